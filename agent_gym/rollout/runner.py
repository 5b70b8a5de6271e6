"""The long-lived episode runner: :class:`EpisodeRunner` owns its envs and worker threads.

``collect`` opens one, runs its episodes and closes it; :class:`~agent_gym.rollout.stream.RolloutStream`,
the trainer adapters (:mod:`agent_gym.integrations`) and the Ray actors each hold one for their
lifetime, so an env is built once and reused through ``reset`` (Gymnasium's contract), episode
after episode. Envs are pooled by key (env id, ``gym.make`` keyword arguments, parser): episodes
of other env ids or keyword arguments (:attr:`EpisodeSpec.env <agent_gym.rollout.planning.EpisodeSpec.env>`)
get envs of their own. An env that raised, or whose episode was cancelled or timed out while a
call on it ran, is discarded (closed once the call returns) and a new one is built for a later
episode.

Each episode runs the one episode loop (:func:`~agent_gym.rollout.episode.episode_loop`):
``reset``/``step`` and env construction run on a
:class:`~agent_gym.rollout.thread_pool.ThreadPool` of daemon threads so a blocking tool never
stalls the event loop, except the ``reset``/``step`` of an env whose calls cannot block (its
``calls_can_block()`` says so, see :mod:`agent_gym.wrappers.blocking`; e.g. ToolUse-v0 with its
own tools), which run on the loop: a hand-off to a thread costs more than such a call. The
policy's ``aact`` runs on the loop (a policy with only a blocking ``act`` runs on the pool too).
A runner serves one event loop at a time (a new loop, e.g. one ``collect`` call after another,
gets new worker threads; the envs stay).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

from agent_gym.parsers import env_parser_for, policy_parser_names
from agent_gym.rollout.env_pool import EnvPool, env_key, safe_close
from agent_gym.rollout.episode import ActCall, EndEpisode, EpisodeCall, ResetCall, TurnCall, adrive, episode_loop
from agent_gym.rollout.long_tail import EpisodeOverBudget, LongTailGate, mark_resumes
from agent_gym.rollout.next_reset import LaterEpisodes, SpecQueue
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import EpisodeSpec, make_env_factory
from agent_gym.rollout.reporting import STOPPED_REASON, Progress, failed_trajectory, label, notify, stopped_trajectory
from agent_gym.rollout.thread_pool import ThreadPool
from agent_gym.types import EpisodeStatus, PolicyOutput, StepTrajectory

__all__ = ["EpisodeRunner"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


def _check_policy(policy: Any) -> Any:
    if not (hasattr(policy, "aact") or hasattr(policy, "act")):
        raise TypeError(f"policy: expected an object with aact() or act(), got {type(policy).__name__}")
    return policy


class _Episode:
    """Mutable state of one running episode (what the timeout handler needs)."""

    def __init__(self, policy: Any, gate: LongTailGate | None = None) -> None:
        self.policy = policy
        self.async_policy = inspect.iscoroutinefunction(getattr(policy, "aact", None))
        self.gate = gate
        self.budget = gate.budget() if gate is not None else None
        self.key: Hashable = None
        self.wrapper: Any = None
        self.session_id: str | None = None
        self.job: Any = None  # the pool call in progress, if any
        self.env_broken = False


class EpisodeRunner:
    """Runs episodes on this process with envs and worker threads kept from one episode to the next.

    Args:
        env: The default env of the episodes: an env id, a factory or factories (see
            :func:`~agent_gym.rollout.planning.make_env_factory`); None when every spec names
            its env (``EpisodeSpec.env``).
        policy: The default policy: an object with ``aact`` (preferred) or ``act``, and
            ``close_session``; None when every call passes one.
        options: The runner's settings; it reads ``n_parallel``, ``gamma``, ``memory``,
            ``max_steps``, ``episode_timeout``, ``env_kwargs``, ``tool_parser``,
            ``reasoning_parser`` and ``long_tail``.
        threads: Most worker threads to start with (default ``n_parallel``); the runner widens
            its thread pool (and the idle envs it keeps) to the episodes in flight, e.g. when
            several runs go on side by side. Threads start only when calls need them.
        **changes: :class:`~agent_gym.rollout.options.RolloutOptions` fields that replace
            those of ``options`` (e.g. ``EpisodeRunner(env, policy, n_parallel=4)``).

    Raises:
        TypeError: A policy without ``aact``/``act``, an env of no accepted kind, an unknown keyword.
        agent_gym.errors.ConfigError: An option out of range or an unknown parser name.

    Example:
        >>> with EpisodeRunner("agent_gym/ToolUse-v0", policy, n_parallel=4) as runner:  # doctest: +SKIP
        ...     first = await runner.run(plan_episodes(None, 8))
        ...     again = await runner.run(plan_episodes(None, 8, seed=8))  # the same four envs
    """

    def __init__(self, env: Any = None, policy: Any = None, options: RolloutOptions | None = None, *,
                 threads: int | None = None, **changes: Any) -> None:
        self.policy = _check_policy(policy) if policy is not None else None
        self.options = RolloutOptions.build(options, where="EpisodeRunner", **changes)
        self.n_parallel = self.options.n_parallel
        self.env = env
        self._threads = max(int(threads or 0), self.n_parallel)
        self.envs = EnvPool(self._threads)
        self._factories: dict[Hashable, Callable[[int], Any]] = {}
        self._pool: ThreadPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._in_flight = 0
        if env is not None and (not isinstance(env, str) or policy is not None):
            self._factory(env, self.options.env_kwargs, policy)  # check the env and choose its parser now

    # ------------------------------------------------------------------ lifecycle
    @property
    def env_builds(self) -> int:
        """Envs built so far (each ``gym.make`` or factory call)."""
        return self.envs.built

    def _thread_pool(self) -> ThreadPool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            if self._pool is not None:
                self._pool.shutdown()
            self._pool, self._pool_loop = ThreadPool(self._threads), loop
        return self._pool

    def _widen(self, count: int) -> None:
        """Allow ``count`` episodes' calls at once."""
        if count > self._threads:
            self._threads = self.envs.capacity = count
            if self._pool is not None:
                self._pool.size = max(self._pool.size, count)

    def close(self) -> None:
        """Close every idle env and stop the worker threads (envs still in use close when given back)."""
        self._closed = True
        for env in self.envs.drain():
            safe_close(env)
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> EpisodeRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> EpisodeRunner:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ envs
    def _factory(self, env: Any, env_kwargs: Mapping[str, Any] | None, policy: Any) -> tuple[Hashable, Any]:
        """The pool key and env factory of episodes of ``env`` with ``env_kwargs`` played by ``policy``."""
        opts = self.options
        if isinstance(env, str):  # an env id: its envs parse with the policy's family, or the names given
            names = (opts.tool_parser, opts.reasoning_parser)
            if names == (None, None):
                names = policy_parser_names(policy)[:2]
            key = env_key(env, env_kwargs, opts.max_steps, names)
        else:
            key = env_key("factory", env)
        factory = self._factories.get(key)
        if factory is None:
            kwargs = env_kwargs
            if isinstance(env, str):
                parser = env_parser_for(policy, env_kwargs, opts.tool_parser, opts.reasoning_parser)
                if parser is not None:
                    kwargs = {**(env_kwargs or {}), "parser": parser}
                factory = make_env_factory(env, env_kwargs=kwargs, max_steps=opts.max_steps)
            else:
                factory = make_env_factory(env, env_kwargs=kwargs, max_steps=opts.max_steps)
            self._factories[key] = factory
        return key, factory

    async def _take_env(self, state: _Episode, spec: EpisodeSpec, prefer: Any = None) -> Any:
        env = spec.env if spec.env is not None else self.env
        env_kwargs = spec.env_kwargs if spec.env_kwargs is not None else self.options.env_kwargs
        state.key, factory = self._factory(env, env_kwargs, state.policy)
        wrapper = self.envs.take(state.key, prefer)
        if wrapper is None:
            from agent_gym.wrappers.trajectory import TrajectoryWrapper

            index = self.envs.count_built()

            def _build() -> Any:
                return TrajectoryWrapper(factory(index), gamma=self.options.gamma, memory=self.options.memory)

            wrapper = await self._thread_pool().run(_build)
        return wrapper

    def _release(self, state: _Episode) -> None:
        """Give the episode's env back, or discard it when it may be in a bad state."""
        wrapper = state.wrapper
        if wrapper is None:
            return
        if not state.env_broken:
            self.envs.give_back(state.key, wrapper)
            return
        self.envs.discard()
        if state.job is not None:  # a call still running on it: close it once the call returns
            self._thread_pool().abandon(state.job, after=lambda: safe_close(wrapper))
        else:
            self._thread_pool().submit(safe_close, wrapper)

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

    async def _env_call(self, state: _Episode, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the env: on the event loop when the env's calls cannot block, else on a worker."""
        if not state.wrapper.calls_can_block():
            return fn(*args)
        return await self._call(state, fn, *args)

    async def _execute(self, state: _Episode, spec: EpisodeSpec, call: EpisodeCall) -> Any:
        """Do one call of the episode loop (see :mod:`agent_gym.rollout.episode`)."""
        wrapper = state.wrapper
        if isinstance(call, ResetCall):
            obs, info = await self._env_call(state, lambda: wrapper.reset(seed=call.seed, options=call.options))
            state.session_id = (info.get("episode_id") or getattr(wrapper, "rollout_id", None)
                                or f"episode-{spec.index}")
            return obs, info
        if isinstance(call, TurnCall):
            if state.gate is not None and state.budget is not None:
                try:
                    await state.gate.before_turn(state.budget, state.session_id or "")
                except EpisodeOverBudget as exc:
                    raise EndEpisode(EpisodeStatus.TIMEOUT, str(exc)) from None
            return None
        if isinstance(call, ActCall):
            started = time.perf_counter()
            session_id, obs, tools = state.session_id, call.obs, call.tools
            if state.async_policy:
                action = await state.policy.aact(obs, session_id=session_id, tools=tools)
            else:
                action = await self._call(state, lambda: state.policy.act(obs, session_id=session_id, tools=tools))
            if not isinstance(action, PolicyOutput):
                wrapper.record_llm_time(time.perf_counter() - started)
            return action
        return await self._env_call(state, wrapper.step, call.action)

    async def _body(self, spec: EpisodeSpec, state: _Episode) -> StepTrajectory:
        wrapper = state.wrapper
        # A deterministic episode id (also the policy's session id, from which seeded
        # policies derive their per-turn sampling seeds) makes a seeded run repeatable.
        options: dict[str, Any] = {"episode_id": spec.episode_id}
        if spec.task is not None:
            options["task"] = spec.task
        ending = await adrive(episode_loop(spec.seed, options), functools.partial(self._execute, state, spec))
        if ending.failed_call is not None:
            logger.warning("episode %d: %s", spec.index, ending.reason)
            if ending.failed_call == "step":
                logger.debug("env.step traceback", exc_info=ending.exception)
        state.env_broken = state.env_broken or ending.env_failed
        if ending.done:
            trajectory = ending.info.get("trajectory")
            return trajectory if trajectory is not None else wrapper.finish(ending.status)
        return wrapper.finish(ending.status, ending.reason)

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

    async def run_episode(self, spec: EpisodeSpec, *, policy: Any = None, gate: LongTailGate | None = None,
                          on_cancel: Callable[[StepTrajectory], None] | None = None,
                          on_env: Callable[[Any], None] | None = None, prefer: Any = None) -> StepTrajectory:
        """Run one episode on a pooled env; never raises for env/policy failures.

        Args:
            spec: The episode to run (its ``env``/``env_kwargs``, when set, replace the runner's).
            policy: The episode's policy (None: the runner's).
            gate: The run's long-tail gate (None: the options' budget, a parked episode resuming
                at once: one episode alone has no other to give its slot to).
            on_cancel: Called, when the call is cancelled, with the episode's record so far (its
                turns, status ``TIMEOUT``, reason :data:`~agent_gym.rollout.reporting.STOPPED_REASON`);
                the cancellation then goes on.
            on_env: Called with the episode's env once taken, before its reset (see
                :mod:`~agent_gym.rollout.next_reset`).
            prefer: The env to take when it is idle (one told of this episode); else the pool's choice.

        Returns:
            The episode's trajectory, with ``idx``, ``group_id`` and ``task`` set.

        Raises:
            RuntimeError: The runner is closed.
            TypeError: Neither the runner nor the call gives a policy, or no env is named.
        """
        if self._closed:
            raise RuntimeError("EpisodeRunner.run_episode: the runner is closed")
        policy = _check_policy(policy if policy is not None else self.policy)
        if spec.env is None and self.env is None:
            raise TypeError("EpisodeRunner.run_episode: expected an env (the runner's or spec.env), got none")
        if gate is None:
            gate, owned = self._gate()
            if gate is not None and owned:
                gate.release_all()  # alone, a parked episode has no other to give its slot to
        state = _Episode(policy, gate)
        self._in_flight += 1
        try:
            self._widen(self._in_flight)
            return await self._run_episode(spec, state, on_cancel, on_env, prefer)
        finally:
            self._in_flight -= 1

    async def _run_episode(self, spec: EpisodeSpec, state: _Episode,
                           on_cancel: Callable[[StepTrajectory], None] | None,
                           on_env: Callable[[Any], None] | None = None, prefer: Any = None) -> StepTrajectory:
        policy = state.policy
        try:
            state.wrapper = await self._take_env(state, spec, prefer)
        except Exception as exc:  # noqa: BLE001 - env construction failed: record it
            logger.warning("episode %d: building the env raised %s: %s", spec.index, type(exc).__name__, exc)
            return failed_trajectory(spec, self.options.gamma,
                                     f"building the env raised {type(exc).__name__}: {exc}")
        if on_env is not None:
            on_env(state.wrapper)
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
                    policy.close_session(state.session_id)
                except Exception:  # noqa: BLE001
                    logger.debug("policy.close_session failed", exc_info=True)
            self._release(state)
        if state.budget is not None and state.budget.resumes:
            mark_resumes(trajectory, state.budget)
        return label(trajectory, spec)

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

    async def run(
        self,
        specs: Sequence[EpisodeSpec],
        *,
        policy: Any = None,
        n_parallel: int | None = None,
        progress: bool = False,
        on_episode: Callable[[StepTrajectory], Any] | None = None,
        later: LaterEpisodes | None = None,
    ) -> list[StepTrajectory]:
        """Run ``specs`` with at most ``n_parallel`` in flight; results in spec order.

        Args:
            specs: The episodes (see :func:`~agent_gym.rollout.planning.plan_episodes`).
            policy: Their policy (None: the runner's).
            n_parallel: Most of them in flight (None: the runner's ``n_parallel``).
            progress: Show a progress bar.
            on_episode: Called with each trajectory as it finishes (see ``RolloutOptions``).
            later: Episodes of later runs for hints (see :mod:`~agent_gym.rollout.next_reset`): a worker with
                nothing of ``specs`` left to claim claims one of them for its env, and an episode of ``specs``
                claimed there takes the env claimed for it when that is idle.

        Returns:
            One trajectory per spec. Cancelling the call cancels the running episodes; before the
            cancellation goes on, ``on_episode`` gets a ``TIMEOUT`` record (reason
            :data:`~agent_gym.rollout.reporting.STOPPED_REASON`) of every episode not finished:
            the turns so far of those in flight, none for those not started.
        """
        limit = self.n_parallel if n_parallel is None else max(1, int(n_parallel))
        self._widen(limit)
        results: list[StepTrajectory | None] = [None] * len(specs)
        stopped: dict[int, StepTrajectory] = {}
        # an env with an expect_reset hook is told its next episode
        queue = SpecQueue(len(specs), workers=min(limit, len(specs)))
        bar = Progress(len(specs), progress)
        extra: list[asyncio.Future] = []

        def on_park(_: Any) -> None:
            # a parked episode's slot goes to a new worker while episodes wait to start;
            # the parked ones resume once none is left
            if queue.empty():
                if gate is not None:
                    gate.release_all()
            else:
                extra.append(asyncio.ensure_future(worker()))

        gate, _ = self._gate(on_park)

        async def worker() -> None:
            me = object()
            while True:
                i = queue.next(me)
                if i is None:
                    if gate is not None:
                        gate.release_all()
                    return
                trajectory = await self.run_episode(specs[i], policy=policy, gate=gate,
                                                    on_cancel=functools.partial(stopped.__setitem__, i),
                                                    on_env=queue.hinter(me, specs, specs[i], later),
                                                    prefer=later.claimant(specs[i]) if later is not None else None)
                results[i] = trajectory
                bar.update(trajectory)
                if on_episode is not None:
                    await notify(on_episode, trajectory)

        try:
            await asyncio.gather(*(worker() for _ in range(min(limit, len(specs)))))
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
