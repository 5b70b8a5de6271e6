"""Error observations of a step, by kind.

The env joins every error observation of a message into ``info["error"]`` and
records the :class:`~agent_gym.errors.ToolErrorKind` of each one, in the same
order, in ``info["error_kinds"]``; each executed call's record in
``info["tool_calls"]`` carries its own ``kind``. :func:`step_errors` reads those
recorded kinds and never the wording of the messages.

Steps recorded without ``error_kinds`` (the gateway's, and files written before
the field existed) are read from what they do record: the call records' ``kind``
and the count of ``info["parse_errors"]``. Only for files older than both fields
is the kind read from the message (:func:`classify_call_error`), using the
prefixes the tool layer wrote then.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent_gym.errors import ToolErrorKind

__all__ = ["classify_call_error", "step_errors"]

_NO_RECORD = frozenset((ToolErrorKind.MALFORMED_CALL.value, ToolErrorKind.NO_ACTION.value))
"""Kinds of errors that belong to the message, not to one call's record."""

# Wording of the tool layer in files written before kinds were recorded.
_LEGACY_NO_ACTION = "the message has no <tool_call> and no <answer>"
_LEGACY_PARSE_ERROR = re.compile(
    r"(?:^|; )(?:tool call \d+(?: \([^)]*\))?: |found </[\w.-]+> without an opening|"
    r"could not parse the message|expected the message as str)"
)


def classify_call_error(message: str) -> str:
    """Kind of a failed call's error in a file written before kinds were recorded, read from its message.

    Args:
        message: ``record["error"]`` of a call in ``info["tool_calls"]``.

    Returns:
        A :data:`ERROR_KINDS` value (``tool_error`` when nothing more specific matches).
    """
    text = message.strip()
    if text.startswith("unknown tool"):
        return ToolErrorKind.UNKNOWN_TOOL.value
    if text.startswith("invalid arguments"):
        return ToolErrorKind.BAD_ARGUMENTS.value
    if " did not finish within " in text or text.startswith("timeout"):
        return ToolErrorKind.TIMEOUT.value
    if text.startswith("tool call ") and " skipped: at most " in text:
        return ToolErrorKind.TOO_MANY_CALLS.value
    return ToolErrorKind.TOOL_ERROR.value


def _failed_calls(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls = info.get("tool_calls")
    return [c for c in (calls if isinstance(calls, list) else ())
            if isinstance(c, dict) and (c.get("ok") is False or c.get("error"))]


def _name(call: Mapping[str, Any] | None) -> str | None:
    name = call.get("name") if call is not None else None
    return name if isinstance(name, str) else None


def step_errors(info: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """Error observations of one step, as ``(kind, tool name or None)`` pairs.

    Args:
        info: A step's ``info`` dict as the env and ``TrajectoryWrapper`` record it.

    Returns:
        One pair per error observation the model received at this step, in the
        order of ``info["error"]``.
    """
    failed = _failed_calls(info)
    kinds = info.get("error_kinds")
    if isinstance(kinds, list):
        calls = iter(failed)
        out: list[tuple[str, str | None]] = []
        for kind in kinds:
            if isinstance(kind, str):
                out.append((kind, None if kind in _NO_RECORD else _name(next(calls, None))))
        return out
    return _unrecorded_step_errors(info, failed)


def _unrecorded_step_errors(info: Mapping[str, Any], failed: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """Steps without ``error_kinds``: call records' kinds, then parse errors (counted, else read from wording)."""
    out: list[tuple[str, str | None]] = []
    for call in failed:
        kind = call.get("kind")
        if not isinstance(kind, str):
            kind = classify_call_error(str(call.get("error") or ""))
        out.append((kind, _name(call)))
    parse_errors = info.get("parse_errors")
    if isinstance(parse_errors, list):
        return [(ToolErrorKind.MALFORMED_CALL.value, None)] * len(parse_errors) + out
    joined = info.get("error")
    if not isinstance(joined, str) or not joined or "tool_calls" not in info:
        # Without a tool_calls record the error is the episode's (policy failure, timeout), not an observation.
        return out
    if not failed and joined == _LEGACY_NO_ACTION:
        return [(ToolErrorKind.NO_ACTION.value, None)]
    call_errors = [c["error"] for c in failed if isinstance(c.get("error"), str)]
    parse_part = joined
    if call_errors:
        cut = joined.find("; ".join(call_errors))
        parse_part = joined[:cut] if cut >= 0 else ""
    malformed = len(_LEGACY_PARSE_ERROR.findall(parse_part))
    return [(ToolErrorKind.MALFORMED_CALL.value, None)] * malformed + out
