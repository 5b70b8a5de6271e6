"""Streaming pieces of a turn as its text arrives: reasoning, content and tool calls, as server-sent events.

:class:`~agent_gym.gateway.splitter.StreamSplitter` (re-exported here) reads the sampled text
delta by delta and cuts it into what a client sees: ``("reasoning", text)``,
``("content", text)`` and ``("call", name, arguments)`` once a call is complete (parsed by
the session's tool-call parser), in the model's own format (hermes ``<tool_call>``,
Mistral's ``[TOOL_CALLS]``, harmony's channels, ...). Text that may be the start of a call
or of an end marker is held back until the next delta decides it.

:class:`OpenAIStream` and :class:`AnthropicStream` turn those pieces into the server-sent
events of each dialect.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from agent_gym.gateway.convert import sse
from agent_gym.gateway.splitter import Piece, StreamSplitter
from agent_gym.types import FinishReason

__all__ = ["AnthropicStream", "OpenAIStream", "StreamSplitter"]


def _openai_finish(finish: str, calls: int) -> str:
    if finish == FinishReason.LENGTH:
        return "length"
    return "tool_calls" if calls else "stop"


class OpenAIStream:
    """``chat.completion.chunk`` events of a streamed turn, built piece by piece."""

    def __init__(self, model: str) -> None:
        self.id, self.created, self.model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model
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
        last = self._chunk({}, _openai_finish(finish, self.calls))
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


class AnthropicStream:
    """Messages API events of a streamed turn, built piece by piece (reasoning is not sent)."""

    def __init__(self, model: str) -> None:
        self.id, self.model = f"msg_{uuid.uuid4().hex}", model
        self.index = 0
        self.text_open = False
        self.calls = 0

    def start(self, input_tokens: int) -> list[bytes]:
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
