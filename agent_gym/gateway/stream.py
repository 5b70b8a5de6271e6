"""Cut a streamed assistant turn into reasoning, content and tool calls, in the model's own format.

The pieces are the same for every dialect; each dialect's
:class:`~agent_gym.gateway.dialect.StreamEncoder` turns them into its server-sent events.

:class:`StreamSplitter` reads the sampled text delta by delta and returns pieces:
``("reasoning", text)``, ``("content", text)`` and ``("call", name, arguments)``. Where calls
and reasoning begin and end is the parser's format (:func:`agent_gym.parsers.streaming.stream_format`):

* Region formats (hermes, ``qwen3_coder``, ``deepseek_v3``, ``mistral``, ``llama3_json``,
  ``pythonic``): text inside a reasoning region streams as reasoning; from a call region's
  opening marker on, text is held until the region closes (or, for formats whose calls run to
  the end of the message, until the turn ends) and then parsed with the session's parser:
  its calls come out as ``call`` pieces, what it leaves (a region that held no call) as content.
* Harmony (``openai``): each message's header (``<|start|>``, role, ``to=``, ``<|channel|>``)
  is held until ``<|message|>``; an ``analysis`` body streams as reasoning, a ``final`` or
  plain ``commentary`` body as content, and a message to ``functions.NAME`` is held to its
  end (``<|call|>``, ``<|end|>``, ...) and parsed as a call. A turn that starts without a
  header is content.

Text that may be the start of a marker (a partial ``<tool_call>``, ``[TOOL_C``, ``<|chan``
at the end of what arrived) or of an end marker (the text of a stop id, which is not part of
the turn) is held back until the next delta decides it, so no part of a call reaches the
content. Content is stripped at both ends, as the unstreamed answer's content is, so a client
that joins the deltas gets the same message text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_gym.parsers.harmony import CALL, CHANNEL, END, MESSAGE, RETURN, START, split_harmony
from agent_gym.parsers.protocol import ToolCallParser
from agent_gym.parsers.streaming import client_content, stream_format

__all__ = ["Piece", "StreamSplitter"]

Piece = tuple[Any, ...]

_BODY_ENDS = (END, CALL, RETURN)
_HEADER_STARTS = (START, CHANNEL, "to=")
_HARMONY_TARGETS = (START, CHANNEL, *_BODY_ENDS)


class StreamSplitter:
    """Cut streamed assistant text into reasoning, content and tool calls (see the module docs).

    Args:
        parser: The session's tool-call parser (its format decides the markers; ``parse``
            reads each call region).
        end_markers: Texts that end the turn without being part of it (stop ids' texts).
    """

    def __init__(self, parser: ToolCallParser, end_markers: Sequence[str] = ()) -> None:
        self.parser = parser
        self.format = stream_format(parser)
        self.markers = [m for m in end_markers if m]
        self.mode = "start" if self.format.harmony else "content"
        self.close: str | None = None  # the marker that ends the current reasoning or call region
        self.buf = ""
        self.done = ""  # raw text already cut
        self.call_text = ""  # a call region's (or harmony message body's) text so far
        self.header = ""  # the current harmony message's header
        self.harmony_calls = self.format.harmony_calls  # calls are harmony messages
        self._regions = dict(self.format.calls + self.format.leading_calls)
        self._leading = {o for o, _ in self.format.leading_calls}
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
        if self.mode == "call":  # an open region or message: parsed as the unstreamed parse does
            out += self._call_pieces(self.header + self.call_text)
        elif self.mode == "held":
            out += self._call_pieces(self.call_text)
        elif self.mode == "header" and self.header.strip():  # text that never got its <|message|>
            out += self._call_pieces(self.header)
        self.mode = "content"
        return out

    # ------------------------------------------------------------------ region formats
    def _targets(self) -> list[str]:
        if self.mode == "content":
            leading = [] if self._started else [o for o, _ in self.format.leading_calls]
            return [o for o, _ in self.format.reasoning] + [o for o, _ in self.format.calls] + leading
        return [self.close] if self.close is not None else []

    def _run(self, final: bool) -> list[Piece]:
        if self.format.harmony:
            return self._run_harmony(final)
        out: list[Piece] = []
        while True:
            best: tuple[int, int, str] | None = None
            for tag in self._targets():
                i = self.buf.find(tag)
                if i > 0 and tag in self._leading and self.buf[:i].strip(" \t\r\n;"):
                    continue  # not at the start of the message
                if i >= 0 and (best is None or (i, -len(tag)) < (best[0], best[1])):
                    best = (i, -len(tag), tag)
            if best is None:
                hold = 0 if final else self._partial(self.buf, self._targets())
                self._emit(out, self.buf[: len(self.buf) - hold])
                self._consume(len(self.buf) - hold)
                return out
            i, _, tag = best
            self._emit(out, self.buf[:i])
            self._consume(i + len(tag))
            if self.mode == "content":
                reasoning = dict(self.format.reasoning)
                if tag in reasoning:
                    self.mode, self.close = "think", reasoning[tag]
                else:
                    self.mode, self.close, self.call_text = "call", self._regions[tag], tag
            elif self.mode == "think":
                self.mode, self.close = "content", None
            else:
                out += self._call_pieces(self.call_text + tag)
                self.mode, self.close = "content", None

    # ------------------------------------------------------------------ harmony
    def _run_harmony(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        while True:
            if self.mode == "start":  # the turn's first text: a header, or plain content
                head = self.buf.lstrip()
                if any(head.startswith(h) for h in _HEADER_STARTS):
                    self.mode, self.header = "header", ""
                elif not final and (not head or any(h.startswith(head) for h in _HEADER_STARTS)):
                    return out  # too short to tell
                else:
                    self.mode = self._body_mode("content")
                continue
            if self.mode == "header":
                i = self.buf.find(MESSAGE)
                if i == -1:  # the header goes on (kept in the buffer: <|message|> may arrive in pieces)
                    if final:
                        self.header += self.buf
                        self._consume(len(self.buf))
                    return out
                self.header += self.buf[: i + len(MESSAGE)]
                self._consume(i + len(MESSAGE))
                messages, _ = split_harmony(self.header)
                message = messages[0] if messages else None
                self.call_text = ""
                if message is not None and message.recipient is not None and message.role == "assistant":
                    self.mode = "call"
                elif message is not None and message.channel == "analysis":
                    self.mode = "think"
                else:
                    self.mode = self._body_mode("content")
                    if self._started:
                        self._space = "\n"  # content messages are joined by a newline, as unstreamed
                continue
            found = [(self.buf.find(t), t) for t in _HARMONY_TARGETS if t in self.buf]
            if not found:
                hold = 0 if final else self._partial(self.buf, list(_HARMONY_TARGETS))
                self._emit(out, self.buf[: len(self.buf) - hold])
                self._consume(len(self.buf) - hold)
                return out
            i, tag = min(found)
            self._emit(out, self.buf[:i])
            ends = tag in _BODY_ENDS  # else the next header begins here: it is not consumed
            if self.mode == "call":  # the whole message, as the parser reads it
                out += self._call_pieces(self.header + self.call_text + (tag if ends else ""))
            elif self.mode == "held":  # a non-harmony call format in the body
                out += self._call_pieces(self.call_text)
            self._consume(i + (len(tag) if ends else 0))
            self.mode, self.header, self.call_text = "header", "", ""

    def _body_mode(self, mode: str) -> str:
        """``mode``, or ``held`` when the calls are in another format inside harmony's messages."""
        return mode if self.harmony_calls else "held"

    # ------------------------------------------------------------------ shared
    def _partial(self, text: str, targets: list[str]) -> int:
        """Length of the longest suffix of ``text`` that may begin a target or an end marker."""
        hold = 0
        for tag in targets + self.markers:
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
        if self.mode in ("call", "held"):
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

    def _call_pieces(self, block: str) -> list[Piece]:
        """Parse a held call region: its calls, and the content it leaves (all of it when it held no call)."""
        parsed = self.parser.parse(block)
        content = client_content(self.parser, parsed)  # as unstreamed (hermes keeps its blocks in the content)
        out: list[Piece] = []
        mode, self.mode = self.mode, "content"
        if parsed.thought:
            out.append(("reasoning", parsed.thought))
        self._emit(out, content.strip())
        self.mode = mode
        self.calls += len(parsed.tool_calls)
        out += [("call", c.name, dict(c.arguments)) for c in parsed.tool_calls]
        return out
