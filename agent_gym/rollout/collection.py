"""The entry point of a collection: :func:`collect` and :func:`collect_async`.

Both plan the episodes (:func:`~agent_gym.rollout.planning.plan_episodes`) and run
them on the backend the options name: the
:class:`~agent_gym.rollout.local_runner.LocalRunner` on this process, or Ray
actors (:mod:`agent_gym.rollout.ray_backend`, imported only when asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_gym.rollout.local_runner import LocalRunner
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import plan_episodes
from agent_gym.rollout.sync import run_sync
from agent_gym.types import StepTrajectory

__all__ = ["collect", "collect_async"]


async def collect_async(
    env: Any,
    policy: Any,
    *,
    tasks: Sequence[dict[str, Any]] | None = None,
    num_episodes: int | None = None,
    options: RolloutOptions | None = None,
    **changes: Any,
) -> list[StepTrajectory]:
    """Collect episodes concurrently; awaitable version of :func:`collect`.

    See :func:`collect` for the arguments and the returned list. Cancelling the
    call cancels the running episodes (their envs and Ray actors are released).
    """
    opts = RolloutOptions.build(options, where="collect_async", **changes)
    specs = plan_episodes(tasks, num_episodes, opts.samples_per_task, opts.seed)
    if opts.backend == "ray":
        from agent_gym.rollout.ray_backend import collect_ray

        return await collect_ray(env, policy, specs, opts)
    if not specs:
        return []
    runner = LocalRunner(env, policy, opts)
    try:
        return await runner.run(specs, progress=opts.progress, on_episode=opts.on_episode)
    finally:
        runner.close()


def collect(
    env: Any,
    policy: Any,
    *,
    tasks: Sequence[dict[str, Any]] | None = None,
    num_episodes: int | None = None,
    options: RolloutOptions | None = None,
    **changes: Any,
) -> list[StepTrajectory]:
    """Run many episodes concurrently and return every trajectory, in task order.

    Episodes are scheduled independently (a finished episode frees its slot for
    the next one) with at most ``n_parallel`` in flight. Every episode comes back
    with a trajectory and a status: a policy exception gives ``POLICY_ERROR``, an
    env exception ``ENV_ERROR`` and a run past ``episode_timeout`` ``TIMEOUT``,
    for that episode only. Works inside a running event loop (e.g. Jupyter).

    Args:
        env: A registered env id (``"agent_gym/ToolUse-v0"``), a zero-argument env
            factory, or a list of factories (one per worker slot, cycled).
        policy: A ``Policy`` (``aact``/``act`` and ``close_session``). With
            ``backend="ray"`` the policy itself is shipped to the actors (it must
            pickle, as the library's policies do), or pass a zero-argument
            callable that builds it there.
        tasks: Task dicts ``{"id", "question", "ground_truth", ...}`` passed to
            ``reset(options={"task": ...})``; None lets the env pick from the seed.
        num_episodes: Number of task groups; required without ``tasks``; with
            ``tasks`` it cycles through them.
        options: A :class:`~agent_gym.rollout.options.RolloutOptions` (None: the defaults).
        **changes: Any field of :class:`~agent_gym.rollout.options.RolloutOptions`,
            overriding ``options``: ``samples_per_task`` (1), ``n_parallel`` (8),
            ``gamma`` (1.0), ``memory``, ``max_steps``, ``episode_timeout``,
            ``env_kwargs``, ``progress`` (True), ``backend`` (``"local"`` or
            ``"ray"``), ``seed`` (0), ``on_episode``, ``ray_address``.

    Returns:
        ``len(tasks or range(num_episodes)) * samples_per_task`` trajectories;
        ``trajectory.idx`` is its position.

    Raises:
        TypeError: An argument of the wrong type, or an unknown keyword.
        ValueError: An argument out of range (``ConfigError``).

    Example:
        >>> trajectories = collect("agent_gym/ToolUse-v0", policy, num_episodes=64, n_parallel=16)  # doctest: +SKIP
    """
    opts = RolloutOptions.build(options, where="collect", **changes)
    return run_sync(
        lambda: collect_async(env, policy, tasks=tasks, num_episodes=num_episodes, options=opts),
        release=[policy],
    )
