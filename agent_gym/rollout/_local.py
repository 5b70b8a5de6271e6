"""Concurrent episode collection on one machine: ``collect`` and ``collect_async``.

Episodes are scheduled independently: ``n_parallel`` worker coroutines each take
the next episode as soon as their previous one ends. Environments are created
lazily (at most one per worker) and reused across episodes; ``reset``/``step`` and
env construction run on a pool of daemon threads so a blocking tool never stalls
the event loop. The policy's ``aact`` runs on the loop (a policy with only a
blocking ``act`` runs on the pool too).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import gymnasium as gym

from agent_gym.rollout._pool import ThreadPool
from agent_gym.rollout._sync import run_sync
from agent_gym.types import EpisodeStatus, FinishReason, PolicyOutput, StepTrajectory

__all__ = [
    "EpisodeSpec",
    "LocalRunner",
    "collect",
    "collect_async",
    "make_env_factory",
    "plan_episodes",
    "run_sync",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")
EnvSource = "str | Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]]"


@dataclass(frozen=True)
class EpisodeSpec:
    """What one episode runs: where its result goes, its seed and its task.

    Attributes:
        index: Position of the episode in the returned list.
        group: Index of its task group; ``samples_per_task`` siblings share it.
        sample: Position among its siblings.
        seed: Seed passed to ``env.reset`` (``seed + group``: siblings face the same task).
        task: The task dict, or None to let the env choose from ``seed``.
        group_id: Shared by the siblings (``Trajectory.group_id``).
    """

    index: int
    group: int
    sample: int
    seed: int
    task: dict[str, Any] | None
    group_id: str


def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    return value


def plan_episodes(
    tasks: Sequence[dict[str, Any]] | None,
    num_episodes: int | None,
    samples_per_task: int = 1,
    seed: int = 0,
) -> list[EpisodeSpec]:
    """Lay out the episodes of a collection, in result order.

    With ``tasks``, each task is one group (``num_episodes``, if given, takes that
    many groups, cycling through the tasks). Without ``tasks``, ``num_episodes``
    groups are drawn by the env from their seeds. Each group runs
    ``samples_per_task`` times with the same reset seed ``seed + group``.

    Args:
        tasks: Task dicts, or None.
        num_episodes: Number of groups (required without ``tasks``).
        samples_per_task: Episodes per group.
        seed: Base seed.

    Returns:
        One spec per episode, ordered by group then sibling.
    """
    _check_positive_int("samples_per_task", samples_per_task)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected int, got {type(seed).__name__}")
    if tasks is not None:
        if isinstance(tasks, (str, bytes, dict)) or not isinstance(tasks, Sequence):
            raise TypeError(f"tasks: expected a list of task dicts, got {type(tasks).__name__}")
        for i, task in enumerate(tasks):
            if not isinstance(task, dict):
                raise TypeError(f"tasks[{i}]: expected dict, got {type(task).__name__}")
        if not tasks:
            return []
        groups = len(tasks) if num_episodes is None else _check_positive_int("num_episodes", num_episodes)
        chosen: list[dict[str, Any] | None] = [tasks[g % len(tasks)] for g in range(groups)]
    else:
        if num_episodes is None:
            raise ValueError("collect: expected tasks or num_episodes, got neither")
        chosen = [None] * _check_positive_int("num_episodes", num_episodes)
    specs = []
    for group, task in enumerate(chosen):
        task_id = task.get("id") if task is not None else None
        group_id = f"{seed}-{group}" if task_id is None else f"{seed}-{group}-{task_id}"
        for sample in range(samples_per_task):
            specs.append(EpisodeSpec(len(specs), group, sample, seed + group, task, group_id))
    return specs


def make_env_factory(
    env: Any, *, env_kwargs: dict[str, Any] | None = None, max_steps: int | None = None
) -> Callable[[int], gym.Env]:
    """Turn an env id, a factory or a list of factories into ``slot -> env``.

    Args:
        env: A registered id (``gym.make(env, max_steps=..., **env_kwargs)``), a
            zero-argument callable, or a sequence of them (slot ``k`` uses
            ``env[k % len(env)]``).
        env_kwargs: Extra ``gym.make`` keyword arguments (ids only).
        max_steps: Passed to ``gym.make`` as ``max_steps`` and as
            ``max_episode_steps`` (so the registry's time limit does not cut the
            episode earlier) (ids only).

    Returns:
        A function building the env for a worker slot.
    """
    if isinstance(env, str):
        kwargs = dict(env_kwargs or {})
        if max_steps is not None:
            kwargs["max_steps"] = _check_positive_int("max_steps", max_steps)
            kwargs.setdefault("max_episode_steps", max_steps)
        env_id = env

        def _make_id(slot: int) -> gym.Env:
            import agent_gym  # noqa: F401 - registers the env ids

            return gym.make(env_id, **kwargs)

        return _make_id
    if env_kwargs or max_steps is not None:
        raise ValueError("env_kwargs/max_steps: expected None when env factories are given (configure the factories)")
    if callable(env):
        return lambda slot: env()
    if isinstance(env, Sequence) and env and all(callable(f) for f in env):
        fns = list(env)
        return lambda slot: fns[slot % len(fns)]()
    raise TypeError(f"env: expected an env id, a callable or a list of callables, got {type(env).__name__}")


class _Progress:
    """A tqdm bar showing the running mean reward (no-op when disabled)."""

    def __init__(self, total: int, enabled: bool, desc: str = "episodes") -> None:
        self.count = 0
        self.reward = 0.0
        self.failed = 0
        self._bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="ep", dynamic_ncols=True)

    def update(self, trajectory: StepTrajectory) -> None:
        self.count += 1
        self.reward += float(trajectory.trajectory_reward)
        if trajectory.status in (EpisodeStatus.TIMEOUT, EpisodeStatus.ENV_ERROR, EpisodeStatus.POLICY_ERROR):
            self.failed += 1
        if self._bar is not None:
            postfix = {"reward": f"{self.reward / self.count:.3f}"}
            if self.failed:
                postfix["failed"] = str(self.failed)
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _safe_close(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a broken env is best effort
        logger.debug("env.close() failed", exc_info=True)


class _Episode:
    """Mutable state of one running episode (what the timeout handler needs)."""

    def __init__(self) -> None:
        self.wrapper: Any = None
        self.session_id: str | None = None
        self.job: Any = None  # the pool call in progress, if any
        self.env_broken = False


class LocalRunner:
    """Runs episodes on this process: an env per worker slot, reused across episodes.

    Args:
        env: Env id, factory or factories (see :func:`make_env_factory`).
        policy: Object with ``aact`` (preferred) or ``act`` and ``close_session``.
        gamma: Discount factor for ``mc_return``.
        memory: Memory config or factory handed to ``TrajectoryWrapper``.
        max_steps: Passed to ``gym.make`` for env ids.
        episode_timeout: Seconds before an episode ends with TIMEOUT (None: no limit).
        env_kwargs: Extra ``gym.make`` keyword arguments.
        n_parallel: Episodes in flight at once.
    """

    def __init__(
        self,
        env: Any,
        policy: Any,
        *,
        gamma: float = 1.0,
        memory: Any = None,
        max_steps: int | None = None,
        episode_timeout: float | None = None,
        env_kwargs: dict[str, Any] | None = None,
        n_parallel: int = 8,
    ) -> None:
        if not (hasattr(policy, "aact") or hasattr(policy, "act")):
            raise TypeError(f"policy: expected an object with aact() or act(), got {type(policy).__name__}")
        if episode_timeout is not None and (
            isinstance(episode_timeout, bool)
            or not isinstance(episode_timeout, (int, float))
            or not episode_timeout > 0
            or not math.isfinite(episode_timeout)
        ):
            raise ValueError(f"episode_timeout: expected a number > 0 or None, got {episode_timeout!r}")
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma: expected a number in [0, 1], got {gamma!r}")
        self.n_parallel = _check_positive_int("n_parallel", n_parallel)
        self.factory = make_env_factory(env, env_kwargs=env_kwargs, max_steps=max_steps)
        self.policy = policy
        self.gamma = float(gamma)
        self.memory = memory
        self.episode_timeout = episode_timeout
        self._async_policy = inspect.iscoroutinefunction(getattr(policy, "aact", None))
        self._pool: ThreadPool | None = None
        self._envs: dict[int, Any] = {}

    # ------------------------------------------------------------------ lifecycle
    def _thread_pool(self) -> ThreadPool:
        if self._pool is None:
            self._pool = ThreadPool(self.n_parallel)
        return self._pool

    def close(self) -> None:
        """Close every cached env and stop the worker threads."""
        for env in self._envs.values():
            _safe_close(env)
        self._envs.clear()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    async def _wrapper(self, slot: int) -> Any:
        wrapper = self._envs.get(slot)
        if wrapper is None:
            from agent_gym.wrappers.trajectory import TrajectoryWrapper

            def _build() -> Any:
                return TrajectoryWrapper(self.factory(slot), gamma=self.gamma, memory=self.memory)

            wrapper = await self._thread_pool().run(_build)
            self._envs[slot] = wrapper
        return wrapper

    def _discard(self, slot: int, state: _Episode) -> None:
        wrapper = self._envs.pop(slot, None)
        if wrapper is None:
            return
        if state.job is not None:
            self._thread_pool().abandon(state.job, after=lambda: _safe_close(wrapper))
        else:
            self._thread_pool().submit(_safe_close, wrapper)

    # ------------------------------------------------------------------ episodes
    async def _call(self, state: _Episode, fn: Callable[..., T], *args: Any) -> T:
        job = self._thread_pool().submit(fn, *args)
        state.job = job
        try:
            result = await job.future
        except asyncio.CancelledError:
            raise  # keep state.job: the timeout handler abandons the stuck call
        except BaseException:
            state.job = None
            raise
        state.job = None
        return result

    async def _act(self, state: _Episode, obs: Any, session_id: str, tools: Any) -> Any:
        if self._async_policy:
            return await self.policy.aact(obs, session_id=session_id, tools=tools)
        return await self._call(state, lambda: self.policy.act(obs, session_id=session_id, tools=tools))

    async def _body(self, spec: EpisodeSpec, state: _Episode) -> StepTrajectory:
        wrapper = state.wrapper
        # A deterministic episode id (also the policy's session id, from which seeded
        # policies derive their per-turn sampling seeds) makes a seeded run repeatable.
        options: dict[str, Any] = {"episode_id": f"{spec.group_id}-{spec.sample}"}
        if spec.task is not None:
            options["task"] = spec.task
        try:
            obs, info = await self._call(state, lambda: wrapper.reset(seed=spec.seed, options=options))
        except Exception as exc:  # noqa: BLE001 - an env failure ends this episode only
            state.env_broken = True
            logger.warning("episode %d: env.reset raised %s", spec.index, _error_text(exc))
            return wrapper.finish(EpisodeStatus.ENV_ERROR, f"env.reset raised {_error_text(exc)}")
        state.session_id = info.get("episode_id") or getattr(wrapper, "rollout_id", None) or f"episode-{spec.index}"
        tools = info.get("policy_tools")
        while True:
            started = time.perf_counter()
            try:
                action = await self._act(state, obs, state.session_id, tools)
            except Exception as exc:  # noqa: BLE001 - a policy failure ends this episode only
                logger.warning("episode %d: policy raised %s", spec.index, _error_text(exc))
                return wrapper.finish(EpisodeStatus.POLICY_ERROR, f"policy raised {_error_text(exc)}")
            if isinstance(action, PolicyOutput) and action.finish_reason == FinishReason.ERROR:
                return wrapper.finish(EpisodeStatus.POLICY_ERROR, action.error or "policy returned an error")
            if not isinstance(action, PolicyOutput):
                wrapper.record_llm_time(time.perf_counter() - started)
            try:
                obs, _, terminated, truncated, info = await self._call(state, wrapper.step, action)
            except Exception as exc:  # noqa: BLE001
                state.env_broken = True
                logger.warning("episode %d: env.step raised %s", spec.index, _error_text(exc))
                logger.debug("%s", traceback.format_exc())
                return wrapper.finish(EpisodeStatus.ENV_ERROR, f"env.step raised {_error_text(exc)}")
            if terminated or truncated:
                trajectory = info.get("trajectory")
                if trajectory is None:
                    status = EpisodeStatus.ENV_DONE if terminated else EpisodeStatus.MAX_STEPS
                    trajectory = wrapper.finish(status)
                return trajectory

    async def run_episode(self, spec: EpisodeSpec, slot: int = 0) -> StepTrajectory:
        """Run one episode on worker slot ``slot``; never raises for env/policy failures.

        Args:
            spec: The episode to run.
            slot: The worker slot (selects the cached env).

        Returns:
            The episode's trajectory, with ``idx``, ``group_id`` and ``task`` set.
        """
        state = _Episode()
        try:
            state.wrapper = await self._wrapper(slot)
        except Exception as exc:  # noqa: BLE001 - env construction failed: record it
            from agent_gym.wrappers.trajectory import TrajectoryWrapper

            logger.warning("episode %d: building the env raised %s", spec.index, _error_text(exc))
            trajectory = TrajectoryWrapper(_NullEnv(), gamma=self.gamma).finish(
                EpisodeStatus.ENV_ERROR, f"building the env raised {_error_text(exc)}"
            )
            return self._label(trajectory, spec)
        try:
            if self.episode_timeout is None:
                trajectory = await self._body(spec, state)
            else:
                trajectory = await asyncio.wait_for(self._body(spec, state), self.episode_timeout)
        except asyncio.TimeoutError:
            logger.warning("episode %d: exceeded episode_timeout=%ss", spec.index, self.episode_timeout)
            state.env_broken = state.env_broken or state.job is not None
            trajectory = state.wrapper.finish(
                EpisodeStatus.TIMEOUT, f"episode exceeded episode_timeout={self.episode_timeout}s"
            )
        finally:
            if state.session_id is not None:
                try:
                    self.policy.close_session(state.session_id)
                except Exception:  # noqa: BLE001
                    logger.debug("policy.close_session failed", exc_info=True)
            if state.env_broken:
                self._discard(slot, state)
        return self._label(trajectory, spec)

    @staticmethod
    def _label(trajectory: StepTrajectory, spec: EpisodeSpec) -> StepTrajectory:
        trajectory.idx = spec.index
        trajectory.group_id = spec.group_id
        if trajectory.task is None and spec.task is not None:
            trajectory.task = spec.task
        return trajectory

    async def run(
        self,
        specs: Sequence[EpisodeSpec],
        *,
        progress: bool = False,
        on_episode: Callable[[StepTrajectory], Any] | None = None,
    ) -> list[StepTrajectory]:
        """Run ``specs`` with at most ``n_parallel`` in flight; results in spec order."""
        results: list[StepTrajectory | None] = [None] * len(specs)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(specs)):
            queue.put_nowait(i)
        bar = _Progress(len(specs), progress)

        async def worker(slot: int) -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                trajectory = await self.run_episode(specs[i], slot)
                results[i] = trajectory
                bar.update(trajectory)
                if on_episode is not None:
                    await _notify(on_episode, trajectory)

        try:
            await asyncio.gather(*(worker(slot) for slot in range(min(self.n_parallel, len(specs)))))
        finally:
            bar.close()
        return results  # type: ignore[return-value]


async def _notify(on_episode: Callable[[StepTrajectory], Any], trajectory: StepTrajectory) -> None:
    """Call the user's per-episode callback; its failure is logged, never fatal.

    Every episode is still returned by ``collect``: a callback that raises (a full
    disk, a closed file) must not make the whole batch disappear.
    """
    try:
        outcome = on_episode(trajectory)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:
        logger.exception("on_episode raised for episode %d; the episode is still returned", trajectory.idx)


class _NullEnv(gym.Env):
    """Stand-in env used to record an episode whose env could not be built."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return (), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return (), 0.0, True, False, {}


async def collect_async(
    env: Any,
    policy: Any,
    *,
    tasks: Sequence[dict[str, Any]] | None = None,
    num_episodes: int | None = None,
    samples_per_task: int = 1,
    n_parallel: int = 8,
    gamma: float = 1.0,
    memory: Any = None,
    max_steps: int | None = None,
    episode_timeout: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    backend: str = "local",
    seed: int = 0,
    on_episode: Callable[[StepTrajectory], Any] | None = None,
    ray_address: str | None = None,
) -> list[StepTrajectory]:
    """Collect episodes concurrently; awaitable version of :func:`collect`.

    See :func:`collect` for the arguments and the returned list.
    """
    specs = plan_episodes(tasks, num_episodes, samples_per_task, seed)
    options = {
        "gamma": gamma,
        "memory": memory,
        "max_steps": max_steps,
        "episode_timeout": episode_timeout,
        "env_kwargs": env_kwargs,
        "n_parallel": n_parallel,
    }
    if backend == "ray":
        from agent_gym.rollout._ray import collect_ray

        return await collect_ray(
            env, policy, specs, progress=progress, on_episode=on_episode, ray_address=ray_address, **options
        )
    if backend != "local":
        raise ValueError(f"backend: expected 'local' or 'ray', got {backend!r}")
    if not specs:
        return []
    runner = LocalRunner(env, policy, **options)
    try:
        return await runner.run(specs, progress=progress, on_episode=on_episode)
    finally:
        runner.close()


def collect(
    env: Any,
    policy: Any,
    *,
    tasks: Sequence[dict[str, Any]] | None = None,
    num_episodes: int | None = None,
    samples_per_task: int = 1,
    n_parallel: int = 8,
    gamma: float = 1.0,
    memory: Any = None,
    max_steps: int | None = None,
    episode_timeout: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    backend: str = "local",
    seed: int = 0,
    on_episode: Callable[[StepTrajectory], Any] | None = None,
    ray_address: str | None = None,
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
            ``backend="ray"`` it is shipped to the actors, or pass a zero-argument
            callable that builds it there.
        tasks: Task dicts ``{"id", "question", "ground_truth", ...}`` passed to
            ``reset(options={"task": ...})``; None lets the env pick from the seed.
        num_episodes: Number of task groups; required without ``tasks``; with
            ``tasks`` it cycles through them.
        samples_per_task: Episodes per task; siblings share ``group_id`` and reset seed.
        n_parallel: Maximum episodes in flight (also the number of envs and threads).
        gamma: Discount factor for ``Step.mc_return``.
        memory: Memory configuration (see ``TrajectoryWrapper``).
        max_steps: Turn limit passed to ``gym.make`` (env ids only).
        episode_timeout: Seconds before an episode ends with ``TIMEOUT``.
        env_kwargs: Extra ``gym.make`` keyword arguments (env ids only).
        progress: Show a tqdm progress bar with the running mean reward.
        backend: ``"local"`` (threads and an event loop) or ``"ray"`` (Ray actors).
        seed: Base seed; group ``g`` resets with ``seed + g``. Episode ids (the
            policy's session ids) derive from it too, so a seeded policy repeats
            its samples run after run; two collects sharing one policy at the
            same time need different seeds.
        on_episode: Called with each trajectory as soon as it finishes (in
            completion order), e.g. an incremental file writer's ``write``.
        ray_address: Ray cluster address (``backend="ray"``); None uses
            ``RAY_ADDRESS`` or starts a local instance.

    Returns:
        ``len(tasks or range(num_episodes)) * samples_per_task`` trajectories;
        ``trajectory.idx`` is its position.

    Example:
        >>> trajectories = collect("agent_gym/ToolUse-v0", policy, num_episodes=64, n_parallel=16)  # doctest: +SKIP
    """
    return run_sync(
        lambda: collect_async(
            env,
            policy,
            tasks=tasks,
            num_episodes=num_episodes,
            samples_per_task=samples_per_task,
            n_parallel=n_parallel,
            gamma=gamma,
            memory=memory,
            max_steps=max_steps,
            episode_timeout=episode_timeout,
            env_kwargs=env_kwargs,
            progress=progress,
            backend=backend,
            seed=seed,
            on_episode=on_episode,
            ray_address=ray_address,
        ),
        release=[policy],
    )
