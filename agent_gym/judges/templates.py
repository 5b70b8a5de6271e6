"""The prompts an LLM judge is sent: pointwise, pairwise and group ranking, each asking for one JSON verdict.

Each template is plain text with ``{question}``, ``{reference}`` and the answers filled in by
:func:`pointwise_messages`, :func:`pairwise_messages` and :func:`ranking_messages`. The verdict
the reply must end with is read by :mod:`agent_gym.judges.verdicts`; the wording asks for it
exactly, so a judge that follows instructions passes the strict parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent_gym.types import Message

__all__ = ["JudgeTemplates", "pairwise_messages", "pointwise_messages", "ranking_messages"]

_SYSTEM = (
    "You are a strict grader. You compare a candidate answer with the reference answer of a question. "
    "An answer earns credit only for content that agrees with the reference. An empty answer, an answer that only "
    "repeats the question, an answer that says it does not know, and an answer with no content all score {low:g}."
)

_POINTWISE = (
    "Question:\n{question}\n\nReference answer:\n{reference}\n\nCandidate answer:\n{answer}\n\n"
    "Score the candidate answer from {low:g} (wrong or empty) to {high:g} (fully correct). End your reply with one "
    'JSON object and nothing after it: {{"score": <number from {low:g} to {high:g}>}}'
)

_PAIRWISE = (
    "Question:\n{question}\n\nReference answer:\n{reference}\n\nAnswer A:\n{answer_a}\n\nAnswer B:\n{answer_b}\n\n"
    "Which answer agrees better with the reference? End your reply with one JSON object and nothing after it: "
    '{{"winner": "A"}}, {{"winner": "B"}} or {{"winner": "tie"}}'
)

_RANKING = (
    "Question:\n{question}\n\nReference answer:\n{reference}\n\n{answers}\n\n"
    "Score each of the {count} answers from {low:g} (wrong or empty) to {high:g} (fully correct), in the order "
    "given. End your reply with one JSON object and nothing after it: "
    '{{"scores": [<{count} numbers, one per answer>]}}'
)


@dataclass(frozen=True)
class JudgeTemplates:
    """The texts of a judge's prompts (the defaults ask for the verdicts :mod:`~agent_gym.judges.verdicts` reads).

    Attributes:
        system: The system message (``{low}``, ``{high}`` filled in).
        pointwise: ``{question}``, ``{reference}``, ``{answer}``, ``{low}``, ``{high}``.
        pairwise: ``{question}``, ``{reference}``, ``{answer_a}``, ``{answer_b}``.
        ranking: ``{question}``, ``{reference}``, ``{answers}`` (numbered), ``{count}``, ``{low}``, ``{high}``.
    """

    system: str = _SYSTEM
    pointwise: str = _POINTWISE
    pairwise: str = _PAIRWISE
    ranking: str = _RANKING

    def fingerprint(self) -> str:
        """Text that changes whenever a template does (part of the verdict cache's key)."""
        return "\x1f".join((self.system, self.pointwise, self.pairwise, self.ranking))


def _messages(system: str, user: str) -> list[Message]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def pointwise_messages(templates: JudgeTemplates, scale: tuple[float, float], question: str, reference: str,
                       answer: str) -> list[Message]:
    """The messages asking for a pointwise score of ``answer``."""
    low, high = scale
    return _messages(templates.system.format(low=low, high=high),
                     templates.pointwise.format(question=question, reference=reference, answer=answer, low=low,
                                                high=high))


def pairwise_messages(templates: JudgeTemplates, scale: tuple[float, float], question: str, reference: str,
                      answer_a: str, answer_b: str) -> list[Message]:
    """The messages asking which of two answers (A first) is better."""
    low, high = scale
    return _messages(templates.system.format(low=low, high=high),
                     templates.pairwise.format(question=question, reference=reference, answer_a=answer_a,
                                               answer_b=answer_b))


def ranking_messages(templates: JudgeTemplates, scale: tuple[float, float], question: str, reference: str,
                     answers: Sequence[str]) -> list[Message]:
    """The messages asking for one score per answer of a group, in the order given."""
    low, high = scale
    numbered = "\n\n".join(f"Answer {i + 1}:\n{answer}" for i, answer in enumerate(answers))
    return _messages(templates.system.format(low=low, high=high),
                     templates.ranking.format(question=question, reference=reference, answers=numbered,
                                              count=len(answers), low=low, high=high))
