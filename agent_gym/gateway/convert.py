"""What the gateway's dialects share: a sampled turn as a client sees it, and assistant messages coming back.

A client's conversation becomes the plain ``{"role", "content"}`` messages an agent_gym env
would produce (each dialect's module parses its own requests, see
:mod:`agent_gym.gateway.dialect`). An assistant message the gateway itself produced is replaced
by the exact text the model sampled (its tool calls included), looked up by its *signature*
(visible text and tool calls); one the gateway does not know (the client wrote or edited it) is
rendered in the session's format (:func:`render_assistant`) and flagged, so the prompt builder
starts a new segment instead of silently re-tokenizing.

:class:`ClientTurn` / :class:`ClientCall` are what every dialect renders of a sampled turn;
:func:`content_text` reads a message's text parts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.errors import RequestError
from agent_gym.parsers import ToolCallParser, family_of
from agent_gym.types import FinishReason

__all__ = [
    "CHAT_TEXT_PARTS",
    "ClientCall",
    "ClientTurn",
    "content_text",
    "expect_list",
    "render_assistant",
    "signature",
]


@dataclass
class ClientCall:
    """A tool call as a client sees it."""

    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        """The arguments as a JSON string (OpenAI's ``function.arguments``)."""
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class ClientTurn:
    """What a client sees of one sampled turn."""

    content: str
    thought: str
    calls: list[ClientCall] = field(default_factory=list)
    finish: str = FinishReason.STOP


def _canonical_args(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value.strip()
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def signature(content: str, calls: Sequence[tuple[str, Any]]) -> str:
    """Key identifying an assistant message by its visible text and tool calls (ids ignored)."""
    return json.dumps([content.strip(), [[str(n), _canonical_args(a)] for n, a in calls]], ensure_ascii=False)


def render_assistant(content: str, calls: Sequence[tuple[str, Any]], parser: ToolCallParser | None = None) -> str:
    """Text of an assistant message the gateway did not produce, in the session's model format.

    Args:
        content: The message's visible text.
        calls: Its tool calls as ``(name, arguments)``.
        parser: The session's tool-call parser: its family writes the message
            (:meth:`~agent_gym.parsers.ChatFamily.unsampled_text`; None: hermes).
    """
    decoded = []
    for name, arguments in calls:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        decoded.append((name, arguments))
    return family_of(parser).unsampled_text(content, decoded)


CHAT_TEXT_PARTS = ("text", "input_text", "output_text")
"""Content part types read as text in chat-completions and Anthropic messages."""


def content_text(content: Any, where: str, *, part_types: Sequence[str] = CHAT_TEXT_PARTS, param: str | None = None,
                 any_text_key: bool = True, read_refusal: bool = False, expected: str = "a text part") -> str:
    """Text of a content field: a string, or a list of text parts/blocks joined by newlines.

    Args:
        content: The field (None reads as "").
        where: The field's path, named in errors.
        part_types: Part ``type`` values read as text.
        param: The error's ``param`` (default ``where``).
        any_text_key: Also read a part of another type that has a ``text`` key.
        read_refusal: A part without text gives its ``refusal`` text (Responses parts).
        expected: How errors name a valid part.

    Raises:
        RequestError: Content of another shape.
    """
    param = where if param is None else param
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") in part_types:
                texts.append(str(part.get("text") or (part.get("refusal") if read_refusal else None) or ""))
            elif any_text_key and isinstance(part, Mapping) and "text" in part:
                texts.append(str(part["text"]))
            else:
                raise RequestError(f"{where}[{i}]: expected {expected}, got {str(part)[:80]!r}", param=param)
        return "\n".join(texts)
    raise RequestError(f"{where}: expected a string or a list of text parts, got {type(content).__name__}",
                       param=param)


def expect_list(value: Any, where: str) -> list[Any]:
    """``value`` when it is a non-empty list.

    Raises:
        RequestError: Anything else (naming ``where``).
    """
    if not isinstance(value, list) or not value:
        raise RequestError(f"{where}: expected a non-empty list, got {str(value)[:80]!r}", param=where)
    return value
