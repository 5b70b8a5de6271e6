"""The event loop every MCP connection of a process runs on, and the bridge from sync code to it.

An env's ``step`` is synchronous and may run on any thread (a hand-stepped ``gym.make`` env, or
the worker threads of ``collect``); the ``mcp`` SDK is async. :class:`LoopThread` owns one asyncio
loop on a daemon thread: :meth:`LoopThread.run` hands it a coroutine and blocks the calling thread
until the result (or the timeout), so any number of threads step envs at once while the loop
multiplexes their requests. :func:`shared_loop` is the process's loop, started on first use and
started again in a forked child (a loop thread does not survive ``fork``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread", "shared_loop"]

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running forever on a daemon thread.

    Args:
        name: The thread's name.
    """

    def __init__(self, name: str = "agent-gym-mcp") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from this (other) thread.

        Raises:
            RuntimeError: When called from the loop's own thread (it would wait on itself).
            TimeoutError: No result within ``timeout`` seconds (the coroutine is cancelled).
            Exception: Whatever ``coro`` raised.
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.run() called from the loop's own thread; await the coroutine instead")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout:g} s") from None

    @property
    def alive(self) -> bool:
        """True while the loop's thread runs."""
        return self._thread.is_alive()


_lock = threading.Lock()
_shared: tuple[int, LoopThread] | None = None


def shared_loop() -> LoopThread:
    """The process's MCP loop thread (one per process; a forked child starts its own)."""
    global _shared
    with _lock:
        if _shared is None or _shared[0] != os.getpid() or not _shared[1].alive:
            _shared = (os.getpid(), LoopThread())
        return _shared[1]
