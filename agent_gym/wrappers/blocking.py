"""Whether an env's ``reset`` and ``step`` may block: :func:`env_calls_can_block`.

A rollout runner calls ``reset`` and ``step`` on worker threads so that a call waiting on I/O
(a sandbox, a server, a judge, a summary written by a model) never stalls the event loop that
drives every other episode. A call that cannot block gains nothing from the hand-off and pays
for it (a thread switch each way). :func:`env_calls_can_block` says which is which, and says
"may block" whenever it cannot be sure: an env is taken not to block only when every layer
says so, i.e. the wrappers between the caller and the env are the plain Gymnasium ones (order
enforcing, the passive checker, the time limit, auto-reset, record-statistics) and the
innermost env's ``calls_can_block()`` (:meth:`agent_gym.env.core.AgentEnv.calls_can_block`)
returns False. Any other wrapper, or an env without that method, may block.

Example:
    >>> import gymnasium as gym, agent_gym
    >>> env_calls_can_block(gym.make("agent_gym/ToolUse-v0"))
    False
    >>> env_calls_can_block(gym.make("agent_gym/Terminal-v0"))
    True
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agent_gym.envs.passive_checker import PassiveEnvChecker

__all__ = ["PLAIN_WRAPPERS", "calls_can_block_of", "env_calls_can_block", "inner_env_behind_plain_wrappers"]

PLAIN_WRAPPERS: tuple[type, ...] = (
    PassiveEnvChecker,
    gym.wrappers.PassiveEnvChecker,
    gym.wrappers.OrderEnforcing,
    gym.wrappers.TimeLimit,
    gym.wrappers.Autoreset,
    gym.wrappers.RecordEpisodeStatistics,
)
"""Wrappers whose own work in ``reset``/``step`` is bookkeeping (matched by exact type, not subclass)."""


def inner_env_behind_plain_wrappers(env: Any) -> Any | None:
    """The innermost env of ``env`` when every wrapper around it is one of :data:`PLAIN_WRAPPERS`, else None.

    A wrapper stack does not change once built, so a caller asking often (each ``reset`` and ``step``)
    finds the env once and asks only it afterwards (see :func:`calls_can_block_of`).
    """
    while isinstance(env, gym.Wrapper):
        if type(env) not in PLAIN_WRAPPERS:
            return None
        env = env.env
    return env


def calls_can_block_of(inner: Any | None) -> bool:
    """Whether the env found by :func:`inner_env_behind_plain_wrappers` may block (True for None)."""
    probe = getattr(inner, "calls_can_block", None)
    if inner is None or not callable(probe):
        return True
    try:
        return bool(probe())
    except Exception:  # noqa: BLE001 - an env that cannot answer is taken to block
        return True


def env_calls_can_block(env: Any) -> bool:
    """Whether ``env.reset`` or ``env.step`` may block (see the module docstring).

    Args:
        env: An env, wrapped or not.

    Returns:
        False only when every wrapper is one of :data:`PLAIN_WRAPPERS` and the innermost env's
        ``calls_can_block()`` returns False; True otherwise (also when that method raises).
    """
    return calls_can_block_of(inner_env_behind_plain_wrappers(env))
