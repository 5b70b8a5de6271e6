"""Streaming pieces of a turn as its text arrives: reasoning, content and tool calls.

:class:`StreamSplitter` reads the sampled text delta by delta and cuts it into what a
client sees: ``("reasoning", text)`` inside ``<think>`` blocks, ``("content", text)``
outside any block, and ``("call", name, arguments)`` once a ``<tool_call>`` block has
closed (parsed by the session's tool-call parser). Text that may be the start of a tag (a
partial ``<tool_call>`` at the end of what arrived) or of an end marker (the text of a stop
id, which is not part of the turn) is held back until the next delta decides it. Content is
stripped at both ends, as the unstreamed answer's content is, so a client that joins the
deltas gets the same message text.

:func:`openai_stream_events` and :func:`anthropic_stream_events` turn those pieces into the
server-sent events of each dialect.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from agent_gym.gateway.convert import sse
from agent_gym.types import FinishReason

__all__ = ["AnthropicStream", "OpenAIStream", "StreamSplitter"]

Piece = tuple[Any, ...]


class StreamSplitter:
    """Cut streamed assistant text into reasoning, content and tool calls (see the module docs).

    Args:
        parser: The tool-call parser (``think_tag`` / ``tool_call_tag`` attributes, ``parse``).
        end_markers: Texts that end the turn without being part of it (stop ids' texts).
    """

    def __init__(self, parser: Any, end_markers: Sequence[str] = ()) -> None:
        think = getattr(parser, "think_tag", "think")
        call = getattr(parser, "tool_call_tag", "tool_call")
        self.parser = parser
        self.think_open, self.think_close = f"<{think}>", f"</{think}>"
        self.call_open, self.call_close = f"<{call}>", f"</{call}>"
        self.markers = [m for m in end_markers if m]
        self.mode = "content"
        self.buf = ""
        self.done = ""  # raw text already cut
        self.call_text = ""
        self.calls = 0
        self._started = False
        self._space = ""

    def feed(self, text: str) -> list[Piece]:
        """Add a text delta; return the pieces it completes."""
        self.buf += text
        return self._run(final=False)

    def finish(self, full_text: str) -> list[Piece]:
        """End the turn whose whole text is ``full_text``; return the remaining pieces."""
        self.buf = full_text[len(self.done):] if full_text.startswith(self.done) else ""
        out = self._run(final=True)
        if self.mode == "call":  # an unclosed block: parsed as the unstreamed parse does
            out += self._call_pieces(self.call_open + self.call_text, closed=False)
            self.mode = "content"
        return out

    # ------------------------------------------------------------------ internals
    def _targets(self) -> list[str]:
        if self.mode == "content":
            return [self.think_open, self.call_open]
        return [self.think_close] if self.mode == "think" else [self.call_close]

    def _run(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        while True:
            best: tuple[int, str] | None = None
            for tag in self._targets():
                i = self.buf.find(tag)
                if i >= 0 and (best is None or i < best[0]):
                    best = (i, tag)
            if best is not None:
                i, tag = best
                self._emit(out, self.buf[:i])
                self._consume(i + len(tag))
                if tag == self.think_open:
                    self.mode = "think"
                elif tag == self.call_open:
                    self.mode, self.call_text = "call", ""
                elif tag == self.think_close:
                    self.mode = "content"
                else:
                    out += self._call_pieces(self.call_open + self.call_text + self.call_close, closed=True)
                    self.mode = "content"
                continue
            hold = 0 if final else self._partial(self.buf)
            self._emit(out, self.buf[: len(self.buf) - hold])
            self._consume(len(self.buf) - hold)
            return out

    def _partial(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that may begin a tag or an end marker."""
        hold = 0
        for tag in self._targets() + self.markers:
            for k in range(min(len(tag), len(text)), hold, -1):
                if text.endswith(tag[:k]):
                    hold = k
                    break
        return hold

    def _consume(self, n: int) -> None:
        self.done += self.buf[:n]
        self.buf = self.buf[n:]

    def _emit(self, out: list[Piece], text: str) -> None:
        if not text:
            return
        if self.mode == "call":
            self.call_text += text
        elif self.mode == "think":
            out.append(("reasoning", text))
        else:
            text = self._space + text
            if not self._started:
                text = text.lstrip()
            core = text.rstrip()
            self._space = text[len(core):]
            if core:
                self._started = True
                out.append(("content", core))

    def _call_pieces(self, block: str, *, closed: bool) -> list[Piece]:
        parsed = self.parser.parse(block)
        if parsed.tool_calls:
            self.calls += len(parsed.tool_calls)
            return [("call", c.name, dict(c.arguments)) for c in parsed.tool_calls]
        out: list[Piece] = []
        mode, self.mode = self.mode, "content"
        self._emit(out, block)  # not a well-formed call: the client sees the text, as unstreamed
        self.mode = mode
        return out


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
