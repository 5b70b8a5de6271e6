"""Streaming rollouts: episodes run continuously while the trainer takes finished groups and updates weights.

:class:`RolloutStream` keeps ``concurrency`` episodes running (one background event loop) over
the tasks handed to it, ``samples_per_task`` episodes per task. A *group* (every sample of one
task) is handed to the trainer as soon as its last episode ends (:meth:`RolloutStream.get`,
iteration, or :func:`collect_stream`), in completion order, so one long episode never holds
back the others.

:meth:`RolloutStream.update_weights` is the trainer's weight update while episodes keep
running: it pauses the servers (vLLM's ``POST /pause?mode=abort|wait|keep``; in ``abort`` mode
the policy continues each aborted turn token-exactly after the resume), applies the new
weights (a callable, or a checkpoint path every server reloads with vLLM's ``POST /collective_rpc``),
bumps the version (``stream.version``, also set as the policy's ``weight_version``) and resumes.

``max_staleness`` bounds how many versions old a handed-out sample may be (its oldest sampled
id's version, ``weight_version_start``, against the current version):

* admission control: a group starts only while the groups started so far (less the dropped
  ones) are fewer than ``(version + max_staleness + 1) * groups_per_update`` (as AReaL does), so
  no episode starts that the trainer could only consume too late;
* a check at hand-out: a group older than the bound is dropped (``stale="drop"``: kept in
  ``stream.dropped``, counted) or handed out with ``group.stale`` set (``stale="mark"``).

With a :class:`~agent_gym.rollout.sampler.TaskSampler` (``sampler=``) the stream draws each group's
task and env from it instead of ``tasks`` (``max_groups`` groups, or until closed) and the sampler
observes every finished group (pass rates, metrics per env). With
:class:`~agent_gym.rollout.dynamic_sampling.DynamicSampling` (``dynamic_sampling=``) a group whose
outcome has zero variance among valid members is dropped when it ends: its slot goes to a new group
at once, it gives its place in the staleness window back, and it is counted on ``stats``
(``filtered_too_easy``, ``filtered_too_hard``, ``filtered_infra``, ``infra_episodes``). With its
``early_cancel`` (and a sampler), a group's unfinished siblings are cancelled once the finished ones
agree and another outcome is unlikely (``stats.cancelled``; :mod:`~agent_gym.rollout.early_cancel`).

Every task handed in comes back: as a group, in ``stream.dropped`` (stale), or counted as filtered. The stream holds one
:class:`~agent_gym.rollout.runner.EpisodeRunner` for its lifetime: every group's episodes run on
its envs and threads (an env is built once and reused through ``reset``), so a stream never
holds more envs than episodes it ran at once (with ``backend="ray_sharded"`` the groups run in Ray shards
instead: :class:`~agent_gym.rollout.sharded_runner.ShardedRunner`). An env with ``expect_reset`` is
told, as under ``collect``, the episode it runs next: within a group, and, when the tasks are a
sequence, in the next groups, laid out ahead (:mod:`~agent_gym.rollout.stream_plan`,
:mod:`~agent_gym.rollout.next_reset`). :meth:`RolloutStream.close` (also on leaving the ``with``
block, on Ctrl-C, and on SIGTERM when ``handle_sigterm``) cancels the running episodes, closes the
runner's envs and stops the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_gym.checks import check_choice, check_int
from agent_gym.errors import AgentGymError, ConfigError
from agent_gym.policy.vllm_client import VLLMClient
from agent_gym.rollout.collection import open_runner, warn_if_truncated
from agent_gym.rollout.dynamic_sampling import DynamicSampling
from agent_gym.rollout.early_cancel import GroupWatch, watch_group
from agent_gym.rollout.long_tail import LongTail, LongTailGate, ParkedEpisode
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.outcome import is_valid
from agent_gym.rollout.runner import EpisodeRunner
from agent_gym.rollout.sampler import SampledTask, TaskSampler
from agent_gym.rollout.stream_plan import GroupPlan
from agent_gym.utils.runtime import LoopThread

__all__ = ["RolloutGroup", "RolloutStream", "check_checkpoint_dir", "collect_stream"]


@dataclass
class RolloutGroup:
    """The finished samples of one task.

    Attributes:
        task: The task.
        trajectories: Its ``samples_per_task`` episodes.
        version_start: The oldest weight version of the group's sampled ids (the stream's
            version when the group started, if no id says).
        version_handed: The stream's version when the group was handed out.
        stale: Whether the group is older than ``max_staleness`` (``stale="mark"``).
        wall_s: Seconds from the group's start to its end.
        source: The sampler's source (env) of the group ("" without a sampler).
    """

    task: Any
    trajectories: list[Any]
    version_start: int
    version_handed: int = 0
    stale: bool = False
    wall_s: float = 0.0
    source: str = ""

    @property
    def staleness(self) -> int:
        """Versions between the group's oldest sampled id and the hand-out."""
        return self.version_handed - self.version_start


@dataclass
class _Stats:
    started: int = 0
    handed: int = 0
    dropped: int = 0
    marked: int = 0
    parked: int = 0
    updates: int = 0
    update_s: list[float] = field(default_factory=list)
    filtered_too_easy: int = 0
    filtered_too_hard: int = 0
    filtered_infra: int = 0
    infra_episodes: int = 0
    cancelled: int = 0

    @property
    def filtered(self) -> int:
        """Groups dropped by dynamic sampling."""
        return self.filtered_too_easy + self.filtered_too_hard + self.filtered_infra


class RolloutStream:
    """Episodes running continuously at a target concurrency; groups handed out as they finish.

    Args:
        env: What ``collect`` takes (a registered env id, a callable, ...).
        policy: The policy (a ``VLLMPolicy`` records per-id weight versions).
        tasks: The tasks, in order (an iterable: the stream takes them as it goes; a sequence is laid out
            ahead, ``concurrency`` episodes, for the envs' next-episode hints); None with a sampler.
        samples_per_task: Episodes per task (the group size).
        concurrency: Target number of episodes running at once.
        max_staleness: Most versions a handed-out sample may lag (None: unbounded).
        groups_per_update: Groups the trainer takes per weight update (admission control).
        stale: ``"drop"`` or ``"mark"`` a group older than ``max_staleness``.
        servers: ``"host:port"`` of the servers to pause (default: the policy's client's).
        pause_mode: Default mode of :meth:`update_weights`.
        handle_sigterm: Turn SIGTERM into ``KeyboardInterrupt`` while the stream is open
            (main thread only), so ``with`` blocks close it.
        long_tail: A :class:`~agent_gym.rollout.long_tail.LongTail` budget per episode. Over it an
            episode is ended with ``TIMEOUT`` (``action="end"``) or parked (``"park"``): its slot
            goes to a new group, and it resumes from where it stopped once a slot is free that
            no new group can take (tasks exhausted or the staleness window closed); the
            episodes parked now are :attr:`parked`.
        collect_kwargs: :class:`~agent_gym.rollout.options.RolloutOptions` fields of the stream's
            runner (``max_steps``, ``episode_timeout``, ``env_kwargs``, ``n_parallel``: most
            episodes of one group in flight, ...; ``seed``: the k-th group taken from the tasks or
            the sampler runs with ``seed + k``, so groups of one task handed in twice get their own episode
            ids and sampling seeds).
        sampler: Draws each group's task and env (``env`` may be None) and observes each finished
            group; replaces ``tasks``.
        max_groups: With a sampler, the most groups started (None: until :meth:`close`).
        dynamic_sampling: Drops groups without outcome variance among valid members when they end
            (counted on ``stats`` and on its own ``stats``). A stream hands each informative group
            out as it ends, so nothing is surplus: a filter with ``carry_over`` (``collect``'s batches) is refused.

    Raises:
        TypeError: A keyword that is no ``RolloutOptions`` field, or a sampler or filter of the wrong type.
        ConfigError: Both ``tasks`` and ``sampler``, or neither; a filter with ``carry_over``.
    """

    def __init__(
        self,
        env: Any,
        policy: Any,
        tasks: Iterable[Any] | None = None,
        *,
        samples_per_task: int = 1,
        concurrency: int = 8,
        max_staleness: int | None = None,
        groups_per_update: int = 1,
        stale: str = "drop",
        servers: Sequence[str] | None = None,
        pause_mode: str = "abort",
        handle_sigterm: bool = False,
        long_tail: LongTail | None = None,
        sampler: TaskSampler | None = None,
        max_groups: int | None = None,
        dynamic_sampling: DynamicSampling | None = None,
        **collect_kwargs: Any,
    ) -> None:
        check_int("samples_per_task", samples_per_task, low=1)
        if sampler is not None and not isinstance(sampler, TaskSampler):
            raise TypeError(f"sampler: expected TaskSampler or None, got {type(sampler).__name__}")
        if dynamic_sampling is not None and not isinstance(dynamic_sampling, DynamicSampling):
            raise TypeError("dynamic_sampling: expected DynamicSampling or None, got "
                            f"{type(dynamic_sampling).__name__}")
        if dynamic_sampling is not None and dynamic_sampling.carry_over:
            raise ConfigError("RolloutStream: expected dynamic_sampling without carry_over (a stream hands every "
                              f"informative group out as it ends; carry_over is for collect), got "
                              f"carry_over={dynamic_sampling.carry_over}")
        if (tasks is None) == (sampler is None):
            raise ConfigError("RolloutStream: expected tasks or a sampler, got "
                              + ("both" if sampler is not None else "neither"))
        if max_groups is not None:
            check_int("max_groups", max_groups, low=0)
        self.sampler, self.max_groups, self.dynamic_sampling = sampler, max_groups, dynamic_sampling
        check_int("concurrency", concurrency, low=1)
        check_int("groups_per_update", groups_per_update, low=1)
        if max_staleness is not None:
            check_int("max_staleness", max_staleness, low=0)
        self.stale_policy = check_choice("stale", stale, ("drop", "mark"))
        self.pause_mode = check_choice("pause_mode", pause_mode, ("abort", "wait", "keep"))
        self.env, self.policy = env, policy
        self.samples_per_task = samples_per_task
        self.concurrency = concurrency
        self.max_staleness = max_staleness
        self.groups_per_update = groups_per_update
        self.base_seed = check_int("seed", collect_kwargs.pop("seed", 0))
        self.collect_kwargs = {"progress": False, **collect_kwargs}
        self._waiting: list[asyncio.Future] = []  # parked episodes, oldest first
        self.gate: LongTailGate | None = None
        if long_tail is not None:
            if not isinstance(long_tail, LongTail):
                raise TypeError(f"long_tail: expected LongTail or None, got {type(long_tail).__name__}")
            self.gate = LongTailGate(long_tail, release=self._hold)
            self.collect_kwargs["long_tail"] = self.gate
        given = dict(self.collect_kwargs)
        options = RolloutOptions.build(given.pop("options", None), where="RolloutStream", **given)
        self.runner = open_runner(env, policy, options, in_flight=concurrency,  # ray_sharded: Ray shards
                                  threads=concurrency + samples_per_task, where="RolloutStream")
        # groups of a sequence of tasks are laid out ahead, for the hints of envs with expect_reset
        self.plan = GroupPlan(tasks, sampler, samples_per_task=samples_per_task, seed=self.base_seed,
                              max_groups=max_groups, ahead=concurrency)
        # Ray shards run their episodes one at a time: hints are the local runner's
        self._hints = {"later": self.plan.later} if isinstance(self.runner, EpisodeRunner) else {}
        client = getattr(policy, "client", None)
        self.servers = list(servers if servers is not None else getattr(client, "server_addresses", []) or [])
        # the policy's client makes update_weights' calls (any other policy: one for ``servers``)
        self._control_client: Any = (client if isinstance(client, VLLMClient)
                                     else VLLMClient(self.servers) if self.servers else None)
        self.version = max(int(getattr(policy, "weight_version", 0)), 0)
        if hasattr(policy, "weight_version"):
            policy.weight_version = self.version
        self.dropped: list[RolloutGroup] = []
        self.stats = _Stats()
        self._out: queue.Queue[RolloutGroup | BaseException | None] = queue.Queue()
        self._closed = False
        self._warned = False
        self._exhausted = False
        self._running: set[asyncio.Task] = set()
        self._runner = LoopThread("agent-gym-rollout-stream")
        self._control = LoopThread("agent-gym-rollout-control")  # update_weights' server calls
        self._loop = self._runner.loop
        self._wake: asyncio.Event | None = None
        self._previous_sigterm: Any = None
        if handle_sigterm and threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._main = self._runner.submit(self._scheduler())
        self._main.add_done_callback(self._finished)

    # ------------------------------------------------------------------ the loop
    def _finished(self, main: concurrent.futures.Future) -> None:
        """The scheduler ended: hand its failure and the end to the consumer, stop the loop."""
        if main.cancelled():
            self._out.put(asyncio.CancelledError("the stream's loop was stopped"))
        elif main.exception() is not None:
            self._out.put(main.exception())
        self._out.put(None)
        self._runner.stop(wait=False)

    def _admissible(self) -> bool:
        if self.max_staleness is None:
            return True
        # a dropped group gives its place back: otherwise a consumer waiting for its next groups
        # would wait for ever once drops used up the staleness window
        admitted = self.stats.started - self.stats.dropped - self.stats.filtered
        return admitted < (self.version + self.max_staleness + 1) * self.groups_per_update

    async def _scheduler(self) -> None:
        self._wake = asyncio.Event()
        try:
            while not self._closed:
                while not self._exhausted and not self._closed and self._free_slots() > 0 and self._admissible():
                    planned = self.plan.next(self.runner.envs.is_idle if self._hints else None)
                    if planned is None:
                        self._exhausted = True
                        break
                    job = asyncio.ensure_future(self._group(planned.task, planned.drawn, planned.specs,
                                                            planned.error))
                    self.stats.started += 1
                    self._running.add(job)
                    job.add_done_callback(self._job_done)
                if self._exhausted and not self._running:
                    return
                self._resume_parked()
                self._wake.clear()
                await self._wake.wait()
        finally:
            self.plan.clear()
            for job in list(self._running):
                job.cancel()
            if self._running:
                await asyncio.gather(*self._running, return_exceptions=True)
            self.runner.close()
            await _aclose(self.policy)

    def _free_slots(self) -> int:
        """Episodes that may start: the target less those running (parked ones not counted)."""
        return self.concurrency - (len(self._running) * self.samples_per_task - len(self._waiting))

    def _resume_parked(self) -> None:
        """Resume the oldest parked episodes into the free slots no new group can take."""
        while self._waiting and self._free_slots() > 0:
            waiting = self._waiting.pop(0)
            if not waiting.done():
                waiting.set_result(None)

    async def _hold(self, parked: ParkedEpisode) -> None:
        """A parked episode waits here for :meth:`_resume_parked`; its slot wakes the scheduler."""
        waiting = self._loop.create_future()
        self._waiting.append(waiting)
        self.stats.parked += 1
        if self._wake is not None:
            self._wake.set()
        try:
            await waiting
        finally:
            if waiting in self._waiting:
                self._waiting.remove(waiting)

    @property
    def parked(self) -> list[ParkedEpisode]:
        """The episodes parked now (over their long-tail budget, waiting to resume)."""
        return list(self.gate.parked) if self.gate is not None else []

    def _job_done(self, job: asyncio.Task) -> None:
        """Free the group's slot, then wake the scheduler.

        In that order: a wake-up that still saw the finished group running would leave its slot
        unused until the next event (and the stream's end unnoticed).
        """
        self._running.discard(job)
        if self._wake is not None:
            self._wake.set()

    async def _group(self, task: Any, drawn: SampledTask | None, specs: list[Any],
                     error: Exception | None = None) -> None:
        start, version = time.perf_counter(), self.version
        try:
            if error is not None:
                raise error  # its episodes could not be laid out: the consumer sees why
            if not self._warned:  # once per stream, not per group
                self._warned = True
                warn_if_truncated(self.policy)
            options = self.runner.options
            watch = watch_group(self.dynamic_sampling, self.sampler, drawn, self.samples_per_task,
                                options.on_episode)
            if watch is None:
                trajectories = await self.runner.run(specs, progress=options.progress, on_episode=options.on_episode,
                                                     **self._hints)
            else:
                job = watch.job = asyncio.ensure_future(self.runner.run(specs, progress=options.progress,
                                                                        on_episode=watch, **self._hints))
                try:
                    trajectories = await job
                except asyncio.CancelledError:
                    if not watch.cancelled or self._closed:
                        raise  # the stream is closing
                    self._cancelled(drawn, watch)
                    return  # its slot goes to a new group
        except Exception as exc:  # noqa: BLE001 - the consumer sees it (episodes' own failures are statuses)
            self._out.put(exc)
            return
        if drawn is not None and self.sampler is not None:
            self.sampler.observe(drawn, trajectories)
        if watch is not None and watch.decided and self.dynamic_sampling is not None:  # an audited decision
            self.dynamic_sampling.count_audit(wrong=self.dynamic_sampling.verdict(trajectories) == "kept")
        if self.dynamic_sampling is not None and not self._keep(trajectories):
            return  # the job ends: its slot and its place in the staleness window go to a new group
        starts = [t.weight_version_start for t in trajectories if getattr(t, "weight_version_start", -1) >= 0]
        group = RolloutGroup(task, list(trajectories), min(starts, default=version),
                             wall_s=time.perf_counter() - start, source=drawn.source if drawn is not None else "")
        self._out.put(group)

    def _cancelled(self, drawn: SampledTask | None, watch: GroupWatch) -> None:
        """Count a group whose unfinished siblings were cancelled early (dropped as too easy / too hard)."""
        assert self.dynamic_sampling is not None
        if drawn is not None and self.sampler is not None:
            self.sampler.observe(drawn, watch.finished)
        verdict = watch.count_cancel(self.dynamic_sampling)
        self.stats.cancelled += 1
        self._count(verdict, watch.finished)

    def _keep(self, trajectories: Sequence[Any]) -> bool:
        """Judge a finished group with the dynamic sampling filter and count a dropped one on ``stats``."""
        assert self.dynamic_sampling is not None
        return self._count(self.dynamic_sampling.judge(trajectories), trajectories)

    def _count(self, verdict: str, trajectories: Sequence[Any]) -> bool:
        """Count a judged group on ``stats``; True when it is kept."""
        self.stats.infra_episodes += sum(1 for t in trajectories if not is_valid(t))
        if verdict != "kept":
            name = f"filtered_{verdict}"
            setattr(self.stats, name, getattr(self.stats, name) + 1)
        return verdict == "kept"

    @property
    def alive(self) -> bool:
        """Whether the stream's loop still runs (False once every task came back or after ``close``)."""
        return self._runner.alive

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # ------------------------------------------------------------------ the trainer's side
    def get(self, timeout: float | None = None) -> RolloutGroup | None:
        """The next finished group (after the staleness check), or None once every task came back.

        Raises:
            queue.Empty: Nothing finished within ``timeout``.
            AgentGymError: The stream's loop failed (the cause is chained).
        """
        while True:
            item = self._out.get(timeout=timeout)
            if item is None:
                self._out.put(None)  # later calls see the end too
                return None
            if isinstance(item, BaseException):
                raise AgentGymError(f"the rollout stream failed: {item!r}") from item
            item.version_handed = self.version
            if self.max_staleness is not None and item.staleness > self.max_staleness:
                if self.stale_policy == "drop":
                    self.stats.dropped += 1
                    self.dropped.append(item)
                    self._poke()
                    continue
                item.stale = True
                self.stats.marked += 1
            self.stats.handed += 1
            self._poke()
            return item

    def __iter__(self) -> Iterator[RolloutGroup]:
        while (group := self.get()) is not None:
            yield group

    def take(self, count: int) -> list[RolloutGroup]:
        """The next ``count`` groups (fewer once every task came back)."""
        out: list[RolloutGroup] = []
        while len(out) < count and (group := self.get()) is not None:
            out.append(group)
        return out

    def update_weights(self, apply: Callable[[], Any] | str | None = None, *, mode: str | None = None,
                       timeout: float = 600.0, check_checkpoint: bool = True) -> int:
        """Pause the servers, apply new weights, label them with the new version and resume; returns it.

        The calls are vLLM's (dev mode, ``VLLM_SERVER_DEV_MODE=1``): ``POST /pause?mode=...``,
        then for a checkpoint directory ``POST /collective_rpc`` with method ``reload_weights``
        and ``kwargs.weights_path`` on every server, then ``POST /update_weight_version`` with the
        new version (a string) and ``GET /weight_info`` to check every server reports it, then
        ``POST /resume``. The reference server answers the same routes. The calls are the
        :class:`~agent_gym.policy.vllm_client.VLLMClient`'s (the policy's own client, with its
        base URLs and API key; a client for ``servers`` when the policy has none).

        Args:
            apply: A callable that loads the new weights (e.g. a trainer pushing them through
                vLLM's weight-transfer routes), or a checkpoint directory every server reloads
                from its own disk, or None (only the version moves).
            mode: The pause mode (default: the stream's ``pause_mode``).
            timeout: Seconds allowed for each server call.
            check_checkpoint: Before pausing, check that a checkpoint directory exists on this
                machine and holds weights (``*.safetensors`` or ``*.bin``): vLLM 0.32's engine fails
                every later request after a reload from a path it cannot load. Pass False when the
                servers read the path from a disk this machine does not see.

        Raises:
            ConfigError: ``check_checkpoint`` and the checkpoint is not a directory with weights.
            AgentGymError: A server could not be paused, reloaded, labelled or resumed (a server
                without dev mode answers 404: the message says to start it with
                ``VLLM_SERVER_DEV_MODE=1``). Every server is resumed all the same; the version
                moves only when the weights were applied.
        """
        mode = check_choice("mode", mode or self.pause_mode, ("abort", "wait", "keep"))
        if isinstance(apply, str) and check_checkpoint:
            check_checkpoint_dir(apply)
        started = time.perf_counter()
        new_version = self.version + 1
        applied = False
        client = self._control_client
        call = self._control.call
        try:
            for server in self.servers:
                call(client.pause(server, mode, timeout=timeout))
            if callable(apply):
                apply()
            elif isinstance(apply, str):
                for server in self.servers:
                    call(client.reload_weights(server, apply, timeout=timeout))
            applied = True
        finally:
            failed = []
            if applied:
                self.version = new_version
                if hasattr(self.policy, "weight_version"):
                    self.policy.weight_version = new_version
                for server in self.servers:  # label the new weights; a server that cannot is reported
                    try:
                        call(_label(client, server, new_version, timeout))
                    except AgentGymError as exc:
                        failed.append(str(exc))
            # every server is resumed, also after a failure (one whose pause call failed may be
            # paused all the same): a server left paused would hold its episodes for ever
            for server in self.servers:
                try:
                    call(client.resume(server, timeout=timeout))
                except AgentGymError as exc:
                    failed.append(str(exc))
            self._poke()
        if failed:
            raise AgentGymError("update_weights: the weights were applied but these servers could not be "
                                "labelled or resumed (their episodes fail over or end with a status): "
                                + "; ".join(failed))
        self.stats.updates += 1
        self.stats.update_s.append(time.perf_counter() - started)
        self._poke()
        return new_version

    def _poke(self) -> None:
        """Wake the scheduler (admission may have room now)."""
        if self._wake is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop just ended
                pass

    def close(self) -> None:
        """Cancel the running episodes, stop the loop and restore the SIGTERM handler."""
        if not self._closed:
            self._closed = True
            self._poke()
        with contextlib.suppress(Exception):  # its failure went to the consumer
            self._main.result(timeout=120)
        self._runner.stop()
        if self._control.running_loop is not None and self._control_client is not None:
            with contextlib.suppress(Exception):
                self._control.call(self._control_client.aclose(), timeout=10)
        self._control.stop()
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def __enter__(self) -> RolloutStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def check_checkpoint_dir(path: str) -> None:
    """Raise ``ConfigError`` unless ``path`` is a directory holding weights (``*.safetensors`` or ``*.bin``)."""
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError(f"update_weights: checkpoint {path!r} is not a directory on this machine (pass "
                          "check_checkpoint=False when the servers read it from a disk this machine does not see)")
    if not any(directory.glob("*.safetensors")) and not any(directory.glob("*.bin")):
        raise ConfigError(f"update_weights: checkpoint {path!r} holds no *.safetensors or *.bin weights")


async def _label(client: VLLMClient, server: str, version: int, timeout: float) -> None:
    """Label a server's weights with ``version`` (``/update_weight_version``) and check ``/weight_info`` says so."""
    await client.set_weight_version(server, version, timeout=timeout)
    reported = await client.weight_version(server, timeout=timeout)
    if str(reported) != str(version):
        raise AgentGymError(f"{server} reports weight version {reported!r} after it was set to {version}")


async def _aclose(policy: Any) -> None:
    close = getattr(policy, "aclose", None)
    if close is not None:
        try:
            await close()
        except Exception:  # noqa: BLE001 - closing connections of a finished loop
            pass


def collect_stream(env: Any, policy: Any, tasks: Iterable[Any], **kwargs: Any) -> Iterator[RolloutGroup]:
    """Yield finished groups as they complete (a :class:`RolloutStream` closed at the end or on an error).

    Args:
        env: What ``collect`` takes.
        policy: The policy.
        tasks: The tasks.
        **kwargs: :class:`RolloutStream`'s options.
    """
    with RolloutStream(env, policy, tasks, **kwargs) as stream:
        yield from stream
