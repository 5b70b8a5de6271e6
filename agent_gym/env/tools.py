"""The tool calls of one assistant message: conversion of an env's tools, the gated loop, records, shaping.

:func:`run_tool_calls` is the loop behind :meth:`agent_gym.env.core.AgentEnv.run_tool_calls`:
each call passes the env's gate, runs (an unknown name is an error), and becomes a ``tool``
message and a record in ``info["tool_calls"]``; errors are joined into ``info["error"]``
with their kinds in ``info["error_kinds"]``, and ``info["toolcall_reward"]`` is the
message's raw shaping (the env then pays it from the episode's budget, see
:class:`~agent_gym.env.rewards.RewardConfig`). :func:`convert_tools` turns tools and plain
callables into the name -> tool map an env runs, with its time and output limits;
:class:`ToolBox` holds an env's own tools and those of the current episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from agent_gym.env.rewards import RewardConfig
from agent_gym.errors import ToolErrorKind
from agent_gym.parsers import ParsedResponse, ToolCall
from agent_gym.tools import Tool, ToolResult, as_tool, unknown_tool_result

__all__ = ["NO_ACTION_ERROR", "NUDGE", "ToolBox", "call_key", "convert_tools", "run_tool_calls"]

NUDGE = (
    "Your message contained neither a tool call nor a final answer. Call a tool with "
    '<tool_call>{"name": ..., "arguments": {...}}</tool_call>, or give the final answer as <answer>...</answer>.'
)
"""The ``user`` message answering an assistant message with no tool call and no answer (hermes' format;
:func:`agent_gym.parsers.instructions.nudge_text` gives another format's)."""

NO_ACTION_ERROR = "the message has no <tool_call> and no <answer>"
"""``info["error"]`` of such a message."""


def call_key(name: str, arguments: Mapping[str, Any]) -> str:
    """A string equal for two calls of the same tool with the same arguments (key order aside)."""
    try:
        return name + "\0" + orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):  # e.g. ints beyond 64 bits, non-str keys
        return name + "\1" + json.dumps(arguments, sort_keys=True, default=str)


def convert_tools(items: Any, where: str, *, time_limit: float | None, max_output_chars: int) -> dict[str, Tool]:
    """Turn tools or callables into a name -> tool map; callables get the given limits.

    Args:
        items: A sequence of :class:`~agent_gym.tools.Tool` objects or callables.
        where: How to name ``items`` in errors (e.g. ``"tools"``).
        time_limit: Seconds a callable may run (None: no limit).
        max_output_chars: Characters of a callable's output kept.

    Raises:
        TypeError: If ``items`` is not a sequence of tools or callables.
        ValueError: If two tools share a name.
    """
    if isinstance(items, (str, bytes, Mapping)) or not hasattr(items, "__iter__"):
        raise TypeError(f"{where}: expected a sequence of tools or callables, got {type(items).__name__}")
    tools: dict[str, Tool] = {}
    for item in items:
        tool = as_tool(item, time_limit=time_limit, max_output_chars=max_output_chars)
        if tool.name in tools:
            raise ValueError(f"{where}: expected unique tool names, got {tool.name!r} twice")
        tools[tool.name] = tool
    return tools


def run_tool_calls(
    parsed: ParsedResponse,
    info: dict[str, Any],
    *,
    tools: Mapping[str, Tool],
    rewards: RewardConfig,
    gate: Callable[[ToolCall, int], ToolResult | None],
    on_result: Callable[[ToolCall, ToolResult], None],
    is_useful: Callable[[str, Mapping[str, Any]], bool],
    add_message: Callable[[str, str], None],
    nudge: str = NUDGE,
    no_action_error: str = NO_ACTION_ERROR,
) -> None:
    """Run the tool calls of one message and record them in ``info``; a message with none gets a nudge.

    Malformed blocks (``parsed.errors``) come first, one ``tool`` error message each. Then
    each call: ``gate(call, index)`` may refuse it (its failed result is the observation);
    otherwise the tool runs and ``on_result`` sees the result. Every call gets a record
    ``{"name", "arguments", "ok", "error", "kind", "output"}`` in ``info["tool_calls"]``.

    Args:
        parsed: The parsed message.
        info: The step's info: ``tool_calls`` is appended to; ``toolcall_reward`` and, for
            error observations, ``error``, ``error_kinds`` (and ``parse_errors``) are set.
        tools: The tools the message may call, by name.
        rewards: The shaping values (``tool_error`` per error, ``tool_success`` once for a
            useful call, ``no_action`` for a message with nothing to do). The sum is the
            message's raw shaping; the per-episode caps are applied by the env
            (:class:`~agent_gym.env.rewards.ShapingBudget`), not here.
        gate: Returns a failed result to refuse a call, or None to run it.
        on_result: Called with each call that ran and its result.
        is_useful: Whether a successful call earns ``tool_success``.
        add_message: Appends a message (role, content) to the conversation.
        nudge: The ``user`` message after a message with nothing to do (in the model's
            tool-call format; default hermes').
        no_action_error: ``info["error"]`` of such a message.
    """
    errors: list[str] = []
    kinds: list[str] = []  # the ToolErrorKind of each error, as info["error_kinds"]
    useful = False
    for problem in parsed.errors:
        errors.append(problem)
        kinds.append(ToolErrorKind.MALFORMED_CALL.value)
        add_message("tool", f"Error: {problem}")
    if parsed.errors:
        info["parse_errors"] = list(parsed.errors)
    for index, call in enumerate(parsed.tool_calls):
        record: dict[str, Any] = {"name": call.name, "arguments": call.arguments}
        result = gate(call, index)
        if result is None:
            tool = tools.get(call.name)
            if tool is None:
                result = unknown_tool_result(call.name, tools)
            else:
                result = tool.run(call.arguments)
                if result.error is None:
                    useful = is_useful(call.name, call.arguments) or useful
                on_result(call, result)
        error, content = result.error, result.content
        kind: str | None = None
        if error is not None:
            kind = ToolErrorKind(getattr(result, "kind", None) or "tool_error").value
            errors.append(error)
            kinds.append(kind)
        record["ok"] = error is None
        record["error"] = error
        record["kind"] = kind
        record["output"] = content
        info["tool_calls"].append(record)
        add_message("tool", content)
    reward = rewards.tool_error * len(errors)
    if useful:
        reward += rewards.tool_success
    if not parsed.tool_calls and not parsed.errors:
        errors.append(no_action_error)
        kinds.append(ToolErrorKind.NO_ACTION.value)
        add_message("user", nudge)
        reward += rewards.no_action
    if errors:
        info["error"] = "; ".join(errors)
        info["error_kinds"] = kinds
    info["toolcall_reward"] = reward


class ToolBox:
    """The tools an env offers: its own, replaced for an episode or during one; schemas serialised once.

    Args:
        items: The env's own tools (tools or callables).
        time_limit: Seconds a callable given as a tool may run (None: no limit), here and later.
        max_output_chars: Characters of a callable's output kept, here and later.

    Attributes:
        own: The env's own tools by name.
        current: The tools calls go to now (``own`` until :meth:`use` gives others).
        changed: True when :meth:`use` replaced the tools during an episode and no info said so yet.
    """

    def __init__(self, items: Any, *, time_limit: float | None, max_output_chars: int) -> None:
        self.time_limit = time_limit
        self.max_output_chars = max_output_chars
        self.own = self.convert(items, "tools")
        self._own_json = orjson.dumps([t.schema for t in self.own.values()])
        self.current = self.own
        self._current_json = self._own_json
        self.changed = False

    def convert(self, items: Any, where: str) -> dict[str, Tool]:
        """``items`` as a name -> tool map with this box's limits (see :func:`convert_tools`)."""
        return convert_tools(items, where, time_limit=self.time_limit, max_output_chars=self.max_output_chars)

    def use(self, tools: dict[str, Tool] | None, *, changed: bool = False) -> None:
        """Make ``tools`` (None: the env's own) the current tools; ``changed`` marks a change mid-episode."""
        if tools is None:
            self.current, self._current_json = self.own, self._own_json
        else:
            self.current = tools
            self._current_json = orjson.dumps([t.schema for t in tools.values()])
        self.changed = changed

    def add_own(self, tools: dict[str, Tool]) -> None:
        """Add ``tools`` (converted, new names) to the env's own tools (current too while they are in use)."""
        clash = sorted(set(tools) & set(self.own))
        if clash:
            raise ValueError(f"tools: expected unique tool names, got {clash[0]!r} twice")
        in_use = self.current is self.own
        self.own.update(tools)
        self._own_json = orjson.dumps([t.schema for t in self.own.values()])
        if in_use:
            self._current_json = self._own_json

    def schemas(self) -> list[dict[str, Any]]:
        """Fresh copies of the current tools' OpenAI function schemas."""
        return orjson.loads(self._current_json)

    def take_change(self) -> bool:
        """True once after a change mid-episode (the info that reports it takes it)."""
        changed, self.changed = self.changed, False
        return changed
