"""The entry point of a collection: :func:`collect` and :func:`collect_async`.

Both plan the episodes (:func:`~agent_gym.rollout.planning.plan_episodes`) and run
them on the backend the options name: an
:class:`~agent_gym.rollout.runner.EpisodeRunner` opened for the call on this process
(open, run, close), Ray actors running one episode at a time (:mod:`agent_gym.rollout.ray_backend`)
or Ray shards with many episodes in flight each (:mod:`agent_gym.rollout.sharded_runner`), both
imported only when asked for. Code that runs episodes again and again holds one ``EpisodeRunner``
instead, so its envs are built once.

A collection cannot change how the policy samples. When the policy's
``SamplingParams`` truncate the distribution (``top_k`` > 0, ``top_p`` < 1 or
``min_p`` > 0), each call logs one warning: such samples are off-policy for a trainer
that scores the full distribution. ``SamplingParams(..., truncation_ok=True)`` says the
truncation is intended and silences it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_gym.errors import ConfigError
from agent_gym.parsers import env_parser_for
from agent_gym.rollout.dynamic_sampling import DynamicSampling
from agent_gym.rollout.group_collection import collect_groups
from agent_gym.rollout.long_tail import LongTail, LongTailGate
from agent_gym.rollout.options import OPTION_DEFAULTS, RolloutOptions, explicit_changes
from agent_gym.rollout.planning import plan_episodes
from agent_gym.rollout.runner import EpisodeRunner
from agent_gym.rollout.sampler import TaskSampler
from agent_gym.rollout.shard_config import RayShards
from agent_gym.types import StepTrajectory
from agent_gym.utils.runtime import run_sync

__all__ = ["close_runner", "collect", "collect_async", "open_runner", "warn_if_truncated"]

logger = logging.getLogger(__name__)


def warn_if_truncated(policy: Any) -> bool:
    """Log one warning when ``policy`` samples from a truncated distribution without opting in.

    Args:
        policy: A policy; its ``sampling`` (a ``SamplingParams``) is read when it has one
            (a policy factory or a policy without it is not checked).

    Returns:
        Whether a warning was logged.
    """
    from agent_gym.policy.sampling import SamplingParams

    sampling = getattr(policy, "sampling", None)
    if not isinstance(sampling, SamplingParams) or not sampling.truncates or sampling.truncation_ok:
        return False
    logger.warning(
        "the policy samples from a %s distribution: truncated sampling is off-policy for a trainer scoring "
        "the full distribution; pass top_k=-1, top_p=1.0, min_p=0.0 for on-policy samples, or "
        "SamplingParams(..., truncation_ok=True) if the truncation is intended",
        sampling.truncation_text(),
    )
    return True


async def collect_async(
    env: Any,
    policy: Any,
    *,
    tasks: Sequence[dict[str, Any]] | None = None,
    num_episodes: int | None = None,
    samples_per_task: int = OPTION_DEFAULTS.samples_per_task,
    n_parallel: int = OPTION_DEFAULTS.n_parallel,
    gamma: float = OPTION_DEFAULTS.gamma,
    memory: Any = OPTION_DEFAULTS.memory,
    max_steps: int | None = OPTION_DEFAULTS.max_steps,
    episode_timeout: float | None = OPTION_DEFAULTS.episode_timeout,
    env_kwargs: Mapping[str, Any] | None = OPTION_DEFAULTS.env_kwargs,
    progress: bool = OPTION_DEFAULTS.progress,
    backend: str = OPTION_DEFAULTS.backend,
    seed: int = OPTION_DEFAULTS.seed,
    on_episode: Callable[[Any], Any] | None = OPTION_DEFAULTS.on_episode,
    ray_address: str | None = OPTION_DEFAULTS.ray_address,
    tool_parser: str | None = OPTION_DEFAULTS.tool_parser,
    reasoning_parser: str | None = OPTION_DEFAULTS.reasoning_parser,
    long_tail: LongTail | LongTailGate | None = OPTION_DEFAULTS.long_tail,
    ray_shards: RayShards | None = OPTION_DEFAULTS.ray_shards,
    options: RolloutOptions | None = None,
    sampler: TaskSampler | None = None,
    dynamic_sampling: DynamicSampling | None = None,
) -> list[StepTrajectory]:
    """Collect episodes concurrently; awaitable version of :func:`collect`.

    See :func:`collect` for the arguments and the returned list. Cancelling the
    call cancels the running episodes (their envs and Ray actors are released).
    """
    changes = explicit_changes(
        samples_per_task=samples_per_task, n_parallel=n_parallel, gamma=gamma, memory=memory, max_steps=max_steps,
        episode_timeout=episode_timeout, env_kwargs=env_kwargs, progress=progress, backend=backend, seed=seed,
        on_episode=on_episode, ray_address=ray_address, tool_parser=tool_parser, reasoning_parser=reasoning_parser,
        long_tail=long_tail, ray_shards=ray_shards,
    )
    opts = RolloutOptions.build(options, where="collect_async", **changes)
    if sampler is not None or dynamic_sampling is not None:
        return await _collect_grouped(env, policy, opts, tasks, num_episodes, sampler, dynamic_sampling)
    specs = plan_episodes(tasks, num_episodes, opts.samples_per_task, opts.seed)
    if specs:
        warn_if_truncated(policy)
    if opts.backend == "ray":
        if isinstance(env, str):  # an env id: its envs parse with the policy's family, or the names given
            parser = env_parser_for(policy, opts.env_kwargs, opts.tool_parser, opts.reasoning_parser)
            if parser is not None:
                opts = opts.replace(env_kwargs={**(opts.env_kwargs or {}), "parser": parser})
        from agent_gym.rollout.ray_backend import collect_ray

        return await collect_ray(env, policy, specs, opts)
    if not specs:
        return []
    runner = open_runner(env, policy, opts)  # the envs parse with the policy's family, or the names given
    try:
        return await runner.run(specs, progress=opts.progress, on_episode=opts.on_episode)
    finally:
        await close_runner(runner)


async def _collect_grouped(env: Any, policy: Any, opts: RolloutOptions, tasks: Sequence[dict[str, Any]] | None,
                           num_episodes: int | None, sampler: TaskSampler | None,
                           dynamic_sampling: DynamicSampling | None) -> list[StepTrajectory]:
    """``collect`` with a sampler or dynamic sampling (see :mod:`~agent_gym.rollout.group_collection`)."""
    if sampler is not None and not isinstance(sampler, TaskSampler):
        raise TypeError(f"sampler: expected TaskSampler or None, got {type(sampler).__name__}")
    if dynamic_sampling is not None and not isinstance(dynamic_sampling, DynamicSampling):
        raise TypeError(f"dynamic_sampling: expected DynamicSampling or None, got {type(dynamic_sampling).__name__}")
    if sampler is not None and tasks is not None:
        raise ConfigError("collect: expected tasks or a sampler, got both (the sampler holds the tasks)")
    if sampler is not None and num_episodes is None:
        raise ConfigError("collect: a sampler needs num_episodes (the number of groups to draw)")
    if sampler is not None and opts.backend == "ray":
        raise ConfigError("collect: a sampler runs on the local or the ray_sharded backend, got backend='ray'")
    specs = plan_episodes(tasks, num_episodes, 1, opts.seed) if sampler is None else []  # checks the arguments
    groups = len(specs) if sampler is None else num_episodes
    if not groups:
        return []
    warn_if_truncated(policy)
    kwargs: dict[str, Any] = {"groups": groups, "samples_per_task": opts.samples_per_task, "seed": opts.seed,
                              "tasks": tasks, "sampler": sampler, "dynamic_sampling": dynamic_sampling,
                              "version": getattr(policy, "weight_version", None)}
    if opts.backend == "ray":
        if isinstance(env, str):
            parser = env_parser_for(policy, opts.env_kwargs, opts.tool_parser, opts.reasoning_parser)
            if parser is not None:
                opts = opts.replace(env_kwargs={**(opts.env_kwargs or {}), "parser": parser})
        from agent_gym.rollout.ray_backend import collect_ray

        return await collect_groups(lambda specs: collect_ray(env, policy, specs, opts), **kwargs)
    # with early cancel a group starts whole while a slot is free: up to samples_per_task - 1 episodes more
    runner = open_runner(env, policy, opts, threads=opts.n_parallel + opts.samples_per_task)
    try:
        return await collect_groups(
            lambda specs: runner.run(specs, progress=opts.progress, on_episode=opts.on_episode), **kwargs,
            run_group=(lambda specs, on_episode: runner.run(specs, n_parallel=len(specs), on_episode=on_episode))
            if opts.backend == "local" else None,  # early cancel watches groups of a local runner
            n_parallel=opts.n_parallel, on_episode=opts.on_episode)
    finally:
        await close_runner(runner)


def open_runner(env: Any, policy: Any, opts: RolloutOptions, *, in_flight: int | None = None,
                threads: int | None = None, where: str = "collect") -> Any:
    """The runner of a collection or a stream: an ``EpisodeRunner``, or a ``ShardedRunner`` over Ray shards.

    Args:
        env: The env (as for ``collect``).
        policy: The policy.
        opts: The options; ``backend`` chooses the runner.
        in_flight: Episodes in flight over all shards (``ray_sharded``; default ``opts.n_parallel``).
        threads: Worker threads of a local runner (default ``opts.n_parallel``).
        where: The caller, for error messages.

    Raises:
        ConfigError: ``backend="ray"``, which has no long-lived runner.
    """
    if opts.backend == "ray_sharded":
        from agent_gym.rollout.sharded_runner import ShardedRunner

        return ShardedRunner(env, policy, opts, in_flight=in_flight)
    if opts.backend != "local":
        raise ConfigError(f"{where}: backend={opts.backend!r} is not supported here; use backend='ray_sharded' "
                          "(Ray actors with many episodes each) or 'local'")
    return EpisodeRunner(env, policy, opts, threads=threads)  # the envs parse with the policy's family


async def close_runner(runner: Any) -> None:
    """Close a runner of :func:`open_runner` (a ``ShardedRunner`` closes its shards first)."""
    aclose = getattr(runner, "aclose", None)
    if aclose is not None:
        await aclose()
    else:
        runner.close()


def collect(
    env: Any,
    policy: Any,
    *,
    tasks: Sequence[dict[str, Any]] | None = None,
    num_episodes: int | None = None,
    samples_per_task: int = OPTION_DEFAULTS.samples_per_task,
    n_parallel: int = OPTION_DEFAULTS.n_parallel,
    gamma: float = OPTION_DEFAULTS.gamma,
    memory: Any = OPTION_DEFAULTS.memory,
    max_steps: int | None = OPTION_DEFAULTS.max_steps,
    episode_timeout: float | None = OPTION_DEFAULTS.episode_timeout,
    env_kwargs: Mapping[str, Any] | None = OPTION_DEFAULTS.env_kwargs,
    progress: bool = OPTION_DEFAULTS.progress,
    backend: str = OPTION_DEFAULTS.backend,
    seed: int = OPTION_DEFAULTS.seed,
    on_episode: Callable[[Any], Any] | None = OPTION_DEFAULTS.on_episode,
    ray_address: str | None = OPTION_DEFAULTS.ray_address,
    tool_parser: str | None = OPTION_DEFAULTS.tool_parser,
    reasoning_parser: str | None = OPTION_DEFAULTS.reasoning_parser,
    long_tail: LongTail | LongTailGate | None = OPTION_DEFAULTS.long_tail,
    ray_shards: RayShards | None = OPTION_DEFAULTS.ray_shards,
    options: RolloutOptions | None = None,
    sampler: TaskSampler | None = None,
    dynamic_sampling: DynamicSampling | None = None,
) -> list[StepTrajectory]:
    """Run many episodes concurrently and return every trajectory, in task order.

    Episodes are scheduled independently (a finished episode frees its slot for
    the next one) with at most ``n_parallel`` in flight. Every episode comes back
    with a trajectory and a status: a policy exception gives ``POLICY_ERROR``, an
    env exception ``ENV_ERROR`` and a run past ``episode_timeout`` ``TIMEOUT``,
    for that episode only. Works inside a running event loop (e.g. Jupyter).

    The policy samples as its ``SamplingParams`` say. When they truncate the
    distribution (``top_k`` > 0, ``top_p`` < 1 or ``min_p`` > 0; the seed API's
    defaults have ``top_k=50``) the call logs one warning, since truncated samples are
    off-policy for a trainer scoring the full distribution, unless the params have
    ``truncation_ok=True``.

    Args:
        env: A registered env id (``"agent_gym/ToolUse-v0"``), a zero-argument env
            factory, or a list of factories (one per worker slot, cycled).
        policy: A ``Policy`` (``aact``/``act`` and ``close_session``). With
            ``backend="ray"`` or ``"ray_sharded"`` the policy itself is shipped to the actors (it must
            pickle, as the library's policies do), or pass a zero-argument
            callable that builds it there.
        tasks: Task dicts ``{"id", "question", "ground_truth", ...}`` passed to
            ``reset(options={"task": ...})``; None lets the env pick from the seed.
        num_episodes: Number of task groups; required without ``tasks``; with
            ``tasks`` it cycles through them.
        samples_per_task: Episodes per task; siblings share ``group_id`` and reset seed.
        n_parallel: Maximum episodes in flight (also the number of envs and threads,
            or of Ray actors).
        gamma: Discount factor for ``Step.mc_return``.
        memory: A ``MemoryConfig`` or a memory factory (see ``TrajectoryWrapper``);
            None shows the policy the whole conversation.
        max_steps: Turn limit passed to ``gym.make`` (env ids only).
        episode_timeout: Seconds before an episode ends with ``TIMEOUT`` (None: no limit).
        env_kwargs: Extra ``gym.make`` keyword arguments (env ids only).
        progress: Show a progress bar with the running mean reward.
        backend: ``"local"`` (threads and an event loop), ``"ray"`` (Ray actors, one episode
            at a time each) or ``"ray_sharded"`` (Ray actors with ``n_parallel`` episodes in flight
            over all of them, laid out by ``ray_shards``; a lost actor's or node's unfinished
            episodes run again elsewhere; see ``docs/ray.md``).
        seed: Base seed; group ``g`` resets with ``seed + g``; episode ids derive from it.
        on_episode: Called with each trajectory as soon as it finishes (may be a
            coroutine function); its exceptions are logged, never fatal.
        ray_address: Ray cluster address (``backend="ray"``); None uses ``RAY_ADDRESS``
            or starts a local instance.
        options: A :class:`~agent_gym.rollout.options.RolloutOptions` holding the
            settings above (None: the defaults); each keyword passed overrides its field.
        tool_parser: The tool-call parser of the envs (an env id's), by vLLM's name (see
            :func:`agent_gym.parsers.make_parser`); None takes the policy's model family (given
            to it or read from its chat template) unless ``env_kwargs`` names a parser.
        reasoning_parser: The reasoning parser name, likewise.
        long_tail: A :class:`~agent_gym.rollout.long_tail.LongTail` budget per episode: an
            episode over it is parked (its slot goes to the episodes not yet started; it resumes
            once none is left) or ended with ``TIMEOUT``. None: no budget.
        ray_shards: A :class:`~agent_gym.rollout.shard_config.RayShards` layout for
            ``backend="ray_sharded"`` (shards, episodes per shard, placement by resources, what
            a lost shard's episodes do); None: its defaults.
        sampler: A :class:`~agent_gym.rollout.sampler.TaskSampler` drawing each of the
            ``num_episodes`` groups' task and env (``env`` may then be None; no ``tasks``; local
            backend); it observes every finished group (pass rates, metrics per env).
        dynamic_sampling: A :class:`~agent_gym.rollout.dynamic_sampling.DynamicSampling`: groups
            whose outcome has zero variance among valid members are dropped (and counted on its
            ``stats``) and more groups are sampled until ``num_episodes`` (or ``len(tasks)``)
            informative groups are in. Its ``early_cancel`` applies with a ``sampler`` on the
            local backend: each group then runs as its own job (the next one starts as soon as
            an episode slot is free) and its unfinished siblings are cancelled once the
            finished ones agree and the task's pass rate makes another outcome unlikely (the
            run then depends on timing, see :mod:`~agent_gym.rollout.group_collection`).

    Returns:
        ``len(tasks or range(num_episodes)) * samples_per_task`` trajectories;
        ``trajectory.idx`` is its position. With ``dynamic_sampling``, those of the informative
        groups only (fewer groups when its ``max_groups`` ran out).

    Raises:
        TypeError: An argument of the wrong type, or an unknown keyword.
        agent_gym.errors.ConfigError: An argument out of range (a ``ValueError``).

    Example:
        >>> trajectories = collect("agent_gym/ToolUse-v0", policy, num_episodes=64, n_parallel=16)  # doctest: +SKIP
    """
    changes = explicit_changes(
        samples_per_task=samples_per_task, n_parallel=n_parallel, gamma=gamma, memory=memory, max_steps=max_steps,
        episode_timeout=episode_timeout, env_kwargs=env_kwargs, progress=progress, backend=backend, seed=seed,
        on_episode=on_episode, ray_address=ray_address, tool_parser=tool_parser, reasoning_parser=reasoning_parser,
        long_tail=long_tail, ray_shards=ray_shards,
    )
    opts = RolloutOptions.build(options, where="collect", **changes)
    return run_sync(
        lambda: collect_async(env, policy, tasks=tasks, num_episodes=num_episodes, options=opts, sampler=sampler,
                              dynamic_sampling=dynamic_sampling),
        release=[policy],
    )
