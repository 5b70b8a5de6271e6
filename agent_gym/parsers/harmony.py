"""OpenAI's harmony format (gpt-oss): vLLM's ``openai`` tool-call and reasoning parsers.

A sampled harmony turn is a sequence of messages. The generation prompt ends with
``<|start|>assistant``, so the first message's header starts right after the role::

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>final<|message|>ANSWER            (sampling stopped at <|return|>)

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{"a": 1}   (stopped at <|call|>)

A header holds the role (left out in the first message), an optional recipient
``to=functions.NAME`` (before or after the channel), ``<|channel|>CHANNEL`` and an optional
content type (``json`` or ``<|constrain|>json``); the body runs to ``<|end|>``, ``<|call|>``,
``<|return|>``, the next ``<|start|>`` or the end of the text. The ``analysis`` channel is
the reasoning; a message with a recipient is a tool call (``functions.`` is taken off the
name; a tool of another namespace keeps its dotted name); ``final`` messages and
``commentary`` messages without a recipient are the content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from agent_gym.parsers.base import FormatParser, call_id, decode_call, error_snippet, find_answer
from agent_gym.parsers.protocol import ParsedResponse, ReasoningParser, ToolCall

__all__ = ["HarmonyMessage", "HarmonyParser", "HarmonyReasoningParser", "split_harmony"]

START, END, CALL, RETURN = "<|start|>", "<|end|>", "<|call|>", "<|return|>"
CHANNEL, MESSAGE, CONSTRAIN = "<|channel|>", "<|message|>", "<|constrain|>"
_BODY_END = re.compile(r"<\|(?:end|call|return|start)\|>")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


@dataclass
class HarmonyMessage:
    """One message of a harmony turn.

    Attributes:
        role: The author (``assistant`` when the header leaves it out).
        channel: ``analysis``, ``commentary``, ``final`` or "" when there is none.
        recipient: ``functions.NAME`` for a tool call, else None.
        body: The text between ``<|message|>`` and its end token.
        raw: The message's text as sampled.
        closed: False when the text ended before an end token.
    """

    role: str
    channel: str
    recipient: str | None
    body: str
    raw: str
    closed: bool


def split_harmony(text: str) -> tuple[list[HarmonyMessage], str]:
    """Split a harmony turn into its messages; text outside any message is returned apart.

    Returns:
        The messages in order and the text that belongs to none (a header without
        ``<|message|>``, stray text between messages).
    """
    messages: list[HarmonyMessage] = []
    stray: list[str] = []
    pos = 0
    first = True
    while pos < len(text):
        if text.startswith(START, pos):
            pos += len(START)
            first = False
        header_end = text.find(MESSAGE, pos)
        next_start = text.find(START, pos)
        if header_end == -1 or (next_start != -1 and next_start < header_end):
            stop = len(text) if next_start == -1 else next_start
            if not first or text[pos:stop].strip():
                stray.append(text[pos:stop])
            pos = stop
            first = False
            continue
        header = text[pos:header_end]
        body_start = header_end + len(MESSAGE)
        end = _BODY_END.search(text, body_start)
        body_end = len(text) if end is None else end.start()
        closed = end is not None and end.group(0) != START
        after = body_end if end is None or end.group(0) == START else end.end()
        role, channel, recipient = _read_header(header, first)
        messages.append(HarmonyMessage(role, channel, recipient, text[body_start:body_end], text[pos:after], closed))
        pos = after
        first = False
    return messages, "".join(stray)


def _read_header(header: str, first: bool) -> tuple[str, str, str | None]:
    """``(role, channel, recipient)`` of a message header."""
    head, _, channel_part = header.partition(CHANNEL)
    recipient_match = _RECIPIENT.search(header)
    recipient = recipient_match.group(1) if recipient_match else None
    role_text = _RECIPIENT.sub("", head).strip()
    role = role_text.split()[0] if role_text else "assistant"
    if first and not role_text:
        role = "assistant"
    channel_text = _RECIPIENT.sub("", channel_part).replace(CONSTRAIN, " ").strip()
    channel = channel_text.split()[0] if channel_text else ""
    return role, channel, recipient


class HarmonyReasoningParser:
    """vLLM's ``openai`` reasoning parser: the ``analysis`` channel is the reasoning."""

    name = "openai"

    def split(self, text: str) -> tuple[str, str]:
        """Return ``(reasoning, rest)``: the analysis messages' bodies and the text without them."""
        if CHANNEL not in text:
            return "", text
        messages, _ = split_harmony(text)
        analysis = [m for m in messages if m.channel == "analysis" and m.recipient is None]
        if not analysis:
            return "", text
        rest = text
        for message in analysis:
            rest = rest.replace(message.raw, "", 1)
        if rest.startswith(START):  # the first message left: the generation prompt opened it already
            rest = rest[len(START) :]
            if rest.startswith("assistant"):
                rest = rest[len("assistant") :]
        return "\n\n".join(m.body.strip() for m in analysis if m.body.strip()), rest


class HarmonyParser(FormatParser):
    """vLLM's ``openai`` tool-call parser: harmony's ``to=functions.NAME`` messages are the calls.

    Args:
        reasoning_parser: Ignored except for its name (None: :class:`HarmonyReasoningParser`):
            this parser always reads the analysis channel as the reasoning (harmony carries both
            in one structure).
    """

    name: ClassVar[str] = "openai"
    call_example: ClassVar[str] = (
        "<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>"
    )
    call_format: ClassVar[str] = (
        f"a commentary message to the tool whose body is the JSON arguments, ended by <|call|>: {call_example}"
    )

    def __init__(self, reasoning_parser: ReasoningParser | None = None) -> None:
        super().__init__(reasoning_parser or HarmonyReasoningParser())

    def _parse(self, text: str) -> ParsedResponse:
        if CHANNEL not in text and MESSAGE not in text:  # plain text: all content
            content = text.strip()
            return ParsedResponse(text=text, content=content, answer=find_answer(content))
        messages, stray = split_harmony(text)
        thoughts: list[str] = []
        contents: list[str] = []
        calls: list[ToolCall] = []
        errors: list[str] = []
        for message in messages:
            if message.recipient is not None and message.role == "assistant":
                index = len(calls) + len(errors) + 1
                name = message.recipient.removeprefix("functions.")
                body = message.body.strip()
                try:
                    args: Any = json.loads(body) if body else {}
                except (ValueError, RecursionError) as exc:
                    errors.append(f"tool call {index} ({name}): invalid JSON arguments ({exc}) in "
                                  f"{error_snippet(body)}")
                    continue
                call, error = decode_call({"name": name, "arguments": args}, message.raw, index)
                if call is None:
                    errors.append(error or f"tool call {index}: malformed")
                else:
                    calls.append(call)
            elif message.channel == "analysis":
                thoughts.append(message.body.strip())
            else:
                contents.append(message.body)
        if stray.strip():
            contents.append(stray)
        for index, call in enumerate(calls, 1):
            call.id = call_id("call", index, call.name, call.raw)
        content = "\n".join(c.strip() for c in contents if c.strip())
        return ParsedResponse(text=text, thought="\n\n".join(t for t in thoughts if t), tool_calls=calls,
                              answer=find_answer(content), errors=errors, content=content)

    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls, the errors and the content (see :meth:`parse`)."""
        parsed = self._parse(text)
        return parsed.tool_calls, parsed.errors, parsed.content

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """One commentary message per call, each ended by ``<|call|>``; the first without ``<|start|>assistant``."""
        parts = []
        for i, (name, args) in enumerate(calls):
            head = "" if i == 0 else f"{START}assistant"
            parts.append(f"{head} to=functions.{name}{CHANNEL}commentary json{MESSAGE}"
                         f"{json.dumps(dict(args), ensure_ascii=False)}{CALL}")
        return "".join(parts)
