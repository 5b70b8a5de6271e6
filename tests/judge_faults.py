"""A judge policy whose replies the tests write, with faults injected the way a judge server fails.

:class:`ScriptedJudge` answers each judge request with a verdict computed from the request itself (the
score of the candidate answer against the reference, by a rule), so the rest of the stack (strict parsing,
cache, rubric, masking) runs on crafted judge outputs. With ``fault_rate`` > 0 a seeded share of requests
fails as real judges do: the server is down (``ServerError``), the request times out, or the reply is
malformed (prose without a verdict, a verdict out of range, two verdicts).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from agent_gym.errors import ServerError
from agent_gym.types import PolicyOutput

__all__ = ["MALFORMED_REPLIES", "ScriptedJudge", "exact_rule", "number_rule"]

MALFORMED_REPLIES = (
    "I think the answer is mostly right.",
    '{"score": 42}',
    '{"score": "high"}',
    'First {"score": 3} then {"score": 9}',
    '```json\n{"grade": 7}\n```',
    "",
)
"""Replies that break the verdict schema, one per way."""

_FIELD = re.compile(r"(Reference answer|Candidate answer):\n(.*?)(?:\n\n|$)", re.DOTALL)
_RANKED = re.compile(r"Answer \d+:\n(.*?)(?=\n\nAnswer \d+:|\n\nScore each)", re.DOTALL)


def exact_rule(reference: str, answer: str) -> float:
    """10 when the answer equals the reference (case and spaces ignored), else 0."""
    return 10.0 if " ".join(answer.lower().split()) == " ".join(reference.lower().split()) else 0.0


def number_rule(reference: str, answer: str) -> float:
    """10 when both are the same number (to 1e-6; else as :func:`exact_rule`), else 0."""
    try:
        return 10.0 if abs(float(answer) - float(reference)) < 1e-6 else 0.0
    except ValueError:
        return exact_rule(reference, answer)


class ScriptedJudge:
    """A policy (``aact`` / ``close_session``) answering judge prompts with rule-made verdicts, some failing.

    Args:
        rule: ``(reference, answer) -> score on 0..10``.
        fault_rate: The share of requests that fail (seeded).
        seed: The faults' seed.
        fail_answers: Candidate answers whose every request fails as unparseable (targeted faults).
    """

    def __init__(self, rule: Callable[[str, str], float] = exact_rule, *, fault_rate: float = 0.0, seed: int = 0,
                 fail_answers: Sequence[str] = ()) -> None:
        self.rule = rule
        self.fault_rate = fault_rate
        self.rng = random.Random(seed)
        self.fail_answers = set(fail_answers)
        self.requests = 0
        self.faults: dict[str, int] = {"down": 0, "timeout": 0, "malformed": 0}

    def close_session(self, session_id: str) -> None:
        """Nothing is kept per session."""

    async def aact(self, messages: Sequence[dict[str, str]], *, session_id: str, tools: Any = None) -> PolicyOutput:
        self.requests += 1
        await asyncio.sleep(0)
        prompt = messages[-1]["content"]
        fields = dict(_FIELD.findall(prompt))
        if fields.get("Candidate answer", "").strip() in self.fail_answers:
            return PolicyOutput(text="no verdict from me")
        if self.fault_rate and self.rng.random() < self.fault_rate:
            fault = self.rng.choice(("down", "timeout", "malformed"))
            self.faults[fault] += 1
            if fault == "down":
                raise ServerError("every server failed: connection refused", server="127.0.0.1:9")
            if fault == "timeout":
                raise ServerError("POST /v1/completions: no response within 5s (timeout)", server="127.0.0.1:9")
            return PolicyOutput(text=self.rng.choice(MALFORMED_REPLIES))
        reference = fields.get("Reference answer", "").strip()
        if "Candidate answer" in fields:
            score = self.rule(reference, fields["Candidate answer"].strip())
            return PolicyOutput(text=f'The answer is judged. {{"score": {score}}}')
        if "Score each" in prompt:
            answers = [a.strip() for a in _RANKED.findall(prompt + "\n\nScore each")]
            scores = [self.rule(reference, a) for a in answers]
            return PolicyOutput(text=f'{{"scores": {scores}}}')
        a, b = re.findall(r"Answer [AB]:\n(.*?)\n\n", prompt, re.DOTALL)
        sa, sb = self.rule(reference, a.strip()), self.rule(reference, b.strip())
        return PolicyOutput(text='{"winner": "%s"}' % ("A" if sa > sb else "B" if sb > sa else "tie"))
