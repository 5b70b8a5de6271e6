"""The package's concurrency plumbing, written once: loops on threads, daemon workers, calls that give up.

* :class:`LoopThread` - an event loop running on a daemon thread of its own, started on first
  use: submit a coroutine from any thread (:meth:`~LoopThread.submit`, :meth:`~LoopThread.call`)
  or await it from another loop (:meth:`~LoopThread.run`, :meth:`~LoopThread.iterate`), and stop
  it cleanly (what is still pending is cancelled, the thread joined, the loop closed). A
  policy's blocking ``act``, a rollout stream's scheduler, a Ray actor's episodes and the
  gateway's large turns run on one.
* :class:`WorkerPool` - daemon worker threads reused across calls (a call costs a queue hand-off,
  not a thread start), optionally bounded; they never hold up the interpreter's exit, and a
  forked child starts its own.
* :func:`call_with_timeout` - a blocking call that the caller waits for at most ``timeout``
  seconds: past it :class:`~agent_gym.errors.CallTimeoutError` is raised at once and the call is
  abandoned (Python cannot kill a thread: it finishes on its worker, which then rejoins the pool;
  its result or exception is dropped). Tools with a time limit, memory summaries, subagents and
  Docker command output use it.
* :func:`run_blocking` - a blocking call awaited off the event loop (on a bounded pool), so a
  server's loop keeps answering meanwhile.
* :func:`run_sync` - a coroutine run to completion from synchronous code, also where an event
  loop is already running (Jupyter, async frameworks).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from agent_gym.errors import CallTimeoutError

__all__ = ["LoopThread", "WorkerPool", "call_outcome", "call_with_timeout", "run_blocking", "run_sync"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

STOP_TIMEOUT_S = 10.0
"""Seconds :meth:`LoopThread.stop` waits for the loop's thread to end by default."""

_UNWIND_S = 2.0
# Seconds a stopping loop gives its cancelled tasks to unwind before it closes.


# ---------------------------------------------------------------------------------------- loop thread


def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    """Body of a loop thread: run ``loop`` until stopped, then cancel what is left and close it.

    A module function (not a method) so the thread holds no reference to the loop's owner, whose
    finaliser can then stop it.
    """
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        try:
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:  # callers waiting on them get CancelledError instead of waiting for ever
                loop.run_until_complete(asyncio.wait(pending, timeout=_UNWIND_S))
            loop.run_until_complete(loop.shutdown_asyncgens())
        except Exception:  # noqa: BLE001 - a loop that cannot unwind is closed all the same
            logger.debug("unwinding the loop of a loop thread failed", exc_info=True)
        finally:
            loop.close()


class LoopThread:
    """An event loop running in a daemon thread of its own (started on first use, restartable).

    Args:
        name: The thread's name.

    Example:
        >>> import asyncio
        >>> runner = LoopThread("example")
        >>> async def add(a, b):
        ...     await asyncio.sleep(0)
        ...     return a + b
        >>> runner.call(add(1, 2))
        3
        >>> runner.stop()
        True
    """

    def __init__(self, name: str = "agent-gym-loop") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ state
    def start(self) -> asyncio.AbstractEventLoop:
        """Start the thread unless it runs; return its loop."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=_serve, args=(loop, ready), name=self.name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The thread's loop (starts the thread)."""
        return self.start()

    @property
    def running_loop(self) -> asyncio.AbstractEventLoop | None:
        """The thread's loop while it runs, else None (starts nothing)."""
        loop = self._loop
        return loop if loop is not None and not loop.is_closed() else None

    @property
    def thread(self) -> threading.Thread | None:
        """The thread of the current (or last) loop; None before the first start."""
        return self._thread

    @property
    def alive(self) -> bool:
        """Whether the loop's thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def in_loop_thread(self) -> bool:
        """Whether the calling thread is the loop's thread."""
        return self._thread is not None and self._thread is threading.current_thread()

    # ------------------------------------------------------------------ running coroutines
    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop (starting it) from any thread; returns its future.

        Cancelling the future cancels the coroutine.
        """
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and block until its result (from any thread but the loop's own).

        Args:
            coro: The coroutine.
            timeout: Seconds to wait (None: no limit); past it the coroutine is cancelled.

        Raises:
            RuntimeError: Called from the loop's own thread (it would wait for itself).
            TimeoutError: No result within ``timeout``.
        """
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError(f"LoopThread.call: called from the loop thread {self.name!r}; await the coroutine")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine's own TimeoutError, or it ended just now
                return future.result()
            future.cancel()
            raise

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the thread's loop and await its result here (cancelling here cancels it there)."""
        return await asyncio.wrap_future(self.submit(coro))

    async def iterate(self, make: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
        """Iterate ``make()`` (an async iterator) on the thread's loop, yielding its items here.

        Closing this iterator early cancels the iteration there.
        """
        here = asyncio.get_running_loop()
        items: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for item in make():
                    here.call_soon_threadsafe(items.put_nowait, ("item", item))
            except BaseException as exc:  # noqa: BLE001 - re-raised on the consuming side
                here.call_soon_threadsafe(items.put_nowait, ("error", exc))
                if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                    raise
                return
            here.call_soon_threadsafe(items.put_nowait, ("end", None))

        future = self.submit(pump())
        ended = False
        try:
            while True:
                kind, value = await items.get()
                if kind == "item":
                    yield value
                    continue
                ended = True  # the pump is returning on its own: nothing to cancel
                if kind == "error":
                    raise value
                return
        finally:
            if not ended:  # left early (closed, or this task cancelled): stop the pump there
                future.cancel()

    # ------------------------------------------------------------------ stopping
    def stop(self, *, wait: bool = True, timeout: float = STOP_TIMEOUT_S) -> bool:
        """Stop the loop: its pending tasks are cancelled (given a moment to unwind), then it closes.

        Safe from any thread, the loop's own included (it then does not wait), and more than once.
        The next use starts a fresh loop.

        Args:
            wait: Wait for the thread to end (not from the loop's own thread).
            timeout: Most seconds to wait.

        Returns:
            Whether the thread has ended (False while it still unwinds, or when not waiting).
        """
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = None
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(loop.stop)
        if thread is None:
            return True
        if wait and thread is not threading.current_thread():
            thread.join(timeout)
        return not thread.is_alive()


# ---------------------------------------------------------------------------------------- worker pool

_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


def _forget_workers_after_fork() -> None:
    for pool in list(_POOLS):
        pool._after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    # A forked child inherits the pools' counts of idle workers but none of their threads: an
    # inherited count would hand work to threads that do not exist there, and it would never run.
    os.register_at_fork(after_in_child=_forget_workers_after_fork)


class WorkerPool(concurrent.futures.Executor):
    """Daemon worker threads reused across calls, started on demand.

    A call costs a queue hand-off to an idle worker (a new thread only when none is idle). The
    threads are daemons: one still busy (e.g. an abandoned call) never keeps the interpreter
    alive, and :meth:`shutdown` does not have to be called. A forked child starts its own threads.

    Args:
        max_workers: Most threads at once (None: no bound; work beyond the bound waits in a queue).
        max_idle: Most idle threads kept; a worker finishing when that many are idle ends.
        name: Prefix of the threads' names.

    Raises:
        ValueError: ``max_workers`` below 1 or ``max_idle`` below 0.
    """

    def __init__(self, max_workers: int | None = None, *, max_idle: int = 32, name: str = "agent-gym-worker") -> None:
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers: expected an int >= 1 or None, got {max_workers!r}")
        if not isinstance(max_idle, int) or max_idle < 0:
            raise ValueError(f"max_idle: expected an int >= 0, got {max_idle!r}")
        self.max_workers = max_workers
        self.max_idle = max_idle
        self.name = name
        self._closed = False
        self._started = 0
        self._after_fork()
        _POOLS.add(self)

    def _after_fork(self) -> None:
        """Start from no threads (at construction, and in a forked child)."""
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: set[threading.Thread] = set()  # alive
        self._idle = 0  # of them, those free for the next call

    @property
    def threads(self) -> int:
        """Worker threads alive now."""
        return len(self._threads)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        """Run ``fn(*args, **kwargs)`` on a worker; returns its future.

        Raises:
            RuntimeError: The pool was shut down.
        """
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._put((fn, args, kwargs, future))
        return future

    def call(self, fn: Callable[..., T], timeout: float, /, *args: Any, **kwargs: Any) -> tuple[str, Any]:
        """Run ``fn(*args, **kwargs)`` on a worker, waiting at most ``timeout`` seconds for it.

        Cheaper than :meth:`submit` and a future (a queue hand-off each way).

        Returns:
            ``("ok", value)``, ``("error", exception)`` or ``("timeout", None)`` (the call is then
            abandoned: it runs on to its end and its outcome is dropped).

        Raises:
            RuntimeError: The pool was shut down.
        """
        outbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._put((fn, args, kwargs, outbox))
        try:
            return outbox.get(timeout=timeout)
        except queue.Empty:
            return "timeout", None

    def _put(self, item: tuple[Any, ...]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"WorkerPool: the pool {self.name!r} is shut down")
            self._queue.put(item)
            if self._idle:
                self._idle -= 1  # that worker takes it
            elif self.max_workers is None or len(self._threads) < self.max_workers:
                self._started += 1
                thread = threading.Thread(target=self._work, args=(self._queue,),
                                          name=f"{self.name}-{self._started}", daemon=True)
                self._threads.add(thread)
                thread.start()

    def _work(self, work: queue.SimpleQueue[Any]) -> None:
        me = threading.current_thread()
        while True:
            item = work.get()
            if item is None:
                with self._lock:
                    self._threads.discard(me)
                return
            fn, args, kwargs, reply = item
            del item
            outcome: tuple[str, Any] | None = None
            if type(reply) is not concurrent.futures.Future or reply.set_running_or_notify_cancel():
                try:
                    outcome = ("ok", fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller (or dropped if abandoned)
                    outcome = ("error", exc)
            del fn, args, kwargs
            # back among the idle ones before answering, so the caller's next call finds this worker
            with self._lock:
                stay = work is self._queue and self._idle < self.max_idle  # (not so in a child it forked)
                if stay:
                    self._idle += 1
                else:
                    self._threads.discard(me)
            if outcome is not None:
                if type(reply) is concurrent.futures.Future:
                    if outcome[0] == "ok":
                        reply.set_result(outcome[1])
                    else:
                        reply.set_exception(outcome[1])
                else:
                    reply.put(outcome)
            del reply, outcome
            if not stay:
                return

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new work and end the threads once the queued work is done.

        Args:
            wait: Join the threads (those running abandoned calls included).
            cancel_futures: Cancel the queued work that has not started.
        """
        with self._lock:
            self._closed = True
            work, threads = self._queue, list(self._threads)
        if cancel_futures:
            pending = []
            with contextlib.suppress(queue.Empty):
                while True:
                    pending.append(work.get_nowait())
            for item in pending:
                if item is not None and type(item[3]) is concurrent.futures.Future:
                    item[3].cancel()
        for _ in threads:
            work.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


_ABANDONABLE = WorkerPool(name="agent-gym-call")
_OFFLOAD = WorkerPool(4, name="agent-gym-offload")


def call_with_timeout(fn: Callable[..., T], timeout: float | None, /, *args: Any, **kwargs: Any) -> T:
    """Return ``fn(*args, **kwargs)``, waiting at most ``timeout`` seconds for it.

    The call runs on a pooled daemon worker thread. Past ``timeout`` the caller gets
    :class:`~agent_gym.errors.CallTimeoutError` at once and the call is abandoned: it runs on to
    its end on its worker (which then rejoins the pool), and its result or exception is dropped.

    Args:
        fn: The blocking callable.
        timeout: Most seconds to wait; None calls ``fn`` inline, without a limit.
        *args: Its positional arguments.
        **kwargs: Its keyword arguments (any names, ``fn`` and ``timeout`` included).

    Raises:
        CallTimeoutError: ``fn`` did not return within ``timeout``.
        BaseException: What ``fn`` raised.
    """
    if timeout is None:
        return fn(*args, **kwargs)
    state, value = call_outcome(fn, timeout, *args, **kwargs)
    if state == "ok":
        return value
    if state == "error":
        raise value
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    raise CallTimeoutError(f"{name} did not return within {timeout:g} s (abandoned)")


def call_outcome(fn: Callable[..., Any], timeout: float, /, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """:func:`call_with_timeout` with the outcome as a value, for callers that report failures.

    Whatever ``fn`` raises on its worker (``SystemExit`` included) is returned, never raised here,
    while an interrupt of the waiting thread still propagates.

    Returns:
        ``("ok", value)``, ``("error", exception)`` or ``("timeout", None)`` (then abandoned).
    """
    return _ABANDONABLE.call(fn, timeout, *args, **kwargs)


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a pool of 4 daemon threads, awaited without blocking the event loop.

    Unlike :func:`asyncio.to_thread`, whose threads are not daemons, a server told to stop does
    not wait for the pool at exit.
    """
    return await asyncio.wrap_future(_OFFLOAD.submit(fn, *args))


# ---------------------------------------------------------------------------------------- run_sync


def run_sync(factory: Callable[[], Awaitable[T]], *, release: Sequence[Any] = ()) -> T:
    """Run the coroutine made by ``factory`` to completion from synchronous code.

    Uses ``asyncio.run`` when this thread has no running event loop; inside a
    running loop (Jupyter, async frameworks) the coroutine runs on a fresh loop
    in a helper thread and this call blocks until it is done.

    Args:
        factory: Zero-argument callable returning the awaitable.
        release: Objects whose ``aclose()`` coroutine (if any) releases what they
            bound to the temporary loop (e.g. a policy's HTTP connections); it is
            awaited before the loop closes.

    Returns:
        The awaitable's result.
    """
    # The result is handed back through ``box``, not as the main task's result: on
    # Python 3.11, ``asyncio.run`` ends with ``signal.getsignal(SIGINT)``, which
    # formats the repr of its SIGINT handler, a partial holding the main task, and
    # so the repr of the task's result (e.g. every trajectory of a collect, tensors
    # included): tens of milliseconds per call for nothing.
    box: list[T] = []

    async def main() -> None:
        box.append(await _await(factory, release))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return box[0]
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agent-gym-collect") as executor:
        executor.submit(lambda: asyncio.run(main())).result()
    return box[0]


async def _await(factory: Callable[[], Awaitable[T]], release: Sequence[Any]) -> T:
    try:
        return await factory()
    finally:
        for obj in release:
            aclose = getattr(obj, "aclose", None)
            if inspect.iscoroutinefunction(aclose):
                try:
                    await aclose()
                except Exception:  # noqa: BLE001 - releasing loop-bound resources is best effort
                    logger.debug("aclose() failed", exc_info=True)
