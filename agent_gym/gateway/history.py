"""Recognise assistant turns that a client framework re-sent in its own shape.

Some agent frameworks do not re-send the tool calls of earlier turns as ``tool_calls`` but
render them into the assistant text. smolagents' tool-calling agent writes

    <the turn's text, if any>
    Calling tools:
    [{'id': 'call_...', 'type': 'function', 'function': {'name': 'calculator', 'arguments': {...}}}]

(a Python ``repr`` of the call list; ``arguments`` a dict or a JSON string), and its tool results
come back as user messages starting ``Observation:``. :func:`text_tool_calls` reads such a
block back into ``(content, calls)``, so the gateway finds the turn it recorded (the same text
and calls, in any order of the calls) and the session does not fork. What the framework
changed beyond that shape - another text, other calls, a dropped turn - still does not match,
and stays a fork.

:func:`unordered_signature` is the key that ignores the order of the calls.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.gateway.convert import signature

__all__ = ["text_tool_calls", "unordered_signature"]

_CALLING = re.compile(r"(?:^|\n)Calling tools:\s*\n(?P<calls>\[.*\])\s*$", re.DOTALL)


def _literal(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def text_tool_calls(content: str) -> tuple[str, list[tuple[str, Any]]] | None:
    """``(content, calls)`` of a turn whose calls were rendered as a ``Calling tools:`` block, else None.

    Args:
        content: The assistant message text as the client sent it.

    Returns:
        The text before the block (stripped) and ``[(name, arguments), ...]``; None when the
        text holds no such block or the block is not a list of function calls.
    """
    if "Calling tools:" not in content:
        return None
    match = _CALLING.search(content)
    if match is None:
        return None
    value = _literal(match.group("calls"))
    if not isinstance(value, list) or not value:
        return None
    calls: list[tuple[str, Any]] = []
    for entry in value:
        fn = entry.get("function") if isinstance(entry, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            return None
        calls.append((fn["name"], fn.get("arguments") if fn.get("arguments") is not None else {}))
    return content[: match.start()].strip(), calls


def unordered_signature(content: str, calls: Sequence[tuple[str, Any]]) -> str:
    """:func:`~agent_gym.gateway.convert.signature` with the calls sorted (their order ignored)."""
    keyed = sorted(calls, key=lambda c: signature("", [c]))
    return signature(content, keyed)
