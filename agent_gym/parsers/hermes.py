"""Hermes' tool-call format (vLLM's ``hermes``): ``<think>``, ``<tool_call>`` JSON blocks and ``<answer>``.

The default format, the one Qwen, Hermes and most open chat templates use::

    <think>reasoning</think>
    <tool_call>{"name": "calculator", "arguments": {"expression": "2 + 2"}}</tool_call>
    <answer>4</answer>

:class:`HermesToolCallParser` is a :class:`~agent_gym.parsers.ToolCallParser` like the other
formats' parsers (``make_parser("hermes")`` returns one); :func:`parse_response` parses with
the default one and :func:`format_tool_call` writes one block. Model text is never trusted:
``parse`` returns a :class:`~agent_gym.parsers.ParsedResponse` for *any* string, recording
problems in ``errors`` instead of raising.

Leniencies, each deliberate:

* ``arguments`` may be a JSON object or a string holding one; ``parameters`` is
  accepted as a synonym; a missing ``arguments`` means ``{}``.
* A tool call body may be wrapped in a Markdown code fence, or hold a JSON list
  of calls.
* A final ``<tool_call>`` without its closing tag is accepted when its body is
  valid JSON (a stop string such as ``</tool_call>`` is often cut off).
* A ``</think>`` without an opening tag ends a thought that began at the start
  of the message (templates that put ``<think>`` in the generation prompt).
* An unclosed ``<answer>`` takes the rest of the message.

Hermes keeps its ``<tool_call>`` blocks in ``content`` (the envs' convention);
:meth:`HermesToolCallParser.strip_calls` takes them out where a client must not see them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.checks import check_pattern
from agent_gym.parsers.base import ThinkReasoningParser, decode_call, error_snippet
from agent_gym.parsers.protocol import ParsedResponse, ReasoningParser, ToolCall

__all__ = ["HermesToolCallParser", "format_tool_call", "parse_response"]

_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.DOTALL)
_TAG_NAME = re.compile(r"[A-Za-z_][\w\-]*")
_TAG_START = re.compile(r"<(?=[/A-Za-z_!?])")  # JSON has no '<' outside strings: this escapes only string text


def _decode_block(body: str, index: int) -> tuple[list[ToolCall], list[str]]:
    """Decode the text of one ``<tool_call>`` block (an object or a list of objects)."""
    raw = body.strip()
    text = raw
    fence = _FENCE.match(text)
    if fence:
        text = fence.group(1)
    if not text:
        return [], [f"tool call {index}: empty <tool_call> block"]
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return [], [f"tool call {index}: invalid JSON ({exc}) in {error_snippet(text)}"]
    items = obj if isinstance(obj, list) else [obj]
    if not items:
        return [], [f"tool call {index}: empty list of calls"]
    calls: list[ToolCall] = []
    errors: list[str] = []
    for item in items:
        call, error = decode_call(item, raw, index)
        if call is not None:
            calls.append(call)
        else:
            errors.append(error or f"tool call {index}: malformed")
    return calls, errors


class HermesToolCallParser:
    """vLLM's ``hermes`` format: ``<think>``, ``<tool_call>`` JSON blocks and ``<answer>`` tags.

    Args:
        think_tag: Name of the reasoning tag.
        tool_call_tag: Name of the tool call tag.
        answer_tag: Name of the answer tag.
        reasoning_parser: A reasoning format taken out first (e.g. harmony's analysis channel,
            ``openai``); a ``<think>`` one (``qwen3``, ``deepseek_r1``) is hermes' own and None.
    """

    name = "hermes"

    def __init__(self, think_tag: str = "think", tool_call_tag: str = "tool_call", answer_tag: str = "answer", *,
                 reasoning_parser: ReasoningParser | None = None) -> None:
        for arg, value in (("think_tag", think_tag), ("tool_call_tag", tool_call_tag), ("answer_tag", answer_tag)):
            check_pattern(arg, value, _TAG_NAME, "a tag name such as 'think'")
        self.think_tag, self.tool_call_tag, self.answer_tag = think_tag, tool_call_tag, answer_tag
        self.reasoning_parser: ReasoningParser | None = (
            None if isinstance(reasoning_parser, ThinkReasoningParser) else reasoning_parser)
        self._compile()

    def __repr__(self) -> str:
        reasoning = None if self.reasoning_parser is None else self.reasoning_parser.name
        return f"{type(self).__name__}(tool_call_tag={self.tool_call_tag!r}, reasoning_parser={reasoning!r})"

    @property
    def call_format(self) -> str:
        """``"<tool_call> blocks"`` (with this parser's call tag)."""
        return f"<{self.tool_call_tag}> blocks"

    @property
    def call_example(self) -> str:
        """One ``<tool_call>`` block with placeholders."""
        return f'<{self.tool_call_tag}>{{"name": ..., "arguments": {{...}}}}</{self.tool_call_tag}>'

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """One :func:`format_tool_call` block per call, a line each (what :meth:`parse` reads back)."""
        return "\n".join(format_tool_call(name, args) for name, args in calls)

    def strip_calls(self, content: str) -> str:
        """``content`` without its call blocks (an unclosed one runs to the end), as a client sees it."""
        tag = re.escape(self.tool_call_tag)
        return re.sub(rf"<{tag}>.*?(</{tag}>|$)", "", content, flags=re.DOTALL)

    def _compile(self) -> None:
        t, c, a = (re.escape(x) for x in (self.think_tag, self.tool_call_tag, self.answer_tag))
        self._think_open, self._think_close = f"<{self.think_tag}>", f"</{self.think_tag}>"
        self._call_open, self._call_close = f"<{self.tool_call_tag}>", f"</{self.tool_call_tag}>"
        self._answer_open, self._answer_close = f"<{self.answer_tag}>", f"</{self.answer_tag}>"
        if (self.think_tag, self.tool_call_tag, self.answer_tag) == ("think", "tool_call", "answer"):
            self._think_re, self._call_re, self._answer_re = _THINK_BLOCK, _TOOL_BLOCK, _ANSWER_BLOCK
        else:
            self._think_re = re.compile(f"<{t}>(.*?)</{t}>", re.DOTALL)
            self._call_re = re.compile(f"<{c}>(.*?)</{c}>", re.DOTALL)
            self._answer_re = re.compile(f"<{a}>(.*?)</{a}>", re.DOTALL)

    def __getstate__(self) -> dict[str, Any]:
        return {"think_tag": self.think_tag, "tool_call_tag": self.tool_call_tag, "answer_tag": self.answer_tag,
                "reasoning_parser": self.reasoning_parser}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"reasoning_parser": None, **state})
        self._compile()

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant message; never raises.

        Args:
            text: The assistant message. A non-string gives an empty response with an error.

        Returns:
            The thought, the well-formed tool calls, the answer and the errors; ``content`` is
            the message without the thought (the call blocks stay).
        """
        if not isinstance(text, str):
            return ParsedResponse(text="", errors=[f"expected the message as str, got {type(text).__name__}"])
        try:
            if self.reasoning_parser is None:
                return self._parse(text)
            reasoning, rest = self.reasoning_parser.split(text)
            parsed = self._parse(rest)
            parsed.text = text
            parsed.thought = "\n\n".join(t for t in (reasoning, parsed.thought) if t)
            return parsed
        except Exception as exc:  # noqa: BLE001 - defensive: parsing must never raise
            return ParsedResponse(text=text, content=text, errors=[f"could not parse the message: {exc!r}"])

    def _parse(self, text: str) -> ParsedResponse:
        result = ParsedResponse(text=text)
        rest = text
        # Thought: explicit blocks, a leading thought closed by a lone </think>, or an unclosed <think>.
        if self._think_open in rest or self._think_close in rest:
            thoughts = [m.strip() for m in self._think_re.findall(rest)]
            rest = self._think_re.sub("", rest)
            close = rest.find(self._think_close)
            if close != -1 and self._think_open not in rest[:close]:
                thoughts.insert(0, rest[:close].strip())
                rest = rest[close + len(self._think_close) :]
            opening = rest.find(self._think_open)
            if opening != -1:
                thoughts.append(rest[opening + len(self._think_open) :].strip())
                rest = rest[:opening]
            result.thought = "\n\n".join(t for t in thoughts if t)
        result.content = rest.strip()

        # Tool calls.
        if self._call_open in rest:
            index = 0
            for body in self._call_re.findall(rest):
                index += 1
                calls, errors = _decode_block(body, index)
                result.tool_calls.extend(calls)
                result.errors.extend(errors)
            tail = self._call_re.sub("", rest)
            opening = tail.find(self._call_open)
            if opening != -1:
                index += 1
                body = tail[opening + len(self._call_open) :]
                body = body.split(self._answer_open, 1)[0]
                calls, errors = _decode_block(body, index)
                if errors:
                    errors = [f"tool call {index}: <{self.tool_call_tag}> is not closed"] + errors
                result.tool_calls.extend(calls)
                result.errors.extend(errors)
        elif self._call_close in rest:
            result.errors.append(f"found </{self.tool_call_tag}> without an opening <{self.tool_call_tag}>")

        # Answer.
        if self._answer_open in rest:
            match = self._answer_re.search(rest)
            if match:
                result.answer = match.group(1).strip()
            else:
                result.answer = rest[rest.index(self._answer_open) + len(self._answer_open) :].strip()
        return result


_DEFAULT_PARSER = HermesToolCallParser()


def parse_response(text: str) -> ParsedResponse:
    """Parse an assistant message with the default :class:`HermesToolCallParser`.

    Args:
        text: The assistant message.

    Returns:
        The parsed response; malformed parts are listed in ``errors``. Never raises.

    Example:
        >>> r = parse_response('<think>add</think><tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
        >>> r.thought, r.tool_calls[0].name, r.tool_calls[0].arguments
        ('add', 'add', {'a': 1})
    """
    return _DEFAULT_PARSER.parse(text)


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    r"""Render one hermes-style ``<tool_call>`` block, the text :func:`parse_response` reads back as the call.

    A ``<`` that starts something tag-like inside a JSON string is written ``\u003c``
    (still the same JSON value), so an argument such as ``"</tool_call>"`` cannot end the block.

    Example:
        >>> format_tool_call("add", {"a": 1})
        '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    """
    body = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
    return "<tool_call>" + _TAG_START.sub(r"\\u003c", body) + "</tool_call>"
