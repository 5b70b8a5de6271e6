"""Run an evaluation into a results directory, and resume one.

:func:`prepare` plans the envs (:func:`~agent_gym.evaluation.plan.plan_env`) and writes
``config.json`` and ``manifest.json`` of a new directory, or, resuming, checks that every
env's tasks still hash as recorded. :func:`run_pending` runs every key without a scored
record on one :class:`~agent_gym.rollout.runner.EpisodeRunner`, appending each finished
attempt to ``episodes.jsonl`` (fsynced) as it ends; an attempt that failed for
infrastructure reasons is recorded unscored and run again, up to ``retries`` times.
:func:`finish` computes the statistics from the directory and writes the summary.

Because the statistics are computed from the records in key order and each key's episode
id (hence its seeded sampling) depends on the key only, a run interrupted at any moment
(``kill -9`` included) and resumed ends with the statistics of an uninterrupted run.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_gym.errors import ConfigError
from agent_gym.evaluation.outcome import episode_record
from agent_gym.evaluation.plan import EnvPlan, episode_specs, plan_env
from agent_gym.evaluation.stats import format_summary, summarize
from agent_gym.evaluation.store import (
    CONFIG_FILE,
    FORMAT_VERSION,
    MANIFEST_FILE,
    SUMMARY_FILE,
    SUMMARY_TEXT_FILE,
    EpisodeStore,
    record_key,
)

__all__ = ["RunCounts", "finish", "pending_keys", "prepare", "run_pending"]


@dataclass
class RunCounts:
    """What one :func:`run_pending` call did.

    Attributes:
        scored: Episodes scored.
        infra_failures: Attempts that failed for infrastructure reasons (each recorded, unscored).
        given_up: Keys still unscored after their retries.
    """

    scored: int = 0
    infra_failures: int = 0
    given_up: int = 0


def prepare(store: EpisodeStore, config: Mapping[str, Any], *, resume: bool = False) -> dict[str, EnvPlan]:
    """Plan the envs of ``config`` and write (or, resuming, check) the directory's config and manifest.

    Args:
        store: The results directory.
        config: ``envs``, ``tasks`` (None: all), ``split``, ``seed``, ``env_kwargs`` and whatever
            else describes the run (written to ``config.json`` as given).
        resume: The directory holds this run already: check that each env's tasks hash as
            recorded instead of writing.

    Returns:
        Env id -> its plan.

    Raises:
        ConfigError: A new run in a directory that holds one, or a resumed run whose envs or
            tasks changed.
    """
    plans = {env_id: plan_env(env_id, num_tasks=config.get("tasks"), split=config.get("split"),
                              seed=int(config.get("seed", 0)), env_kwargs=config.get("env_kwargs"))
             for env_id in config["envs"]}
    manifest = {"format": FORMAT_VERSION, "envs": {env_id: plan.manifest() for env_id, plan in plans.items()}}
    if resume:
        recorded = store.read_json(MANIFEST_FILE).get("envs", {})
        for env_id, plan in plans.items():
            before = recorded.get(env_id, {})
            if before.get("tasks_sha256") != plan.data_hash or before.get("task_indices") != list(plan.task_indices):
                raise ConfigError(
                    f"{env_id}: its tasks changed since the run in {store.root} started (tasks hash "
                    f"{before.get('tasks_sha256')}, now {plan.data_hash}); start a new evaluation in another directory"
                )
        return plans
    if store.exists():
        raise ConfigError(f"{store.root} holds an evaluation already: resume it with --resume, or choose another --out")
    store.write_json(MANIFEST_FILE, manifest)
    store.write_json(CONFIG_FILE, {"format": FORMAT_VERSION, **config})  # last: a directory with it is complete
    return plans


def pending_keys(plans: Mapping[str, EnvPlan], k: int,
                 records: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, int]]:
    """The keys of ``plans`` (each task ``k`` times) without a scored record, in key order."""
    done = {record_key(r) for r in records if r.get("scored")}
    return [(env_id, task, sample) for env_id, plan in plans.items() for task in plan.task_indices
            for sample in range(k) if (env_id, task, sample) not in done]


async def run_pending(
    store: EpisodeStore,
    plans: Mapping[str, EnvPlan],
    policy: Any,
    *,
    k: int,
    seed: int,
    n_parallel: int = 8,
    retries: int = 2,
    max_steps: int | None = None,
    episode_timeout: float | None = None,
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
    retry_delay: float = 1.0,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> RunCounts:
    """Run every key without a scored record; record each attempt as it ends.

    Args:
        store: The results directory (its episode log is appended to).
        plans: Env id -> plan, from :func:`prepare`.
        policy: The policy (``aact``/``act``); seeded sampling makes the run repeatable.
        k: Samples per task.
        seed: The evaluation's seed (reset seeds and episode ids).
        n_parallel: Episodes in flight.
        retries: Further attempts at a key whose attempt failed for infrastructure reasons.
        max_steps: Turn limit of the envs (None: each env's default).
        episode_timeout: Seconds before an episode ends with ``TIMEOUT`` (an infrastructure failure).
        tool_parser: The envs' tool-call parser by vLLM's name (None: the policy's family).
        reasoning_parser: The envs' reasoning parser likewise.
        retry_delay: Seconds before a retry, times the attempt number.
        on_record: Called with each record once it is on disk.

    Returns:
        The counts of this call.
    """
    from agent_gym.rollout.runner import EpisodeRunner

    keys = pending_keys(plans, k, store.records())
    counts = RunCounts()
    if not keys:
        return counts
    specs = dict(zip(keys, episode_specs(plans, keys, seed), strict=True))
    queue: asyncio.Queue[tuple[str, int, int]] = asyncio.Queue()
    for key in keys:
        queue.put_nowait(key)
    runner = EpisodeRunner(None, policy, n_parallel=n_parallel, max_steps=max_steps, episode_timeout=episode_timeout,
                           tool_parser=tool_parser, reasoning_parser=reasoning_parser)

    async def work(log: Any) -> None:
        while not queue.empty():
            key = queue.get_nowait()
            for attempt in range(1, retries + 2):
                if attempt > 1:
                    await asyncio.sleep(retry_delay * (attempt - 1))
                trajectory = await runner.run_episode(specs[key])
                record = episode_record(key, attempt, trajectory)
                await asyncio.to_thread(log.append, record)  # the fsync does not hold up the other episodes
                if on_record is not None:
                    on_record(record)
                if record["scored"]:
                    counts.scored += 1
                    break
                counts.infra_failures += 1
            else:
                counts.given_up += 1

    try:
        with store.open_append() as log:
            await asyncio.gather(*(work(log) for _ in range(min(n_parallel, len(keys)))))
    finally:
        runner.close()
    return counts


def finish(store: EpisodeStore, plans: Mapping[str, EnvPlan], k: int) -> dict[str, Any]:
    """Compute the statistics of the directory's episodes and write ``summary.json`` and ``summary.txt``.

    Returns:
        The summary (see :func:`~agent_gym.evaluation.stats.summarize`).
    """
    records = store.records()
    scored: dict[tuple[str, int, int], Mapping[str, Any]] = {}
    for record in records:
        if record.get("scored"):
            scored.setdefault(record_key(record), record)
    infra = Counter(record_key(r)[0] for r in records if not r.get("scored"))
    summary = summarize([scored[key] for key in sorted(scored)], {e: p.task_indices for e, p in plans.items()}, k,
                        infra)
    store.write_json(SUMMARY_FILE, summary)
    store.write_text(SUMMARY_TEXT_FILE, format_summary(summary) + "\n")
    return summary
