"""Parse an assistant message into its thought, tool calls and final answer.

The default format is the one Qwen, Hermes and most open chat templates use::

    <think>reasoning</think>
    <tool_call>{"name": "calculator", "arguments": {"expression": "2 + 2"}}</tool_call>
    <answer>4</answer>

Model text is never trusted: :func:`parse_response` (and every
:class:`ToolCallParser` shipped here) returns a :class:`ParsedResponse` for *any*
string, recording problems in ``errors`` instead of raising.

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
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agent_gym.checks import check_pattern

__all__ = [
    "HermesToolCallParser",
    "ParsedResponse",
    "ToolCall",
    "ToolCallParser",
    "decode_call",
    "error_snippet",
    "format_tool_call",
    "parse_response",
]

_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.DOTALL)
_MAX_ERROR_SNIPPET = 80
_TAG_NAME = re.compile(r"[A-Za-z_][\w\-]*")
_TAG_START = re.compile(r"<(?=[/A-Za-z_!?])")  # JSON has no '<' outside strings: this escapes only string text


@dataclass
class ToolCall:
    """One tool call requested by the model.

    Attributes:
        name: The tool name.
        arguments: The arguments, a JSON object.
        raw: The text of the call as the model wrote it (inside the ``<tool_call>`` tags
            for hermes).
        id: The call id, where the format carries one or the parser derives one (formats
            whose templates pair tool results with call ids); None otherwise.
    """

    name: str
    arguments: dict[str, Any]
    raw: str = ""
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"name", "arguments", "raw"}`` (and ``"id"`` when set) as a new dict."""
        out = {"name": self.name, "arguments": dict(self.arguments), "raw": self.raw}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass
class ParsedResponse:
    """The parts of an assistant message.

    Attributes:
        text: The whole message.
        thought: Text inside ``<think>`` (several blocks joined by a blank line), or "".
        tool_calls: Well-formed tool calls, in order.
        answer: Text inside ``<answer>`` (stripped), or None when there is none.
        errors: One human-readable line per malformed part (e.g. invalid JSON).
        content: The message with the thought removed (what is left for the user).
    """

    text: str
    thought: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    errors: list[str] = field(default_factory=list)
    content: str = ""

    @property
    def reasoning(self) -> str:
        """The model's reasoning (the same text as ``thought``, by the name vLLM uses)."""
        return self.thought

    @property
    def has_action(self) -> bool:
        """True if the message called a tool, gave an answer, or tried to (errors)."""
        return bool(self.tool_calls) or self.answer is not None or bool(self.errors)

    @property
    def action_text(self) -> str | None:
        """The raw text of the tool call blocks joined by newlines, or None without calls."""
        if not self.tool_calls:
            return None
        # Calls decoded from one block holding a JSON list share that block's text: list it once.
        return "\n".join(dict.fromkeys(c.raw for c in self.tool_calls))


@runtime_checkable
class ToolCallParser(Protocol):
    """Anything that splits an assistant message into a :class:`ParsedResponse`.

    Implementations must never raise on model text.
    """

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant message."""
        ...


def _snippet(text: str) -> str:
    text = text.strip()
    if len(text) > _MAX_ERROR_SNIPPET:
        text = text[: _MAX_ERROR_SNIPPET - 3] + "..."
    return repr(text)


def _decode_call(obj: Any, raw: str, index: int) -> tuple[ToolCall | None, str | None]:
    """Turn one decoded JSON value into a ToolCall or an error line."""
    where = f"tool call {index}"
    if not isinstance(obj, dict):
        return None, f"{where}: expected a JSON object with 'name' and 'arguments', got {type(obj).__name__}"
    if "function" in obj and isinstance(obj["function"], dict) and "name" not in obj:
        obj = obj["function"]  # OpenAI-style {"type": "function", "function": {...}}
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, f"{where}: expected a non-empty string 'name', got {_snippet(json.dumps(name))}"
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if args is None:
        args = {}
    if isinstance(args, str):
        stripped = args.strip()
        if not stripped:
            args = {}
        else:
            try:
                args = json.loads(stripped)
            except (ValueError, RecursionError) as exc:
                return None, f"{where} ({name}): 'arguments' is a string but not valid JSON: {exc}"
    if not isinstance(args, dict):
        return None, f"{where} ({name}): expected 'arguments' to be a JSON object, got {type(args).__name__}"
    return ToolCall(name=name.strip(), arguments=args, raw=raw), None


def decode_call(obj: Any, raw: str, index: int) -> tuple[ToolCall | None, str | None]:
    """Turn one decoded JSON value (``{"name", "arguments" | "parameters"}``) into a call or an error line.

    Args:
        obj: The decoded JSON value.
        raw: The call's text as the model wrote it.
        index: The call's 1-based position in the message (for the error line).

    Returns:
        ``(call, None)`` or ``(None, error)``; never raises.
    """
    return _decode_call(obj, raw, index)


def error_snippet(text: str) -> str:
    """``text`` stripped, shortened to 80 characters and quoted: how error lines show model text."""
    return _snippet(text)


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
        return [], [f"tool call {index}: invalid JSON ({exc}) in {_snippet(text)}"]
    items = obj if isinstance(obj, list) else [obj]
    if not items:
        return [], [f"tool call {index}: empty list of calls"]
    calls: list[ToolCall] = []
    errors: list[str] = []
    for item in items:
        call, error = _decode_call(item, raw, index)
        if call is not None:
            calls.append(call)
        else:
            errors.append(error or f"tool call {index}: malformed")
    return calls, errors


class HermesToolCallParser:
    """Parser for ``<think>``, hermes-style ``<tool_call>`` JSON and ``<answer>`` tags.

    Args:
        think_tag: Name of the reasoning tag.
        tool_call_tag: Name of the tool call tag.
        answer_tag: Name of the answer tag.
    """

    def __init__(self, think_tag: str = "think", tool_call_tag: str = "tool_call", answer_tag: str = "answer") -> None:
        for arg, value in (("think_tag", think_tag), ("tool_call_tag", tool_call_tag), ("answer_tag", answer_tag)):
            check_pattern(arg, value, _TAG_NAME, "a tag name such as 'think'")
        self.think_tag, self.tool_call_tag, self.answer_tag = think_tag, tool_call_tag, answer_tag
        self._compile()

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
        return {"think_tag": self.think_tag, "tool_call_tag": self.tool_call_tag, "answer_tag": self.answer_tag}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compile()

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant message; never raises.

        Args:
            text: The assistant message. A non-string gives an empty response with an error.

        Returns:
            The thought, the well-formed tool calls, the answer and the errors.
        """
        if not isinstance(text, str):
            return ParsedResponse(text="", errors=[f"expected the message as str, got {type(text).__name__}"])
        try:
            return self._parse(text)
        except Exception as exc:  # pragma: no cover - defensive: parsing must never raise
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
