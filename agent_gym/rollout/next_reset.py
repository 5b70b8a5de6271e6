"""Telling an env its next episode while the current one runs: :class:`SpecQueue` and :func:`reset_hook`.

An env may prepare its next episode in the background while the current one runs (Web-v0 opens
the next episode's browser context and starts its task's page ahead), but it can only guess which
episode comes next. An env that wants to be told has an optional method on its unwrapped env::

    def expect_reset(self, seed: int | None = None, options: dict | None = None) -> None: ...

called, before the ``reset`` that starts an episode, with the ``seed`` and ``options`` (``task``
when the episode has one) of the reset that will follow that one on the same env. It must return
at once (no I/O: it runs on the runner's event loop) and only prepare: a hint that turns out wrong
may cost the env some work, never change what any reset returns.

:meth:`EpisodeRunner.run <agent_gym.rollout.runner.EpisodeRunner.run>` hands its episodes out
through a :class:`SpecQueue`. When a worker has taken its env for an episode and that env has the
hook, the worker *claims* the next episode of the queue (of the same env id and keyword arguments)
and tells the env: the worker runs it next, on the env it just gave back (the pool hands the most
recently given back env of a key first). A claim never keeps another worker idle: a worker that
finds the queue empty takes a claimed episode that has not started. For envs without the hook
nothing is claimed, so the episodes go out in queue order exactly as before, and results stay in
spec order either way.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence
from typing import Any

from agent_gym.rollout.planning import EpisodeSpec

__all__ = ["SpecQueue", "reset_hook", "reset_options"]

logger = logging.getLogger(__name__)


def reset_hook(env: Any) -> Callable[..., Any] | None:
    """The env's ``expect_reset`` method (looked up on ``env.unwrapped``), or None when it has none."""
    hook = getattr(getattr(env, "unwrapped", env), "expect_reset", None)
    return hook if callable(hook) else None


def reset_options(spec: EpisodeSpec) -> dict[str, Any]:
    """The ``options`` of ``spec``'s reset that decide its episode's task (``{"task": ...}`` or ``{}``)."""
    return {} if spec.task is None else {"task": spec.task}


class SpecQueue:
    """The episodes of a run not started yet, in order, and those claimed by a worker for its env's next episode.

    Args:
        count: The number of episodes (indices ``0 .. count - 1``).
    """

    def __init__(self, count: int) -> None:
        self._waiting: collections.deque[int] = collections.deque(range(count))
        self._claims: dict[Any, int] = {}

    def empty(self) -> bool:
        """Whether no episode waits to start (none in the queue, none claimed)."""
        return not self._waiting and not self._claims

    def next(self, worker: Any) -> int | None:
        """The next episode for ``worker``: its claim, else the queue's head, else another's claim; None when none."""
        index = self._claims.pop(worker, None)
        if index is not None:
            return index
        if self._waiting:
            return self._waiting.popleft()
        if self._claims:  # an idle worker takes the oldest claim rather than wait for its owner
            return self._claims.pop(next(iter(self._claims)))
        return None

    def hinter(self, worker: Any, specs: Sequence[EpisodeSpec], current: EpisodeSpec) -> Callable[[Any], None]:
        """A callback for the env of ``worker``'s episode ``current``: claims and hints its next episode.

        The callback does nothing for an env without the hook, when ``worker`` holds a claim already, when the
        queue is empty or when its head runs on another env id or keyword arguments.
        """

        def on_env(env: Any) -> None:
            hook = reset_hook(env)
            if hook is None or worker in self._claims or not self._waiting:
                return
            spec = specs[self._waiting[0]]
            if (spec.env, spec.env_kwargs) != (current.env, current.env_kwargs):
                return
            self._claims[worker] = self._waiting.popleft()
            try:
                hook(seed=spec.seed, options=reset_options(spec))
            except Exception:  # noqa: BLE001 - a hint is advice: a failing one changes nothing
                logger.debug("expect_reset raised", exc_info=True)

        return on_env
