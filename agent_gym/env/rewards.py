"""``RewardConfig``: the reward values of an :class:`~agent_gym.env.core.AgentEnv`, and the per-episode shaping caps.

A step's reward has two parts, kept apart in every record: the **outcome**
(``info["res_reward"]``, what solving the task pays) and the **shaping**
(``info["toolcall_reward"]``, small nudges for tool use). The shaping of an episode is
bounded by construction: :class:`ShapingBudget` pays each step's shaping only while the
episode's totals stay within ``bonus_cap`` and ``penalty_cap``, so a policy cannot earn
more by making more calls, however long the episode.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from agent_gym.checks import check_float
from agent_gym.errors import ConfigError

__all__ = ["RewardConfig", "ShapingBudget"]

_SLACK = 1e-9  # a step that fits up to float rounding (0.1 + 0.2 against 0.3) is paid whole


@dataclass(frozen=True)
class RewardConfig:
    """Reward values of an :class:`~agent_gym.env.core.AgentEnv`.

    **Outcome.** ``res_reward`` = ``correct`` times the task score of the answer (or of
    the episode's end grade), clipped to [0, 1].

    **Shaping.** A step's *raw* shaping is ``tool_success`` if at least one call was
    well-formed, succeeded and was useful (by default: not an exact repeat of an earlier
    call of the episode), plus ``tool_error`` per failed call (malformed, unknown tool, bad
    arguments, exception, time or size limit, refused), plus ``no_action`` when the
    message neither called a tool nor answered. What the step gets, ``toolcall_reward``,
    follows one rule (:class:`ShapingBudget`): a step with positive raw shaping is paid from
    the episode's bonus budget, ``bonus_cap`` in all, and a step with negative raw shaping
    from its penalty budget, ``penalty_cap`` in all; once a budget is spent, later steps
    of that sign get 0. The episode's shaping (the sum of its steps' ``toolcall_reward``)
    therefore lies in ``[-penalty_cap, bonus_cap]`` whatever the episode's length, and
    the return with gamma 1 is ``outcome + shaping``; with any gamma in [0, 1] the
    discounted shaping from any step on lies in the same interval (discounting only
    shrinks the bonuses and the penalties).

    **Solving always pays more.** ``bonus_cap + penalty_cap < correct`` is required (unless
    both caps are 0), so every episode that solves its task returns more than every episode
    that does not, whatever calls either made: ``correct - penalty_cap > bonus_cap``. With
    the defaults (``bonus_cap`` = ``tool_success`` = 0.1, ``penalty_cap`` = 0.3,
    ``correct`` = 1) the bonus is paid for the first useful step of an episode only, so no
    policy gains anything by farming calls: a policy that never solves returns at most 0.1,
    one that solves at least 0.7. A trainer that wants the outcome alone reads
    ``res_reward`` (step info) or ``metrics["res_reward"]`` (trajectories).

    Attributes:
        correct: Reward for a fully correct answer.
        tool_success: Raw bonus of a step with a useful successful tool call (>= 0).
        tool_error: Raw reward per failed tool call (<= 0).
        no_action: Raw reward of a message with no tool call and no answer (<= 0).
        bonus_cap: The most the bonuses of one episode add up to (>= 0); None (the
            default): ``tool_success``, one useful step's worth.
        penalty_cap: The most the penalties of one episode take away, as a positive
            number (>= 0).
    """

    correct: float = 1.0
    tool_success: float = 0.1
    tool_error: float = -0.1
    no_action: float = -0.1
    bonus_cap: float | None = None
    penalty_cap: float = 0.3

    def __post_init__(self) -> None:
        check_float("rewards.correct", self.correct)
        check_float("rewards.tool_success", self.tool_success, low=0.0)
        check_float("rewards.tool_error", self.tool_error, high=0.0)
        check_float("rewards.no_action", self.no_action, high=0.0)
        if self.bonus_cap is None:
            object.__setattr__(self, "bonus_cap", float(self.tool_success))
        bonus_cap = check_float("rewards.bonus_cap", self.bonus_cap, low=0.0)
        penalty_cap = check_float("rewards.penalty_cap", self.penalty_cap, low=0.0)
        if (bonus_cap > 0 or penalty_cap > 0) and not bonus_cap + penalty_cap < self.correct:
            raise ConfigError(
                f"rewards: expected bonus_cap + penalty_cap < correct (shaping never outweighs solving), got "
                f"bonus_cap {bonus_cap:g} + penalty_cap {penalty_cap:g} >= correct {self.correct:g}"
            )

    @classmethod
    def coerce(cls, value: RewardConfig | Mapping[str, Any] | None) -> RewardConfig:
        """Build from None (defaults), a mapping of field values, or a RewardConfig.

        Raises:
            TypeError: If ``value`` is none of those, or a field is not a number.
            ValueError: For an unknown key; :class:`~agent_gym.errors.ConfigError` (a
                ``ValueError``) for a value out of its range or caps that outweigh ``correct``.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            names = [f.name for f in fields(cls)]
            unknown = sorted(set(value) - set(names))
            if unknown:
                raise ValueError(f"rewards: expected keys among {names}, got unknown {unknown}")
            kwargs: dict[str, Any] = {}
            for key, item in value.items():
                if item is None and key == "bonus_cap":
                    kwargs[key] = None
                elif isinstance(item, bool) or not isinstance(item, (int, float)):
                    raise TypeError(f"rewards.{key}: expected a number, got {type(item).__name__} {item!r:.40}")
                else:
                    kwargs[key] = float(item)
            return cls(**kwargs)
        raise TypeError(f"rewards: expected RewardConfig, a mapping or None, got {type(value).__name__}")

    def outcome(self, score: float) -> float:
        """``res_reward`` for a task score: ``correct`` times ``score`` clipped to [0, 1]."""
        return self.correct * min(max(float(score), 0.0), 1.0)

    def budget(self) -> ShapingBudget:
        """A fresh :class:`ShapingBudget` for one episode."""
        return ShapingBudget(self)


class ShapingBudget:
    """What one episode's shaping has paid so far; keeps the episode's totals within the caps.

    ``pay(raw)`` returns the part of a step's raw shaping that still fits: a positive
    ``raw`` is paid up to what is left of ``bonus_cap``, a negative one down to what is left
    of ``penalty_cap``; the rest is dropped (later steps of a spent budget get 0).

    Args:
        config: The env's reward values.

    Attributes:
        bonus: The bonuses paid so far (in ``[0, bonus_cap]``).
        penalty: The penalties paid so far (in ``[-penalty_cap, 0]``).

    Example:
        >>> budget = RewardConfig().budget()
        >>> [budget.pay(r) for r in (0.1, 0.1, -0.1, -0.2, -0.1)]
        [0.1, 0.0, -0.1, -0.2, 0.0]
    """

    def __init__(self, config: RewardConfig) -> None:
        self.config = config
        self.bonus = 0.0
        self.penalty = 0.0

    def pay(self, raw: float) -> float:
        """The step's shaping for a raw step shaping of ``raw``, counted against the budget.

        Raises:
            ValueError: If ``raw`` is not a finite number.
        """
        raw = float(raw)
        if not math.isfinite(raw):
            raise ValueError(f"shaping: expected a finite step shaping, got {raw!r}")
        if raw > 0:
            left = max(0.0, float(self.config.bonus_cap or 0.0) - self.bonus)
            paid = raw if raw <= left + _SLACK else left
            self.bonus += paid
        elif raw < 0:
            left = max(0.0, self.config.penalty_cap + self.penalty)
            paid = raw if -raw <= left + _SLACK else -left
            self.penalty += paid
        else:
            paid = 0.0
        return paid + 0.0  # never -0.0
