"""Sharded Ray collection: :class:`ShardedRunner`, many episodes per Ray actor, every episode back once.

The runner starts :attr:`RayShards.shards <agent_gym.rollout.shard_config.RayShards.shards>` Ray
actors (:class:`~agent_gym.rollout.shard_actor.ShardActor`), placed by their ``num_cpus`` and
custom ``resources`` (and spread over the nodes), each with a long-lived
:class:`~agent_gym.rollout.runner.EpisodeRunner` keeping up to ``per shard`` episodes in flight.
One dispatcher task on the caller's event loop:

* hands each shard numbered episodes (*tickets*) while it has room: a shard never holds more than
  its capacity unreturned, so the load on the policy's servers is at most the sum of the
  capacities (backpressure) and a shard's outbox stays bounded;
* long-polls every started shard for its finished episodes (they travel as ``to_dict`` records,
  a batch per poll) and resolves their tickets as they arrive;
* notices a lost shard (its actor or its node died: the poll raises) and puts the shard's
  unfinished tickets back at the head of the queue for the other shards (or ends them
  ``ENV_ERROR`` with ``on_shard_loss="fail"``, or after ``max_reruns`` losses), then starts a
  replacement wherever Ray finds room.

Every ticket is resolved exactly once: a record is accepted only from the shard that holds the
ticket now and only while the ticket is open; anything else (a late record of a re-run ticket)
is dropped and counted on :attr:`ShardedRunner.stats`. :meth:`ShardedRunner.iterate` yields
episodes in completion order with at most a window of them submitted ahead, so a driver that
writes them out as they come keeps flat memory for any number of episodes.

Example:
    >>> from agent_gym.rollout.shard_config import RayShards
    >>> runner = ShardedRunner("agent_gym/ToolUse-v0", policy, RolloutOptions(n_parallel=256),  # doctest: +SKIP
    ...                        shards=RayShards(shards=4, resources={"env_worker": 1}))
    >>> async for trajectory in runner.iterate(plan_episodes(None, 10_000)):  # doctest: +SKIP
    ...     writer.write(trajectory)
    >>> await runner.aclose()  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import EpisodeSpec, make_env_factory
from agent_gym.rollout.ray_backend import import_ray, init_ray
from agent_gym.rollout.reporting import Progress, failed_trajectory, notify, stopped_trajectory
from agent_gym.rollout.shard_actor import ShardActor
from agent_gym.rollout.shard_config import RayShards
from agent_gym.types import EpisodeStatus, StepTrajectory

__all__ = ["ShardStats", "ShardedRunner"]

logger = logging.getLogger(__name__)

POLL_WAIT_S = 1.0
"""Seconds one poll waits in a shard for a finished episode (a long poll)."""

CLOSE_TIMEOUT_S = 10.0
"""Seconds :meth:`ShardedRunner.aclose` waits for the shards to close their envs and policies."""


@dataclass
class ShardStats:
    """Counters of a :class:`ShardedRunner`.

    Attributes:
        submitted: Tickets handed to the runner.
        finished: Tickets resolved (each once).
        shards_started: Shard actors that answered their first call.
        shards_lost: Shards whose actor or node died.
        reruns: Tickets re-queued after their shard was lost.
        lost_failed: Tickets ended ``ENV_ERROR`` because their shard was lost.
        duplicates_dropped: Records that arrived for a ticket already resolved or held elsewhere.
    """

    submitted: int = 0
    finished: int = 0
    shards_started: int = 0
    shards_lost: int = 0
    reruns: int = 0
    lost_failed: int = 0
    duplicates_dropped: int = 0


class _Ticket:
    """One episode handed to the runner."""

    __slots__ = ("future", "losses", "number", "shard", "spec")

    def __init__(self, number: int, spec: EpisodeSpec, future: asyncio.Future[StepTrajectory]) -> None:
        self.number, self.spec, self.future = number, spec, future
        self.losses = 0
        self.shard: _Shard | None = None


class _Shard:
    """The driver's view of one shard actor."""

    def __init__(self, handle: Any, capacity: int, ready: asyncio.Future[Any]) -> None:
        self.handle = handle
        self.capacity = capacity
        self.ready_call: asyncio.Future[Any] | None = ready
        self.started = False
        self.where: dict[str, Any] = {}
        self.outstanding: dict[int, _Ticket] = {}
        self.poll: asyncio.Future[Any] | None = None
        self.weight_version: int | None = None

    @property
    def room(self) -> int:
        return self.capacity - len(self.outstanding) if self.started else 0


def _report(finished: asyncio.Queue[tuple[int, _Ticket] | None], position: int, ticket: _Ticket, _: Any) -> None:
    finished.put_nowait((position, ticket))


def _wrap(ref: Any) -> asyncio.Future[Any]:
    return asyncio.wrap_future(ref.future())


class ShardedRunner:
    """Episodes in Ray actors, each with many in flight; every episode back exactly once.

    It serves one event loop (the one of its first call) and offers what the runner of
    ``collect`` and of a ``RolloutStream`` offers: :meth:`run` and :meth:`close`.

    Args:
        env: Env id, factory or factories (as for ``collect``); None when every spec names its env.
        policy: A picklable policy (shipped once through Ray's object store), or a zero-argument
            callable building it in each shard.
        options: The collection's options (``n_parallel``: episodes in flight over all shards
            unless ``shards.episodes_per_shard`` says; ``ray_address``: the cluster).
        shards: The layout (default ``options.ray_shards``, else :class:`RayShards`'s defaults).
        in_flight: Episodes in flight over all shards (default ``options.n_parallel``).

    Raises:
        MissingExtraError: Ray is not installed.
        TypeError: The policy is neither a policy nor a callable, or does not pickle.
    """

    def __init__(self, env: Any, policy: Any, options: RolloutOptions | None = None, *,
                 shards: RayShards | None = None, in_flight: int | None = None) -> None:
        import_ray()
        self.options = RolloutOptions.build(options, where="ShardedRunner")
        self.layout = shards or self.options.ray_shards or RayShards()
        if not isinstance(self.layout, RayShards):
            raise TypeError(f"shards: expected RayShards or None, got {type(self.layout).__name__}")
        if not (hasattr(policy, "aact") or hasattr(policy, "act") or callable(policy)):
            raise TypeError("policy: expected an object with aact() or act(), or a zero-argument callable "
                            f"building one, got {type(policy).__name__}")
        if env is not None:
            make_env_factory(env, env_kwargs=self.options.env_kwargs, max_steps=self.options.max_steps)
        self.env, self.policy = env, policy
        self.capacity = self.layout.per_shard(in_flight or self.options.n_parallel)
        self.stats = ShardStats()
        self.shards: list[_Shard] = []
        self._tickets: dict[int, _Ticket] = {}
        self._queue: collections.deque[_Ticket] = collections.deque()
        self._next_number = 0
        self._ray: Any = None
        self._actor_cls: Any = None
        self._policy_ref: Any = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._closed = False
        self._start_failures = 0
        self._broken: str | None = None  # why no shard can run episodes (they end ENV_ERROR at once)
        self._no_shard_since: float | None = None

    # ------------------------------------------------------------------ shards
    def _connect(self) -> None:
        if self._ray is not None:
            return
        ray = init_ray(self.options.ray_address)
        try:
            self._policy_ref = ray.put(self.policy)
        except Exception as exc:  # noqa: BLE001 - Ray raises several types for an unpicklable object
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TypeError(f"policy: expected a picklable policy or a zero-argument callable building it in "
                            f"each Ray actor, got a {type(self.policy).__name__} that cannot be pickled "
                            f"({text})") from exc
        self._actor_cls = ray.remote(ShardActor).options(**self.layout.actor_options())
        self._ray = ray

    def _spawn(self) -> None:
        handle = self._actor_cls.remote(self.env, self._policy_ref, self.options, self.capacity)
        self.shards.append(_Shard(handle, self.capacity, _wrap(handle.ready.remote())))

    def _ensure_started(self) -> None:
        if self._closed:
            raise RuntimeError("ShardedRunner: the runner is closed")
        self._connect()
        if self._dispatcher is None:
            self._wake = asyncio.Event()
            for _ in range(self.layout.shards):
                self._spawn()
            self._no_shard_since = time.monotonic()
            self._dispatcher = asyncio.ensure_future(self._dispatch())

    def _lose(self, shard: _Shard, error: BaseException) -> None:
        """Drop a dead shard: re-queue (or fail) its unfinished tickets and start a replacement."""
        if shard not in self.shards:
            return
        self.shards.remove(shard)
        self.stats.shards_lost += 1
        reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        logger.warning("ray shard on %s lost (%s); %d unfinished episodes", shard.where.get("host", "?"), reason,
                       len(shard.outstanding))
        for poll in (shard.poll, shard.ready_call):
            if poll is not None and not poll.done():
                poll.cancel()
        try:
            self._ray.kill(shard.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        rerun: list[_Ticket] = []
        for ticket in shard.outstanding.values():
            ticket.shard = None
            ticket.losses += 1
            if self.layout.on_shard_loss == "fail" or ticket.losses > self.layout.max_reruns:
                self.stats.lost_failed += 1
                self._resolve(ticket, failed_trajectory(
                    ticket.spec, self.options.gamma,
                    f"ray shard lost ({ticket.losses} time(s)) while running the episode: {reason}"))
            else:
                self.stats.reruns += 1
                rerun.append(ticket)
        shard.outstanding.clear()
        self._queue.extendleft(reversed(rerun))  # first in line, in their order
        if not self._closed and self._broken is None:
            self._spawn()

    def _resolve(self, ticket: _Ticket, trajectory: StepTrajectory) -> None:
        self._tickets.pop(ticket.number, None)
        if ticket.shard is not None:
            ticket.shard.outstanding.pop(ticket.number, None)
            ticket.shard = None
        if not ticket.future.done():
            ticket.future.set_result(trajectory)
            self.stats.finished += 1

    def _fail_waiting(self, reason: str) -> None:
        """End every ticket not in a started shard ``ENV_ERROR`` (no shard could be started)."""
        logger.error("%s: %d waiting episodes end ENV_ERROR", reason, len(self._queue))
        while self._queue:
            ticket = self._queue.popleft()
            self._resolve(ticket, failed_trajectory(ticket.spec, self.options.gamma, reason))

    # ------------------------------------------------------------------ the dispatcher
    def _sync_weight_version(self) -> None:
        """Give the shards' policies the driver policy's ``weight_version`` when it moved (a stream's update)."""
        version = getattr(self.policy, "weight_version", None)
        if not isinstance(version, int):
            return
        for shard in self.shards:
            if shard.started and shard.weight_version != version:
                shard.weight_version = version
                shard.handle.set_weight_version.remote(version)

    def _assign(self) -> None:
        """Hand queued tickets to the started shards with room, most room first.

        A shard gets a batch once an eighth of its capacity is free (or all that is queued fits):
        one call per few episodes instead of one per episode keeps the driver's CPU per episode low.
        """
        while self._queue:
            shard = max(self.shards, key=lambda s: s.room, default=None)
            if shard is None or shard.room < min(max(1, shard.capacity // 8), len(self._queue)):
                return
            batch: list[tuple[int, EpisodeSpec]] = []
            while self._queue and len(batch) < shard.room:
                ticket = self._queue.popleft()
                if ticket.future.done():  # cancelled while it waited
                    continue
                ticket.shard = shard
                shard.outstanding[ticket.number] = ticket
                batch.append((ticket.number, ticket.spec))
            if batch:
                shard.handle.start.remote(batch)  # its failure shows in the shard's next poll

    def _take(self, shard: _Shard, records: list[tuple[int, dict[str, Any]]]) -> None:
        for number, record in records:
            ticket = shard.outstanding.get(number)
            if ticket is None or ticket.future.done():
                self.stats.duplicates_dropped += 1
                continue
            self._resolve(ticket, StepTrajectory.from_dict(record))

    def _started(self, shard: _Shard, call: asyncio.Future[Any]) -> None:
        shard.ready_call = None
        try:
            shard.where = call.result() or {}
        except BaseException as exc:  # noqa: BLE001 - the actor could not start
            self._start_failures += 1
            if self._start_failures >= 3 * self.layout.shards and not any(s.started for s in self.shards):
                self._broken = f"no ray shard could start: {type(exc).__name__}: {exc}"
                self._fail_waiting(self._broken)
            self._lose(shard, exc)
            return
        shard.started = True
        self._start_failures = 0
        self.stats.shards_started += 1

    def _check_start_timeout(self) -> None:
        if any(s.started for s in self.shards):
            self._no_shard_since = None
            return
        now = time.monotonic()
        if self._no_shard_since is None:
            self._no_shard_since = now
        if self._queue and now - self._no_shard_since > self.layout.start_timeout:
            needs = {"CPU": self.layout.num_cpus, **(self.layout.resources or {})}
            self._fail_waiting(f"no ray shard started within {self.layout.start_timeout:g}s (no node offers "
                               f"{needs}, or the shards fail to start)")

    async def _dispatch(self) -> None:
        assert self._wake is not None
        wake = self._wake
        while not self._closed:
            self._check_start_timeout()
            self._sync_weight_version()
            self._assign()
            waiting: dict[asyncio.Future[Any], tuple[str, _Shard]] = {}
            for shard in list(self.shards):
                if shard.ready_call is not None:
                    waiting[shard.ready_call] = ("ready", shard)
                elif shard.started:
                    if shard.poll is None:
                        shard.poll = _wrap(shard.handle.take.remote(self.layout.poll_batch, POLL_WAIT_S))
                    waiting[shard.poll] = ("poll", shard)
            woken = asyncio.ensure_future(wake.wait())
            try:
                done, _ = await asyncio.wait([*waiting, woken], timeout=POLL_WAIT_S * 5,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
            wake.clear()
            for call in done:
                if call is woken:
                    continue
                kind, shard = waiting[call]
                if kind == "ready":
                    self._started(shard, call)
                    continue
                shard.poll = None
                try:
                    records = call.result()
                except asyncio.CancelledError:
                    continue
                except Exception as exc:  # noqa: BLE001 - the actor or its node died
                    self._lose(shard, exc)
                    continue
                self._take(shard, records)

    # ------------------------------------------------------------------ episodes
    def _submit(self, spec: EpisodeSpec) -> _Ticket:
        number = self._next_number
        self._next_number += 1
        ticket = _Ticket(number, spec, asyncio.get_running_loop().create_future())
        self._tickets[number] = ticket
        self._queue.append(ticket)
        self.stats.submitted += 1
        if self._broken is not None:
            self._fail_waiting(self._broken)
        return ticket

    def _cancel(self, tickets: Iterable[_Ticket]) -> None:
        """Withdraw unresolved tickets (cancelled in their shard; a late record is dropped)."""
        by_shard: dict[int, tuple[_Shard, list[int]]] = {}
        for ticket in tickets:
            if ticket.future.done():
                continue
            ticket.future.cancel()
            self._tickets.pop(ticket.number, None)
            if ticket.shard is not None:
                ticket.shard.outstanding.pop(ticket.number, None)
                by_shard.setdefault(id(ticket.shard), (ticket.shard, []))[1].append(ticket.number)
                ticket.shard = None
        for shard, numbers in by_shard.values():
            try:
                shard.handle.cancel.remote(numbers)
            except Exception:  # noqa: BLE001 - a dead shard cancels nothing
                pass
        if self._wake is not None:
            self._wake.set()

    async def _iterate(self, specs: Iterable[EpisodeSpec],
                       window: int | None) -> AsyncIterator[tuple[int, StepTrajectory]]:
        """``(position, trajectory)`` in completion order, at most ``window`` submitted ahead (None: all).

        Each ticket reports its end into one queue (a done callback), so a finished episode costs the
        same whether ten or a million are open.
        """
        self._ensure_started()
        assert self._wake is not None and self._dispatcher is not None
        dispatcher = self._dispatcher
        finished: asyncio.Queue[tuple[int, _Ticket] | None] = asyncio.Queue()

        def stopped(_: Any) -> None:
            finished.put_nowait(None)

        dispatcher.add_done_callback(stopped)
        source = iter(enumerate(specs))
        open_tickets: dict[int, _Ticket] = {}
        exhausted = False
        try:
            while True:
                while not exhausted and (window is None or len(open_tickets) < window):
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    ticket = self._submit(item[1])
                    open_tickets[ticket.number] = ticket
                    ticket.future.add_done_callback(functools.partial(_report, finished, item[0], ticket))
                self._wake.set()
                if not open_tickets:
                    return
                got = await finished.get()
                if got is None:
                    if not self._closed:
                        dispatcher.result()  # re-raise the dispatcher's failure
                        raise RuntimeError("ShardedRunner: the dispatcher stopped")
                    continue  # closed: its tickets were resolved and are on their way
                position, ticket = got
                if open_tickets.pop(ticket.number, None) is None or ticket.future.cancelled():
                    continue
                yield position, ticket.future.result()
        finally:
            dispatcher.remove_done_callback(stopped)
            self._cancel(list(open_tickets.values()))

    async def iterate(self, specs: Iterable[EpisodeSpec], *,
                      window: int | None = None) -> AsyncIterator[StepTrajectory]:
        """Run ``specs`` and yield each trajectory as it finishes (completion order).

        Args:
            specs: The episodes (an iterable: taken as room frees up).
            window: Most episodes submitted and not yet yielded (default: twice the shards'
                capacity): the driver holds at most that many specs and trajectories.

        Yields:
            One trajectory per spec (``idx`` is the spec's index).
        """
        limit = window if window is not None else 2 * self.capacity * self.layout.shards
        async for _, trajectory in self._iterate(specs, max(1, int(limit))):
            yield trajectory

    async def run(self, specs: Sequence[EpisodeSpec], *, progress: bool = False,
                  on_episode: Callable[[StepTrajectory], Any] | None = None) -> list[StepTrajectory]:
        """Run ``specs``; one trajectory per spec, in spec order.

        Cancelling the call withdraws its unfinished episodes; before the cancellation goes on,
        ``on_episode`` gets a ``TIMEOUT`` record (reason
        :data:`~agent_gym.rollout.reporting.STOPPED_REASON`) of each.
        """
        if not specs:
            return []
        results: list[StepTrajectory | None] = [None] * len(specs)
        bar = Progress(len(specs), progress, desc="episodes (ray shards)")
        try:
            async for position, trajectory in self._iterate(specs, None):
                results[position] = trajectory
                bar.update(trajectory)
                if on_episode is not None:
                    await notify(on_episode, trajectory)
        except asyncio.CancelledError:
            if on_episode is not None:
                for position, spec in enumerate(specs):
                    if results[position] is None:
                        await notify(on_episode, stopped_trajectory(spec, self.options.gamma))
            raise
        finally:
            bar.close()
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ reading
    async def shard_stats(self) -> list[dict[str, Any]]:
        """Per started shard: where it runs (``node_id``, ``host``, ``pid``) and its counters."""
        started = [s for s in self.shards if s.started]
        answers = await asyncio.gather(*(_wrap(s.handle.stats.remote()) for s in started), return_exceptions=True)
        return [{**s.where, **(a if isinstance(a, dict) else {"error": repr(a)})}
                for s, a in zip(started, answers, strict=True)]

    @property
    def handles(self) -> list[Any]:
        """The Ray actor handles of the shards now (started or starting)."""
        return [s.handle for s in self.shards]

    # ------------------------------------------------------------------ closing
    def _stop(self) -> list[Any]:
        self._closed = True
        if self._dispatcher is not None:
            self._dispatcher.cancel()
        for ticket in list(self._tickets.values()):
            if not ticket.future.done():
                self._resolve(ticket, failed_trajectory(ticket.spec, self.options.gamma,
                                                        "the sharded runner was closed", EpisodeStatus.TIMEOUT))
        shards, self.shards = self.shards, []
        for shard in shards:
            for call in (shard.poll, shard.ready_call):
                if call is not None and not call.done():
                    call.cancel()
        return shards

    async def aclose(self) -> None:
        """Close the shards (their envs and policies), then end their actors."""
        if self._closed:
            return
        shards = self._stop()
        closing = [_wrap(s.handle.close.remote()) for s in shards if s.started]
        if closing:
            try:
                await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), CLOSE_TIMEOUT_S)
            except asyncio.TimeoutError:
                logger.debug("ray shards did not close within %ss", CLOSE_TIMEOUT_S)
        self._kill(shards)

    def close(self) -> None:
        """Close the shards (waiting up to ``CLOSE_TIMEOUT_S``), then end their actors; safe to call twice."""
        if self._closed:
            return
        shards = self._stop()
        if self._ray is not None and shards:
            refs = [s.handle.close.remote() for s in shards if s.started]
            if refs:
                try:
                    self._ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
                except Exception:  # noqa: BLE001 - a dead shard closes nothing
                    pass
        self._kill(shards)

    def _kill(self, shards: list[_Shard]) -> None:
        for shard in shards:
            try:
                self._ray.kill(shard.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    async def __aenter__(self) -> ShardedRunner:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
