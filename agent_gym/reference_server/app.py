"""FastAPI application of the reference server (vLLM's OpenAI-compatible dialect).

Endpoints: ``POST /v1/completions`` (also streamed: ``"stream": true`` answers vLLM's
server-sent events token by token, see :mod:`agent_gym.reference_server.streaming`),
``POST /v1/chat/completions``, ``GET /v1/models``, ``POST /tokenize``, ``POST /detokenize``,
``GET /health``, and the token-in ``POST /inference/v1/generate`` (vLLM) and ``POST /generate``
(SGLang) of :mod:`agent_gym.reference_server.token_routes`. Errors use vLLM's body
``{"error": {"message", "type", "param", "code"}}``. Generation runs in the backend's worker
thread (or without a model in fake mode), never on the event loop; so do the tokenization and
template rendering of a large request (:mod:`agent_gym.reference_server.guards`). Requests are
bounded by :class:`~agent_gym.serving.limits.RequestLimits` (413 / 400); a generation whose
client disconnects is cancelled; a chat template sent with a request is refused unless
``trust_request_chat_template`` (then rendered in a bounded sandbox, see
:mod:`agent_gym.serving.templates`); with ``api_key`` every route but ``/health`` needs it.

:class:`Faults` holds the *testing aids* (failing, hanging, dying, malformed answers) that the
command line can switch on; they only affect the two generation endpoints.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from agent_gym.models.tiny import public_model_name
from agent_gym.parsers import make_parser
from agent_gym.reference_server.backends import SeqResult
from agent_gym.reference_server.guards import ClientGone, Guards, protect, until_done_or_gone
from agent_gym.reference_server.protocol import (
    BadRequest,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    PromptBound,
    TokenizeRequest,
    context_error,
    encode_text,
    message_text,
    to_gen_request,
)
from agent_gym.reference_server.rl_control import PausableBackend, dev_mode_enabled, register_rl_routes
from agent_gym.reference_server.streaming import stream_completions
from agent_gym.reference_server.token_routes import register_token_routes
from agent_gym.serving.limits import RequestLimits
from agent_gym.serving.templates import TemplateLimits, check_template_kwargs, render_in_sandbox

__all__ = ["Faults", "create_app"]

_Body = TypeVar("_Body", bound=BaseModel)

# vLLM reports a logprob of -inf (a token its sampling filters ruled out) as -9999.0.
_MIN_LOGPROB = -9999.0


def _logprob(value: float) -> float:
    return value if value >= _MIN_LOGPROB else _MIN_LOGPROB


def _json(body: Any, status_code: int = 200) -> Response:
    """A JSON response serialized with orjson (several times faster than the standard library)."""
    return Response(content=orjson.dumps(body), status_code=status_code, media_type="application/json")


@dataclass
class Faults:
    """Fault injection for tests of clients (off by default).

    Applied, in this order, to the k-th request (k = 1, 2, ...) of a generation endpoint:

    Attributes:
        die_after: When set, the process exits abruptly on request ``die_after + 1``
            (the client sees a dropped connection, like a crashed server).
        fail_first: Requests ``1..fail_first`` answer ``fail_status`` with an error body.
        fail_status: Status of those failures (e.g. 500 or 429).
        hang_after: When set, requests after the first ``hang_after`` never get an answer.
        malformed_json: Answer 200 with a truncated, unparseable JSON body.
        cut_stream_after: When set, a streamed answer is cut off (the connection dropped)
            after this many token chunks.
    """

    die_after: int | None = None
    fail_first: int = 0
    fail_status: int = 500
    hang_after: int | None = None
    malformed_json: bool = False
    cut_stream_after: int | None = None

    def __post_init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    async def before(self, request: Request) -> Response | None:
        """Return the injected response for this request, or ``None`` to serve it normally."""
        with self._lock:
            self._count += 1
            k = self._count
        if self.die_after is not None and k > self.die_after:
            os._exit(17)
        if k <= self.fail_first:
            kind = "TooManyRequests" if self.fail_status == 429 else "InternalServerError"
            body = {
                "error": {
                    "message": f"injected failure {k}/{self.fail_first}",
                    "type": kind,
                    "param": None,
                    "code": self.fail_status,
                }
            }
            headers = {"Retry-After": "0"} if self.fail_status == 429 else None
            return JSONResponse(body, status_code=self.fail_status, headers=headers)
        if self.hang_after is not None and k > self.hang_after:
            while not await request.is_disconnected():  # until the client gives up
                await asyncio.sleep(0.2)
            return Response(status_code=499)
        if self.malformed_json:
            return Response(content=b'{"id": "cmpl-malformed", "choices": [{"text": ', media_type="application/json")
        return None


class _TokenText:
    """Per-id decoded strings (cached) for logprob entries."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int, as_ids: bool) -> str:
        if as_ids:
            return f"token_id:{token_id}"
        s = self.cache.get(token_id)
        if s is None:
            s = self.tokenizer.decode([token_id], skip_special_tokens=False)
            self.cache[token_id] = s
        return s


def _assistant_message(text: str, parser: Any) -> dict[str, Any]:
    """The answer's message; with a tool-call parser, the calls are taken out of the text (as vLLM's parsers do)."""
    if parser is None:
        return {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": []}
    parsed = parser.parse(text)
    if not parsed.tool_calls:
        return {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": []}
    calls = [{"id": call.id or f"chatcmpl-tool-{uuid.uuid4().hex[:16]}", "type": "function",
              "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
             for call in parsed.tool_calls]
    # the content is the text before the first call (its opening marker dropped), None when empty
    first = text.find(parsed.tool_calls[0].raw) if parsed.tool_calls[0].raw else -1
    content = re.sub(r"\s*<[^<>\s]*>\s*$", "", text[:first]).strip() if first >= 0 else ""
    return {"role": "assistant", "content": content or None, "reasoning_content": None, "tool_calls": calls}


def create_app(
    backend: Any, *, served_model_name: str | None = None, faults: Faults | None = None, dev_mode: bool | None = None,
    tool_call_parser: str | None = None, limits: RequestLimits | None = None, api_key: str | None = None,
    trust_request_chat_template: bool = False, template_limits: TemplateLimits | None = None,
) -> FastAPI:
    """Build the FastAPI app serving ``backend``.

    Args:
        backend: A :class:`~agent_gym.reference_server.backends.TransformersBackend` or
            :class:`~agent_gym.reference_server.backends.FakeBackend` (anything with ``tokenizer``,
            ``max_model_len``, ``vocab_size`` and ``async generate(GenRequest)``).
        served_model_name: Name reported by ``/v1/models`` and in responses (default: the
            backend's model path). A completions or chat request naming another model is answered
            404 (``NotFoundError``), as vLLM answers it; one naming none gets this one.
        faults: Fault injection for tests; ``None`` disables it.
        tool_call_parser: vLLM's ``--enable-auto-tool-choice --tool-call-parser NAME``: chat
            requests with tools and ``tool_choice`` ``"auto"`` (the default when tools are given)
            get the calls parsed out of the text into ``message.tool_calls``. Without it such a
            request is refused with vLLM's 400; ``tool_choice: "none"`` renders the tools and
            returns the text as it is either way.
        dev_mode: Serve vLLM's RL routes (pause, resume, weight reload; see
            :mod:`agent_gym.reference_server.rl_control`); None reads ``VLLM_SERVER_DEV_MODE``.
        limits: Request limits (default :class:`~agent_gym.serving.limits.RequestLimits`).
        api_key: vLLM's ``--api-key``: every route but ``/health`` needs ``Authorization: Bearer KEY``.
        trust_request_chat_template: vLLM's ``--trust-request-chat-template``: a template sent with a
            request (or structured template arguments) is rendered, in a bounded sandbox, instead of refused.
        template_limits: The sandbox's bounds (default :class:`~agent_gym.serving.templates.TemplateLimits`).

    Returns:
        The app; ``app.state.backend`` is ``backend`` (in dev mode, its
        :class:`~agent_gym.reference_server.rl_control.PausableBackend`).
    """
    app = FastAPI(title="agent_gym reference server", docs_url=None, redoc_url=None)
    guards = Guards(limits)
    protect(app, guards.limits, api_key)
    if dev_mode_enabled() if dev_mode is None else dev_mode:
        backend = PausableBackend(backend)
        register_rl_routes(app, backend)
    app.state.backend = backend
    tok = backend.tokenizer
    root = public_model_name(backend.model_path)  # the embedded default by name, not by its directory
    name = served_model_name or root
    created = int(time.time())
    token_text = _TokenText(tok)
    bound = PromptBound(tok, backend.max_model_len)
    faults = faults or Faults()
    tool_parser = make_parser(tool_call_parser) if tool_call_parser else None

    def check_model(model: str | None) -> None:
        """Answer 404 to a request naming a model the server does not serve, as vLLM does (no name: the served one)."""
        if model and model != name:
            raise BadRequest(f"The model `{model}` does not exist. Valid aliases: {name}.", status=404,
                             kind="NotFoundError", param="model")

    @app.exception_handler(BadRequest)
    async def _bad_request(_: Request, exc: BadRequest) -> JSONResponse:
        return JSONResponse(exc.openai_body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        error = _validation_error(exc.errors())
        return JSONResponse(error.openai_body(), status_code=error.status)

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nobody reads it: the client went away and its generation was cancelled

    def chat_prompt(
        messages: list[dict[str, Any]], tools: Any, kwargs: dict | None, add_gen: bool, cont: bool = False,
        template: Any = None,
    ) -> list[int]:
        guards.conversation(messages, tools)
        kwargs, client_template = check_template_kwargs(kwargs, trust=trust_request_chat_template, template=template)
        msgs = []
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise BadRequest("each message must be an object with a 'role'", param="messages")
            msgs.append({**m, "content": message_text(m.get("content"), name)})
        if client_template is not None:
            special = {name: getattr(tok, name, None) for name in ("bos_token", "eos_token", "pad_token", "unk_token")}
            text = render_in_sandbox(client_template, msgs, tools=tools, add_generation_prompt=add_gen and not cont,
                                     special_tokens={k: v for k, v in special.items() if isinstance(v, str)},
                                     kwargs=kwargs, limits=template_limits)
            return encode_text(tok, text, add_special_tokens=False, param="chat_template")
        try:
            enc = tok.apply_chat_template(
                msgs,
                tools=tools,
                tokenize=True,
                add_generation_prompt=add_gen and not cont,
                continue_final_message=cont,
                **kwargs,
            )
        except Exception as exc:  # template errors are the client's messages' fault
            raise BadRequest(f"chat template failed: {exc}", param="messages") from exc
        ids = enc["input_ids"] if isinstance(enc, dict) or hasattr(enc, "keys") else enc
        return list(ids)

    @app.get("/health")
    async def health() -> Response:
        ok = getattr(backend, "healthy", True)
        return Response(status_code=200 if ok else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "agent_gym",
                    "root": root,
                    "parent": None,
                    "max_model_len": backend.max_model_len,
                    "permission": [],
                }
            ],
        }

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        req = await _parse_body(request, TokenizeRequest)

        def count() -> bytes:
            if req.messages is not None:
                ids = chat_prompt(req.messages, req.tools, req.chat_template_kwargs, req.add_generation_prompt,
                                  template=req.chat_template)
            elif req.prompt is not None:
                ids = encode_text(tok, req.prompt, add_special_tokens=req.add_special_tokens)  # no length check (vLLM)
            else:
                raise BadRequest("either 'prompt' or 'messages' is required", param="prompt")
            strs = tok.convert_ids_to_tokens(ids) if req.return_token_strs else None
            return orjson.dumps({"count": len(ids), "max_model_len": backend.max_model_len, "tokens": ids,
                                 "token_strs": strs})

        heavy = _client_template(req.chat_template, req.chat_template_kwargs)
        return Response(await guards.prepare(request, count, heavy=heavy), media_type="application/json")

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        req = await _parse_body(request, DetokenizeRequest)

        def text() -> bytes:
            for t in req.tokens:
                if not 0 <= t < backend.vocab_size:
                    raise BadRequest(f"Token id {t} is out of vocabulary (size {backend.vocab_size}).",
                                     param="tokens")
            return orjson.dumps({"prompt": tok.decode(req.tokens)})

        return Response(await guards.prepare(request, text), media_type="application/json")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = await _parse_body(request, CompletionRequest)
        check_model(req.model)
        injected = await faults.before(request)
        if injected is not None:
            return injected
        prompts = _split_prompts(req.prompt)
        if req.echo:
            raise BadRequest("echo=true is not supported by this reference server.", param="echo")
        max_tokens = 16 if req.max_tokens is None else req.max_tokens
        guards.sampling(req.n, None)
        guards.prompts(len(prompts), req.n)
        top = 0 if req.logprobs is None else req.logprobs

        def prepare() -> list[Any]:
            gens = []
            for p in prompts:
                if isinstance(p, str):
                    bound.check(p)
                ids = encode_text(tok, p, add_special_tokens=req.add_special_tokens) if isinstance(p, str) else p
                if not ids:
                    raise BadRequest("The prompt cannot be empty.", param="prompt")
                err = context_error(backend.max_model_len, len(ids), max_tokens)
                if err is not None:
                    raise err
                gens.append(to_gen_request(req, ids, max_tokens=max_tokens, top_logprobs=top,
                                           vocab_size=backend.vocab_size))
            return gens

        gens = await guards.prepare(request, prepare)
        guards.sampling(None, max_tokens)  # after the context check, whose answer a client may look for
        if req.stream:
            usage = bool((req.stream_options or {}).get("include_usage"))
            as_ids = req.return_tokens_as_token_ids

            def chunk_logprobs(ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]],
                               offset: int) -> dict[str, Any]:
                return _completion_logprobs(SeqResult(ids, lps, tops, "", ""), token_text, as_ids, offset)

            events = stream_completions(
                backend, gens, model=name, return_token_ids=req.return_token_ids,
                logprobs=chunk_logprobs if req.logprobs is not None else None, include_usage=usage,
                cut_after=faults.cut_stream_after,
            )
            return StreamingResponse(events, media_type="text/event-stream")
        results = await until_done_or_gone(request, asyncio.gather(*(backend.generate(g) for g in gens)))

        def answer() -> bytes:
            choices: list[dict[str, Any]] = []
            prompt_tokens = completion_tokens = 0
            for g, samples in zip(gens, results, strict=False):
                prompt_tokens += len(g.prompt_ids)
                for s in samples:
                    completion_tokens += len(s.token_ids)
                    choices.append(
                        {
                            "index": len(choices),
                            "text": s.text,
                            "logprobs": _completion_logprobs(s, token_text, req.return_tokens_as_token_ids)
                            if req.logprobs is not None
                            else None,
                            "finish_reason": s.finish_reason,
                            "stop_reason": s.stop_reason,
                            "prompt_logprobs": None,
                            "prompt_token_ids": list(g.prompt_ids) if req.return_token_ids else None,
                            "token_ids": list(s.token_ids) if req.return_token_ids else None,
                        }
                    )
            return orjson.dumps(
                {
                    "id": f"cmpl-{uuid.uuid4().hex}",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": name,
                    "choices": choices,
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    },
                }
            )

        size = sum(len(s.token_ids) for samples in results for s in samples)
        return Response(await guards.answer(size, answer), media_type="application/json")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req = await _parse_body(request, ChatRequest)
        check_model(req.model)
        injected = await faults.before(request)
        if injected is not None:
            return injected
        if not req.messages:
            raise BadRequest("messages must be a non-empty list.", param="messages")
        guards.conversation(req.messages, req.tools)
        if req.stream:
            raise BadRequest("stream=true is supported by /v1/completions only in this reference server.",
                             param="stream")
        auto_tools = bool(req.tools) and req.tool_choice in (None, "auto")
        if req.tools and req.tool_choice not in (None, "auto", "none"):
            raise BadRequest("tool_choice: only 'auto' and 'none' are served by this reference server",
                             param="tool_choice")
        if auto_tools and tool_parser is None:
            raise BadRequest('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
        requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        guards.sampling(req.n, None)
        top = (req.top_logprobs or 0) if req.logprobs else 0

        def prepare() -> tuple[list[int], Any]:
            ids = chat_prompt(req.messages, req.tools, req.chat_template_kwargs, req.add_generation_prompt,
                              req.continue_final_message, template=req.chat_template)
            max_tokens = requested
            err = context_error(backend.max_model_len, len(ids), max_tokens)
            if err is not None:
                raise err
            guards.sampling(None, max_tokens)
            if max_tokens is None:
                max_tokens = min(backend.max_model_len - len(ids), guards.limits.max_tokens)
            return ids, to_gen_request(req, ids, max_tokens=max_tokens, top_logprobs=top,
                                       vocab_size=backend.vocab_size)

        ids, gen = await guards.prepare(request, prepare,
                                        heavy=_client_template(req.chat_template, req.chat_template_kwargs))
        samples = await until_done_or_gone(request, backend.generate(gen))
        choices = []
        for i, s in enumerate(samples):
            choices.append(
                {
                    "index": i,
                    "message": _assistant_message(s.text, tool_parser if auto_tools else None),
                    "logprobs": _chat_logprobs(s, token_text, req.return_tokens_as_token_ids, top)
                    if req.logprobs
                    else None,
                    "finish_reason": s.finish_reason,
                    "stop_reason": s.stop_reason,
                    "token_ids": list(s.token_ids) if req.return_token_ids else None,
                }
            )
        completion_tokens = sum(len(s.token_ids) for s in samples)
        return _json(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": name,
                "choices": choices,
                "prompt_token_ids": ids if req.return_token_ids else None,
                "prompt_logprobs": None,
                "usage": {
                    "prompt_tokens": len(ids),
                    "completion_tokens": completion_tokens,
                    "total_tokens": len(ids) + completion_tokens,
                },
            }
        )

    register_token_routes(app, backend, model_name=name, faults=faults, guards=guards)
    return app


def _validation_error(errors: Sequence[Any]) -> BadRequest:
    """A 400 naming each invalid field (from pydantic's or FastAPI's validation errors)."""
    first = errors[0] if errors else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    msg = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()) if x != 'body')}: {e.get('msg')}" for e in errors)
    return BadRequest(msg or "invalid request", param=loc[0] if loc else None)


async def _parse_body(request: Request, model: type[_Body]) -> _Body:
    """Parse and validate a generation request's JSON body (orjson; the standard library for NaN).

    Raises:
        BadRequest: The body is not JSON or does not fit ``model``.
    """
    raw = await request.body()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise BadRequest(f"the request body is not valid JSON: {str(exc)[:200]}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc.errors()) from None


def _client_template(template: Any, kwargs: Any) -> bool:
    """Whether a request sends a chat template of its own (rendered, when trusted, in a child process)."""
    return template is not None or isinstance(kwargs, dict) and "chat_template" in kwargs


def _split_prompts(prompt: Any) -> list[str | list[int]]:
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise BadRequest("The prompt cannot be empty.", param="prompt")
    if all(isinstance(x, int) for x in prompt):
        return [list(prompt)]
    return list(prompt)


def _completion_logprobs(s: SeqResult, text: _TokenText, as_ids: bool, start: int = 0) -> dict[str, Any]:
    tokens = [text(t, as_ids) for t in s.token_ids]
    offsets, pos = [], start
    for t in s.token_ids:
        offsets.append(pos)
        pos += len(text(t, False))
    tops = []
    for t, lp, top in zip(s.token_ids, s.logprobs, s.top_logprobs, strict=False):
        entry = {text(t, as_ids): _logprob(lp)}
        for tid, v in top:
            entry.setdefault(text(tid, as_ids), _logprob(v))
        tops.append(entry)
    logprobs = [_logprob(v) for v in s.logprobs]
    return {"text_offset": offsets, "token_logprobs": logprobs, "tokens": tokens, "top_logprobs": tops}


def _chat_logprobs(s: SeqResult, text: _TokenText, as_ids: bool, top_n: int) -> dict[str, Any]:
    content = []
    for t, lp, top in zip(s.token_ids, s.logprobs, s.top_logprobs, strict=False):
        tstr = text(t, as_ids)
        content.append(
            {
                "token": tstr,
                "logprob": _logprob(lp),
                "bytes": list(text(t, False).encode("utf-8")),
                "top_logprobs": [
                    {"token": text(i, as_ids), "logprob": _logprob(v), "bytes": list(text(i, False).encode("utf-8"))}
                    for i, v in top[:top_n]
                ],
            }
        )
    return {"content": content}
