"""Pausing generation for weight updates: vLLM's RL routes in the reference server.

vLLM serves these routes when started with ``VLLM_SERVER_DEV_MODE=1``; so does the reference
server (or with ``create_app(..., dev_mode=True)``):

* ``POST /pause?mode=abort|wait|keep`` stops generation. ``abort`` ends every in-flight request
  at once with ``finish_reason: "abort"`` and the ids (and logprobs) sampled so far; ``wait``
  lets in-flight requests finish first; ``keep`` freezes them: they resume after
  ``POST /resume``, on the weights loaded meanwhile, and answer once with every id. While
  paused, new requests wait. Answers ``{"status": "paused", "mode"}`` once no request runs.
* ``POST /resume`` lets generation go on; ``GET /is_paused`` answers ``{"is_paused"}``.
* ``POST /collective_rpc`` with ``{"method": "reload_weights", "kwargs": {"weights_path": DIR}}``
  loads a checkpoint directory's weights in place (vLLM's way of reloading from disk; a server
  that is not paused finishes its running requests first) and answers ``{"results": [null]}``;
  another method, or a path that cannot be loaded, answers 500 (``InternalServerError``, "Call
  to collective_rpc method failed: ..."), a body without ``method`` 400, as vLLM does.
* ``POST /update_weight_version`` with ``{"new_version": "3"}`` labels the weights (answers
  ``{"success": true, "new_version"}``); ``GET /weight_info`` answers ``{"weight_version"}``
  (``"default"`` until a label is set). Reloading does not move the label: the client sets it.
* ``GET /debug/sample_answers`` (a testing aid) lists the last samples the backend answered, of
  every endpoint, streamed or not (oldest first): ``{"prompt_tokens", "prompt_tail" (the last
  32 prompt ids), "prompt_hash", "continuation_hash", "token_ids", "finish_reason",
  "weight_versions"}`` each, an aborted answer being one entry, so a test can check that a client's
  turns hold every sampled id exactly once. The hashes (:func:`ids_hash`) identify the whole prompt
  and the prompt followed by the answer's ids: a turn continued after an abort sends a prompt whose
  ``prompt_hash`` is the aborted answer's ``continuation_hash``.
  ``GET /debug/stats`` answers ``stats`` (pauses, aborted, frozen, reloads; ``held``: samples
  waiting for a resume now) and ``in_flight``: the ids drawn so far by each sample running now.

Answers say which weights sampled them where vLLM's do: a ``/inference/v1/generate`` choice
carries ``weight_versions``, contiguous spans ``[{"version", "start", "end"}]`` over its output
ids (a request frozen by ``keep`` spans two labels); ``/v1/completions`` and chat answers carry
none (a client labels their ids with the version it set); SGLang's ``/generate`` carries
``meta_info.weight_version``.

:class:`PausableBackend` wraps the generation backend and implements the pause: each request's
samples run as *flights* whose ids are collected as they are drawn; a pause cancels the
flights (the backend drops their rows) and hands back what was sampled. A frozen request
continues as a new flight for prompt + sampled ids with the budget reduced, so the ids
recorded before the pause are never drawn again.
"""

from __future__ import annotations

import array
import asyncio
import dataclasses
import hashlib
import os
import threading
from collections import deque
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from agent_gym.reference_server.backends import GenRequest, SeqResult
from agent_gym.reference_server.protocol import BadRequest

__all__ = ["PAUSE_MODES", "RECORDED_SAMPLES", "PausableBackend", "dev_mode_enabled", "ids_hash", "register_rl_routes",
           "version_spans"]

PAUSE_MODES = ("abort", "wait", "keep")
"""The ``mode`` values of ``POST /pause`` (vLLM's)."""

RECORDED_SAMPLES = 1024
"""How many answered samples ``GET /debug/sample_answers`` keeps."""


def ids_hash(ids: list[int]) -> str:
    """A short content hash of a token id sequence (the recorded answers' ``prompt_hash``).

    Args:
        ids: Token ids.

    Returns:
        The first 16 hex digits of the SHA-256 of the ids as 64-bit integers (native byte order).
    """
    return hashlib.sha256(array.array("q", ids).tobytes()).hexdigest()[:16]


def dev_mode_enabled() -> bool:
    """Whether ``VLLM_SERVER_DEV_MODE`` asks for the RL routes (``1``/``true``, as vLLM reads it)."""
    return os.environ.get("VLLM_SERVER_DEV_MODE", "").strip().lower() in ("1", "true", "yes")


class _Flight:
    """One running sample: the ids drawn so far (collected from the backend's thread)."""

    def __init__(self, on_token: Any, index: int) -> None:
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.tops: list[list[tuple[int, float]]] = []
        self.on_token = on_token
        self.index = index
        self.stopped: str | None = None  # "abort" or "keep" once a pause ended the flight
        self.task: asyncio.Future | None = None
        self._lock = threading.Lock()

    def add(self, _: int, token: int, logprob: float, top: list[tuple[int, float]]) -> None:
        with self._lock:
            if self.stopped is not None:
                return
            self.ids.append(token)
            self.logprobs.append(logprob)
            self.tops.append(top)
        if self.on_token is not None:
            self.on_token(self.index, token, logprob, top)

    def stop(self, mode: str) -> None:
        """Freeze the ids (later ones are ignored) and cancel the backend's request."""
        with self._lock:
            self.stopped = mode
        if self.task is not None:
            self.task.cancel()


class PausableBackend:
    """A generation backend with vLLM's pause modes and a weight version.

    Every attribute other than ``generate`` is the wrapped backend's.

    Args:
        backend: The backend (``TransformersBackend`` or ``FakeBackend``).
        weight_version: The version of the weights the backend starts with.
    """

    def __init__(self, backend: Any, *, weight_version: int = 0) -> None:
        self.inner = backend
        self.weight_version = int(weight_version)
        #: The label ``GET /weight_info`` reports (vLLM's is ``"default"`` until one is set).
        self.version_label = "default"
        #: The label of each weight number the ids are recorded with (see :meth:`set_version_label`).
        self.labels: dict[int, str] = {self.weight_version: "default"}
        self.paused = False
        self.mode: str | None = None
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._flights: set[_Flight] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.stats = {"aborted": 0, "frozen": 0, "pauses": 0, "reloads": 0, "held": 0}
        #: The last samples answered (see the module docs), oldest first.
        self.answers: deque[dict[str, Any]] = deque(maxlen=RECORDED_SAMPLES)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ generation
    async def generate(self, req: GenRequest) -> list[SeqResult]:
        """Generate ``req``'s samples, each one pausable (see the module docs)."""
        if req.n == 1:
            return [await self._sample(req, 0)]
        seeds = [None if req.seed is None else req.seed + i for i in range(req.n)]
        singles = [dataclasses.replace(req, n=1, seed=seeds[i]) for i in range(req.n)]
        return list(await asyncio.gather(*(self._sample(single, i) for i, single in enumerate(singles))))

    async def _sample(self, req: GenRequest, index: int) -> SeqResult:
        result = await self._run_sample(req, index)
        prompt = list(req.prompt_ids)
        self.answers.append({"prompt_tokens": len(prompt), "prompt_tail": prompt[-32:],
                             "prompt_hash": ids_hash(prompt),
                             "continuation_hash": ids_hash(prompt + list(result.token_ids)),
                             "token_ids": list(result.token_ids), "finish_reason": result.finish_reason,
                             "weight_versions": result.weight_versions})
        return result

    async def _run_sample(self, req: GenRequest, index: int) -> SeqResult:
        ids: list[int] = []
        logprobs: list[float] = []
        tops: list[list[tuple[int, float]]] = []
        versions: list[int] = []
        while True:
            if self.paused:
                self.stats["held"] += 1
                try:
                    while self.paused:
                        await self._resumed.wait()
                finally:
                    self.stats["held"] -= 1
            left = req.max_tokens - len(ids)
            flight = _Flight(req.on_token, index)
            part = dataclasses.replace(
                req, prompt_ids=list(req.prompt_ids) + ids, max_tokens=left, on_token=flight.add,
                min_tokens=max(0, req.min_tokens - len(ids)),
                seed=None if req.seed is None else req.seed + len(ids),
            )
            version = self.weight_version
            flight.task = asyncio.ensure_future(self.inner.generate(part))
            self._flights.add(flight)
            self._idle.clear()
            try:
                result = (await asyncio.shield(flight.task))[0]
            except asyncio.CancelledError:
                if flight.stopped is None:  # the client went away
                    flight.task.cancel()
                    raise
                result = None
            finally:
                self._flights.discard(flight)
                if not self._flights:
                    self._idle.set()
            if result is not None:
                versions += [version] * len(result.token_ids)
                return SeqResult(ids + list(result.token_ids), logprobs + list(result.logprobs),
                                 tops + list(result.top_logprobs), self._text(req, ids, result),
                                 result.finish_reason, result.stop_reason, versions)
            ids += flight.ids
            logprobs += flight.logprobs
            tops += flight.tops
            versions += [version] * len(flight.ids)
            if flight.stopped == "abort":
                self.stats["aborted"] += 1
                text = self.inner.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
                return SeqResult(ids, logprobs, tops, text, "abort", None, versions)
            self.stats["frozen"] += 1
            if len(ids) >= req.max_tokens:  # the budget ran out as the pause came
                text = self.inner.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
                return SeqResult(ids, logprobs, tops, text, "length", None, versions)

    def in_flight(self) -> list[int]:
        """How many ids each sample generating now has drawn (frozen and waiting ones not counted)."""
        return [len(flight.ids) for flight in list(self._flights)]

    def _text(self, req: GenRequest, head: list[int], result: SeqResult) -> str:
        """The whole sample's text: the head sampled before a freeze and the rest."""
        if not head:
            return result.text
        return self.inner.tokenizer.decode(head, skip_special_tokens=req.skip_special_tokens) + result.text

    # ------------------------------------------------------------------ control
    async def pause(self, mode: str) -> None:
        """Stop generation in ``mode`` (see the module docs); returns once no flight runs."""
        if mode not in PAUSE_MODES:
            raise BadRequest(f"mode: expected one of {list(PAUSE_MODES)}, got {mode!r}", param="mode")
        self.paused, self.mode = True, mode
        self._resumed.clear()
        self.stats["pauses"] += 1
        if mode != "wait":
            for flight in list(self._flights):
                flight.stop(mode)
        await self._idle.wait()

    def resume(self) -> None:
        """Let generation go on (frozen requests continue on the current weights)."""
        self.paused, self.mode = False, None
        self._resumed.set()

    async def reload_weights(self, model_path: str) -> None:
        """Load ``model_path``'s weights in place; a server that is not paused drains its requests first."""
        reload = getattr(self.inner, "reload_weights", None)
        if reload is None:
            raise BadRequest("this backend cannot reload weights", status=500, kind="InternalServerError")
        was_paused = self.paused
        if not was_paused:
            await self.pause("wait")
        try:
            await reload(model_path)
        finally:
            if not was_paused:
                self.resume()
        self.stats["reloads"] += 1

    def set_version_label(self, label: str) -> None:
        """Label the weights (``/update_weight_version``).

        New ids are numbered with the label when it is an int >= 0, else with the next number;
        :attr:`labels` maps the numbers back to labels (the spans of the generate answers).
        """
        self.version_label = label
        self.weight_version = int(label) if label.isdigit() else self.weight_version + 1
        self.labels[self.weight_version] = label


def version_spans(versions: list[int], labels: dict[int, str]) -> list[dict[str, Any]]:
    """VLLM's ``weight_versions`` of a choice: ``[{"version", "start", "end"}]``, contiguous spans of output ids.

    Example:
        >>> version_spans([0, 0, 3], {0: "default"})
        [{'version': 'default', 'start': 0, 'end': 2}, {'version': '3', 'start': 2, 'end': 3}]
    """
    spans: list[dict[str, Any]] = []
    for index, number in enumerate(versions):
        label = labels.get(number, str(number))
        if spans and spans[-1]["version"] == label:
            spans[-1]["end"] = index + 1
        else:
            spans.append({"version": label, "start": index, "end": index + 1})
    return spans


def _json(body: Any) -> Response:
    return Response(content=orjson.dumps(body), media_type="application/json")


async def _json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object (400 otherwise, as vLLM answers)."""
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object")
    return body


def register_rl_routes(app: FastAPI, backend: PausableBackend) -> None:
    """Add vLLM's RL routes and the ``/debug`` aids to ``app`` (see the module docs)."""

    @app.post("/pause")
    async def pause(mode: str = "abort", clear_cache: bool = True) -> Response:
        await backend.pause(mode)
        return _json({"status": "paused"})

    @app.post("/resume")
    async def resume() -> Response:
        backend.resume()
        return _json({"status": "resumed"})

    @app.get("/is_paused")
    async def is_paused() -> Response:
        return _json({"is_paused": backend.paused})

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> Response:
        body = await _json_body(request)
        method = body.get("method")
        if method is None:
            raise BadRequest("Missing 'method' in request body")
        kwargs = body.get("kwargs") or {}
        path = kwargs.get("weights_path") if isinstance(kwargs, dict) else None
        if method != "reload_weights" or not isinstance(path, str) or not path:
            what = (f"unknown method {method!r}" if method != "reload_weights"
                    else "reload_weights needs kwargs.weights_path (a checkpoint directory)")
            raise BadRequest(f"Call to collective_rpc method failed: {what}", status=500, kind="InternalServerError")
        try:
            await backend.reload_weights(path)
        except BadRequest:
            raise
        except Exception as exc:  # noqa: BLE001 - the engine's answer to a checkpoint it cannot load
            raise BadRequest(f"Call to collective_rpc method failed: {type(exc).__name__}: {exc}", status=500,
                             kind="InternalServerError") from None
        return _json({"results": [None]})

    @app.post("/update_weight_version")
    async def update_weight_version(request: Request) -> Response:
        body = await _json_body(request)
        label = body.get("new_version")
        if not isinstance(label, str):
            raise BadRequest("new_version: expected a string", param="body.new_version")
        backend.set_version_label(label)
        return _json({"success": True, "new_version": label})

    @app.get("/weight_info")
    async def weight_info() -> Response:
        return _json({"weight_version": backend.version_label})

    @app.get("/debug/stats")
    async def debug_stats() -> Response:
        return _json({"weight_version": backend.weight_version, "stats": dict(backend.stats),
                      "in_flight": backend.in_flight()})

    @app.get("/debug/sample_answers")
    async def sample_answers() -> Response:
        return _json(list(backend.answers))
