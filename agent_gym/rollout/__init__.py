"""Collect many episodes concurrently: ``collect`` / ``collect_async`` (local or Ray).

Example:
    >>> import agent_gym
    >>> from agent_gym.rollout import collect
    >>> trajectories = collect("agent_gym/ToolUse-v0", policy, num_episodes=64, n_parallel=16)  # doctest: +SKIP
"""

from __future__ import annotations

from agent_gym.rollout._local import (
    EpisodeSpec,
    LocalRunner,
    collect,
    collect_async,
    make_env_factory,
    plan_episodes,
    run_sync,
)

__all__ = [
    "EpisodeSpec",
    "LocalRunner",
    "collect",
    "collect_async",
    "make_env_factory",
    "plan_episodes",
    "run_sync",
]
