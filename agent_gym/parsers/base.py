"""What every named parser shares: reasoning parsers, the format-parser base, call ids, ``<answer>``.

A *format parser* (one per tool-call format, named as vLLM names its ``--tool-call-parser``)
splits an assistant message in three steps: its reasoning parser (if any) takes the
reasoning out, :meth:`FormatParser.extract_calls` takes the tool calls out of what is left,
and the rest is the ``content``, where ``<answer>...</answer>`` is the final answer (the
envs' convention, the same in every format). Like :class:`~agent_gym.parsers.HermesToolCallParser`,
``parse`` never raises on model text: malformed calls become lines in ``errors``.
:func:`decode_call` and :func:`error_snippet` are the JSON-call helpers the formats share.

Call ids: formats whose templates pair each tool result with its call (Mistral, harmony's
``functions.NAME``) need an id per call. A format that writes ids keeps them; otherwise
:func:`call_id` derives one from the call's position and text, so parsing the same message
twice gives the same ids (the message is parsed again each time the conversation is rendered).
"""

from __future__ import annotations

import abc
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agent_gym.parsers.protocol import ParsedResponse, ReasoningParser, ToolCall

__all__ = [
    "FormatParser",
    "ThinkReasoningParser",
    "call_id",
    "decode_call",
    "error_snippet",
    "find_answer",
]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_MAX_ERROR_SNIPPET = 80


def error_snippet(text: str) -> str:
    """``text`` stripped, shortened to 80 characters and quoted: how error lines show model text."""
    text = text.strip()
    if len(text) > _MAX_ERROR_SNIPPET:
        text = text[: _MAX_ERROR_SNIPPET - 3] + "..."
    return repr(text)


def decode_call(obj: Any, raw: str, index: int) -> tuple[ToolCall | None, str | None]:
    """Turn one decoded JSON value (``{"name", "arguments" | "parameters"}``) into a call or an error line.

    ``arguments`` may be a JSON object or a string holding one; ``parameters`` is a synonym; a
    missing ``arguments`` means ``{}``; OpenAI's ``{"type": "function", "function": {...}}`` is read.

    Args:
        obj: The decoded JSON value.
        raw: The call's text as the model wrote it.
        index: The call's 1-based position in the message (for the error line).

    Returns:
        ``(call, None)`` or ``(None, error)``; never raises.
    """
    where = f"tool call {index}"
    if not isinstance(obj, dict):
        return None, f"{where}: expected a JSON object with 'name' and 'arguments', got {type(obj).__name__}"
    if "function" in obj and isinstance(obj["function"], dict) and "name" not in obj:
        obj = obj["function"]  # OpenAI-style {"type": "function", "function": {...}}
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, f"{where}: expected a non-empty string 'name', got {error_snippet(json.dumps(name))}"
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


def find_answer(content: str) -> str | None:
    """The stripped text of the first ``<answer>`` block (an unclosed one takes the rest), or None."""
    if "<answer>" not in content:
        return None
    match = _ANSWER.search(content)
    if match:
        return match.group(1).strip()
    return content[content.index("<answer>") + len("<answer>") :].strip()


def call_id(style: str, index: int, name: str, raw: str) -> str:
    """A call id derived from the call's position and text (stable across parses of one message).

    Args:
        style: ``"mistral"`` (9 alphanumeric characters, what Mistral's templates require) or
            ``"call"`` (``call_`` and 12 hex digits).
        index: The call's 1-based position in the message.
        name: The tool name.
        raw: The call's text.
    """
    digest = hashlib.blake2s(f"{index}\0{name}\0{raw}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return digest[:9] if style == "mistral" else f"call_{digest[:12]}"


class ThinkReasoningParser:
    """``<think>...</think>`` reasoning: vLLM's ``deepseek_r1`` and ``qwen3`` reasoning parsers.

    Several blocks are joined by a blank line. A ``</think>`` without an opening tag ends a
    reasoning that began at the start of the message (templates that put ``<think>`` in the
    generation prompt, as DeepSeek-R1's and Qwen3's thinking mode do); an unclosed ``<think>``
    takes the rest of the message.

    Args:
        name: ``"deepseek_r1"`` or ``"qwen3"`` (the behaviour is the same; the name is recorded).
    """

    def __init__(self, name: str = "qwen3") -> None:
        self.name = name

    def split(self, text: str) -> tuple[str, str]:
        """Return ``(reasoning, rest)``; never raises."""
        if "<think>" not in text and "</think>" not in text:
            return "", text
        thoughts: list[str] = []
        rest: list[str] = []
        pos = 0
        first_close = text.find("</think>")
        first_open = text.find("<think>")
        if first_close != -1 and (first_open == -1 or first_close < first_open):
            thoughts.append(text[:first_close])
            pos = first_close + len("</think>")
        while True:
            opening = text.find("<think>", pos)
            if opening == -1:
                rest.append(text[pos:])
                break
            rest.append(text[pos:opening])
            closing = text.find("</think>", opening)
            if closing == -1:
                thoughts.append(text[opening + len("<think>") :])
                break
            thoughts.append(text[opening + len("<think>") : closing])
            pos = closing + len("</think>")
        return "\n\n".join(t.strip() for t in thoughts if t.strip()), "".join(rest)


class FormatParser(abc.ABC):
    """Base of the named tool-call parsers: reasoning, then calls, then the ``<answer>`` in the content.

    Subclasses set ``name`` (vLLM's parser name), ``call_format``, ``call_example`` and ``id_style`` and implement
    :meth:`extract_calls` and :meth:`format_calls`.

    Args:
        reasoning_parser: Takes the reasoning out before the calls are looked for (None: none).
    """

    name: ClassVar[str] = ""
    #: How a model of this format writes a call, with an example (completes "Call tools with ...";
    #: the env's system prompt and its no-action nudge use it, see :mod:`agent_gym.parsers.instructions`).
    call_format: ClassVar[str] = ""
    #: One call in this format with placeholders (the no-action nudge's example).
    call_example: ClassVar[str] = ""
    #: How ids are derived for calls the model wrote without one (see :func:`call_id`).
    id_style: ClassVar[str] = "call"

    def __init__(self, reasoning_parser: ReasoningParser | None = None) -> None:
        self.reasoning_parser = reasoning_parser

    def __repr__(self) -> str:
        reasoning = None if self.reasoning_parser is None else self.reasoning_parser.name
        return f"{type(self).__name__}(reasoning_parser={reasoning!r})"

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant message; never raises.

        Returns:
            The reasoning (``thought``), the well-formed calls (with ids), the content without
            reasoning and calls, the ``<answer>`` and one error line per malformed call.
        """
        if not isinstance(text, str):
            return ParsedResponse(text="", errors=[f"expected the message as str, got {type(text).__name__}"])
        try:
            return self._parse(text)
        except Exception as exc:  # noqa: BLE001 - defensive: parsing must never raise
            return ParsedResponse(text=text, content=text, errors=[f"could not parse the message: {exc!r}"])

    def _parse(self, text: str) -> ParsedResponse:
        reasoning, rest = ("", text) if self.reasoning_parser is None else self.reasoning_parser.split(text)
        calls, errors, content = self.extract_calls(rest)
        for index, call in enumerate(calls, 1):
            if call.id is None:
                call.id = call_id(self.id_style, index, call.name, call.raw)
        content = content.strip()
        return ParsedResponse(text=text, thought=reasoning, tool_calls=calls, answer=find_answer(content),
                              errors=errors, content=content)

    @abc.abstractmethod
    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls in ``text``, an error line per malformed one, and the text without them."""

    @abc.abstractmethod
    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """The text a model of this format writes to make ``calls`` (what :meth:`parse` reads back).

        Args:
            calls: ``(name, arguments)`` pairs.
        """
