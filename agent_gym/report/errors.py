"""Error observations of a step, by kind.

The env records every executed tool call in ``info["tool_calls"]`` (``name``,
``ok``, ``error``, ``output``) and joins every error of the message into
``info["error"]``: first the parse errors of malformed ``<tool_call>`` blocks
(which have no call record), then the errors of the calls, then the nudge for a
message with neither a call nor an answer. A call record with a ``kind`` field is
taken as it is (``AgentEnv`` records one, and lists parse errors in
``info["parse_errors"]``); otherwise, for files written before those fields existed,
the kind is read from the message, whose prefixes are those of the tool layer:

=================  ===============================================================
kind               message
=================  ===============================================================
``malformed_call``  ``tool call N: ...`` / ``found </tool_call> ...`` (parse errors)
``unknown_tool``    ``unknown tool 'x'; available tools: ...``
``bad_arguments``   ``invalid arguments: ...``
``timeout``         ``tool 'x' did not finish within its N s time limit``
``too_many_calls``  ``tool call 'x' skipped: at most N calls are run per message``
``tool_error``      any other failed call (the tool raised, output over the limit, ...)
``no_action``       ``the message has no <tool_call> and no <answer>``
=================  ===============================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["ERROR_KINDS", "classify_call_error", "step_errors"]

ERROR_KINDS: tuple[str, ...] = (
    "malformed_call",
    "unknown_tool",
    "bad_arguments",
    "tool_error",
    "timeout",
    "output_limit",
    "too_many_calls",
    "no_action",
)
"""Kinds of error observations, in display order."""

_NO_ACTION = "the message has no <tool_call> and no <answer>"
# Starts of the parser's messages (agent_gym.tools.parsing); each one error of a malformed block.
_PARSE_ERROR = re.compile(
    r"(?:^|; )(?:tool call \d+(?: \([^)]*\))?: |found </[\w.-]+> without an opening|"
    r"could not parse the message|expected the message as str)"
)


def classify_call_error(message: str) -> str:
    """Kind of the error of one executed tool call, read from its message.

    Args:
        message: ``record["error"]`` of a call in ``info["tool_calls"]``.

    Returns:
        One of :data:`ERROR_KINDS` (``tool_error`` when nothing more specific matches).
    """
    text = message.strip()
    if text.startswith("unknown tool"):
        return "unknown_tool"
    if text.startswith("invalid arguments"):
        return "bad_arguments"
    if " did not finish within " in text or text.startswith("timeout"):
        return "timeout"
    if text.startswith("tool call ") and " skipped: at most " in text:
        return "too_many_calls"
    return "tool_error"


def step_errors(info: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """Error observations of one step, as ``(kind, tool name or None)`` pairs.

    Args:
        info: A step's ``info`` dict as the env and ``TrajectoryWrapper`` record it.

    Returns:
        One pair per error observation the model received at this step.
    """
    out: list[tuple[str, str | None]] = []
    call_errors: list[str] = []
    calls = info.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        error = call.get("error")
        if call.get("ok") is not False and not error:
            continue
        kind = call.get("kind")
        if kind not in ERROR_KINDS:
            kind = classify_call_error(str(error or ""))
        name = call.get("name")
        out.append((kind, name if isinstance(name, str) else None))
        if isinstance(error, str):
            call_errors.append(error)
    recorded = info.get("parse_errors")
    if isinstance(recorded, list):
        # Envs that record their parse errors (AgentEnv does) need no message matching.
        out[:0] = [("malformed_call", None)] * len(recorded)
        return out
    joined = info.get("error")
    if not isinstance(joined, str) or not joined or "tool_calls" not in info:
        # Without a tool_calls record the error is the episode's (policy failure, timeout), not an observation.
        return out
    parse_part = joined
    if call_errors:
        tail = "; ".join(call_errors)
        cut = joined.find(tail)
        parse_part = joined[:cut] if cut >= 0 else ""
    elif joined == _NO_ACTION:
        return [("no_action", None)]
    parse_errors = len(_PARSE_ERROR.findall(parse_part))
    out[:0] = [("malformed_call", None)] * parse_errors
    return out
