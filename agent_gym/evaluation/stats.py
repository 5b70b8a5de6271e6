"""The statistics of an evaluation: unbiased pass@k and pass^k with intervals, per env.

For each env, the scored episodes are grouped by task (``n`` samples, ``c`` successes).
pass@k is the mean over tasks of :func:`~agent_gym.report.stats.pass_at_k` (at least one of
``k`` samples succeeds) and pass^k the mean of :func:`~agent_gym.report.stats.pass_hat_k`
(all ``k`` succeed); a task with fewer than ``k`` scored samples (its other samples failed
for infrastructure reasons every time) is left out of that ``k``. The 95% intervals are
Wilson intervals with the tasks as units (:func:`~agent_gym.report.stats.mean_wilson_interval`);
the success rate's is Wilson over the episodes. Infrastructure failures are counted, never
scored. Everything is computed from the records in key order, so it does not depend on
the order episodes finished in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent_gym.report.stats import mean_wilson_interval, pass_at_k, pass_hat_k, wilson_interval

__all__ = ["format_summary", "k_values", "summarize"]


def k_values(k: int) -> list[int]:
    """The ``k`` reported for ``k`` samples per task: 1, the powers of two below ``k``, and ``k``."""
    values, power = [1], 2
    while power < k:
        values.append(power)
        power *= 2
    if k > 1:
        values.append(k)
    return values


def _estimates(groups: Sequence[tuple[int, int]], k: int, hat: bool) -> dict[str, Any]:
    values = [(pass_hat_k if hat else pass_at_k)(n, c, k) for n, c in groups if n >= k]
    if not values:
        return {"value": None, "ci95": None, "tasks": 0}
    low, high = mean_wilson_interval(values)
    return {"value": sum(values) / len(values), "ci95": [low, high], "tasks": len(values)}


def summarize(records: Iterable[Mapping[str, Any]], plans: Mapping[str, Sequence[int]], k: int,
              infra_attempts: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Statistics per env from scored episode records.

    Args:
        records: Scored records (``key``, ``success``, ``res_reward``), one per key.
        plans: Env id -> its evaluated task indices.
        k: Samples per task asked for.
        infra_attempts: Env id -> attempts that failed for infrastructure reasons.

    Returns:
        ``{"k", "envs": {env: {...}}}``; each env has ``tasks``, ``planned_episodes``,
        ``scored_episodes``, ``missing_episodes`` (keys without a scored episode),
        ``infra_failures``, ``successes``, ``success_rate`` and ``success_ci95``,
        ``mean_res_reward``, ``pass_at_k`` and ``pass_hat_k`` (``{k: {value, ci95, tasks}}``).
    """
    by_task: dict[str, dict[int, list[Mapping[str, Any]]]] = {
        env: {t: [] for t in tasks} for env, tasks in plans.items()
    }
    for record in records:
        env, task, _ = record["key"]
        if env in by_task and task in by_task[env]:
            by_task[env][task].append(record)
    infra = dict(infra_attempts or {})
    envs: dict[str, Any] = {}
    for env, tasks in by_task.items():
        groups = [(len(rs), sum(1 for r in rs if r["success"])) for _, rs in sorted(tasks.items()) if rs]
        scored = sum(n for n, _ in groups)
        successes = sum(c for _, c in groups)
        rewards = [float(r["res_reward"]) for rs in tasks.values() for r in rs]
        low, high = wilson_interval(successes, scored)
        envs[env] = {
            "tasks": len(tasks),
            "planned_episodes": len(tasks) * k,
            "scored_episodes": scored,
            "missing_episodes": len(tasks) * k - scored,
            "infra_failures": int(infra.get(env, 0)),
            "successes": successes,
            "success_rate": successes / scored if scored else None,
            "success_ci95": [low, high] if scored else None,
            "mean_res_reward": sum(rewards) / len(rewards) if rewards else None,
            "pass_at_k": {str(j): _estimates(groups, j, hat=False) for j in k_values(k)},
            "pass_hat_k": {str(j): _estimates(groups, j, hat=True) for j in k_values(k)},
        }
    return {"k": k, "envs": envs}


def _cell(estimate: Mapping[str, Any] | None) -> str:
    if not estimate or estimate.get("value") is None:
        return "-"
    low, high = estimate["ci95"]
    return f"{estimate['value']:.3f} [{low:.3f}, {high:.3f}]"


def format_summary(summary: Mapping[str, Any]) -> str:
    """The statistics as a text table: one block per env."""
    lines: list[str] = []
    for env, stats in summary["envs"].items():
        rate = stats["success_rate"]
        rows = [
            ("tasks", str(stats["tasks"])),
            ("episodes scored", f"{stats['scored_episodes']} of {stats['planned_episodes']}"),
            ("infra failures", f"{stats['infra_failures']} (retried, never scored)"),
            ("success rate", "-" if rate is None else
             f"{rate:.3f} [{stats['success_ci95'][0]:.3f}, {stats['success_ci95'][1]:.3f}]"),
        ]
        rows += [(f"pass@{j}", _cell(v)) for j, v in stats["pass_at_k"].items()]
        rows += [(f"pass^{j}", _cell(v)) for j, v in stats["pass_hat_k"].items()]
        width = max(len(name) for name, _ in rows)
        lines.append(f"{env} (95% intervals)")
        lines += [f"  {name:<{width}} | {value}" for name, value in rows]
    return "\n".join(lines)
