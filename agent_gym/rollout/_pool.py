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
    """Up to ``size`` daemon worker threads fed from one queue.

    Workers start lazily, when a call is queued and none is idle, so a batch whose
    env steps are quick uses a few threads, not ``size``.

    Wake-ups are throttled so a burst of quick calls does not wake every idle thread
    at once (they would only fight over the GIL): idle workers sleep on their own lock
    in a LIFO stack, and at most one woken worker is on its way at a time. A worker
    takes the next queued call itself when it finishes one, and when it takes a call
    while more are queued it wakes (or starts) the next worker, so calls that block
    (a tool that sleeps) still fan out over many threads, one wake-up after another.

    Args:
        size: Most workers (at least 1).
        name: Prefix of the thread names.
    """

    def __init__(self, size: int, name: str = "agent-gym-worker") -> None:
        if size < 1:
            raise ValueError(f"ThreadPool.size: expected an int >= 1, got {size}")
        self.name = name
        self._jobs: collections.deque[_Job] = collections.deque()
        self._lock = threading.Lock()
        self._workers = 0
        self._idle: list[_Worker] = []  # LIFO: the most recently busy thread is woken first
        self._waking = 0  # woken (or started) workers that have not yet looked at the queue
        self.size = size
        self._closed = False
        self._spawn_requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._spawner: threading.Thread | None = None

    @property
    def workers(self) -> int:
        """Number of live workers (abandoned calls not yet returned excluded)."""
        return self._workers

    def _grow(self) -> bool:
        """Wake or start one more worker if calls wait and none is on its way (holds ``_lock``).

        Returns True when a worker must be started (call ``_start`` after releasing the lock).
        """
        if self._waking or not self._jobs:
            return False
        if self._idle:
            self._waking += 1
            self._idle.pop().wake.release()
            return False
        if self._workers < self.size and not self._closed:  # after shutdown, live workers drain the queue
            self._waking += 1
            self._workers += 1
            if self._spawner is None:
                self._spawner = threading.Thread(target=self._spawn_loop, name=f"{self.name}-spawner", daemon=True)
                self._spawner.start()
            return True
        return False

    def _start(self) -> None:
        """Ask the spawner thread for the worker ``_grow`` counted."""
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
                start = self._grow() if jobs else False
                lock.release()
                if start:
                    self._start()
                job.run()
                if job.retire:
                    return
                lock.acquire()
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

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Job:
        """Queue ``fn(*args)``; await ``job.future`` (must be called on the loop's thread)."""
        if self._closed:
            raise RuntimeError("ThreadPool.submit: the pool is shut down")
        job = _Job(asyncio.get_running_loop(), fn, args)
        with self._lock:
            self._jobs.append(job)
            start = self._grow()
        if start:
            self._start()
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
        with self._lock:
            self._closed = True
            while self._idle:  # each runs what is still queued, then exits
                self._waking += 1
                self._idle.pop().wake.release()
        self._spawn_requests.put(False)
