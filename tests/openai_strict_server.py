"""A strict OpenAI Chat Completions endpoint for the tests: it checks each request as a hosted API does.

:class:`StrictOpenAIServer` is a real HTTP server (``/v1/chat/completions``) that checks each request
body against the ``openai`` package's own request types (``CompletionCreateParamsNonStreaming`` and the
TypedDicts under it): a field those types do not name, at any depth, is refused with HTTP 400, as are
values of the wrong type (pydantic validation of the same types), a ``tool`` message whose
``tool_call_id`` answers no call of the assistant message before it, and an assistant message whose
calls are not all answered before the next message. A request that passes goes on to a real model
server behind it (the reference server), whose answer comes back reduced to the fields of the API's
``ChatCompletion`` (no token ids, no vLLM extras). It counts what it saw for the tests to check.
"""

from __future__ import annotations

import json
import threading
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import typing_extensions
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam, ChatCompletionToolUnionParam
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter, ValidationError

__all__ = ["StrictOpenAIServer", "request_problems"]

_ADAPTER: TypeAdapter[Any] = TypeAdapter(CompletionCreateParamsNonStreaming)
_MESSAGE: TypeAdapter[Any] = TypeAdapter(ChatCompletionMessageParam)
_TOOL: TypeAdapter[Any] = TypeAdapter(ChatCompletionToolUnionParam)
_WRAPPERS = {typing_extensions.Required, typing_extensions.NotRequired, typing_extensions.Annotated,
             typing.Required, typing.NotRequired, typing.Annotated}


def request_problems(body: Any) -> list[str]:
    """Why a hosted API would refuse ``body`` (empty when it is a valid Chat Completions request)."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = _unknown_fields(body, CompletionCreateParamsNonStreaming, "body")
    # pydantic checks an Iterable lazily: the messages and tools are checked one by one
    checks = [(_ADAPTER, {k: v for k, v in body.items() if k not in ("messages", "tools")} | {"messages": []})]
    checks += [(_MESSAGE, message) for message in body.get("messages") or []]
    checks += [(_TOOL, tool) for tool in body.get("tools") or []]
    for adapter, value in checks:
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            problems.append(f"invalid values: {exc}"[:800])
    problems.extend(_tool_pairing(body.get("messages")))
    return problems


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) in _WRAPPERS:
        tp = typing.get_args(tp)[0]
    return tp


def _unknown_fields(value: Any, tp: Any, where: str) -> list[str]:
    """Fields of ``value`` that the type ``tp`` does not name (and values not of its shape), at any depth."""
    tp = _unwrap(tp)
    origin = typing.get_origin(tp)
    if typing_extensions.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        hints = typing_extensions.get_type_hints(tp, include_extras=True)
        problems = [f"{where}.{key}: unknown field" for key in value if key not in hints]
        problems += [f"{where}.{key}: required field missing" for key, hint in hints.items()
                     if typing.get_origin(hint) in (typing_extensions.Required, typing.Required) and key not in value]
        for key, item in value.items():
            if key in hints:
                problems += _unknown_fields(item, hints[key], f"{where}.{key}")
        return problems
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", typing.Union)):
        best: list[str] | None = None
        for alternative in typing.get_args(tp):
            found = _unknown_fields(value, alternative, where)
            if not found:
                return []
            best = found if best is None or len(found) < len(best) else best
        return best or []
    if origin is typing.Literal or origin is typing_extensions.Literal:
        allowed = typing.get_args(tp)
        return [] if value in allowed else [f"{where}: expected one of {allowed}, got {value!r}"]
    if tp is type(None):
        return [] if value is None else [f"{where}: expected null"]
    if tp in (str, int, float, bool):
        ok = isinstance(value, tp) and not (tp in (int, float) and isinstance(value, bool))
        ok = ok or (tp is float and isinstance(value, int) and not isinstance(value, bool))
        return [] if ok else [f"{where}: expected {tp.__name__}, got {type(value).__name__}"]
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        args = typing.get_args(tp)
        if not isinstance(value, dict):
            return [f"{where}: expected an object"]
        return [p for key, item in value.items() for p in _unknown_fields(item, args[1] if args else Any,
                                                                          f"{where}.{key}")]
    if origin is not None and isinstance(origin, type) and issubclass(origin, Iterable):
        if not isinstance(value, list):
            return [f"{where}: expected an array, got {type(value).__name__}"]
        item_type = (typing.get_args(tp) or (Any,))[0]
        return [p for i, item in enumerate(value) for p in _unknown_fields(item, item_type, f"{where}[{i}]")]
    return []


def _tool_pairing(messages: Any) -> list[str]:
    """Tool results that answer no call, and calls left unanswered (a hosted API refuses both)."""
    problems: list[str] = []
    pending: list[str] = []
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                problems.append(f"messages[{i}]: tool message with tool_call_id {call_id!r} answers no call of "
                                "the assistant message before it")
            else:
                pending.remove(call_id)
            continue
        if pending:
            problems.append(f"messages[{i}]: the assistant's tool calls {pending} have no tool message")
        pending = [call.get("id") for call in message.get("tool_calls") or [] if isinstance(call, dict)] \
            if role == "assistant" else []
    if pending:
        problems.append(f"the last assistant message's tool calls {pending} have no tool message")
    return problems


@dataclass
class Seen:
    """What the server saw: requests, refusals (with the reasons), tool turns and call ids."""

    requests: int = 0
    refused: list[list[str]] = field(default_factory=list)
    tool_results: int = 0
    structured_turns: int = 0
    issued_ids: set[str] = field(default_factory=set)
    replayed_ids: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)


class StrictOpenAIServer:
    """A strict Chat Completions endpoint in front of ``backend`` (``host:port`` of a chat server).

    Args:
        backend: The model server that answers valid requests.
        api_key: The bearer key every request must carry (None: no key).

    Use as a context manager; ``base_url`` is ``http://127.0.0.1:PORT/v1``.
    """

    def __init__(self, backend: str, api_key: str | None = None) -> None:
        self.backend, self.api_key = backend, api_key
        self.seen = Seen()
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=600.0)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> StrictOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                return

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 - the base class's name
                if self.path != "/v1/chat/completions":
                    self._reply(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                    return
                if owner.api_key is not None and self.headers.get("Authorization") != f"Bearer {owner.api_key}":
                    self._reply(401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}})
                    return
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                status, payload = owner._answer(body)
                self._reply(status, payload)

        return Handler

    def _answer(self, body: Any) -> tuple[int, dict[str, Any]]:
        problems = request_problems(body)
        with self._lock:
            self.seen.requests += 1
            if problems:
                self.seen.refused.append(problems)
            else:
                self.seen.bodies.append(body)
                for message in body["messages"]:
                    if message.get("role") == "tool":
                        self.seen.tool_results += 1
                    if message.get("role") == "assistant" and message.get("tool_calls"):
                        self.seen.structured_turns += 1
                        self.seen.replayed_ids += [call["id"] for call in message["tool_calls"]]
        if problems:
            return 400, {"error": {"message": "; ".join(problems), "type": "invalid_request_error", "param": None,
                                   "code": None}}
        reply = self._http.post(f"http://{self.backend}/v1/chat/completions", json=body)
        if reply.status_code != 200:
            return reply.status_code, reply.json()
        return 200, self._openai_only(reply.json())

    def _openai_only(self, data: dict[str, Any]) -> dict[str, Any]:
        """The backend's answer with the ``ChatCompletion`` fields only (no token ids, no vLLM extras)."""
        choices = []
        for choice in data["choices"]:
            message = choice["message"]
            calls = [{"id": call["id"], "type": "function",
                      "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}}
                     for call in message.get("tool_calls") or []]
            with self._lock:
                self.seen.issued_ids.update(call["id"] for call in calls)
            finish = "tool_calls" if calls else choice["finish_reason"]
            choices.append({"index": choice["index"], "finish_reason": finish,
                            "logprobs": None, "message": {"role": "assistant", "content": message.get("content"),
                                                          "refusal": None, **({"tool_calls": calls} if calls else {})}})
        out = {"id": data["id"], "object": "chat.completion", "created": data["created"], "model": data["model"],
               "choices": choices, "usage": {key: data["usage"][key] for key in
                                             ("prompt_tokens", "completion_tokens", "total_tokens")}}
        ChatCompletion.model_validate(out)
        return out
