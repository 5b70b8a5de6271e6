"""``Grade``: what :meth:`AgentEnv.grade_episode <agent_gym.env.core.AgentEnv.grade_episode>` returns.

An episode's end grade is a score, or no score, or the news that grading could not grade
(an infrastructure failure: the tests did not run, a grading sandbox did not start). The last
one is not a wrong answer: the step that ends the episode then reports ``ENV_ERROR`` with the
grade's reason, and trainers mask the episode instead of learning from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_gym.types import EpisodeStatus

__all__ = ["Grade"]


@dataclass(frozen=True)
class Grade:
    """The end grade of an episode (see :meth:`~agent_gym.env.core.AgentEnv.grade_episode`).

    Build one with :meth:`scored`, :meth:`ungraded`, :meth:`infra_failure` or :meth:`judge_failure`.

    Attributes:
        score: A score in [0, 1] (clipped): the step's ``res_reward`` gains ``rewards.correct * score``;
            None adds nothing.
        status: None keeps the status the episode ended with; otherwise the episode ends with this
            one (``terminated`` for ENV_DONE, ``truncated`` for any other).
        reason: None keeps the episode's ``info["end_reason"]``; otherwise it replaces it.
    """

    score: float | None = None
    status: EpisodeStatus | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.score is not None:
            score = _as_score(self.score)
            if score is None:
                raise TypeError(f"score: expected a float or None, got {type(self.score).__name__}")
            object.__setattr__(self, "score", score)
        if self.status is not None:
            try:
                object.__setattr__(self, "status", EpisodeStatus(self.status))
            except ValueError:
                raise ValueError(f"status: expected an EpisodeStatus or None, got {self.status!r}") from None
        if self.reason is not None and (not isinstance(self.reason, str) or not self.reason):
            raise TypeError(f"reason: expected a non-empty str or None, got {self.reason!r}")

    @classmethod
    def scored(cls, score: float) -> Grade:
        """A verdict on the work: ``score`` in [0, 1], the episode's status and reason kept.

        Args:
            score: The score (clipped to [0, 1] when it is paid).
        """
        return cls(score=score)

    @classmethod
    def ungraded(cls) -> Grade:
        """No end grade: nothing is added to the reward, the episode's status and reason are kept."""
        return cls()

    @classmethod
    def infra_failure(cls, reason: str) -> Grade:
        """Grading could not grade (not the agent's doing): no reward, the episode ends ENV_ERROR.

        Args:
            reason: The episode's ``info["end_reason"]`` (e.g. ``"grading_error"``).
        """
        return cls(status=EpisodeStatus.ENV_ERROR, reason=reason)

    @classmethod
    def judge_failure(cls, reason: str) -> Grade:
        """A judge could not score the episode (down, timed out, unparseable): no reward, the episode ends JUDGE_ERROR.

        Args:
            reason: The episode's ``info["end_reason"]`` (e.g. ``"judge_error"``).
        """
        return cls(status=EpisodeStatus.JUDGE_ERROR, reason=reason)

    @classmethod
    def coerce(cls, value: Grade | float | None | Any) -> Grade:
        """``value`` as a Grade: a Grade as it is, a number as :meth:`scored`, None as :meth:`ungraded`.

        ``grade_episode`` overrides written before :class:`Grade` existed return a float (or any
        number, ``bool`` included) or None; they keep working unchanged.

        Args:
            value: What ``grade_episode`` returned.

        Raises:
            TypeError: For anything else (text included).
        """
        if isinstance(value, Grade):
            return value
        if value is None:
            return cls.ungraded()
        score = _as_score(value)
        if score is None:
            raise TypeError(f"grade_episode: expected a Grade, a float or None, got {type(value).__name__}")
        return cls.scored(score)


def _as_score(value: Any) -> float | None:
    """``value`` as a float when it is a number (``bool``, NumPy and 0-d tensor values included; never text)."""
    if isinstance(value, (str, bytes)) or not hasattr(type(value), "__float__"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
