"""Re-grade a results directory's stored episodes with a rubric (an LLM judge): judge failures are retried, never zeros.

:func:`rejudge` reads each key's stored episode, the scored ones and those that ended ``JUDGE_ERROR``
(their judge failed: they have no grade yet), scores them again with the rubric
(:func:`~agent_gym.judges.judge_trajectories`, grouped by task) and compares with what was stored. An
episode whose judge fails again stays unscored (counted in ``judge_errors``), never a zero; one that
failed before and is scored now counts in ``recovered``. The statistics are those of the new grades.
"""

from __future__ import annotations

import time
from typing import Any

from agent_gym.evaluation.outcome import success_of
from agent_gym.evaluation.stats import format_summary, summarize
from agent_gym.evaluation.store import CONFIG_FILE, MANIFEST_FILE, EpisodeStore, record_key
from agent_gym.judges.apply import judge_trajectories
from agent_gym.judges.rubric import Rubric
from agent_gym.types import EpisodeStatus, StepTrajectory

__all__ = ["REJUDGE_FILE", "rejudge"]

REJUDGE_FILE = "rejudge.json"
"""What :func:`rejudge` writes into the results directory."""

_TOLERANCE = 1e-9


def rejudge(store: EpisodeStore, rubric: Rubric, *, correct: float = 1.0) -> dict[str, Any]:
    """Re-grade ``store``'s scored and judge-failed episodes with ``rubric`` and write ``rejudge.json``.

    Args:
        store: A results directory.
        rubric: The rubric (its judges are called).
        correct: The reward of a fully correct outcome.

    Returns:
        ``{"envs": {env: {"checked", "agreed", "changed", "recovered", "judge_errors"}}, "judging": the judge's
        usage and failures, "summary", "summary_text", "seconds"}``.

    Raises:
        FileNotFoundError: ``store`` holds no evaluation.
    """
    started = time.perf_counter()
    config = store.read_json(CONFIG_FILE)
    manifest = store.read_json(MANIFEST_FILE).get("envs", {})
    chosen: dict[tuple[str, int, int], dict[str, Any]] = {}
    for record in store.records():
        key = record_key(record)
        judged_failure = record.get("status") == EpisodeStatus.JUDGE_ERROR.value
        if (record.get("scored") or judged_failure) and (key not in chosen or not chosen[key].get("scored")):
            chosen[key] = record
    keys = sorted(chosen)
    episodes = [StepTrajectory.from_dict(chosen[key]["trajectory"]) for key in keys]
    report = judge_trajectories(episodes, rubric, correct=correct)
    result: dict[str, dict[str, Any]] = {}
    regraded: list[dict[str, Any]] = []
    for key, episode in zip(keys, episodes, strict=True):
        stored = chosen[key]
        entry = result.setdefault(key[0], {"checked": 0, "agreed": 0, "changed": [], "recovered": 0,
                                           "judge_errors": 0})
        entry["checked"] += 1
        if episode.status == EpisodeStatus.JUDGE_ERROR.value:
            entry["judge_errors"] += 1
            continue
        res = float(episode.metrics["res_reward"])
        success = success_of({}, res)  # the rubric's outcome decides (the env's own flags graded the old answer)
        regraded.append({"key": list(key), "res_reward": res, "success": success})
        if not stored.get("scored"):
            entry["recovered"] += 1
        elif abs(res - float(stored["res_reward"])) <= _TOLERANCE and success == stored["success"]:
            entry["agreed"] += 1
        else:
            entry["changed"].append({"key": list(key), "stored": {"res_reward": stored["res_reward"],
                                                                  "success": stored["success"]},
                                     "now": {"res_reward": res, "success": success}})
    plans = {env_id: entry["task_indices"] for env_id, entry in manifest.items() if env_id in result}
    summary = summarize(sorted(regraded, key=lambda r: tuple(r["key"])), plans, int(config.get("k", 1)))
    out = {"envs": result, "judging": report.to_dict(), "summary": summary, "summary_text": format_summary(summary),
           "seconds": time.perf_counter() - started}
    store.write_json(REJUDGE_FILE, out)
    return out
