"""What an episode's outcome is, and which episodes have none: the one reading shared by the sampler and the filter.

The outcome of an episode is its answer's score, ``metrics["res_reward"]`` (the sum of the steps'
``info["res_reward"]``), never the shaped total ``trajectory_reward`` (which adds the tool-call
shaping ``toolcall_reward``): two episodes that differ only in shaping have the same outcome. An
episode *succeeded* when its outcome is > 0 (the report's definition). An episode that ended for
infrastructure reasons (:data:`~agent_gym.integrations.contract.INFRA_FAILURE_STATUSES`: env
error, policy error, timeout) has no outcome: it is *invalid*, never counted as a failure.

Example:
    >>> from agent_gym.rollout.outcome import OUTCOMES
    >>> OUTCOMES
    ('res_reward', 'success')
"""

from __future__ import annotations

from typing import Any

from agent_gym.integrations.contract import is_infra_failure

__all__ = ["OUTCOMES", "is_valid", "outcome_of", "succeeded"]

OUTCOMES = ("res_reward", "success")
"""The outcome readings: the answer's score, or 1.0/0.0 for success (``res_reward > 0``)."""


def is_valid(trajectory: Any) -> bool:
    """Whether the episode has an outcome (it did not end for infrastructure reasons)."""
    return not is_infra_failure(trajectory)


def succeeded(trajectory: Any) -> bool:
    """Whether the episode's answer earned a positive ``res_reward``."""
    return float(trajectory.metrics.get("res_reward", 0.0)) > 0


def outcome_of(trajectory: Any, outcome: str = "res_reward") -> float:
    """The episode's outcome: ``metrics["res_reward"]``, or ``1.0``/``0.0`` for ``outcome="success"``.

    Args:
        trajectory: An episode (its ``metrics`` are read).
        outcome: One of :data:`OUTCOMES`.

    Raises:
        ValueError: ``outcome`` is not one of :data:`OUTCOMES`.
    """
    if outcome == "res_reward":
        return float(trajectory.metrics.get("res_reward", 0.0))
    if outcome == "success":
        return 1.0 if succeeded(trajectory) else 0.0
    raise ValueError(f"outcome: expected one of {OUTCOMES}, got {outcome!r}")
