"""The gateway's HTTP application (FastAPI): OpenAI and Anthropic dialects over token-in vLLM.

Endpoints (each model endpoint also under ``/sessions/{id}``):

* ``POST /v1/chat/completions`` - OpenAI chat, ``tools`` / ``tool_calls``, ``stream`` (SSE).
* ``POST /v1/messages`` - Anthropic Messages, ``tool_use`` / ``tool_result`` blocks, ``stream``.
* ``POST /v1/responses`` - OpenAI Responses: ``input`` items, ``instructions``, function ``tools``,
  ``previous_response_id``, ``stream`` (see :mod:`agent_gym.gateway.responses`).
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
its text is forwarded as it arrives (:mod:`agent_gym.gateway.splitter`): OpenAI ``content``
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
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from agent_gym.gateway.access import AccessRules, gateway_error
from agent_gym.gateway.convert import (
    RequestError,
    anthropic_events,
    anthropic_message,
    anthropic_request,
    openai_chunks,
    openai_completion,
    openai_request,
)
from agent_gym.gateway.policy_thread import OffLoopPolicy
from agent_gym.gateway.responses import ResponseMemory, ResponsesStream, response_body, responses_request
from agent_gym.gateway.session import GatewaySession, TurnResult, TurnStream
from agent_gym.gateway.store import SessionStore
from agent_gym.gateway.stream import AnthropicStream, OpenAIStream, StreamSplitter
from agent_gym.serving.limits import BodyLimit, RequestLimits
from agent_gym.utils.runtime import run_blocking

__all__ = ["create_gateway_app", "trajectory_json"]


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


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


async def _body(request: Request) -> Any:
    return _decode(await request.body())


#: Routes the gateway serves under ``/v1`` (also under ``/sessions/{id}/v1``): path -> method.
SERVED = {"chat/completions": "POST", "messages": "POST", "responses": "POST", "models": "GET"}


def _check_counts(body: dict[str, Any], limits: RequestLimits) -> None:
    """Refuse lists beyond the limits before converting them (400)."""
    for name, most in (("messages", limits.max_messages), ("input", limits.max_messages), ("tools", limits.max_tools)):
        value = body.get(name)
        if isinstance(value, list) and len(value) > most:
            raise RequestError(f"{name}: expected at most {most} items, got {len(value)}", param=name)


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

    async def read_request(request: Request, convert: Callable[[Any], Any] | None) -> tuple[Any, Any, Any]:
        """``(body, converted, policy for the turn)``: a large body is parsed (and converted) off the loop."""
        raw = await request.body()
        large = len(raw) > limits.offload_bytes

        def parse() -> tuple[Any, Any]:
            body = _decode(raw)
            if isinstance(body, dict):
                _check_counts(body, limits)
            return body, convert(body) if convert is not None else None

        body, converted = await run_blocking(parse) if large else parse()
        return body, converted, off_loop if large else policy

    def headers(session: GatewaySession, result: TurnResult) -> dict[str, str]:
        return {
            "x-agent-gym-session": session.id,
            "x-agent-gym-step": str(result.step_index),
            "x-agent-gym-new-segment": "true" if result.new_segment else "false",
        }

    def errors(anthropic: bool) -> Callable[[RequestError], Response]:
        def answer(exc: RequestError) -> Response:
            return _json(exc.anthropic_body() if anthropic else exc.openai_body(), exc.status)

        return answer

    async def stream(events: Iterator[bytes]) -> AsyncIterator[bytes]:
        for event in events:
            yield event

    def check_turn(body: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        if len(messages) > limits.max_messages:
            raise RequestError(f"messages: expected at most {limits.max_messages} messages, got {len(messages)}",
                               param="messages")
        if len(tools) > limits.max_tools:
            raise RequestError(f"tools: expected at most {limits.max_tools} tools, got {len(tools)}", param="tools")
        n = body.get("n") if isinstance(body, dict) else None
        if n is not None and n != 1:
            raise RequestError(f"n: the gateway samples one turn per request; expected 1, got {n!r:.40}", param="n")

    async def start_stream(session: GatewaySession, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                           api: str, turn_policy: Any) -> tuple[TurnStream, tuple[Any, ...]]:
        splitter = StreamSplitter(session.parser, end_markers)
        turn = session.stream_turn(turn_policy, messages, tools, api=api, splitter=splitter)
        first = await turn.queue.get()
        if first[0] == "error":
            raise first[1]
        return turn, first

    async def relay(turn: TurnStream, first: tuple[Any, ...], encoder: Any, opening: list[bytes],
                    end: Callable[[TurnResult], list[bytes]]) -> AsyncIterator[bytes]:
        item = first
        try:
            yield b"".join(opening)
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

    def stream_headers(session: GatewaySession) -> dict[str, str]:
        return {"x-agent-gym-session": session.id, "x-agent-gym-step": str(len(session.steps))}

    # ------------------------------------------------------------------ model endpoints
    async def chat(request: Request, path_id: str | None) -> Response:
        try:
            body, (messages, tools), turn_policy = await read_request(request, openai_request)
            check_turn(body, messages, tools)
            session = find_session(request, path_id)
            if body.get("stream") and streams:
                turn, first = await start_stream(session, messages, tools, "openai", turn_policy)
                name = str(body.get("model") or (await upstream_info())["model"] or "agent_gym")
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                encoder = OpenAIStream(name)

                def openai_end(result: TurnResult) -> list[bytes]:
                    if store.strict_tool_calls and result.errors:
                        exc = strict_error(result)
                        return encoder.error(str(exc), exc.kind, exc.status)
                    out = result.output
                    counts = _usage(len(out.prompt_token_ids or []), len(out.token_ids or [])) if usage else None
                    return encoder.end(out.finish_reason, counts, stream_record(session, result))

                return StreamingResponse(relay(turn, first, encoder, encoder.start(), openai_end),
                                         media_type="text/event-stream", headers=stream_headers(session))
            result = await session.run_turn(turn_policy, messages, tools, api="openai",
                                            stream=bool(body.get("stream")))
            if store.strict_tool_calls and result.errors:
                raise strict_error(result)
        except RequestError as exc:
            return errors(False)(exc)
        out = result.output
        info = await upstream_info()
        name = str(body.get("model") or info["model"] or "agent_gym")
        prompt_ids, token_ids = out.prompt_token_ids or [], out.token_ids or []
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = openai_chunks(result.turn, model=name, prompt_ids=prompt_ids, token_ids=token_ids,
                                   include_usage=usage)
            return StreamingResponse(stream(events), media_type="text/event-stream", headers=headers(session, result))
        completion = openai_completion(result.turn, model=name, prompt_ids=prompt_ids, token_ids=token_ids,
                                       with_ids=bool(body.get("return_token_ids")))
        return _json(completion, headers=headers(session, result))

    async def messages_api(request: Request, path_id: str | None) -> Response:
        try:
            body, (messages, tools), turn_policy = await read_request(request, anthropic_request)
            check_turn(body, messages, tools)
            session = find_session(request, path_id)
            if body.get("stream") and streams:
                turn, first = await start_stream(session, messages, tools, "anthropic", turn_policy)
                name = str(body.get("model") or (await upstream_info())["model"] or "agent_gym")
                encoder = AnthropicStream(name)

                def anthropic_end(result: TurnResult) -> list[bytes]:
                    if store.strict_tool_calls and result.errors:
                        return encoder.error(str(strict_error(result)), "invalid_request_error")
                    return encoder.end(result.output.finish_reason, len(result.output.token_ids or []),
                                       stream_record(session, result))

                return StreamingResponse(relay(turn, first, encoder, encoder.start(0), anthropic_end),
                                         media_type="text/event-stream", headers=stream_headers(session))
            result = await session.run_turn(turn_policy, messages, tools, api="anthropic",
                                            stream=bool(body.get("stream")))
            if store.strict_tool_calls and result.errors:
                raise strict_error(result)
        except RequestError as exc:
            return errors(True)(exc)
        out = result.output
        info = await upstream_info()
        name = str(body.get("model") or info["model"] or "agent_gym")
        prompt_ids, token_ids = out.prompt_token_ids or [], out.token_ids or []
        if body.get("stream"):
            events = anthropic_events(result.turn, model=name, prompt_ids=prompt_ids, token_ids=token_ids)
            return StreamingResponse(stream(events), media_type="text/event-stream", headers=headers(session, result))
        message = anthropic_message(result.turn, model=name, prompt_ids=prompt_ids, token_ids=token_ids)
        return _json(message, headers=headers(session, result))

    async def responses_api(request: Request, path_id: str | None) -> Response:
        try:
            body, _, turn_policy = await read_request(request, None)
            if not isinstance(body, dict):
                raise RequestError(f"expected a JSON object, got {type(body).__name__}")
            session = find_session(request, path_id)
            previous = body.get("previous_response_id")
            history = memory.get(previous, session.id) if previous else []
            if turn_policy is off_loop:
                messages, tools, conversation = await run_blocking(responses_request, body, history)
            else:
                messages, tools, conversation = responses_request(body, history)
            check_turn(body, messages, tools)
            name = str(body.get("model") or (await upstream_info())["model"] or "agent_gym")
            if body.get("stream") and streams:
                turn, first = await start_stream(session, messages, tools, "responses", turn_policy)
                encoder = ResponsesStream(body, name)

                def responses_end(result: TurnResult) -> list[bytes]:
                    if store.strict_tool_calls and result.errors:
                        return encoder.error(str(strict_error(result)), "invalid_tool_call")
                    out = encoder.end(result.output.finish_reason, len(result.output.prompt_token_ids or []),
                                      len(result.output.token_ids or []), stream_record(session, result))
                    memory.put(encoder.id, session.id, conversation, encoder.turn, previous, len(history))
                    return out

                return StreamingResponse(relay(turn, first, encoder, encoder.start(), responses_end),
                                         media_type="text/event-stream", headers=stream_headers(session))
            result = await session.run_turn(turn_policy, messages, tools, api="responses",
                                            stream=bool(body.get("stream")))
            if store.strict_tool_calls and result.errors:
                raise strict_error(result)
        except RequestError as exc:
            return errors(False)(exc)
        out = result.output
        response_id = f"resp_{uuid.uuid4().hex}"
        memory.put(response_id, session.id, conversation, result.turn, previous, len(history))
        prompt_ids, token_ids = out.prompt_token_ids or [], out.token_ids or []
        if body.get("stream"):  # a policy that cannot stream: the decided turn as events
            replay = ResponsesStream(body, name, response_id)
            pieces: list[tuple[Any, ...]] = [("reasoning", result.turn.thought)] if result.turn.thought else []
            pieces += [("content", result.turn.content)] if result.turn.content else []
            pieces += [("call", c.name, c.arguments) for c in result.turn.calls]
            events = replay.start() + replay.pieces(pieces) + replay.end(
                out.finish_reason, len(prompt_ids), len(token_ids), stream_record(session, result))
            return StreamingResponse(stream(iter(events)), media_type="text/event-stream",
                                     headers=headers(session, result))
        answer = response_body(result.turn, body, response_id=response_id, model=name, prompt_ids=prompt_ids,
                               token_ids=token_ids)
        return _json(answer, headers=headers(session, result))

    async def models(request: Request, path_id: str | None) -> Response:
        try:
            access.may_list_models(request, path_id)
        except RequestError as exc:
            return errors("anthropic-version" in request.headers)(exc)
        info = await upstream_info()
        entry = {"id": info["model"] or "agent_gym", "object": "model", "created": 0, "owned_by": "agent_gym",
                 "max_model_len": info["max_model_len"]}
        return _json({"object": "list", "data": [entry]})

    @app.post("/v1/chat/completions")
    async def _chat(request: Request) -> Response:
        return await chat(request, None)

    @app.post("/sessions/{session_id}/v1/chat/completions")
    async def _chat_session(session_id: str, request: Request) -> Response:
        return await chat(request, session_id)

    @app.post("/v1/messages")
    async def _messages(request: Request) -> Response:
        return await messages_api(request, None)

    @app.post("/sessions/{session_id}/v1/messages")
    async def _messages_session(session_id: str, request: Request) -> Response:
        return await messages_api(request, session_id)

    @app.post("/v1/responses")
    async def _responses(request: Request) -> Response:
        return await responses_api(request, None)

    @app.post("/sessions/{session_id}/v1/responses")
    async def _responses_session(session_id: str, request: Request) -> Response:
        return await responses_api(request, session_id)

    @app.get("/v1/models")
    async def _models(request: Request) -> Response:
        return await models(request, None)

    @app.get("/sessions/{session_id}/v1/models")
    async def _models_session(session_id: str, request: Request) -> Response:
        return await models(request, session_id)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

    def unknown_route(request: Request, rest: str) -> Response:
        anthropic = "anthropic-version" in request.headers or rest.strip("/") == "messages"
        return errors(anthropic)(route_error(request.method, request.url.path, rest))

    @app.api_route("/v1/{rest:path}", methods=methods)
    async def _unknown(rest: str, request: Request) -> Response:
        return unknown_route(request, rest)

    @app.api_route("/sessions/{session_id}/v1/{rest:path}", methods=methods)
    async def _unknown_session(session_id: str, rest: str, request: Request) -> Response:
        return unknown_route(request, rest)

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
            return errors(False)(RequestError(f"expected a JSON body ({exc})"))
        except RequestError as exc:
            return errors(False)(exc)
        base = str(request.base_url).rstrip("/")
        return _json({"session_id": session.id, "api_key": session.api_key or session.id,
                      "base_url": f"{base}/sessions/{session.id}"}, 201)

    @app.get("/sessions")
    async def _list(request: Request) -> Response:
        try:
            access.require_trainer(request)
        except RequestError as exc:
            return errors(False)(exc)
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
            return errors(False)(exc)

        def record() -> bytes:
            return orjson.dumps(trajectory_json(session.trajectory()))

        data = await run_blocking(record) if large(session) else record()
        return Response(data, media_type="application/json")

    @app.post("/sessions/{session_id}/reward")
    async def _reward(session_id: str, request: Request) -> Response:
        try:
            access.require_trainer(request)
            session = store.get(session_id)
            body = await _body(request)
            if not isinstance(body, dict) or not ({"reward", "rewards"} & set(body)):
                raise RequestError('expected {"reward": number} and/or {"rewards": [number per step]}')

            def finish() -> Any:
                return store.finish(session, policy, reward=body.get("reward"), rewards=body.get("rewards"),
                                    status=body.get("status"))

            trajectory = await run_blocking(finish) if large(session) else finish()
        except RequestError as exc:
            return errors(False)(exc)
        return _json({"session_id": session.id, "status": trajectory.status,
                      "trajectory_reward": trajectory.trajectory_reward, "steps": len(trajectory.steps)})

    return app
