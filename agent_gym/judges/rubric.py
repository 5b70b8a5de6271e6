"""``Rubric``: weighted criteria over episodes (rules, LLM judges, group-relative rankings), outcome and shaping apart.

A rubric scores a *group* of episodes (the samples of one task; a group of one is fine):

* :class:`RuleCriterion` - a function of one episode, in [0, 1] (a rule grader, a format check);
* :class:`JudgeCriterion` - an :class:`~agent_gym.judges.llm.LLMJudge`'s pointwise score of the final answer;
* :class:`RankingCriterion` - the judge scores the group's answers together (in both orders), as RULER
  ranks them: each episode's score is relative to its siblings.

Each criterion is **outcome** (the default: what solving the task pays, ``res_reward``) or **shaping**
(``outcome=False``: added on top, never part of ``res_reward``), so filters and advantages can read the
outcome alone. The outcome is the weighted mean of the outcome criteria, in [0, 1]; the shaping is the
weighted sum of the shaping criteria (its weights are its magnitudes). An outcome criterion may be
**required** (``required=True``): an episode it scores 0 gets outcome 0 whatever the others gave (a hard
requirement, e.g. that the answer states at least one fact asked for, so that no judge can pay an empty
answer). A criterion that cannot score an
episode (its judge failed: :class:`~agent_gym.errors.JudgeError`) leaves that episode with no score at
all: :attr:`RubricScore.failure` is set, and the episode must end ``JUDGE_ERROR``, never with a zero.
"""

from __future__ import annotations

import abc
import asyncio
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agent_gym.errors import ConfigError, JudgeError
from agent_gym.judges.llm import JudgeLog, LLMJudge
from agent_gym.utils.runtime import run_sync

__all__ = ["Criterion", "JudgeCriterion", "JudgedEpisode", "PointwiseJudge", "RankingCriterion", "Rubric",
           "RubricScore", "RuleCriterion"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class JudgedEpisode:
    """What a criterion sees of one episode.

    Attributes:
        question: The task's question.
        reference: The task's reference answer (``ground_truth``, text; "" when none).
        answer: The final answer: the text inside the last ``<answer>`` of the last assistant message,
            else that message's whole text ("" when there is none).
        task: The task dict.
        messages: The conversation (role/content dicts).
    """

    question: str
    reference: str
    answer: str
    task: Mapping[str, Any] = field(default_factory=dict)
    messages: tuple[Mapping[str, str], ...] = ()

    @classmethod
    def from_messages(cls, task: Mapping[str, Any], messages: Sequence[Mapping[str, str]]) -> JudgedEpisode:
        """An episode from its task and conversation."""
        last = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "assistant"), "")
        found = _ANSWER.findall(str(last))
        answer = found[-1].strip() if found else str(last).strip()
        reference = task.get("ground_truth", task.get("reference", ""))
        if isinstance(reference, (list, tuple)):
            reference = " | ".join(map(str, reference))
        return cls(question=str(task.get("question", "")), reference=str(reference), answer=answer,
                   task=dict(task), messages=tuple(dict(m) for m in messages))

    @classmethod
    def from_trajectory(cls, trajectory: Any) -> JudgedEpisode:
        """An episode from a :class:`~agent_gym.types.StepTrajectory` (its task and last step's context)."""
        task = getattr(trajectory, "task", None) or {}
        steps = getattr(trajectory, "steps", None) or []
        messages = list(steps[-1].chat_completions) if steps else []
        if steps and steps[-1].model_response and (not messages or messages[-1].get("role") != "assistant"):
            messages.append({"role": "assistant", "content": steps[-1].model_response})
        return cls.from_messages(task, messages or list(trajectory.chat_completions))


@runtime_checkable
class PointwiseJudge(Protocol):
    """What a :class:`JudgeCriterion` asks: a score in [0, 1] of an answer against the reference.

    :class:`~agent_gym.judges.llm.LLMJudge` (a server) and
    :class:`~agent_gym.judges.probability.ProbabilityJudge` (a local model's verdict probabilities) are two.
    """

    async def ascore(self, question: str, reference: str, answer: str, log: JudgeLog | None = None) -> float:
        """The score, or raise :class:`~agent_gym.errors.JudgeError`."""
        ...


class Criterion(abc.ABC):
    """One weighted part of a :class:`Rubric` (subclasses say how it scores).

    Args:
        name: Its key in the recorded scores.
        weight: Its weight (>= 0).
        outcome: Part of the outcome (``res_reward``; the default) or shaping.
        required: An outcome criterion whose score 0 makes the episode's outcome 0 (see the module doc).
    """

    group_relative = False

    def __init__(self, name: str, weight: float = 1.0, *, outcome: bool = True, required: bool = False) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name: expected a non-empty str, got {name!r}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise ConfigError(f"{name}.weight: expected a finite number >= 0, got {weight!r}")
        if required and not outcome:
            raise ConfigError(f"{name}: a required criterion must be an outcome criterion (outcome=True)")
        self.name, self.weight, self.outcome, self.required = name, float(weight), bool(outcome), bool(required)

    @abc.abstractmethod
    async def ascore_group(self, episodes: Sequence[JudgedEpisode], logs: Sequence[JudgeLog]) -> list[Any]:
        """One score in [0, 1] (or a :class:`~agent_gym.errors.JudgeError`) per episode of the group.

        Args:
            episodes: The group.
            logs: One :class:`~agent_gym.judges.llm.JudgeLog` per episode, for the judge calls made for it.
        """


class RuleCriterion(Criterion):
    """A rule: ``fn(episode) -> float`` in [0, 1] (clipped; a bool counts as 0 or 1).

    Args:
        name: Its key.
        fn: The rule.
        weight: Its weight.
        outcome: Outcome or shaping.
        required: Its score 0 makes the outcome 0.
    """

    def __init__(self, name: str, fn: Callable[[JudgedEpisode], float], weight: float = 1.0, *,
                 outcome: bool = True, required: bool = False) -> None:
        super().__init__(name, weight, outcome=outcome, required=required)
        if not callable(fn):
            raise TypeError(f"{name}: expected a callable rule, got {type(fn).__name__}")
        self.fn = fn

    async def ascore_group(self, episodes: Sequence[JudgedEpisode], logs: Sequence[JudgeLog]) -> list[Any]:
        """The rule's score of each episode."""
        out = []
        for episode in episodes:
            value = float(self.fn(episode))
            out.append(min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0)
        return out


class JudgeCriterion(Criterion):
    """A judge's pointwise score of each episode's final answer against the reference.

    Args:
        name: Its key.
        judge: The judge: an :class:`~agent_gym.judges.llm.LLMJudge` or any :class:`PointwiseJudge`.
        weight: Its weight.
        outcome: Outcome or shaping.
    """

    def __init__(self, name: str, judge: PointwiseJudge, weight: float = 1.0, *, outcome: bool = True) -> None:
        super().__init__(name, weight, outcome=outcome)
        if not callable(getattr(judge, "ascore", None)):
            raise TypeError(f"{name}: expected a judge with ascore(), got {type(judge).__name__}")
        self.judge = judge

    async def ascore_group(self, episodes: Sequence[JudgedEpisode], logs: Sequence[JudgeLog]) -> list[Any]:
        """The judge's pointwise score of each episode (concurrently), or its JudgeError."""

        async def one(episode: JudgedEpisode, log: JudgeLog) -> Any:
            try:
                return await self.judge.ascore(episode.question, episode.reference, episode.answer, log)
            except JudgeError as exc:
                return exc

        return list(await asyncio.gather(*(one(e, log) for e, log in zip(episodes, logs, strict=True))))


class RankingCriterion(Criterion):
    """The judge scores the group's answers together (RULER-style), asked in both orders; relative to the siblings.

    The group's judge calls are recorded in its first episode's log. A failed ranking fails every
    episode of the group.

    Args:
        name: Its key.
        judge: The judge.
        weight: Its weight.
        outcome: Outcome or shaping (group-relative scores are often shaping).
    """

    group_relative = True

    def __init__(self, name: str, judge: LLMJudge, weight: float = 1.0, *, outcome: bool = True) -> None:
        super().__init__(name, weight, outcome=outcome)
        self.judge = judge
        self.position_shifts: list[float] = []

    async def ascore_group(self, episodes: Sequence[JudgedEpisode], logs: Sequence[JudgeLog]) -> list[Any]:
        """The group's scores from one ranking (both orders), or its JudgeError for every episode."""
        if not episodes:
            return []
        first = episodes[0]
        try:
            verdict = await self.judge.arank(first.question, first.reference, [e.answer for e in episodes], logs[0])
        except JudgeError as exc:
            return [exc] * len(episodes)
        self.position_shifts.append(verdict.position_shift)
        return list(verdict.scores)


@dataclass
class RubricScore:
    """What a rubric gave one episode.

    Attributes:
        scores: Each criterion's score in [0, 1] (only those that scored).
        outcome: The weighted mean of the outcome criteria in [0, 1]; None when a criterion failed
            (or the rubric has no outcome criterion).
        shaping: The weighted sum of the shaping criteria (0.0 when a criterion failed).
        failure: The first criterion failure, None when every criterion scored.
        log: The judge calls and cache hits spent on the episode.
    """

    scores: dict[str, float]
    outcome: float | None
    shaping: float
    failure: JudgeError | None
    log: JudgeLog

    def info(self) -> dict[str, Any]:
        """The JSON record of the score (``info["rubric"]``): scores, outcome, shaping, failure, judge usage."""
        return {"scores": dict(self.scores), "outcome": self.outcome, "shaping": self.shaping,
                "failure": None if self.failure is None else {"kind": self.failure.kind, "error": str(self.failure)},
                "judge": self.log.usage()}


class Rubric:
    """Weighted criteria scoring groups of episodes (see the module doc).

    Args:
        criteria: At least one, with distinct names.

    Example:
        >>> rubric = Rubric([RuleCriterion("has_answer", lambda e: bool(e.answer))])
        >>> rubric.score([JudgedEpisode("q", "r", "an answer")])[0].outcome
        1.0
    """

    def __init__(self, criteria: Sequence[Criterion]) -> None:
        criteria = list(criteria)
        if not criteria or not all(isinstance(c, Criterion) for c in criteria):
            raise TypeError("criteria: expected a non-empty sequence of Criterion")
        names = [c.name for c in criteria]
        if len(set(names)) != len(names):
            raise ConfigError(f"criteria: expected distinct names, got {names}")
        self.criteria = criteria

    @property
    def group_relative(self) -> bool:
        """Whether a criterion scores an episode relative to its group (then score whole groups)."""
        return any(c.group_relative for c in self.criteria)

    async def ascore(self, episodes: Sequence[JudgedEpisode]) -> list[RubricScore]:
        """Score one group of episodes (the samples of one task; group criteria compare them).

        Returns:
            One :class:`RubricScore` per episode, in order.
        """
        episodes = list(episodes)
        logs = [JudgeLog() for _ in episodes]
        per_criterion = await asyncio.gather(*(c.ascore_group(episodes, logs) for c in self.criteria))
        out = []
        for i, log in enumerate(logs):
            scores: dict[str, float] = {}
            failure: JudgeError | None = None
            for criterion, values in zip(self.criteria, per_criterion, strict=True):
                value = values[i]
                if isinstance(value, JudgeError):
                    failure = failure or value
                else:
                    scores[criterion.name] = float(value)
            out.append(self._combine(scores, failure, log))
        return out

    def score(self, episodes: Sequence[JudgedEpisode]) -> list[RubricScore]:
        """Blocking :meth:`ascore` (safe where an event loop runs)."""
        policies = {id(j.policy): j.policy for j in self.judges()}
        return run_sync(lambda: self.ascore(episodes), release=list(policies.values()))

    def judges(self) -> list[LLMJudge]:
        """The LLM judges of the criteria (each once)."""
        found: dict[int, LLMJudge] = {}
        for criterion in self.criteria:
            judge = getattr(criterion, "judge", None)
            if isinstance(judge, LLMJudge):
                found.setdefault(id(judge), judge)
        return list(found.values())

    def _combine(self, scores: dict[str, float], failure: JudgeError | None, log: JudgeLog) -> RubricScore:
        if failure is not None:
            return RubricScore(scores=scores, outcome=None, shaping=0.0, failure=failure, log=log)
        outcome_criteria = [c for c in self.criteria if c.outcome]
        total = sum(c.weight for c in outcome_criteria)
        outcome = (sum(c.weight * scores[c.name] for c in outcome_criteria) / total) if total > 0 else None
        if outcome is not None and any(c.required and scores[c.name] <= 0.0 for c in outcome_criteria):
            outcome = 0.0
        shaping = float(sum(c.weight * scores[c.name] for c in self.criteria if not c.outcome))
        return RubricScore(scores=scores, outcome=outcome, shaping=shaping, failure=None, log=log)
