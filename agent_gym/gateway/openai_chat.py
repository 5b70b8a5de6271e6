"""The OpenAI chat-completions dialect (``POST /v1/chat/completions``).

Inbound, :func:`openai_request` splits a body into the gateway's messages (``developer`` read as
``system``; an assistant message's ``tool_calls`` as ``calls``) and its function tools.
Outbound, :func:`openai_completion` builds a ``chat.completion`` (``reasoning_content``,
``tool_calls``, vLLM's ``prompt_token_ids`` / ``token_ids`` when ``return_token_ids``),
:func:`openai_chunks` the ``chat.completion.chunk`` events of a decided turn and
:class:`OpenAIStream` those of a turn streamed as it is sampled. :class:`OpenAIChat` is the
:class:`~agent_gym.gateway.dialect.Dialect`; errors are vLLM's (OpenAI's) error bodies.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from agent_gym.errors import RequestError
from agent_gym.gateway.convert import ClientTurn, content_text, expect_list
from agent_gym.gateway.dialect import Exchange, TurnRequest, sse, text_pieces
from agent_gym.types import FinishReason

if TYPE_CHECKING:
    from agent_gym.gateway.session import TurnResult
    from agent_gym.gateway.stream import Piece

__all__ = ["OpenAIChat", "OpenAIStream", "openai_chunks", "openai_completion", "openai_request", "usage"]


def usage(prompt: int, completion: int) -> dict[str, int]:
    """The ``usage`` object of chat completions."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _finish_reason(finish: str, calls: int) -> str:
    if finish == FinishReason.LENGTH:
        return "length"
    return "tool_calls" if calls else "stop"


def _openai_tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError(f"tools: expected a list of function tools, got {type(tools).__name__}", param="tools")
    out = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise RequestError(f"tools[{i}]: expected {{'type': 'function', 'function': {{'name', ...}}}}, "
                               f"got {str(tool)[:80]!r}", param="tools")
        out.append({"type": "function", "function": dict(fn)})
    return out


def openai_request(body: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split a ``/v1/chat/completions`` body into messages and tools.

    Returns:
        ``(messages, tools)``: messages keep ``role``, text ``content`` and, for assistant
        messages, ``calls`` as ``[(name, arguments), ...]`` (resolved later by the session).

    Raises:
        RequestError: The body is malformed.
    """
    if not isinstance(body, Mapping):
        raise RequestError(f"expected a JSON object, got {type(body).__name__}")
    messages = []
    for i, msg in enumerate(expect_list(body.get("messages"), "messages")):
        if not isinstance(msg, Mapping) or msg.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise RequestError(f"messages[{i}]: expected an object with role system/user/assistant/tool, "
                               f"got {str(msg)[:80]!r}", param="messages")
        role = "system" if msg["role"] == "developer" else msg["role"]
        item: dict[str, Any] = {"role": role, "content": content_text(msg.get("content"), f"messages[{i}].content")}
        if role == "assistant":
            calls = []
            for j, call in enumerate(msg.get("tool_calls") or []):
                fn = call.get("function") if isinstance(call, Mapping) else None
                if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                    raise RequestError(f"messages[{i}].tool_calls[{j}]: expected a function call, "
                                       f"got {str(call)[:80]!r}", param="messages")
                calls.append((fn["name"], fn.get("arguments") or "{}"))
            item["calls"] = calls
        messages.append(item)
    return messages, _openai_tools(body.get("tools"))


def openai_completion(
    turn: ClientTurn, *, model: str, prompt_ids: list[int], token_ids: list[int], with_ids: bool
) -> dict[str, Any]:
    """A ``chat.completion`` body (vLLM's ``prompt_token_ids`` / ``token_ids`` when ``with_ids``)."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content if turn.content or not turn.calls else None}
    if turn.thought:
        message["reasoning_content"] = turn.thought
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
            for c in turn.calls
        ]
    finish = _finish_reason(turn.finish, len(turn.calls))
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(len(prompt_ids), len(token_ids)),
    }
    if with_ids:
        body["prompt_token_ids"] = list(prompt_ids)
        choice["token_ids"] = list(token_ids)
    return body


def openai_chunks(
    turn: ClientTurn, *, model: str, prompt_ids: list[int], token_ids: list[int], include_usage: bool
) -> Iterator[bytes]:
    """The ``chat.completion.chunk`` events of a turn, ending with ``[DONE]``."""
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in text_pieces(turn.thought):
        yield chunk({"reasoning_content": piece})
    for piece in text_pieces(turn.content):
        yield chunk({"content": piece})
    for i, call in enumerate(turn.calls):
        yield chunk({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": call.arguments_json}}]})
    yield chunk({}, _finish_reason(turn.finish, len(turn.calls)))
    if include_usage:
        yield sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": usage(len(prompt_ids), len(token_ids))})
    yield sse("[DONE]")


class OpenAIStream:
    """``chat.completion.chunk`` events of a streamed turn, built piece by piece.

    Args:
        model: The model name the chunks report.
        include_usage: End with a usage chunk (``stream_options.include_usage``).
    """

    def __init__(self, model: str, include_usage: bool = False) -> None:
        self.id, self.created, self.model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model
        self.include_usage = include_usage
        self.calls = 0

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    def start(self) -> list[bytes]:
        """The first chunk (the assistant role)."""
        return [self._chunk({"role": "assistant", "content": ""})]

    def pieces(self, pieces: list[Piece]) -> list[bytes]:
        """Chunks of reasoning, content and tool-call pieces."""
        out = []
        for piece in pieces:
            if piece[0] == "reasoning":
                out.append(self._chunk({"reasoning_content": piece[1]}))
            elif piece[0] == "content":
                out.append(self._chunk({"content": piece[1]}))
            else:
                call = {"index": self.calls, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                        "function": {"name": piece[1], "arguments": json.dumps(piece[2], ensure_ascii=False)}}
                self.calls += 1
                out.append(self._chunk({"tool_calls": [call]}))
        return out

    def end(self, finish: str, usage: dict[str, int] | None, extra: dict[str, Any] | None = None) -> list[bytes]:
        """The finish chunk (with ``extra``'s fields), the usage chunk when asked, and ``[DONE]``."""
        last = self._chunk({}, _finish_reason(finish, self.calls))
        if extra:
            data = json.loads(last[len(b"data: "):])
            data.update(extra)
            last = sse(data)
        out = [last]
        if usage is not None:
            out.append(sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                            "model": self.model, "choices": [], "usage": usage}))
        out.append(sse("[DONE]"))
        return out

    def error(self, message: str, kind: str = "BadGatewayError", code: int = 502) -> list[bytes]:
        """An error event (the stream broke after it started, or the turn is refused), then ``[DONE]``."""
        return [self._chunk({}, "error"),
                sse({"error": {"message": message, "type": kind, "param": None, "code": code}}),
                sse("[DONE]")]

    def refuse(self, exc: RequestError) -> list[bytes]:
        """The error event of a refused turn (its kind and status), then ``[DONE]``."""
        return self.error(str(exc), exc.kind, exc.status)

    def finish(self, result: TurnResult, record: dict[str, Any]) -> list[bytes]:
        """:meth:`end` of a decided turn (its usage when asked)."""
        out = result.output
        counts = usage(len(out.prompt_token_ids or []), len(out.token_ids or [])) if self.include_usage else None
        return self.end(out.finish_reason, counts, record)


class OpenAIChat:
    """The chat-completions :class:`~agent_gym.gateway.dialect.Dialect`."""

    api = "openai"
    path = "chat/completions"
    stateful = False

    def parse_request(self, body: Mapping[str, Any], session_id: str | None) -> TurnRequest:
        """:func:`openai_request` of the body."""
        return TurnRequest(*openai_request(body))

    def render_turn(self, exchange: Exchange, result: TurnResult) -> dict[str, Any]:
        """A ``chat.completion`` (with the token ids when the body asks ``return_token_ids``)."""
        out = result.output
        return openai_completion(result.turn, model=exchange.model, prompt_ids=out.prompt_token_ids or [],
                                 token_ids=out.token_ids or [], with_ids=bool(exchange.body.get("return_token_ids")))

    def replay(self, exchange: Exchange, result: TurnResult, record: dict[str, Any]) -> list[bytes]:
        """:func:`openai_chunks` of the decided turn."""
        out = result.output
        return list(openai_chunks(result.turn, model=exchange.model, prompt_ids=out.prompt_token_ids or [],
                                  token_ids=out.token_ids or [], include_usage=_include_usage(exchange.body)))

    def encoder(self, exchange: Exchange) -> OpenAIStream:
        """An :class:`OpenAIStream`."""
        return OpenAIStream(exchange.model, _include_usage(exchange.body))

    def render_error(self, exc: RequestError) -> dict[str, Any]:
        """VLLM's (OpenAI's) error body."""
        return exc.openai_body()


def _include_usage(body: Mapping[str, Any]) -> bool:
    return bool((body.get("stream_options") or {}).get("include_usage"))
