"""Re-grade the stored episodes of a results directory with the current grader, without inference.

An env whose outcome is the grade of the final answer alone (it keeps
:meth:`AgentEnv.grade_episode <agent_gym.AgentEnv.grade_episode>`'s default, which grades
nothing more: ToolUse-v0, RAG-v0) is re-graded from what is stored: the last assistant
message is parsed with the env's parser and, when the episode ended on that answer, scored
with the env's current :meth:`score_answer <agent_gym.AgentEnv.score_answer>`. Envs whose
grade needs state that is not stored (the tests of a sandbox, the tools' state after a
conversation: Terminal-v0, SWE-v0, Conversation-v0) cannot be re-verified: they are
skipped and named in the result with the reason.

Only the JSON of each record is read (no tensors are built), so ten thousand episodes
re-grade in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_gym.evaluation.outcome import last_info, success_of
from agent_gym.evaluation.stats import format_summary, summarize
from agent_gym.evaluation.store import CONFIG_FILE, MANIFEST_FILE, EpisodeStore, record_key

__all__ = ["REVERIFY_FILE", "regrader_for", "reverify"]

REVERIFY_FILE = "reverify.json"
"""What :func:`reverify` writes into the results directory."""

_TOLERANCE = 1e-9


def regrader_for(env_id: str, env_kwargs: Mapping[str, Any], parsers: Mapping[str, Any] | None = None) -> Any:
    """The env that re-grades ``env_id``'s answers, or the reason it cannot.

    Args:
        env_id: The registered id.
        env_kwargs: Its ``gym.make`` keyword arguments as run.
        parsers: ``tool_parser``/``reasoning_parser`` names the run's envs used (None: the default).

    Returns:
        The unwrapped env, or a ``str`` saying why its episodes cannot be re-verified.
    """
    import gymnasium as gym

    from agent_gym import AgentEnv
    from agent_gym.envs import register_envs

    register_envs()
    if env_id not in gym.registry:
        return f"{env_id} is not registered in this agent_gym"
    kwargs = dict(env_kwargs)
    for name in ("tool_parser", "reasoning_parser"):
        if parsers and parsers.get(name) and name not in kwargs and "parser" not in kwargs:
            kwargs[name] = parsers[name]
    env = gym.make(env_id, **kwargs).unwrapped
    if not isinstance(env, AgentEnv):
        env.close()
        return f"{env_id} is not an AgentEnv: its grading is not known"
    if type(env).grade_episode is not AgentEnv.grade_episode:
        env.close()
        return (f"{env_id} grades the episode's final state ({type(env).__name__}.grade_episode: tests, sandbox or "
                "tool state), which is not stored: its episodes cannot be re-verified")
    return env


def _regrade(env: Any, record: Mapping[str, Any]) -> tuple[float, bool]:
    """The outcome reward and success of a stored episode under ``env``'s current grader."""
    trajectory = record["trajectory"]
    info = last_info(trajectory)
    steps = trajectory.get("steps") or []
    if info.get("end_reason") != "answer" or not steps:
        return 0.0, success_of({}, 0.0)
    answer = env.parser.parse(str(steps[-1].get("model_response") or "")).answer
    if answer is None:
        return 0.0, False
    res = float(env.rewards.outcome(env.score_answer(trajectory.get("task") or {}, answer)))
    return res, success_of({}, res)


def reverify(store: EpisodeStore) -> dict[str, Any]:
    """Re-grade every scored episode of ``store`` and write ``reverify.json``.

    Args:
        store: A results directory.

    Returns:
        ``{"envs": {env: {"checked", "agreed", "changed": [{"key", "stored", "now"}], "skipped"}},
        "summary": the statistics with the new grades (re-verified envs only), "seconds"}``;
        ``skipped`` is None for a re-verified env, else the reason.

    Raises:
        FileNotFoundError: ``store`` holds no evaluation.
    """
    import time

    started = time.perf_counter()
    config = store.read_json(CONFIG_FILE)
    manifest = store.read_json(MANIFEST_FILE).get("envs", {})
    parsers = config.get("parsers") or {}
    graders: dict[str, Any] = {}
    result: dict[str, dict[str, Any]] = {}
    regraded: list[dict[str, Any]] = []
    seen: set[tuple[str, int, int]] = set()
    try:
        for record in store.records():
            key = record_key(record)
            if not record.get("scored") or key in seen:
                continue
            seen.add(key)
            env_id = key[0]
            if env_id not in graders:
                graders[env_id] = regrader_for(env_id, manifest.get(env_id, {}).get("env_kwargs", {}), parsers)
                result[env_id] = {"checked": 0, "agreed": 0, "changed": [],
                                  "skipped": graders[env_id] if isinstance(graders[env_id], str) else None}
            env = graders[env_id]
            if isinstance(env, str):
                continue
            res, success = _regrade(env, record)
            entry = result[env_id]
            entry["checked"] += 1
            if abs(res - float(record["res_reward"])) <= _TOLERANCE and success == record["success"]:
                entry["agreed"] += 1
            else:
                entry["changed"].append({"key": list(key), "stored": {"res_reward": record["res_reward"],
                                                                      "success": record["success"]},
                                         "now": {"res_reward": res, "success": success}})
            regraded.append({"key": list(key), "res_reward": res, "success": success})
    finally:
        for env in graders.values():
            if not isinstance(env, str):
                env.close()
    plans = {env_id: entry["task_indices"] for env_id, entry in manifest.items()
             if env_id in result and result[env_id]["skipped"] is None}
    summary = summarize(sorted(regraded, key=lambda r: tuple(r["key"])), plans, int(config.get("k", 1)))
    out = {"envs": result, "summary": summary, "summary_text": format_summary(summary),
           "seconds": time.perf_counter() - started}
    store.write_json(REVERIFY_FILE, out)
    return out
