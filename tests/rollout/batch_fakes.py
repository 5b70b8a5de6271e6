"""A fast async policy whose outcome per task and sibling is scripted, for the sampler and filter tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["BEHAVIOURS", "ScriptedOutcomePolicy", "tool_use_tasks"]

BEHAVIOURS = ("right", "wrong", "tool_right", "tool_wrong", "slow_right", "slow_wrong", "raise")
"""right/wrong: answer at once; tool_*: call the calculator first (+ shaping), then answer; slow_*: wait
``slow_s`` seconds (asyncio), then answer; raise: infra failure."""

_CALL = json.dumps({"name": "calculator", "arguments": {"expression": "1 + 2"}})


def tool_use_tasks(n: int, per_family: int = 3) -> list[dict[str, Any]]:
    """The first ``n`` of a small seeded ToolUse-v0 task set."""
    from agent_gym.envs.tool_use.tasks import generate_tasks

    return generate_tasks(per_family=per_family, seed=1)[:n]


class ScriptedOutcomePolicy:
    """Plays each episode as ``plan(task, sample)`` says (one of :data:`BEHAVIOURS`).

    Args:
        tasks: Tasks whose questions it recognises (the answer of a ``right`` episode is the task's
            ``ground_truth``); an unknown question is answered wrong.
        plan: ``(task or None, sample index) -> behaviour``.
        slow_s: The wait of a ``slow_*`` turn.
    """

    def __init__(self, tasks: Sequence[dict[str, Any]],
                 plan: Callable[[dict[str, Any] | None, int], str], slow_s: float = 0.0) -> None:
        self.slow_s = slow_s
        self.by_question = {t["question"]: t for t in tasks}
        self.plan = plan
        self.tools_seen: dict[str, set[str]] = {}
        self.active: set[str] = set()
        self.max_active = 0  # most episodes between their first turn and their end at once

    def _task(self, messages: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
        for message in messages:
            if message["role"] == "user":
                return self.by_question.get(message["content"].strip())
        return None

    async def aact(self, messages: Sequence[dict[str, Any]], *, session_id: str,
                   tools: Sequence[dict[str, Any]] | None = None) -> str:
        self.active.add(session_id)
        self.max_active = max(self.max_active, len(self.active))
        names = {(t.get("function") or t).get("name", "") for t in tools or ()}
        self.tools_seen.setdefault(session_id, set()).update(names)
        task = self._task(messages)
        behaviour = self.plan(task, int(session_id.rsplit("-", 1)[-1]))
        if behaviour == "raise":
            raise RuntimeError("scripted infrastructure failure")
        if behaviour.startswith("slow"):
            await asyncio.sleep(self.slow_s)
        right = task["ground_truth"] if task is not None else "none"
        answer = f"<answer>{right if behaviour.endswith('right') else '-987654.5'}</answer>"
        if behaviour.startswith("tool") and messages[-1]["role"] != "tool":
            return f"<tool_call>\n{_CALL}\n</tool_call>"
        return answer

    def close_session(self, session_id: str) -> None:
        self.active.discard(session_id)
