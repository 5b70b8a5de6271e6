"""The written contract of a tool-call format: what a parser reads, what it writes, and the records it returns.

* :class:`ToolCall` and :class:`ParsedResponse`: one call, and the parts of one assistant
  message (reasoning, calls, content, ``<answer>``, errors).
* :class:`ReasoningParser`: takes the reasoning out of a message (``<think>``, harmony's
  analysis channel).
* :class:`ResponseParser`: anything with ``parse(text) -> ParsedResponse``; what an env,
  a subagent or the gateway accepts from a user.
* :class:`ToolCallParser`: a whole format (every parser :func:`~agent_gym.parsers.make_parser`
  returns, hermes included): its ``name``, the ``reasoning_parser`` it applies first, how it
  parses (``parse``) and writes (``format_calls``) calls, and the words that describe it to a
  model (``call_format``, ``call_example``). :func:`~agent_gym.parsers.as_parser` completes a
  parse-only object into one (hermes' writing side).

Model text is never trusted: ``parse`` never raises; malformed calls are lines of ``errors``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["ParsedResponse", "ReasoningParser", "ResponseParser", "ToolCall", "ToolCallParser"]


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
        content: The message with the thought removed (what is left for the user; hermes
            keeps its ``<tool_call>`` blocks here, the other formats take the calls out).
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
class ReasoningParser(Protocol):
    """Splits an assistant message into its reasoning and the rest (never raises)."""

    name: str

    def split(self, text: str) -> tuple[str, str]:
        """Return ``(reasoning, rest)``."""
        ...


@runtime_checkable
class ResponseParser(Protocol):
    """Anything that splits an assistant message into a :class:`ParsedResponse` (never raises on model text).

    The envs, subagents and the gateway accept one; :func:`~agent_gym.parsers.as_parser`
    makes it a :class:`ToolCallParser` that writes hermes' ``<tool_call>`` blocks.
    """

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant message."""
        ...


@runtime_checkable
class ToolCallParser(ResponseParser, Protocol):
    """One tool-call format, read and written: the contract every named parser keeps.

    Attributes:
        name: The format's name as vLLM's ``--tool-call-parser`` names it (``"hermes"``,
            ``"mistral"``, ``"openai"``, ...); the model family of
            :data:`~agent_gym.parsers.FAMILIES` with that name renders the messages.
        reasoning_parser: The reasoning format taken out before the calls are looked for
            (None: none, or the format reads ``<think>`` itself, as hermes does).
        call_format: How a model of this format writes a call, with an example: it completes
            "Call tools with ..." in an env's system prompt (hermes: ``"<tool_call> blocks"``).
        call_example: One call in this format with placeholders (the no-action nudge's example).
    """

    @property
    def name(self) -> str:
        """The format's name (vLLM's ``--tool-call-parser``)."""
        ...

    @property
    def reasoning_parser(self) -> ReasoningParser | None:
        """The reasoning format applied first, or None."""
        ...

    @property
    def call_format(self) -> str:
        """How a call is written, with an example (completes "Call tools with ...")."""
        ...

    @property
    def call_example(self) -> str:
        """One call with placeholders."""
        ...

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant message; never raises.

        Returns:
            The reasoning (``thought``), the well-formed calls in order, the ``content`` without
            the reasoning, the ``<answer>`` and one line of ``errors`` per malformed call.
        """
        ...

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """The text a model of this format writes to make ``calls``.

        Args:
            calls: ``(name, arguments)`` pairs.

        Returns:
            Text that :meth:`parse` reads back as the same calls (names and arguments).
        """
        ...
