"""Collect many episodes concurrently: ``collect`` / ``collect_async`` (local or Ray).

The public names are :class:`EpisodeRunner` (the long-lived runner that owns envs and worker
threads), :class:`EpisodeSpec` and :func:`plan_episodes` (what it runs), :func:`collect`,
:func:`collect_async` (open a runner, run, close), :class:`RolloutOptions`, the
streaming API (:class:`~agent_gym.rollout.stream.RolloutStream`, :func:`~agent_gym.rollout.stream.collect_stream`)
the long-tail budget (:class:`~agent_gym.rollout.long_tail.LongTail`) and what goes into a batch
(:class:`~agent_gym.rollout.sampler.TaskSampler`, :class:`~agent_gym.rollout.sampler.EnvSource`,
:class:`~agent_gym.rollout.sampler.Curriculum`, :class:`~agent_gym.rollout.dynamic_sampling.DynamicSampling`);
the rest is imported from its module. Modules, by responsibility (each imports only
those above it):

* :mod:`~agent_gym.rollout.long_tail`: :class:`~agent_gym.rollout.long_tail.LongTail`, a turn/time budget per
  episode and what happens over it (park and resume later, or end);
* :mod:`~agent_gym.rollout.shard_config`: :class:`~agent_gym.rollout.shard_config.RayShards`, the layout of a
  sharded Ray collection;
* :mod:`~agent_gym.rollout.options`: :class:`RolloutOptions`, the settings of a collection;
* :mod:`~agent_gym.rollout.outcome`: an episode's outcome (``res_reward``, success) and validity
  (infrastructure failures have none);
* :mod:`~agent_gym.rollout.sampler`: :class:`~agent_gym.rollout.sampler.TaskSampler`, env mixtures
  with weights and a pass-rate curriculum (:class:`~agent_gym.rollout.sampler.Curriculum`);
* :mod:`~agent_gym.rollout.carry_over`: :class:`~agent_gym.rollout.carry_over.CarryOver`, surplus informative
  groups carried into the next batch with their weight versions;
* :mod:`~agent_gym.rollout.dynamic_sampling`: :class:`~agent_gym.rollout.dynamic_sampling.DynamicSampling`,
  dropping groups without outcome variance;
* :mod:`~agent_gym.rollout.planning`: :class:`~agent_gym.rollout.planning.EpisodeSpec`,
  :func:`~agent_gym.rollout.planning.plan_episodes`, :func:`~agent_gym.rollout.planning.make_env_factory`;
* :mod:`~agent_gym.rollout.episode`: :func:`~agent_gym.rollout.episode.episode_loop`, the one
  policy-drives-env loop (also run by subagents and the tiny agent's data generation);
* :mod:`~agent_gym.rollout.thread_pool`: :class:`~agent_gym.rollout.thread_pool.ThreadPool`, daemon
  threads for blocking env and policy calls;
* :mod:`~agent_gym.rollout.env_pool`: :class:`~agent_gym.rollout.env_pool.EnvPool`, idle envs by key,
  reused through ``reset``;
* :mod:`~agent_gym.rollout.reporting`: progress bar, per-episode callback, failed-episode records;
* :mod:`~agent_gym.rollout.runner`: :class:`~agent_gym.rollout.runner.EpisodeRunner`, episodes on
  this process with envs and threads kept from one episode to the next;
* :mod:`~agent_gym.rollout.ray_backend`: episodes in Ray actors, one at a time each (imported on demand);
* :mod:`~agent_gym.rollout.shard_actor` and :mod:`~agent_gym.rollout.sharded_runner`: Ray actors with many
  episodes in flight each, every episode back once after a lost worker or node (imported on demand);
* :mod:`~agent_gym.rollout.group_collection`: rounds of groups for ``collect`` with a sampler or
  dynamic sampling;
* :mod:`~agent_gym.rollout.early_cancel`: the early cancel of a group's unfinished siblings (stream, ``collect``);
* :mod:`~agent_gym.rollout.collection`: :func:`collect` and :func:`collect_async`;
* :mod:`~agent_gym.rollout.stream`: :class:`~agent_gym.rollout.stream.RolloutStream`, episodes running across
  weight updates, groups handed out as they finish.

Example:
    >>> import agent_gym
    >>> from agent_gym.rollout import collect
    >>> trajectories = collect("agent_gym/ToolUse-v0", policy, num_episodes=64, n_parallel=16)  # doctest: +SKIP
    >>> with EpisodeRunner("agent_gym/ToolUse-v0", policy, n_parallel=16) as runner:  # doctest: +SKIP
    ...     batch = await runner.run(plan_episodes(None, 64, seed=step))  # envs built once, reused
"""

from __future__ import annotations

from agent_gym.rollout.collection import collect, collect_async
from agent_gym.rollout.dynamic_sampling import DynamicSampling, FilterStats
from agent_gym.rollout.long_tail import LongTail
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import EpisodeSpec, plan_episodes
from agent_gym.rollout.runner import EpisodeRunner
from agent_gym.rollout.sampler import Curriculum, EnvSource, SampledTask, TaskSampler
from agent_gym.rollout.shard_config import RayShards
from agent_gym.rollout.stream import RolloutGroup, RolloutStream, collect_stream

__all__ = [
    "Curriculum",
    "DynamicSampling",
    "EnvSource",
    "EpisodeRunner",
    "EpisodeSpec",
    "FilterStats",
    "LongTail",
    "RayShards",
    "RolloutGroup",
    "RolloutOptions",
    "RolloutStream",
    "SampledTask",
    "TaskSampler",
    "collect",
    "collect_async",
    "collect_stream",
    "plan_episodes",
]
