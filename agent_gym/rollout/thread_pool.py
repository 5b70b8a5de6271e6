"""Daemon worker threads that run blocking env and policy calls for an event loop.

``asyncio``'s default executor joins its threads at interpreter exit, so a tool
that hangs forever would keep the process alive. This pool uses daemon threads,
hands results back to the loop with ``call_soon_threadsafe``, and lets the caller
abandon a call (after a timeout): the stuck thread retires when the call returns
and no longer counts against the pool's size, so capacity never shrinks.

New workers are started by a helper thread, not by the caller: ``Thread.start``
waits until the new thread runs, which takes tens of milliseconds when many busy
threads compete for the GIL, and the caller is the event loop.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ThreadPool"]

_ids = itertools.count()


class _Job:
    """One call queued on the pool.

    ``finished`` (set by ``run`` once the call returned) and ``after``/``retire`` (set by
    ``ThreadPool.abandon``) change under ``lock``, so exactly one side runs ``after``: the
    worker, when the call was abandoned while running, or ``abandon``, when it had finished.
    """

    __slots__ = ("after", "args", "finished", "fn", "future", "lock", "loop", "retire")

    def __init__(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.loop = loop
        self.fn = fn
        self.args = args
        self.future: asyncio.Future[Any] = loop.create_future()
        self.after: Callable[[], None] | None = None
        self.retire = False
        self.finished = False
        self.lock = threading.Lock()

    def run(self) -> None:
        try:
            result, error = self.fn(*self.args), None
        except BaseException as exc:  # noqa: BLE001 - handed back to the awaiting coroutine
            result, error = None, exc
        with self.lock:
            self.finished = True
            after = self.after
        try:
            self.loop.call_soon_threadsafe(self._settle, result, error)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass
        if after is not None:
            try:
                after()
            except Exception:  # noqa: BLE001 - cleanup of an abandoned call is best effort
                pass

    def _settle(self, result: Any, error: BaseException | None) -> None:
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)


class _Worker:
    """An idle worker's own wake-up: a lock held while it sleeps, released to wake it."""

    __slots__ = ("wake",)

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()


class ThreadPool:
    """Up to ``size`` daemon worker threads fed from one queue, woken only when needed.

    Quick calls (an env step that parses a message and scores it) are best run one after
    another on as few threads as possible: Python runs one thread at a time, and every
    extra thread taking turns with the event loop adds GIL hand-offs and wake-ups that
    delay all episodes. Calls that block (a tool waiting on I/O or sleeping) must instead
    run side by side. So:

    * a call queued while no worker is awake wakes (or starts) one;
    * otherwise the awake workers take it in turn, and a check on the event loop, every
      ``stall_after`` seconds while calls are queued, wakes a worker for each queued call
      whenever no call finished since the previous check (every awake worker is blocked;
      intervals during which workers were starting or the loop itself was busy don't count,
      unless nothing finished for ten such intervals).

    A blocking call therefore holds up the calls queued behind it by at most about
    ``stall_after``, while a burst of quick calls stays on one or two threads.

    Args:
        size: Most workers (at least 1).
        name: Prefix of the thread names.
        stall_after: Seconds without a finished call, calls being queued, before more
            workers are woken.
    """

    def __init__(self, size: int, name: str = "agent-gym-worker", *, stall_after: float = 0.002) -> None:
        if size < 1:
            raise ValueError(f"ThreadPool.size: expected an int >= 1, got {size}")
        if not stall_after > 0:
            raise ValueError(f"ThreadPool.stall_after: expected seconds > 0, got {stall_after!r}")
        self.name = name
        self.size = size
        self.stall_after = float(stall_after)
        self._jobs: collections.deque[_Job] = collections.deque()
        self._lock = threading.Lock()
        self._workers = 0
        self._idle: list[_Worker] = []  # LIFO: the most recently busy thread is woken first
        self._waking = 0  # woken (or started) workers that have not yet looked at the queue
        self._finished = 0  # calls finished so far (progress seen by the stall check)
        self._check: asyncio.TimerHandle | None = None
        self._progress_at = 0.0  # loop time of the last check that saw progress (or woke workers)
        self._closed = False
        self._spawn_requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._spawner: threading.Thread | None = None

    @property
    def workers(self) -> int:
        """Number of live workers (abandoned calls not yet returned excluded)."""
        return self._workers

    def _wake(self, count: int) -> int:
        """Wake idle workers, then count new ones, for up to ``count`` calls (holds ``_lock``).

        Returns the number of workers to start (call ``_start`` after releasing the lock).
        """
        start = 0
        while count > 0 and self._idle:
            self._waking += 1
            self._idle.pop().wake.release()
            count -= 1
        while count > 0 and self._workers < self.size and not self._closed:
            self._waking += 1
            self._workers += 1
            start += 1
            count -= 1
        if start and self._spawner is None:
            self._spawner = threading.Thread(target=self._spawn_loop, name=f"{self.name}-spawner", daemon=True)
            self._spawner.start()
        return start

    def _start(self, count: int) -> None:
        """Ask the spawner thread for the workers ``_wake`` counted."""
        for _ in range(count):
            self._spawn_requests.put(True)

    def _spawn_loop(self) -> None:
        while self._spawn_requests.get():
            thread = threading.Thread(target=self._work, name=f"{self.name}-{next(_ids)}", daemon=True)
            thread.start()

    def _work(self) -> None:
        me = _Worker()
        lock = self._lock
        jobs = self._jobs
        lock.acquire()
        self._waking -= 1
        while True:
            if jobs:
                job = jobs.popleft()
                lock.release()
                job.run()
                if job.retire:
                    return
                lock.acquire()
                self._finished += 1
                continue
            if self._closed:
                self._workers -= 1
                lock.release()
                return
            self._idle.append(me)
            lock.release()
            me.wake.acquire()
            lock.acquire()
            self._waking -= 1

    def _schedule_check(self, loop: asyncio.AbstractEventLoop, finished: int, *, fresh: bool = False) -> None:
        """Schedule the next stall check (``fresh``: the first one since the queue was empty)."""
        if self._check is None and not self._closed:
            now = loop.time()
            if fresh:
                self._progress_at = now
            due = now + self.stall_after
            self._check = loop.call_at(due, self._stall_check, loop, finished, due)

    def _stall_check(self, loop: asyncio.AbstractEventLoop, finished_before: int, due: float) -> None:
        """Wake a worker per queued call if the awake ones finished nothing since the last check.

        Runs on the loop thread. An interval proves nothing when workers were still starting,
        or when this check itself ran late: the loop was busy, holding the GIL the workers need.
        """
        self._check = None
        now = loop.time()
        with self._lock:
            if not self._jobs or self._closed:
                return
            start = 0
            if self._finished != finished_before or self._waking:
                self._progress_at = now
            elif now - due < self.stall_after or now - self._progress_at > 10 * self.stall_after:
                start = self._wake(len(self._jobs))  # on time, or stalled for long whatever the loop did
                self._progress_at = now
            finished = self._finished
        self._start(start)
        self._schedule_check(loop, finished)

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Job:
        """Queue ``fn(*args)``; await ``job.future`` (must be called on the loop's thread)."""
        if self._closed:
            raise RuntimeError("ThreadPool.submit: the pool is shut down")
        loop = asyncio.get_running_loop()
        job = _Job(loop, fn, args)
        with self._lock:
            self._jobs.append(job)
            awake = self._workers - len(self._idle)
            start = self._wake(1) if awake == 0 else 0
            finished = self._finished
        self._start(start)
        self._schedule_check(loop, finished, fresh=True)
        return job

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on a worker and return its result (or raise its exception)."""
        return await self.submit(fn, *args).future

    def abandon(self, job: _Job, after: Callable[[], None] | None = None) -> None:
        """Give up on a running call: its worker retires once it returns and stops counting.

        Args:
            job: The call to abandon.
            after: Run on the worker once the call returns (e.g. close the env it used), or
                right here when the call has already returned (its worker stays in the pool).
        """
        # The awaiting coroutine's cancellation cancels job.future even when the call has
        # already returned (its result was not delivered yet), so ask the job, not the future.
        with job.lock:
            finished = job.finished
            if not finished:
                job.after = after
                job.retire = True
        if finished:  # the worker is back in the pool: it neither retires nor runs `after`
            if after is not None:
                try:
                    after()
                except Exception:  # noqa: BLE001 - cleanup of an abandoned call is best effort
                    pass
            return
        with self._lock:
            self._workers -= 1

    def shutdown(self) -> None:
        """Stop idle workers; calls still running finish on their daemon threads."""
        if self._closed:
            return
        if self._check is not None:
            self._check.cancel()
            self._check = None
        with self._lock:
            self._closed = True
            while self._idle:  # each runs what is still queued, then exits
                self._waking += 1
                self._idle.pop().wake.release()
        self._spawn_requests.put(False)
