"""The gateway's HTTP application (FastAPI): OpenAI and Anthropic dialects over token-in vLLM.

Endpoints (each model endpoint also under ``/sessions/{id}``), one per
:class:`~agent_gym.gateway.dialect.Dialect`, all driven alike (parse the request, sample and
record the turn, render it, stream it or answer an error in the dialect's shape):

* ``POST /v1/chat/completions`` - OpenAI chat, ``tools`` / ``tool_calls``, ``stream`` (SSE)
  (:mod:`agent_gym.gateway.openai_chat`).
* ``POST /v1/messages`` - Anthropic Messages, ``tool_use`` / ``tool_result`` blocks, ``stream``
  (:mod:`agent_gym.gateway.anthropic`).
* ``POST /v1/responses`` - OpenAI Responses: ``input`` items, ``instructions``, function ``tools``,
  ``previous_response_id``, ``stream`` (:mod:`agent_gym.gateway.responses`).
* ``GET /v1/models`` - the upstream model.
* ``POST /sessions`` (create), ``GET /sessions`` (list), ``GET /sessions/{id}/trajectory``,
  ``POST /sessions/{id}/reward`` (rewards; ends the episode), ``GET /health``.

Two roles (see :mod:`agent_gym.gateway.access`): a session's API key (``Authorization: Bearer`` or
``x-api-key``, made when the session is created) samples in that session and does nothing else;
the trainer's token (given to :func:`create_gateway_app`, compared in constant time) creates,
lists, reads and ends sessions (rewards, statuses) and may sample in any session. A request's
session is found from the path prefix, then the API key, then the ``x-session-id`` header. Each
turn is sampled by a token-in :class:`~agent_gym.policy.VLLMPolicy` (session affinity, retries,
failover).

Requests are bounded by :class:`~agent_gym.serving.limits.RequestLimits` (body size: 413;
messages, tools, ``n``: 400), in the dialect's error shape. A body larger than
``offload_bytes`` is parsed on a worker thread and its turn (template rendering, tokenization,
the upstream request) runs on a loop of its own thread (:mod:`agent_gym.gateway.policy_thread`),
so ``/health`` and the other sessions never wait for it.

Streaming is real upstream streaming: a ``"stream": true`` request is sampled by
:meth:`~agent_gym.policy.VLLMPolicy.astream` (a streamed token-in ``/v1/completions``), and
its text is forwarded as it arrives (:mod:`agent_gym.gateway.stream`): OpenAI ``content``
and ``reasoning_content`` deltas, Anthropic ``text_delta`` events; a tool call is held back
from the moment the session's call marker may begin (``<tool_call>`` for hermes, the model
family's own marker otherwise) and sent once parsed (OpenAI
``tool_calls`` deltas, Anthropic ``tool_use`` blocks with ``input_json_delta``). The recorded
step and ids are those of the unstreamed path. A failure before anything was sent is an HTTP
error as without streaming; a stream that breaks later ends with an error event. Answers carry
``x-agent-gym-session`` and ``x-agent-gym-step`` headers, unstreamed answers also
``x-agent-gym-new-segment``. A streamed answer's headers leave before the turn is decided, so its
last event carries the same facts in an ``agent_gym`` field (``{"session_id", "step",
"new_segment", "history_rewritten"}``): on the finish chunk (chat completions), on
``message_delta`` (Messages) and on ``response.completed`` (Responses).

Any other route or method under ``/v1`` answers an error in the dialect of the request (Anthropic's
when it sends ``anthropic-version``) naming the routes served. Sampling fields of the request
(``temperature``, ``tool_choice``, ``stop``, ``parallel_tool_calls``, a tool's ``strict``, ...) are
ignored: the gateway's sampling applies. With ``SessionStore(strict_tool_calls=True)`` a turn whose
``<tool_call>`` is malformed is still recorded but answered with a 422 ``InvalidToolCallError``
(an error event in a stream) instead of reaching the client as plain text.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from agent_gym.errors import RequestError
from agent_gym.gateway.access import AccessRules, gateway_error
from agent_gym.gateway.anthropic import AnthropicMessages
from agent_gym.gateway.dialect import Dialect, Exchange, StreamEncoder, TurnRequest
from agent_gym.gateway.openai_chat import OpenAIChat
from agent_gym.gateway.policy_thread import OffLoopPolicy
from agent_gym.gateway.responses import ResponseMemory, Responses
from agent_gym.gateway.session import GatewaySession, TurnResult, TurnStream
from agent_gym.gateway.store import SessionStore
from agent_gym.gateway.stream import StreamSplitter
from agent_gym.serving.limits import BodyLimit, RequestLimits
from agent_gym.utils.runtime import run_blocking

__all__ = ["PREFIXES", "SERVED", "create_gateway_app", "route_error", "stream_record", "strict_error",
           "trajectory_json"]

PREFIXES = ("/v1", "/sessions/{session_id}/v1")
"""Where the model routes are served: for the session a key or header names, or the one in the path."""

#: Routes the gateway serves under ``/v1`` (also under ``/sessions/{id}/v1``): path -> method.
SERVED = {**{dialect.path: "POST" for dialect in (OpenAIChat, AnthropicMessages, Responses)}, "models": "GET"}

_OPENAI = OpenAIChat()
_ANTHROPIC = AnthropicMessages()


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _error(dialect: Dialect, exc: RequestError) -> Response:
    return _json(dialect.render_error(exc), exc.status)


def trajectory_json(trajectory: Any) -> dict[str, Any]:
    """A trajectory as the JSON record the JSONL export writes (``_kind`` included)."""
    data = trajectory.to_dict()
    data["_kind"] = "StepTrajectory"
    return data


def _decode(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"expected a JSON body, got {raw[:60]!r} ({exc})") from None


def _check_counts(body: dict[str, Any], limits: RequestLimits) -> None:
    """Refuse lists beyond the limits before converting them (400)."""
    for name, most in (("messages", limits.max_messages), ("input", limits.max_messages), ("tools", limits.max_tools)):
        value = body.get(name)
        if isinstance(value, list) and len(value) > most:
            raise RequestError(f"{name}: expected at most {most} items, got {len(value)}", param=name)


def _check_turn(body: dict[str, Any], request: TurnRequest, limits: RequestLimits) -> None:
    """Refuse a converted request beyond the limits, or one asking more than one turn (400)."""
    if len(request.messages) > limits.max_messages:
        raise RequestError(f"messages: expected at most {limits.max_messages} messages, "
                           f"got {len(request.messages)}", param="messages")
    if len(request.tools) > limits.max_tools:
        raise RequestError(f"tools: expected at most {limits.max_tools} tools, got {len(request.tools)}",
                           param="tools")
    n = body.get("n")
    if n is not None and n != 1:
        raise RequestError(f"n: the gateway samples one turn per request; expected 1, got {n!r:.40}", param="n")


def route_error(method: str, path: str, rest: str) -> RequestError:
    """The error answering ``method path`` under ``/v1`` that no route serves (405 or 404)."""
    served = ", ".join(f"{m} /v1/{p}" for p, m in SERVED.items())
    if rest.strip("/") in SERVED:
        return RequestError(f"{method} {path} is not served: use {SERVED[rest.strip('/')]} (the gateway serves "
                            f"{served})", status=405, kind="MethodNotAllowedError")
    return RequestError(f"unknown route {method} {path}: the gateway serves {served}, each also under "
                        "/sessions/{id}/v1", status=404, kind="NotFoundError")


def strict_error(result: TurnResult) -> RequestError:
    """The client's error for a turn whose tool call is malformed (``strict_tool_calls``)."""
    return RequestError(f"the model's tool call is malformed ({'; '.join(result.errors)}); the turn is recorded as "
                        f"step {result.step_index}: {result.output.text[:200]!r}", status=422,
                        kind="InvalidToolCallError")


def stream_record(session: GatewaySession, result: TurnResult) -> dict[str, Any]:
    """The ``agent_gym`` field of a stream's last event: the recorded step and whether it began a segment."""
    return {"agent_gym": {"session_id": session.id, "step": result.step_index, "new_segment": result.new_segment,
                          "history_rewritten": result.history_rewritten}}


def _headers(session: GatewaySession, result: TurnResult) -> dict[str, str]:
    return {
        "x-agent-gym-session": session.id,
        "x-agent-gym-step": str(result.step_index),
        "x-agent-gym-new-segment": "true" if result.new_segment else "false",
    }


def _stream_headers(session: GatewaySession) -> dict[str, str]:
    return {"x-agent-gym-session": session.id, "x-agent-gym-step": str(len(session.steps))}


async def _events(events: Iterator[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


async def _relay(turn: TurnStream, first: tuple[Any, ...], encoder: StreamEncoder,
                 end: Callable[[TurnResult], list[bytes]]) -> AsyncIterator[bytes]:
    """The events of a streamed turn as its pieces arrive (the turn is recorded even if the client leaves)."""
    item = first
    try:
        yield b"".join(encoder.start())
        while True:
            if item[0] == "pieces":
                data = encoder.pieces(item[1])
                if data:
                    yield b"".join(data)
            elif item[0] == "error":
                yield b"".join(encoder.error(str(item[1])))
                return
            else:
                yield b"".join(end(item[1]))
                return
            item = await turn.queue.get()
    finally:
        if item[0] == "pieces":
            turn.client_gone = True  # the turn task completes and records the turn anyway


def _routes(serve: Callable[[Request, str | None], Awaitable[Response]]) -> tuple[Callable[..., Any], ...]:
    """The handlers of one route under each of :data:`PREFIXES` (without and with the path's session id)."""

    async def plain(request: Request) -> Response:
        return await serve(request, None)

    async def scoped(session_id: str, request: Request) -> Response:
        return await serve(request, session_id)

    return plain, scoped


def create_gateway_app(policy: Any, store: SessionStore, *, model: str | None = None,
                       trainer_token: str | None = None, limits: RequestLimits | None = None) -> FastAPI:
    """Build the gateway app.

    Args:
        policy: A token-mode :class:`~agent_gym.policy.VLLMPolicy` (anything with ``aact``,
            ``close_session`` and ``aclose``; ``client.server_info`` for ``/v1/models``).
        store: The sessions.
        model: Model name reported to clients (default: the upstream's).
        trainer_token: The trainer's token (a random one by default: ``app.state.trainer_token``).
        limits: The request limits (default :class:`~agent_gym.serving.limits.RequestLimits`).
    """
    limits = limits or RequestLimits()
    access = AccessRules(store, trainer_token)
    off_loop = OffLoopPolicy(policy)
    names: dict[str, Any] = {"model": model or getattr(policy, "model", None), "max_model_len": None}
    tokenizer = getattr(policy, "tokenizer", None)
    end_markers = sorted(
        {tokenizer.decode([i], skip_special_tokens=False) for i in getattr(policy, "_stop_ids", ())}
        if tokenizer is not None else set()
    )
    streams = hasattr(policy, "astream")
    memory = ResponseMemory()
    store.finish_hooks.append(memory.forget)
    dialects: tuple[Dialect, ...] = (_OPENAI, _ANTHROPIC, Responses(memory))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # the first trajectory built imports its tensor library (seconds): do it now, off the loop, not
        # while serving a trainer's request
        await run_blocking(lambda: GatewaySession("warm-up", parser=store.parser).trajectory())
        yield
        await off_loop.aclose()
        with contextlib.suppress(Exception):
            await policy.aclose()

    app = FastAPI(title="agent_gym gateway", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.trainer_token = access.trainer_token
    app.state.limits = limits
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, error=gateway_error)

    async def upstream_info() -> dict[str, Any]:
        if names["model"] is None or names["max_model_len"] is None:
            client = getattr(policy, "client", None)
            if client is not None:
                for server in client.server_addresses:
                    info = await client.server_info(server)
                    if info:
                        names["model"] = names["model"] or info.get("model")
                        names["max_model_len"] = info.get("max_model_len")
                        break
        return names

    find_session = access.find_session

    async def read_request(request: Request, dialect: Dialect) -> tuple[dict[str, Any], TurnRequest | None, Any]:
        """``(body, its parse, policy for the turn)``: a large body is parsed off the loop.

        A stateful dialect's body is parsed once its session is known (the parse is then None).
        """
        raw = await request.body()
        large = len(raw) > limits.offload_bytes

        def parse() -> tuple[dict[str, Any], TurnRequest | None]:
            body = _decode(raw)
            if not isinstance(body, dict):
                raise RequestError(f"expected a JSON object, got {type(body).__name__}")
            _check_counts(body, limits)
            return body, None if dialect.stateful else dialect.parse_request(body, None)

        body, parsed = await run_blocking(parse) if large else parse()
        return body, parsed, off_loop if large else policy

    async def start_stream(session: GatewaySession, request: TurnRequest, api: str,
                           turn_policy: Any) -> tuple[TurnStream, tuple[Any, ...]]:
        splitter = StreamSplitter(session.parser, end_markers)
        turn = session.stream_turn(turn_policy, request.messages, request.tools, api=api, splitter=splitter)
        first = await turn.queue.get()
        if first[0] == "error":
            raise first[1]
        return turn, first

    # ------------------------------------------------------------------ model endpoints
    async def model_turn(dialect: Dialect, request: Request, path_id: str | None) -> Response:
        """Serve one turn in ``dialect``: parse, sample and record, then answer, replay or stream it."""
        try:
            body, parsed, turn_policy = await read_request(request, dialect)
            session = find_session(request, path_id) if parsed is None else None
            if parsed is None:  # a stateful dialect: parsed within its session
                assert session is not None
                parsed = (await run_blocking(dialect.parse_request, body, session.id) if turn_policy is off_loop
                          else dialect.parse_request(body, session.id))
            _check_turn(body, parsed, limits)
            session = session or find_session(request, path_id)
            exchange = Exchange(body, parsed, session.id,
                                str(body.get("model") or (await upstream_info())["model"] or "agent_gym"))
            if body.get("stream") and streams:
                turn, first = await start_stream(session, parsed, dialect.api, turn_policy)
                encoder = dialect.encoder(exchange)

                def end(result: TurnResult) -> list[bytes]:
                    if store.strict_tool_calls and result.errors:
                        return encoder.refuse(strict_error(result))
                    return encoder.finish(result, stream_record(session, result))

                return StreamingResponse(_relay(turn, first, encoder, end), media_type="text/event-stream",
                                         headers=_stream_headers(session))
            result = await session.run_turn(turn_policy, parsed.messages, parsed.tools, api=dialect.api,
                                            stream=bool(body.get("stream")))
            if store.strict_tool_calls and result.errors:
                raise strict_error(result)
        except RequestError as exc:
            return _error(dialect, exc)
        if body.get("stream"):  # a policy that cannot stream: the decided turn as events
            events = dialect.replay(exchange, result, stream_record(session, result))
            return StreamingResponse(_events(iter(events)), media_type="text/event-stream",
                                     headers=_headers(session, result))
        return _json(dialect.render_turn(exchange, result), headers=_headers(session, result))

    async def models(request: Request, path_id: str | None) -> Response:
        try:
            access.may_list_models(request, path_id)
        except RequestError as exc:
            return _error(_ANTHROPIC if "anthropic-version" in request.headers else _OPENAI, exc)
        info = await upstream_info()
        entry = {"id": info["model"] or "agent_gym", "object": "model", "created": 0, "owned_by": "agent_gym",
                 "max_model_len": info["max_model_len"]}
        return _json({"object": "list", "data": [entry]})

    served: list[tuple[str, str, Callable[[Request, str | None], Awaitable[Response]]]] = [
        (dialect.path, "POST", functools.partial(model_turn, dialect)) for dialect in dialects]
    served.append(("models", "GET", models))
    for path, method, serve in served:
        for prefix, handler in zip(PREFIXES, _routes(serve), strict=True):
            app.add_api_route(f"{prefix}/{path}", handler, methods=[method])

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

    async def unknown_route(request: Request, path_id: str | None) -> Response:
        rest = str(request.path_params.get("rest", ""))
        anthropic = "anthropic-version" in request.headers or rest.strip("/") == _ANTHROPIC.path
        return _error(_ANTHROPIC if anthropic else _OPENAI, route_error(request.method, request.url.path, rest))

    for prefix, handler in zip(PREFIXES, _routes(unknown_route), strict=True):
        app.add_api_route(f"{prefix}/{{rest:path}}", handler, methods=methods)

    # ------------------------------------------------------------------ sessions
    @app.get("/health")
    async def _health() -> Response:
        return Response(status_code=200)

    @app.post("/sessions")
    async def _create(request: Request) -> Response:
        try:
            access.require_trainer(request)
            raw = await request.body()
            body = orjson.loads(raw) if raw.strip() else {}
            if not isinstance(body, dict):
                raise RequestError(f"expected a JSON object, got {type(body).__name__}")
            session = store.create(body.get("session_id"), task=body.get("task"), group_id=body.get("group_id", ""),
                                   env_id=body.get("env_id", ""), idx=body.get("idx", 0))
        except orjson.JSONDecodeError as exc:
            return _error(_OPENAI, RequestError(f"expected a JSON body ({exc})"))
        except RequestError as exc:
            return _error(_OPENAI, exc)
        base = str(request.base_url).rstrip("/")
        return _json({"session_id": session.id, "api_key": session.api_key or session.id,
                      "base_url": f"{base}/sessions/{session.id}"}, 201)

    @app.get("/sessions")
    async def _list(request: Request) -> Response:
        try:
            access.require_trainer(request)
        except RequestError as exc:
            return _error(_OPENAI, exc)
        return _json({"sessions": store.list()})

    def large(session: GatewaySession) -> bool:
        """Whether building the session's record is heavy enough to leave the loop for (its steps' prompt ids)."""
        return sum(int(step.info.get("num_prompt_tokens") or 0) for step in session.steps) > 16384

    @app.get("/sessions/{session_id}/trajectory")
    async def _trajectory(session_id: str, request: Request) -> Response:
        try:
            access.require_trainer(request)
            session = store.get(session_id)
        except RequestError as exc:
            return _error(_OPENAI, exc)

        def record() -> bytes:
            return orjson.dumps(trajectory_json(session.trajectory()))

        data = await run_blocking(record) if large(session) else record()
        return Response(data, media_type="application/json")

    @app.post("/sessions/{session_id}/reward")
    async def _reward(session_id: str, request: Request) -> Response:
        try:
            access.require_trainer(request)
            session = store.get(session_id)
            body = _decode(await request.body())
            if not isinstance(body, dict) or not ({"reward", "rewards"} & set(body)):
                raise RequestError('expected {"reward": number} and/or {"rewards": [number per step]}')

            def finish() -> Any:
                return store.finish(session, policy, reward=body.get("reward"), rewards=body.get("rewards"),
                                    status=body.get("status"))

            trajectory = await run_blocking(finish) if large(session) else finish()
        except RequestError as exc:
            return _error(_OPENAI, exc)
        return _json({"session_id": session.id, "status": trajectory.status,
                      "trajectory_reward": trajectory.trajectory_reward, "steps": len(trajectory.steps)})

    return app
