"""A deterministic answering policy for evaluation tests: right or wrong by a hash of the episode id."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.envs.tool_use.tasks import shared_builtin_tasks


class AnswerPolicy:
    """Answers ToolUse-v0 questions at once: right unless the episode id hashes into ``wrong_share``.

    Args:
        wrong_share: Share of episodes answered wrongly (by a hash of the session id).
        fail_first: Session id -> how many first calls raise (an infrastructure failure).
    """

    def __init__(self, wrong_share: float = 0.4, fail_first: Mapping[str, int] | None = None) -> None:
        self.truth = {t["question"]: str(t["ground_truth"]) for t in shared_builtin_tasks()}
        self.wrong_share = wrong_share
        self.fail_first = dict(fail_first or {})
        self.calls: dict[str, int] = {}

    def act(self, messages: Sequence[Mapping[str, str]], *, session_id: str, tools: Any = None) -> str:
        self.calls[session_id] = self.calls.get(session_id, 0) + 1
        if self.calls[session_id] <= self.fail_first.get(session_id, 0):
            raise ConnectionError("server down")
        digest = int(hashlib.sha256(session_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        question = next(m["content"] for m in messages if m["role"] == "user")
        answer = "-12345" if digest < self.wrong_share else self.truth[question]
        return f"<answer>{answer}</answer>"

    def close_session(self, session_id: str) -> None:
        """Nothing to release."""
