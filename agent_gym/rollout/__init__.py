"""Collect many episodes concurrently: ``collect`` / ``collect_async`` (local or Ray).

The public names are :func:`collect`, :func:`collect_async` and :class:`RolloutOptions`;
the rest is imported from its module. Modules, by responsibility (each imports only
those above it):

* :mod:`~agent_gym.rollout.options`: :class:`RolloutOptions`, the settings of a collection;
* :mod:`~agent_gym.rollout.planning`: :class:`~agent_gym.rollout.planning.EpisodeSpec`,
  :func:`~agent_gym.rollout.planning.plan_episodes`, :func:`~agent_gym.rollout.planning.make_env_factory`;
* :mod:`~agent_gym.rollout.thread_pool`: :class:`~agent_gym.rollout.thread_pool.ThreadPool`, daemon
  threads for blocking env and policy calls;
* :mod:`~agent_gym.rollout.reporting`: progress bar, per-episode callback, failed-episode records;
* :mod:`~agent_gym.rollout.local_runner`: :class:`~agent_gym.rollout.local_runner.LocalRunner`, episodes on
  this process;
* :mod:`~agent_gym.rollout.ray_backend`: episodes in Ray actors (imported on demand);
* :mod:`~agent_gym.rollout.sync`: :func:`~agent_gym.rollout.sync.run_sync`, a coroutine run from synchronous code;
* :mod:`~agent_gym.rollout.collection`: :func:`collect` and :func:`collect_async`.

Example:
    >>> import agent_gym
    >>> from agent_gym.rollout import collect
    >>> trajectories = collect("agent_gym/ToolUse-v0", policy, num_episodes=64, n_parallel=16)  # doctest: +SKIP
"""

from __future__ import annotations

from agent_gym.rollout.collection import collect, collect_async
from agent_gym.rollout.options import RolloutOptions

__all__ = ["RolloutOptions", "collect", "collect_async"]
