"""Heavy work of a server off its event loop, on threads that never hold up the process's exit.

* :func:`run_blocking` runs a function on a pool of daemon threads and awaits it (parsing a
  large body, rendering a chat template, tokenizing): the event loop keeps answering
  (``/health`` included) meanwhile, and a server told to stop does not wait for the pool at exit
  as it would for :func:`asyncio.to_thread`'s non-daemon threads.
* :class:`LoopThread` runs coroutines on an event loop of its own thread: an async object whose
  methods do heavy synchronous work between their awaits (a policy rendering and tokenizing a
  prompt before its HTTP request) is driven there, and the server's loop only awaits the result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["DaemonPool", "LoopThread", "run_blocking"]

T = TypeVar("T")


class DaemonPool(concurrent.futures.Executor):
    """A thread pool of daemon threads (started on demand, at most ``max_workers``).

    Args:
        max_workers: Most threads.
        name: Prefix of the threads' names.
    """

    def __init__(self, max_workers: int = 4, name: str = "agent-gym-offload") -> None:
        self.max_workers = max_workers
        self.name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        """Run ``fn(*args, **kwargs)`` on a pool thread; returns its future."""
        if self._closed:
            raise RuntimeError("DaemonPool.submit: the pool is shut down")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._queue.put((future, fn, args, kwargs))
            if self._idle == 0 and len(self._threads) < self.max_workers:
                thread = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self._idle -= 1 if self._idle else 0
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the threads once the queued work is done (``wait``: join them)."""
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


_POOL = DaemonPool()


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the shared daemon pool, awaited without blocking the event loop."""
    return await asyncio.wrap_future(_POOL.submit(fn, *args))


class LoopThread:
    """An event loop running in a daemon thread of its own (started on first use).

    Args:
        name: The thread's name.
    """

    def __init__(self, name: str = "agent-gym-loop") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The thread's loop (starts the thread)."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=run, name=self.name, daemon=True).start()
                ready.wait()
                self._loop = loop
            return self._loop

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the thread's loop and await its result here (cancelling here cancels it there)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

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

        future = asyncio.run_coroutine_threadsafe(pump(), self.loop)
        try:
            while True:
                kind, value = await items.get()
                if kind == "item":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    return
        finally:
            if not future.done():
                future.cancel()
                with contextlib.suppress(Exception):
                    await asyncio.wrap_future(future)

    def stop(self) -> None:
        """Stop the loop (pending work is dropped)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
