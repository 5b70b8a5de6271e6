"""The worker thread in front of a :class:`~agent_gym.inference.batch_engine.BatchEngine`.

Callers submit requests (each one or more rows, e.g. the ``n`` samples of a server request) and
get a future; waiting requests join the running batch between decode steps, never more rows than
the engine's ``max_batch`` at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from agent_gym.inference.batch_engine import BatchEngine, GenerationStopped
from agent_gym.inference.row import Row

__all__ = ["Batcher"]

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    make_rows: Callable[[], list[Row]]
    collect: Callable[[list[Row]], Any]
    future: Future
    size: int  # rows it makes (a hint for the gather window)


class _Owner:
    """A request whose rows decode: its future is set when the last row finishes."""

    __slots__ = ("left", "request", "rows")

    def __init__(self, request: _Request, rows: list[Row]) -> None:
        self.request, self.rows, self.left = request, rows, len(rows)


class Batcher:
    """A worker thread that decodes waiting requests as one batch, admitting new ones as they come.

    A request is a function making its rows and a function turning its finished rows into the
    future's result. After the first waiting request the worker keeps collecting for as long
    as new ones keep arriving within ``gather_s`` (turns of episodes whose environment step is
    just finishing), but only when ``expect_more()`` says that other requests may come (e.g.
    other sessions are open), and only until the requests have ``max_batch`` rows; while a batch
    decodes, requests that arrive join it as far as there is room (the engine holds back the
    rows of a request that does not fit until others leave).

    Args:
        engine: The engine that decodes.
        gather_s: The gather window (0: take only what is waiting).
        expect_more: Whether to wait the gather window at all (None: always).
        name: The thread's name.
    """

    def __init__(self, engine: BatchEngine, *, gather_s: float = 0.004,
                 expect_more: Callable[[], bool] | None = None, name: str = "agent-gym-batcher") -> None:
        self.engine = engine
        self.gather_s = gather_s
        self.expect_more = expect_more
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._abort = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the worker thread runs."""
        return self._thread.is_alive()

    def submit(self, make_rows: Callable[[], list[Row]], collect: Callable[[list[Row]], Any], *,
               rows: int = 1) -> Future:
        """Queue a request; the future gets ``collect(rows)`` once all its rows are finished.

        Args:
            make_rows: Makes the request's rows (called in the worker thread when it joins).
            collect: Turns the finished rows into the future's result.
            rows: How many rows ``make_rows`` makes (used to fill a batch, not checked).
        """
        future: Future = Future()
        self._queue.put(_Request(make_rows, collect, future, max(1, int(rows))))
        return future

    def close(self, *, abort: bool = False, timeout: float | None = None) -> None:
        """Stop the worker: after the current batch, or at once with ``abort``.

        Args:
            abort: End the batch decoding now: its requests (and those still queued) fail with
                :class:`~agent_gym.inference.batch_engine.GenerationStopped`.
            timeout: Seconds to wait for the worker thread to end (None: do not wait). A process
                about to exit should wait: a thread still inside the model when the interpreter
                shuts down can abort the process.
        """
        if abort:
            self._abort.set()
        self._queue.put(None)
        if timeout is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if abort and not self._thread.is_alive():
            self._fail_queued()

    def _fail_queued(self) -> None:
        """Fail the requests still queued (after an aborting close)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None and item.future.set_running_or_notify_cancel():
                item.future.set_exception(GenerationStopped("generation stopped: the batching worker closed"))

    def _run(self) -> None:
        room = self.engine.max_batch
        while True:
            item = self._queue.get()
            if item is None or self._abort.is_set():
                if item is not None and item.future.set_running_or_notify_cancel():
                    item.future.set_exception(GenerationStopped("generation stopped: the batching worker closed"))
                if item is None:
                    return
                continue
            batch = [item]
            size = item.size
            closing = False
            wait = self.gather_s if self.gather_s > 0 and (self.expect_more is None or self.expect_more()) else 0.0
            while size < room:
                try:
                    nxt = self._queue.get(timeout=wait) if wait else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    closing = True
                    break
                batch.append(nxt)
                size += nxt.size
            if self._serve(batch):
                closing = True
            if closing:
                return

    def _serve(self, batch: list[_Request]) -> bool:
        """Decode ``batch`` and the requests that arrive meanwhile; True when ``close`` was called."""
        closing = False
        owners: dict[int, _Owner] = {}  # id(row) -> its request

        def rows_of(request: _Request) -> list[Row]:
            if not request.future.set_running_or_notify_cancel():
                return []
            try:
                rows = request.make_rows()
                if not rows:
                    request.future.set_result(request.collect(rows))
                    return []
            except Exception as exc:  # noqa: BLE001 - the request's error, not the batch's
                request.future.set_exception(exc)
                return []
            owner = _Owner(request, rows)
            for row in rows:
                owners[id(row)] = owner
            return rows

        def admit(room: int) -> list[Row]:
            nonlocal closing
            out: list[Row] = []
            while not closing and len(out) < room:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    closing = True
                else:
                    out.extend(rows_of(nxt))
            return out

        def finished(row: Row) -> None:
            owner = owners.pop(id(row))
            owner.left -= 1
            if owner.left == 0:
                request = owner.request
                try:
                    request.future.set_result(request.collect(owner.rows))
                except Exception as exc:  # noqa: BLE001 - a failing collect fails its own request
                    request.future.set_exception(exc)

        try:
            self.engine.run([row for request in batch for row in rows_of(request)], admit, finished,
                            should_stop=self._abort.is_set)
        except BaseException as exc:  # noqa: BLE001 - every waiting request gets the error
            if isinstance(exc, GenerationStopped):
                closing = True
            else:
                logger.exception("batched generation failed")
            for owner in {id(o): o for o in owners.values()}.values():
                if not owner.request.future.done():
                    owner.request.future.set_exception(exc)
        return closing
