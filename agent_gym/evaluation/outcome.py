"""What an episode achieved: its outcome, never its shaped total.

An episode succeeds when the env says so: a ``success`` flag in the last step's info
(Conversation-v0), the tests' or the patch's ``resolved`` (Terminal-v0 ``tests``, SWE-v0
``swe``), else a positive outcome reward (``res_reward``, the sum of the steps' outcome
rewards; the shaping of tool calls, ``toolcall_reward``, never counts). An episode whose
status is an infrastructure failure (:data:`~agent_gym.integrations.contract.INFRA_FAILURE_STATUSES`)
has no outcome: it is retried and never scored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_gym.integrations.contract import INFRA_FAILURE_STATUSES

__all__ = ["episode_record", "is_infra_failure", "last_info", "success_of"]


def last_info(trajectory: Mapping[str, Any]) -> Mapping[str, Any]:
    """The info of the last step of a trajectory given as a dict ({} without steps)."""
    steps = trajectory.get("steps") or []
    info = steps[-1].get("info") if steps else None
    return info if isinstance(info, Mapping) else {}


def success_of(info: Mapping[str, Any], res_reward: float) -> bool:
    """Whether an episode succeeded, from its last step's info and its outcome reward.

    Args:
        info: The last step's info.
        res_reward: The episode's outcome reward (``metrics["res_reward"]``).

    Returns:
        The env's ``success`` flag, else the ``resolved`` of its ``tests`` or ``swe`` report,
        else ``res_reward > 0``.
    """
    flag = info.get("success")
    if isinstance(flag, bool):
        return flag
    for name in ("tests", "swe"):
        report = info.get(name)
        if isinstance(report, Mapping) and isinstance(report.get("resolved"), bool):
            return bool(report["resolved"])
    return float(res_reward) > 0


def is_infra_failure(status: str) -> bool:
    """Whether an episode status means the infrastructure failed (server down, env error, timeout)."""
    return str(status) in INFRA_FAILURE_STATUSES


def episode_record(key: tuple[str, int, int], attempt: int, trajectory: Any) -> dict[str, Any]:
    """The ``episodes.jsonl`` record of one finished attempt.

    Args:
        key: ``(env id, task index, sample index)``.
        attempt: 1 for the first attempt at the key in this run, 2 for its first retry, ...
        trajectory: The episode's :class:`~agent_gym.types.StepTrajectory`.

    Returns:
        ``key``, ``attempt``, ``status``, ``scored`` (False for an infrastructure failure),
        ``success`` and ``res_reward`` (None when not scored), ``end_reason``, ``error`` and the
        ``trajectory`` as a dict (:meth:`~agent_gym.types.StepTrajectory.to_dict`).
    """
    data = trajectory.to_dict()
    status = str(data.get("status") or "")
    info = last_info(data)
    res_reward = float(data.get("metrics", {}).get("res_reward", 0.0))
    scored = not is_infra_failure(status)
    return {
        "key": list(key),
        "attempt": attempt,
        "status": status,
        "scored": scored,
        "success": success_of(info, res_reward) if scored else None,
        "res_reward": res_reward if scored else None,
        "end_reason": info.get("end_reason"),
        "error": None if scored else str(info.get("error") or info.get("end_reason") or status),
        "trajectory": data,
    }
