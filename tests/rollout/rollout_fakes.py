"""Small deterministic envs, tools and policies shared by the rollout, engine, export and CLI tests."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.env.core import AgentEnv
from agent_gym.tools import FunctionTool, ToolResult
from agent_gym.types import PolicyOutput

__all__ = [
    "ADD_TASKS",
    "CrashingTool",
    "FailingPolicy",
    "ScriptedPolicy",
    "add",
    "make_add_env",
    "make_tasks",
    "strip_timings",
]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First addend.
        b: Second addend.

    Returns:
        The sum.
    """
    return a + b


def slow_add(a: int, b: int) -> int:
    """Add two integers slowly (blocking sleep of 0.2 s).

    Args:
        a: First addend.
        b: Second addend.

    Returns:
        The sum.
    """
    time.sleep(0.2)
    return a + b


def hang_add(a: int, b: int) -> int:
    """Add two integers, hanging for 3 s when a == 13.

    Args:
        a: First addend.
        b: Second addend.

    Returns:
        The sum.
    """
    if a == 13:
        time.sleep(3.0)
    return a + b


class CrashingTool:
    """A tool breaking the ``Tool`` contract: ``run`` raises when ``a == 13``."""

    name = "add"

    @property
    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers.",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
        }

    def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        if arguments.get("a") == 13:
            raise RuntimeError("tool crashed")
        return ToolResult(content=str(int(arguments["a"]) + int(arguments["b"])))


def make_tasks(n: int, offset: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": f"add-{i}", "question": f"What is {i} + {i + 1}?", "ground_truth": str(2 * i + 1)}
        for i in range(offset, offset + n)
    ]


ADD_TASKS = make_tasks(8)


def make_add_env(tool: Any = add, max_steps: int = 4, tasks: Sequence[dict[str, Any]] | None = None) -> AgentEnv:
    """An env whose only tool is called ``add`` (plain functions run inline, with no time limit)."""
    if callable(tool) and not hasattr(tool, "run"):
        tool = FunctionTool(tool, name="add", time_limit=None)
    return AgentEnv(tasks=list(tasks or ADD_TASKS), tools=[tool], max_steps=max_steps)


_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


class ScriptedPolicy:
    """Deterministic string policy: call ``add`` for the question, then answer with the tool result.

    Args:
        delay: Seconds each turn takes (``asyncio.sleep``).
        fail_on: Question operand ``a`` for which the policy raises.
    """

    def __init__(self, delay: float = 0.0, fail_on: int | None = None) -> None:
        self.delay = delay
        self.fail_on = fail_on
        self.sessions: set[str] = set()
        self.closed: list[str] = []

    def _answer(self, messages: Sequence[Mapping[str, str]]) -> str:
        last = messages[-1]
        if last["role"] == "tool":
            return f"<answer>{last['content'].strip()}</answer>"
        match = _QUESTION.search(last["content"])
        if match is None:
            return "<answer>unknown</answer>"
        a, b = int(match.group(1)), int(match.group(2))
        if self.fail_on is not None and a == self.fail_on:
            raise RuntimeError("policy exploded")
        call = json.dumps({"name": "add", "arguments": {"a": a, "b": b}})
        return f"<think>add them</think>\n<tool_call>\n{call}\n</tool_call>"

    def act(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> str:
        self.sessions.add(session_id)
        if self.delay:
            time.sleep(self.delay)
        return self._answer(messages)

    async def aact(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> str:
        self.sessions.add(session_id)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._answer(messages)

    def close_session(self, session_id: str) -> None:
        self.closed.append(session_id)


class FailingPolicy(ScriptedPolicy):
    """Returns a ``PolicyOutput`` with finish_reason ``error`` on every turn."""

    async def aact(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> Any:
        return PolicyOutput(text="", finish_reason="error", error="server down")


def strip_timings(record: dict[str, Any]) -> dict[str, Any]:
    """A trajectory dict without run-specific values (ids, times) for comparisons."""
    out = dict(record)
    out.pop("rollout_id", None)
    out["metrics"] = {k: v for k, v in out["metrics"].items() if not k.endswith("_time")}
    steps = []
    for step in out.get("steps", []):
        step = dict(step)
        step["info"] = {k: v for k, v in step["info"].items() if not k.endswith("_time") and k != "episode_id"}
        steps.append(step)
    out["steps"] = steps
    return out
