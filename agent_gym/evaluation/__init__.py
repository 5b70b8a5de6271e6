"""Evaluation of a policy on agent_gym envs: k samples per task, pass@k and pass^k, crash-safe resume.

The ``agent-gym eval`` command is a thin layer over this package:

* :mod:`~agent_gym.evaluation.plan` - the evaluated tasks of each env and their data hash;
* :mod:`~agent_gym.evaluation.store` - the results directory and its append-only, fsynced episode log;
* :mod:`~agent_gym.evaluation.outcome` - an episode's success (its outcome, never the shaped total);
* :mod:`~agent_gym.evaluation.runner` - run the episodes not yet scored, retrying infrastructure failures;
* :mod:`~agent_gym.evaluation.stats` - unbiased pass@k and pass^k with Wilson intervals, per env;
* :mod:`~agent_gym.evaluation.reverify` - re-grade stored episodes with the current grader.

Example:
    >>> from agent_gym.evaluation import EpisodeStore, finish, prepare, run_pending  # doctest: +SKIP
    >>> store = EpisodeStore("results")  # doctest: +SKIP
    >>> plans = prepare(store, {"envs": ["agent_gym/ToolUse-v0"], "k": 4, "tasks": 50, "seed": 0})  # doctest: +SKIP
    >>> await run_pending(store, plans, policy, k=4, seed=0)  # doctest: +SKIP
    >>> print(finish(store, plans, k=4))  # doctest: +SKIP
"""

from __future__ import annotations

from agent_gym.evaluation.outcome import episode_record, is_infra_failure, success_of
from agent_gym.evaluation.plan import EnvPlan, episode_specs, plan_env
from agent_gym.evaluation.reverify import reverify
from agent_gym.evaluation.runner import RunCounts, finish, pending_keys, prepare, run_pending
from agent_gym.evaluation.stats import format_summary, k_values, summarize
from agent_gym.evaluation.store import AppendLog, EpisodeStore, read_records, tasks_hash

__all__ = [
    "AppendLog",
    "EnvPlan",
    "EpisodeStore",
    "RunCounts",
    "episode_record",
    "episode_specs",
    "finish",
    "format_summary",
    "is_infra_failure",
    "k_values",
    "pending_keys",
    "plan_env",
    "prepare",
    "read_records",
    "reverify",
    "run_pending",
    "success_of",
    "summarize",
    "tasks_hash",
]
