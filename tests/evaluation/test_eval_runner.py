"""run_pending / finish / reverify in-process, with a deterministic answering policy."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from eval_fakes import AnswerPolicy

from agent_gym.errors import ConfigError
from agent_gym.evaluation import EpisodeStore, finish, pending_keys, prepare, reverify, run_pending
from agent_gym.evaluation.store import read_records

ENV = "agent_gym/ToolUse-v0"
CONFIG = {"envs": [ENV], "k": 3, "tasks": 6, "seed": 7, "split": None}


def _run(store: EpisodeStore, policy: AnswerPolicy, *, retries: int = 2, resume: bool = False) -> tuple:
    plans = prepare(store, CONFIG, resume=resume)
    counts = asyncio.run(run_pending(store, plans, policy, k=3, seed=7, n_parallel=4, retries=retries,
                                     retry_delay=0.0))
    return plans, counts, finish(store, plans, 3)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    store = EpisodeStore(tmp_path_factory.mktemp("full"))
    plans, counts, summary = _run(store, AnswerPolicy())
    return store, plans, counts, summary


def test_a_run_scores_every_key_and_the_summary_has_pass_at_k_and_pass_hat_k(full_run):
    store, plans, counts, summary = full_run
    stats = summary["envs"][ENV]
    assert counts.scored == 18 and counts.infra_failures == 0
    assert stats["scored_episodes"] == 18 and stats["missing_episodes"] == 0
    assert 0 < stats["successes"] < 18  # a mix of right and wrong answers
    assert set(stats["pass_at_k"]) == {"1", "2", "3"} == set(stats["pass_hat_k"])
    assert stats["pass_at_k"]["1"]["value"] == pytest.approx(stats["success_rate"])
    assert stats["pass_hat_k"]["3"]["value"] <= stats["pass_at_k"]["1"]["value"] <= stats["pass_at_k"]["3"]["value"]
    assert (store.root / "summary.txt").read_text().startswith(ENV)
    assert len(plans[ENV].task_indices) == 6


def test_success_comes_from_the_outcome_not_the_shaped_total(full_run):
    store = full_run[0]
    for record in store.records():
        trajectory = record["trajectory"]
        assert record["success"] == (trajectory["metrics"]["res_reward"] > 0)


def test_a_resumed_run_after_losing_episodes_and_a_torn_line_equals_the_full_run(full_run, tmp_path):
    store, _, _, summary = full_run
    lines = store.episodes_path.read_bytes().splitlines(keepends=True)
    copy = EpisodeStore(tmp_path / "copy")
    copy.root.mkdir()
    for name in ("config.json", "manifest.json"):
        (copy.root / name).write_bytes((store.root / name).read_bytes())
    copy.episodes_path.write_bytes(b"".join(lines[:7]) + lines[7][: len(lines[7]) // 2])  # killed mid-line
    assert len(read_records(copy.episodes_path)[0]) == 7
    _, counts, resumed = _run(copy, AnswerPolicy(), resume=True)
    assert counts.scored == 11
    assert resumed == summary
    records = copy.records()  # the torn line was cut off: every line parses
    assert len(records) == 18 == len({tuple(r["key"]) for r in records})


def test_infra_failures_are_retried_recorded_and_never_scored(tmp_path):
    store = EpisodeStore(tmp_path / "infra")
    plans = prepare(store, CONFIG)
    keys = pending_keys(plans, 3, [])
    session = f"ToolUse-v0-7-{keys[0][1]}-0"
    policy = AnswerPolicy(fail_first={session: 2})
    counts = asyncio.run(run_pending(store, plans, policy, k=3, seed=7, n_parallel=2, retries=2, retry_delay=0.0))
    summary = finish(store, plans, 3)
    assert counts.infra_failures == 2 and counts.scored == 18 and counts.given_up == 0
    assert summary["envs"][ENV]["infra_failures"] == 2
    failed = [r for r in store.records() if not r["scored"]]
    assert [r["status"] for r in failed] == ["POLICY_ERROR", "POLICY_ERROR"]
    assert all(r["success"] is None and r["res_reward"] is None for r in failed)


def test_an_episode_failing_every_retry_is_missing_not_a_failure(tmp_path):
    store = EpisodeStore(tmp_path / "down")
    plans = prepare(store, {**CONFIG, "k": 3})
    session = f"ToolUse-v0-7-{plans[ENV].task_indices[0]}-1"
    counts = asyncio.run(run_pending(store, plans, AnswerPolicy(fail_first={session: 99}), k=3, seed=7,
                                     retries=1, retry_delay=0.0))
    summary = finish(store, plans, 3)["envs"][ENV]
    assert counts.given_up == 1 and counts.infra_failures == 2
    assert summary["scored_episodes"] == 17 and summary["missing_episodes"] == 1
    assert summary["pass_at_k"]["3"]["tasks"] == 5  # the task short of a sample is left out of pass@3
    # A resume runs the missing key again (the server is back).
    _, counts, _ = _run(store, AnswerPolicy(), resume=True)
    assert counts.scored == 1


def test_reverify_of_stored_episodes_equals_the_stored_grades(full_run):
    store, _, _, summary = full_run
    result = reverify(store)
    entry = result["envs"][ENV]
    assert entry["skipped"] is None and entry["checked"] == 18 == entry["agreed"] and entry["changed"] == []
    assert result["summary"] == summary
    assert (store.root / "reverify.json").is_file()


def test_reverify_reports_a_grade_that_changed(full_run, tmp_path):
    store = full_run[0]
    copy = EpisodeStore(tmp_path / "tampered")
    copy.root.mkdir()
    for name in ("config.json", "manifest.json"):
        (copy.root / name).write_bytes((store.root / name).read_bytes())
    records = store.records()
    right = next(r for r in records if r["success"])
    right["trajectory"]["task"]["ground_truth"] = "99999"  # the grader now disagrees with the stored grade
    copy.episodes_path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    entry = reverify(copy)["envs"][ENV]
    assert entry["checked"] == 18 and entry["agreed"] == 17
    assert entry["changed"][0]["key"] == right["key"]
    assert entry["changed"][0]["now"] == {"res_reward": 0.0, "success": False}


def test_a_new_run_refuses_a_directory_holding_one_and_a_resume_refuses_changed_tasks(full_run, tmp_path):
    store = full_run[0]
    with pytest.raises(ConfigError, match="holds an evaluation"):
        prepare(store, CONFIG)
    with pytest.raises(ConfigError, match="tasks changed"):
        prepare(store, {**CONFIG, "tasks": 5}, resume=True)


def test_plans_draw_tasks_with_the_seed_and_refuse_a_split_the_env_does_not_take():
    from agent_gym.evaluation import plan_env

    a, b = plan_env(ENV, num_tasks=5, seed=1), plan_env(ENV, num_tasks=5, seed=1)
    assert a.task_indices == b.task_indices == tuple(sorted(a.task_indices)) and a.data_hash == b.data_hash
    assert plan_env(ENV, num_tasks=5, seed=2).task_indices != a.task_indices
    assert plan_env(ENV).total_tasks == len(plan_env(ENV).task_indices) == 480
    with pytest.raises(ConfigError, match="takes no split"):
        plan_env(ENV, split="test")
    with pytest.raises(ConfigError, match="unknown env id"):
        plan_env("agent_gym/Nope-v0")
