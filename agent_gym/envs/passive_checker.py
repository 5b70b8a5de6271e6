"""The passive env checker of the agent_gym ids: Gymnasium's, surviving a first call that raises.

Gymnasium's :class:`gymnasium.wrappers.PassiveEnvChecker` marks its one-time ``reset`` check
as done before it calls the env. When that first ``reset`` raises (a bad ``options["task"]``,
a sandbox that did not start), the reset's data is never recorded, and the first ``step``
after a later, successful reset fails with an unrelated ``TypeError`` (``cannot unpack
non-iterable NoneType object``) from the data-reuse check. :class:`PassiveEnvChecker` leaves
the check of a call that raised to the next call, for ``reset``, ``step`` and ``render``.

The agent_gym ids register it as their checker (``disable_env_checker=True`` plus this
wrapper in ``additional_wrappers``), so ``gym.make`` runs the same checks as for any id.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

__all__ = ["PassiveEnvChecker", "checker_spec"]


class PassiveEnvChecker(gym.wrappers.PassiveEnvChecker):
    """Gymnasium's passive checker whose first ``reset``, ``step`` or ``render`` may raise.

    A call that raises does not count as checked: the next one is (Gymnasium's wrapper
    counts it and then crashes on the data it never got).

    Args:
        env: The env to check.
    """

    # Gymnasium's checker rewrites ``spec.disable_env_checker``; this one lists itself in
    # ``spec.additional_wrappers``, so ``gym.make(env.spec)`` rebuilds the same wrapper stack.
    spec = gym.Wrapper.spec

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset; the first reset that returns is the one checked."""
        first = not self.checked_reset
        try:
            return super().reset(seed=seed, options=options)
        except BaseException:
            if first:
                self.checked_reset = False
            raise

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step; the first step that returns is the one checked."""
        first = not self.checked_step
        try:
            return super().step(action)
        except BaseException:
            if first:
                self.checked_step = False
            raise

    def render(self) -> Any:
        """Render; the first render that returns is the one checked."""
        first = not self.checked_render
        try:
            return super().render()
        except BaseException:
            if first:
                self.checked_render = False
            raise


def checker_spec() -> WrapperSpec:
    """The ``WrapperSpec`` that registers :class:`PassiveEnvChecker` as an id's additional wrapper."""
    return WrapperSpec(name=PassiveEnvChecker.__name__, entry_point=f"{__name__}:{PassiveEnvChecker.__name__}",
                       kwargs={})
