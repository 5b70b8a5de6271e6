"""An env's tools and the tool calls of one assistant message.

:class:`ToolBox` holds an env's own tools and those of the current episode (their schemas
serialised once); :func:`convert_tools` turns tools and plain callables into the name -> tool
map an env runs, with its time and output limits. :meth:`agent_gym.env.core.AgentEnv.run_tool_calls`
runs a message's calls through the env's hooks and records them with a :class:`ToolCallLog`:
each call becomes a ``tool`` message and a record in ``info["tool_calls"]``; errors are joined
into ``info["error"]`` with their kinds in ``info["error_kinds"]``, and ``info["toolcall_reward"]``
is the message's raw shaping (the env then pays it from the episode's budget, see
:class:`~agent_gym.env.rewards.RewardConfig`).

A tool may carry an ``episode_scope``: an object whose ``open_episode(end_episode)`` sets up the
state of one episode outside the env (e.g. a server, see :class:`agent_gym.tools.mcp.MCPTools`) and
returns a handle with ``tools`` (the episode's tools bound to that state, by name) and ``close()``.
:meth:`ToolBox.open_scopes` opens each scope of the current tools once per episode and
:meth:`ToolBox.close_scopes` closes them when the episode is released.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from agent_gym.env.rewards import RewardConfig
from agent_gym.errors import ToolErrorKind
from agent_gym.parsers import ToolCall
from agent_gym.tools import Tool, ToolResult, as_tool

__all__ = ["NO_ACTION_ERROR", "NUDGE", "ToolBox", "ToolCallLog", "call_key", "convert_tools"]

logger = logging.getLogger(__name__)

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


class ToolCallLog:
    """What the tool calls of one assistant message come to in the step's ``info``.

    :meth:`agent_gym.env.core.AgentEnv.run_tool_calls` runs the calls and tells the log about
    each: a malformed block, a call and its result (refused or run), a message with nothing to
    do. Every call becomes a record ``{"name", "arguments", "ok", "error", "kind", "output"}``
    in ``info["tool_calls"]`` at once; :meth:`settle` then sets ``info["error"]`` (the errors
    joined) and ``info["error_kinds"]`` (the :class:`~agent_gym.errors.ToolErrorKind` value of
    each) when there were errors, and ``info["toolcall_reward"]``, the message's raw shaping
    (the env pays it from the episode's budget, see :class:`~agent_gym.env.rewards.ShapingBudget`).

    Args:
        info: The step's info (``tool_calls`` is appended to).

    Attributes:
        useful: True once a successful call earned the ``tool_success`` bonus.
    """

    def __init__(self, info: dict[str, Any]) -> None:
        self.info = info
        self.errors: list[str] = []
        self.kinds: list[str] = []  # the ToolErrorKind of each error, as info["error_kinds"]
        self.useful = False
        self.no_action = False

    def malformed(self, problems: Sequence[str]) -> list[str]:
        """Record the message's malformed call blocks; returns the ``tool`` message of each."""
        if problems:
            self.errors.extend(problems)
            self.kinds.extend([ToolErrorKind.MALFORMED_CALL.value] * len(problems))
            self.info["parse_errors"] = list(problems)
        return [f"Error: {problem}" for problem in problems]

    def add(self, call: ToolCall, result: ToolResult) -> str:
        """Record a call and its result (refused, failed or not); returns its ``tool`` message."""
        kind: str | None = None
        if result.error is not None:
            kind = ToolErrorKind(getattr(result, "kind", None) or "tool_error").value
            self.errors.append(result.error)
            self.kinds.append(kind)
        self.info["tool_calls"].append({"name": call.name, "arguments": call.arguments, "ok": result.error is None,
                                        "error": result.error, "kind": kind, "output": result.content})
        return result.content

    def nothing_to_do(self, error: str) -> None:
        """Record a message with no tool call and no answer; ``error`` becomes its ``info["error"]``."""
        self.errors.append(error)
        self.kinds.append(ToolErrorKind.NO_ACTION.value)
        self.no_action = True

    def settle(self, rewards: RewardConfig) -> None:
        """Set the message's shaping and, after errors, ``info["error"]`` and ``info["error_kinds"]``.

        ``info["toolcall_reward"]`` is ``tool_error`` per error, ``tool_success`` once for a useful
        call and ``no_action`` for a message with nothing to do (the per-episode caps are applied
        by the env, not here).
        """
        reward = rewards.tool_error * (len(self.errors) - self.no_action)
        if self.useful:
            reward += rewards.tool_success
        if self.no_action:
            reward += rewards.no_action
        if self.errors:
            self.info["error"] = "; ".join(self.errors)
            self.info["error_kinds"] = self.kinds
        self.info["toolcall_reward"] = reward


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
        self._scopes: dict[int, Any] = {}  # id(episode_scope) -> the open episode's handle

    def open_scopes(self, end_episode: Callable[..., None]) -> None:
        """Open an episode on each ``episode_scope`` of the current tools not yet open; bind their tools.

        The current tools of each scope are replaced by the handle's tools of the same names (their
        schemas are the same). ``end_episode(status, reason)`` is what a scope calls to end the episode
        (e.g. ``ENV_ERROR`` when its server failed).
        """
        bound: dict[str, Any] = {}
        for tool in self.current.values():
            scope = getattr(tool, "episode_scope", None)
            if scope is None:
                continue
            handle = self._scopes.get(id(scope))
            if handle is None:
                handle = self._scopes[id(scope)] = scope.open_episode(end_episode)
            bound.update(handle.tools)
        if bound:
            self.current = {name: bound.get(name, tool) for name, tool in self.current.items()}

    def close_scopes(self) -> None:
        """Close every episode the scopes opened (a failing close is logged, never raised)."""
        handles, self._scopes = list(self._scopes.values()), {}
        for handle in handles:
            try:
                handle.close()
            except Exception:  # noqa: BLE001 - releasing an episode never fails the next reset
                logger.exception("closing a tool scope's episode failed")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._scopes:  # a copy holds no open episode: its scoped tools are the unbound ones
            state["_scopes"] = {}
            state["current"] = {name: (self.own.get(name, tool) if getattr(tool, "episode_scope", None) else tool)
                                for name, tool in self.current.items()}
        return state

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

    def can_block(self) -> bool:
        """Whether a call to one of the env's own or current tools may block.

        A tool cannot block only when it says so (``blocking`` is False, see
        :func:`~agent_gym.tools.non_blocking`) and has no ``episode_scope`` (opening one starts
        a server or a connection); a tool that does not say is taken to block.
        """
        boxes = (self.own,) if self.current is self.own else (self.own, self.current)
        return any(getattr(tool, "blocking", True) is not False or getattr(tool, "episode_scope", None) is not None
                   for tools in boxes for tool in tools.values())

    def schemas(self) -> list[dict[str, Any]]:
        """Fresh copies of the current tools' OpenAI function schemas."""
        return orjson.loads(self._current_json)

    def take_change(self) -> bool:
        """True once after a change mid-episode (the info that reports it takes it)."""
        changed, self.changed = self.changed, False
        return changed
