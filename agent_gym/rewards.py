"""``RewardConfig``: the reward values an :class:`~agent_gym.core.AgentEnv` gives per step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["RewardConfig"]


@dataclass(frozen=True)
class RewardConfig:
    """Reward values of an :class:`~agent_gym.core.AgentEnv`.

    ``toolcall_reward`` of a step = ``tool_success`` if at least one call was
    well-formed, succeeded and was useful, plus ``tool_error`` per failed call
    (malformed, unknown tool, bad arguments, exception, time or size limit),
    plus ``no_action`` when the message neither called a tool nor answered.
    ``res_reward`` = ``correct`` times the task score of the answer (in [0, 1]).

    Attributes:
        correct: Reward for a fully correct answer.
        tool_success: Bonus for a step with a useful successful tool call.
        tool_error: Reward per failed tool call (negative).
        no_action: Reward for a message with no tool call and no answer.
    """

    correct: float = 1.0
    tool_success: float = 0.1
    tool_error: float = -0.1
    no_action: float = -0.1

    @classmethod
    def coerce(cls, value: RewardConfig | Mapping[str, float] | None) -> RewardConfig:
        """Build from None (defaults), a mapping of field values, or a RewardConfig."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(asdict(cls())))
            if unknown:
                raise ValueError(f"rewards: expected keys among {list(asdict(cls()))}, got unknown {unknown}")
            return cls(**{k: float(v) for k, v in value.items()})
        raise TypeError(f"rewards: expected RewardConfig, a mapping or None, got {type(value).__name__}")

    def outcome(self, score: float) -> float:
        """``res_reward`` for a task score: ``correct`` times ``score`` clipped to [0, 1]."""
        return self.correct * min(max(float(score), 0.0), 1.0)
