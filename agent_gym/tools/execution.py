"""Running tool functions: inline, or on reusable worker threads with a time limit; output as text.

A call handed to a worker costs a queue hand-off each way (a few microseconds,
more on a loaded machine); an inline call costs nothing extra. Python cannot
kill a thread: a call past its limit gives a timeout at once, while its worker
stays busy until the function returns and then rejoins the pool.

A forked child process (``multiprocessing``'s default start method on Linux,
e.g. ``gym.make_vec(..., vectorization_mode="async")``) inherits the pool's
list of idle workers but none of their threads; the pool is emptied in the
child right after the fork, so the child starts its own workers on demand.
"""

from __future__ import annotations

import collections
import enum
import json
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["call_with_time_limit", "to_text"]


class _Worker(threading.Thread):
    """A daemon thread that runs calls handed to it; returns itself to the pool when idle."""

    def __init__(self, pool: _WorkerPool) -> None:
        super().__init__(name="agent-gym-tool", daemon=True)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._pool = pool

    def run(self) -> None:
        while True:
            func, kwargs, outbox = self.inbox.get()
            try:
                result = (True, func(**kwargs))
            except BaseException as exc:  # noqa: BLE001 - report everything to the caller
                result = (False, exc)
            if not self._pool.release(self):
                outbox.put(result)
                return
            outbox.put(result)


class _WorkerPool:
    """Reusable worker threads so a time-limited call costs a queue hand-off, not a thread start."""

    def __init__(self, max_idle: int = 32) -> None:
        self._idle: collections.deque[_Worker] = collections.deque()
        self._max_idle = max_idle

    def forget_workers(self) -> None:
        """Drop every idle worker (in a forked child, whose copies of them have no thread)."""
        self._idle = collections.deque()

    def release(self, worker: _Worker) -> bool:
        if len(self._idle) >= self._max_idle:
            return False
        self._idle.append(worker)
        return True

    def call(self, func: Callable[..., Any], kwargs: dict[str, Any], timeout: float) -> tuple[str, Any]:
        try:
            worker = self._idle.pop()
        except IndexError:
            worker = _Worker(self)
            worker.start()
        outbox: queue.SimpleQueue = queue.SimpleQueue()
        worker.inbox.put((func, kwargs, outbox))
        try:
            ok, value = outbox.get(timeout=timeout)
        except queue.Empty:
            return "timeout", None  # the worker finishes (or not) on its own and rejoins the pool
        return ("ok", value) if ok else ("error", value)


_POOL = _WorkerPool()
if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    # Workers busy at the time of the fork are not in the list; they do not exist in the child
    # either, and an inherited one would never answer: every call would time out.
    os.register_at_fork(after_in_child=_POOL.forget_workers)


def call_with_time_limit(func: Callable[..., Any], kwargs: dict[str, Any], timeout: float) -> tuple[str, Any]:
    """Run ``func(**kwargs)`` on a pooled worker thread, waiting at most ``timeout`` seconds.

    Returns:
        ``("ok", value)``, ``("error", exception)`` or ``("timeout", None)``.
    """
    return _POOL.call(func, kwargs, timeout)


def to_text(value: Any) -> str:
    """A tool's return value as the text of its observation (JSON for containers, ``""`` for None)."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, ".12g")
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
