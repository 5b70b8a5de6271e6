"""The Anthropic Messages dialect (``POST /v1/messages``).

Inbound, :func:`anthropic_request` reads ``system``, ``text`` blocks, an assistant's
``tool_use`` blocks (as ``calls``) and a user's ``tool_result`` blocks (as ``tool`` messages);
``thinking`` blocks are the model's own text and dropped; :func:`anthropic_tools` turns tool
definitions into function schemas. Outbound, :func:`anthropic_message` builds a ``message``
(``text`` and ``tool_use`` blocks), :func:`anthropic_events` the events of a decided turn and
:class:`AnthropicStream` those of a turn streamed as it is sampled (reasoning is not sent).
:class:`AnthropicMessages` is the :class:`~agent_gym.gateway.dialect.Dialect`.
"""

from __future__ import annotations

import json
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

__all__ = [
    "AnthropicMessages",
    "AnthropicStream",
    "anthropic_events",
    "anthropic_message",
    "anthropic_request",
    "anthropic_tools",
]


def anthropic_tools(tools: Any) -> list[dict[str, Any]]:
    """Anthropic tool definitions as OpenAI function schemas (what chat templates render)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError(f"tools: expected a list of tools, got {type(tools).__name__}", param="tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise RequestError(f"tools[{i}]: expected {{'name', 'input_schema', ...}}, got {str(tool)[:80]!r}",
                               param="tools")
        fn: dict[str, Any] = {"name": tool["name"]}
        if tool.get("description"):
            fn["description"] = tool["description"]
        fn["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": fn})
    return out


def anthropic_request(body: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split a ``/v1/messages`` body into messages and tools (see :func:`openai_request`)."""
    if not isinstance(body, Mapping):
        raise RequestError(f"expected a JSON object, got {type(body).__name__}")
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": content_text(system, "system")})
    for i, msg in enumerate(expect_list(body.get("messages"), "messages")):
        if not isinstance(msg, Mapping) or msg.get("role") not in ("user", "assistant"):
            raise RequestError(f"messages[{i}]: expected an object with role user/assistant, got {str(msg)[:80]!r}",
                               param="messages")
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise RequestError(f"messages[{i}].content: expected a string or a list of blocks", param="messages")
        texts: list[str] = []
        calls: list[tuple[str, Any]] = []
        for j, block in enumerate(blocks):
            kind = block.get("type") if isinstance(block, Mapping) else None
            where = f"messages[{i}].content[{j}]"
            if kind == "text":
                texts.append(str(block.get("text") or ""))
            elif kind == "tool_result" and msg["role"] == "user":
                messages.append({"role": "tool", "content": content_text(block.get("content"), where)})
            elif kind == "tool_use" and msg["role"] == "assistant":
                calls.append((str(block.get("name")), block.get("input") or {}))
            elif kind in ("thinking", "redacted_thinking") and msg["role"] == "assistant":
                continue
            else:
                raise RequestError(f"{where}: unsupported block {str(block)[:80]!r}", param="messages")
        if msg["role"] == "assistant":
            messages.append({"role": "assistant", "content": "\n".join(texts), "calls": calls})
        elif texts:
            messages.append({"role": "user", "content": "\n".join(texts)})
    return messages, anthropic_tools(body.get("tools"))


def _anthropic_stop(turn: ClientTurn) -> str:
    if turn.finish == FinishReason.LENGTH:
        return "max_tokens"
    return "tool_use" if turn.calls else "end_turn"


def _anthropic_blocks(turn: ClientTurn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.content or not turn.calls:
        blocks.append({"type": "text", "text": turn.content})
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in turn.calls]
    return blocks


def anthropic_message(turn: ClientTurn, *, model: str, prompt_ids: list[int], token_ids: list[int]) -> dict[str, Any]:
    """A ``message`` body of the Messages API."""
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(turn),
        "stop_reason": _anthropic_stop(turn),
        "stop_sequence": None,
        "usage": {"input_tokens": len(prompt_ids), "output_tokens": len(token_ids)},
    }


def anthropic_events(turn: ClientTurn, *, model: str, prompt_ids: list[int], token_ids: list[int]) -> Iterator[bytes]:
    """The server-sent events of a streamed Messages API answer."""
    start = anthropic_message(turn, model=model, prompt_ids=prompt_ids, token_ids=token_ids)
    start.update(content=[], stop_reason=None)
    start["usage"] = {"input_tokens": len(prompt_ids), "output_tokens": 0}
    yield sse({"type": "message_start", "message": start}, "message_start")
    for index, block in enumerate(_anthropic_blocks(turn)):
        first: dict[str, Any]
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in text_pieces(block["text"])]
        else:
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}]
        yield sse({"type": "content_block_start", "index": index, "content_block": first}, "content_block_start")
        for delta in deltas:
            yield sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    yield sse({"type": "message_delta", "delta": {"stop_reason": _anthropic_stop(turn), "stop_sequence": None},
               "usage": {"output_tokens": len(token_ids)}}, "message_delta")
    yield sse({"type": "message_stop"}, "message_stop")
class AnthropicStream:
    """Messages API events of a streamed turn, built piece by piece (reasoning is not sent)."""

    def __init__(self, model: str) -> None:
        self.id, self.model = f"msg_{uuid.uuid4().hex}", model
        self.index = 0
        self.text_open = False
        self.calls = 0

    def start(self, input_tokens: int = 0) -> list[bytes]:
        """``message_start``."""
        message: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        }
        return [sse({"type": "message_start", "message": message}, "message_start")]

    def _close_text(self) -> list[bytes]:
        if not self.text_open:
            return []
        self.text_open = False
        self.index += 1
        return [sse({"type": "content_block_stop", "index": self.index - 1}, "content_block_stop")]

    def _open_text(self) -> list[bytes]:
        if self.text_open:
            return []
        self.text_open = True
        return [sse({"type": "content_block_start", "index": self.index,
                     "content_block": {"type": "text", "text": ""}}, "content_block_start")]

    def pieces(self, pieces: list[Piece]) -> list[bytes]:
        """Events of content and tool-call pieces."""
        out: list[bytes] = []
        for piece in pieces:
            if piece[0] == "content":
                out += self._open_text()
                out.append(sse({"type": "content_block_delta", "index": self.index,
                                "delta": {"type": "text_delta", "text": piece[1]}}, "content_block_delta"))
            elif piece[0] == "call":
                out += self._close_text()
                block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": piece[1], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(piece[2], ensure_ascii=False)}
                out += [sse({"type": "content_block_start", "index": self.index, "content_block": block},
                            "content_block_start"),
                        sse({"type": "content_block_delta", "index": self.index, "delta": delta},
                            "content_block_delta"),
                        sse({"type": "content_block_stop", "index": self.index}, "content_block_stop")]
                self.index += 1
                self.calls += 1
        return out

    def end(self, finish: str, output_tokens: int, extra: dict[str, Any] | None = None) -> list[bytes]:
        """Close the open block, then ``message_delta`` (with ``extra``'s fields) and ``message_stop``."""
        out: list[bytes] = []
        if self.index == 0 and not self.text_open:  # an empty answer still has a text block
            out += self._open_text()
        out += self._close_text()
        stop = "max_tokens" if finish == FinishReason.LENGTH else ("tool_use" if self.calls else "end_turn")
        out.append(sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": output_tokens}, **(extra or {})}, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return out

    def error(self, message: str, kind: str = "api_error") -> list[bytes]:
        """An ``error`` event (the stream broke after it started, or the turn is refused)."""
        return [sse({"type": "error", "error": {"type": kind, "message": message}}, "error")]

    def refuse(self, exc: RequestError) -> list[bytes]:
        """An ``invalid_request_error`` event (a refused turn)."""
        return self.error(str(exc), "invalid_request_error")

    def finish(self, result: TurnResult, record: dict[str, Any]) -> list[bytes]:
        """:meth:`end` of a decided turn."""
        return self.end(result.output.finish_reason, len(result.output.token_ids or []), record)


class AnthropicMessages:
    """The Messages API :class:`~agent_gym.gateway.dialect.Dialect`."""

    api = "anthropic"
    path = "messages"
    stateful = False

    def parse_request(self, body: Mapping[str, Any], session_id: str | None) -> TurnRequest:
        """:func:`anthropic_request` of the body."""
        return TurnRequest(*anthropic_request(body))

    def render_turn(self, exchange: Exchange, result: TurnResult) -> dict[str, Any]:
        """A ``message``."""
        out = result.output
        return anthropic_message(result.turn, model=exchange.model, prompt_ids=out.prompt_token_ids or [],
                                 token_ids=out.token_ids or [])

    def replay(self, exchange: Exchange, result: TurnResult, record: dict[str, Any]) -> list[bytes]:
        """:func:`anthropic_events` of the decided turn."""
        out = result.output
        return list(anthropic_events(result.turn, model=exchange.model, prompt_ids=out.prompt_token_ids or [],
                                     token_ids=out.token_ids or []))

    def encoder(self, exchange: Exchange) -> AnthropicStream:
        """An :class:`AnthropicStream`."""
        return AnthropicStream(exchange.model)

    def render_error(self, exc: RequestError) -> dict[str, Any]:
        """Anthropic's error body."""
        return exc.anthropic_body()
