"""Collect many episodes concurrently: ``collect`` / ``collect_async`` (local or Ray).

Modules, by responsibility (each imports only those above it):

* :mod:`~agent_gym.rollout.options`: :class:`RolloutOptions`, the settings of a collection;
* :mod:`~agent_gym.rollout.planning`: :class:`EpisodeSpec`, :func:`plan_episodes`, :func:`make_env_factory`;
* :mod:`~agent_gym.rollout.thread_pool`: :class:`~agent_gym.rollout.thread_pool.ThreadPool`, daemon
  threads for blocking env and policy calls;
* :mod:`~agent_gym.rollout.reporting`: progress bar, per-episode callback, failed-episode records;
* :mod:`~agent_gym.rollout.local_runner`: :class:`LocalRunner`, episodes on this process;
* :mod:`~agent_gym.rollout.ray_backend`: episodes in Ray actors (imported on demand);
* :mod:`~agent_gym.rollout.sync`: :func:`run_sync`, a coroutine run from synchronous code;
* :mod:`~agent_gym.rollout.collection`: :func:`collect` and :func:`collect_async`.

Example:
    >>> import agent_gym
    >>> from agent_gym.rollout import collect
    >>> trajectories = collect("agent_gym/ToolUse-v0", policy, num_episodes=64, n_parallel=16)  # doctest: +SKIP
"""

from __future__ import annotations

from agent_gym.rollout.collection import collect, collect_async
from agent_gym.rollout.local_runner import LocalRunner
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import EpisodeSpec, make_env_factory, plan_episodes
from agent_gym.rollout.sync import run_sync

__all__ = [
    "EpisodeSpec",
    "LocalRunner",
    "RolloutOptions",
    "collect",
    "collect_async",
    "make_env_factory",
    "plan_episodes",
    "run_sync",
]
