"""The local runner: episodes run concurrently on this process (:class:`LocalRunner`).

Episodes are scheduled independently: ``n_parallel`` worker coroutines each take
the next episode as soon as their previous one ends. Environments are created
lazily (at most one per worker) and reused across episodes; ``reset``/``step`` and
env construction run on a :class:`~agent_gym.rollout.thread_pool.ThreadPool` of
daemon threads so a blocking tool never stalls the event loop. The policy's
``aact`` runs on the loop (a policy with only a blocking ``act`` runs on the pool
too). The Ray backend runs this same runner inside each actor.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agent_gym.rollout.long_tail import EpisodeOverBudget, LongTailGate, mark_resumes
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import EpisodeSpec, make_env_factory
from agent_gym.rollout.reporting import STOPPED_REASON, Progress, failed_trajectory, label, notify, stopped_trajectory
from agent_gym.rollout.thread_pool import ThreadPool
from agent_gym.types import EpisodeStatus, FinishReason, PolicyOutput, StepTrajectory

__all__ = ["LocalRunner"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _safe_close(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a broken env is best effort
        logger.debug("env.close() failed", exc_info=True)


class _Episode:
    """Mutable state of one running episode (what the timeout handler needs)."""

    def __init__(self, gate: LongTailGate | None = None) -> None:
        self.gate = gate
        self.budget = gate.budget() if gate is not None else None
        self.wrapper: Any = None
        self.session_id: str | None = None
        self.job: Any = None  # the pool call in progress, if any
        self.env_broken = False


class LocalRunner:
    """Runs episodes on this process: an env per worker slot, reused across episodes.

    Args:
        env: Env id, factory or factories (see :func:`~agent_gym.rollout.planning.make_env_factory`).
        policy: Object with ``aact`` (preferred) or ``act``, and ``close_session``.
        options: The runner's settings; it reads ``n_parallel``, ``gamma``,
            ``memory``, ``max_steps``, ``episode_timeout`` and ``env_kwargs``.
        **changes: :class:`~agent_gym.rollout.options.RolloutOptions` fields that
            replace those of ``options`` (e.g. ``LocalRunner(env, policy, n_parallel=4)``).

    Example:
        >>> runner = LocalRunner("agent_gym/ToolUse-v0", policy, n_parallel=4)  # doctest: +SKIP
        >>> trajectories = await runner.run(plan_episodes(None, 8))  # doctest: +SKIP
    """

    def __init__(self, env: Any, policy: Any, options: RolloutOptions | None = None, **changes: Any) -> None:
        if not (hasattr(policy, "aact") or hasattr(policy, "act")):
            raise TypeError(f"policy: expected an object with aact() or act(), got {type(policy).__name__}")
        self.options = RolloutOptions.build(options, where="LocalRunner", **changes)
        self.n_parallel = self.options.n_parallel
        self.factory = make_env_factory(env, env_kwargs=self.options.env_kwargs, max_steps=self.options.max_steps)
        self.policy = policy
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
                return TrajectoryWrapper(self.factory(slot), gamma=self.options.gamma, memory=self.options.memory)

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
        options: dict[str, Any] = {"episode_id": spec.episode_id}
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
            if state.gate is not None and state.budget is not None:
                try:
                    await state.gate.before_turn(state.budget, state.session_id)
                except EpisodeOverBudget as exc:
                    return wrapper.finish(EpisodeStatus.TIMEOUT, str(exc))
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
            # The tool set may change during an episode: the wrapper puts the current
            # schemas in every info; an info without the key leaves them unchanged.
            tools = info.get("policy_tools", tools)
            if terminated or truncated:
                trajectory = info.get("trajectory")
                if trajectory is None:
                    status = EpisodeStatus.ENV_DONE if terminated else EpisodeStatus.MAX_STEPS
                    trajectory = wrapper.finish(status)
                return trajectory

    async def _report_stopped(self, specs: Sequence[EpisodeSpec], results: list[StepTrajectory | None],
                              stopped: dict[int, StepTrajectory],
                              on_episode: Callable[[StepTrajectory], Any] | None) -> None:
        """Hand ``on_episode`` the record of every episode a cancellation left unfinished."""
        if on_episode is None:
            return
        for i, spec in enumerate(specs):
            if results[i] is None:
                record = stopped.get(i) or stopped_trajectory(spec, self.options.gamma)
                results[i] = record
                await notify(on_episode, record)

    def _stopped_record(self, spec: EpisodeSpec, state: _Episode) -> StepTrajectory:
        """The record of an episode cancelled in flight: its turns so far, ``TIMEOUT``."""
        try:
            return label(state.wrapper.finish(EpisodeStatus.TIMEOUT, STOPPED_REASON), spec)
        except Exception:  # noqa: BLE001 - a wrapper in a broken state: the record without turns
            logger.debug("finishing a cancelled episode failed", exc_info=True)
            return stopped_trajectory(spec, self.options.gamma)

    def _gate(self, on_park: Callable[[Any], None] | None = None) -> tuple[LongTailGate | None, bool]:
        """The long-tail gate of a run and whether the run owns it (a new one for the options' budget)."""
        long_tail = self.options.long_tail
        if long_tail is None or isinstance(long_tail, LongTailGate):
            return long_tail, False
        return LongTailGate(long_tail, on_park=on_park), True

    async def run_episode(self, spec: EpisodeSpec, slot: int = 0, gate: LongTailGate | None = None,
                          on_cancel: Callable[[StepTrajectory], None] | None = None) -> StepTrajectory:
        """Run one episode on worker slot ``slot``; never raises for env/policy failures.

        Args:
            spec: The episode to run.
            slot: The worker slot (selects the cached env).
            gate: The run's long-tail gate (None: the options' budget, a parked episode resuming
                at once: one episode alone has no other to give its slot to).
            on_cancel: Called, when the call is cancelled, with the episode's record so far (its
                turns, status ``TIMEOUT``, reason :data:`~agent_gym.rollout.reporting.STOPPED_REASON`);
                the cancellation then goes on.

        Returns:
            The episode's trajectory, with ``idx``, ``group_id`` and ``task`` set.
        """
        if gate is None:
            gate, owned = self._gate()
            if gate is not None and owned:
                gate.release_all()  # alone, a parked episode has no other to give its slot to
        state = _Episode(gate)
        try:
            state.wrapper = await self._wrapper(slot)
        except Exception as exc:  # noqa: BLE001 - env construction failed: record it
            logger.warning("episode %d: building the env raised %s", spec.index, _error_text(exc))
            return failed_trajectory(spec, self.options.gamma, f"building the env raised {_error_text(exc)}")
        timeout = self.options.episode_timeout
        try:
            if timeout is None:
                trajectory = await self._body(spec, state)
            else:
                trajectory = await asyncio.wait_for(self._body(spec, state), timeout)
        except asyncio.TimeoutError:
            logger.warning("episode %d: exceeded episode_timeout=%ss", spec.index, timeout)
            state.env_broken = state.env_broken or state.job is not None
            trajectory = state.wrapper.finish(EpisodeStatus.TIMEOUT, f"episode exceeded episode_timeout={timeout}s")
        except asyncio.CancelledError:
            state.env_broken = state.env_broken or state.job is not None
            if on_cancel is not None:
                on_cancel(self._stopped_record(spec, state))
            raise
        finally:
            if state.session_id is not None:
                try:
                    self.policy.close_session(state.session_id)
                except Exception:  # noqa: BLE001
                    logger.debug("policy.close_session failed", exc_info=True)
            if state.env_broken:
                self._discard(slot, state)
        if state.budget is not None and state.budget.resumes:
            mark_resumes(trajectory, state.budget)
        return label(trajectory, spec)

    async def run(
        self,
        specs: Sequence[EpisodeSpec],
        *,
        progress: bool = False,
        on_episode: Callable[[StepTrajectory], Any] | None = None,
    ) -> list[StepTrajectory]:
        """Run ``specs`` with at most ``n_parallel`` in flight; results in spec order.

        Args:
            specs: The episodes (see :func:`~agent_gym.rollout.planning.plan_episodes`).
            progress: Show a progress bar.
            on_episode: Called with each trajectory as it finishes (see ``RolloutOptions``).

        Returns:
            One trajectory per spec. Cancelling the call cancels the running episodes; before the
            cancellation goes on, ``on_episode`` gets a ``TIMEOUT`` record (reason
            :data:`~agent_gym.rollout.reporting.STOPPED_REASON`) of every episode not finished:
            the turns so far of those in flight, none for those not started.
        """
        results: list[StepTrajectory | None] = [None] * len(specs)
        stopped: dict[int, StepTrajectory] = {}
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(specs)):
            queue.put_nowait(i)
        bar = Progress(len(specs), progress)
        workers = min(self.n_parallel, len(specs))
        slots = itertools.count(workers)
        extra: list[asyncio.Future] = []

        def on_park(_: Any) -> None:
            # a parked episode's slot goes to a new worker while episodes wait to start;
            # the parked ones resume once none is left
            if queue.empty():
                if gate is not None:
                    gate.release_all()
            else:
                extra.append(asyncio.ensure_future(worker(next(slots))))

        gate, _ = self._gate(on_park)

        async def worker(slot: int) -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    if gate is not None:
                        gate.release_all()
                    return
                trajectory = await self.run_episode(specs[i], slot, gate, on_cancel=functools.partial(
                    stopped.__setitem__, i))
                results[i] = trajectory
                bar.update(trajectory)
                if on_episode is not None:
                    await notify(on_episode, trajectory)

        try:
            await asyncio.gather(*(worker(slot) for slot in range(workers)))
            while pending := [job for job in extra if not job.done()]:
                await asyncio.gather(*pending)
            for job in extra:
                job.result()
        except asyncio.CancelledError:
            await self._report_stopped(specs, results, stopped, on_episode)
            raise
        finally:
            for job in extra:
                job.cancel()
            bar.close()
        return results  # type: ignore[return-value]
