"""Re-grading stored episodes with an LLM judge: JUDGE_ERROR episodes are retried, never scored as zeros."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from eval_fakes import AnswerPolicy
from judge_faults import ScriptedJudge, number_rule

from agent_gym.cli import main
from agent_gym.evaluation import EpisodeStore, finish, prepare, run_pending
from agent_gym.evaluation.rejudge import rejudge
from agent_gym.judges import JudgeCriterion, LLMJudge, Rubric

ENV = "agent_gym/ToolUse-v0"
CONFIG = {"envs": [ENV], "k": 2, "tasks": 4, "seed": 3, "split": None}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = EpisodeStore(tmp_path_factory.mktemp("judged"))
    plans = prepare(store, CONFIG)
    asyncio.run(run_pending(store, plans, AnswerPolicy(), k=2, seed=3, n_parallel=4, retries=0, retry_delay=0.0))
    finish(store, plans, 2)
    return store


def _rubric(**faults) -> Rubric:
    return Rubric([JudgeCriterion("judge", LLMJudge(ScriptedJudge(number_rule, **faults)))])


def test_a_judge_that_agrees_with_the_grader_changes_nothing(store):
    result = rejudge(store, _rubric())
    entry = result["envs"][ENV]
    assert (entry["checked"], entry["agreed"], entry["changed"], entry["judge_errors"]) == (8, 8, [], 0)
    assert result["judging"]["scored"] == 8 and (store.root / "rejudge.json").is_file()


def test_judge_error_episodes_are_retried_and_recovered(store, tmp_path):
    copy = EpisodeStore(tmp_path / "failed-judge")
    copy.root.mkdir()
    for name in ("config.json", "manifest.json"):
        (copy.root / name).write_bytes((store.root / name).read_bytes())
    records = store.records()
    for record in records[:3]:  # an earlier run's judge failed on these: unscored, never a zero
        record.update(status="JUDGE_ERROR", scored=False, success=None, res_reward=None, error="judge failed: down")
        record["trajectory"]["status"] = "JUDGE_ERROR"
    copy.episodes_path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    still_down = rejudge(copy, _rubric(fault_rate=1.0))["envs"][ENV]
    assert still_down["judge_errors"] == 8 and still_down["agreed"] == 0  # nothing is scored, nothing is zero
    entry = rejudge(copy, _rubric())["envs"][ENV]
    assert (entry["recovered"], entry["agreed"], entry["judge_errors"]) == (3, 5, 0)


def test_eval_cli_rejudges_with_a_judge_server(store, capsys):
    assert main(["eval", "--reverify", str(store.root), "--judge", "127.0.0.1:9", "--rubric", "x:y"]) == 2
    assert main(["eval", "--out", str(store.root), ENV, "--judge", "127.0.0.1:9"]) == 2
    code = main(["eval", "--reverify", str(store.root), "--judge", "127.0.0.1:9"])  # no judge there: all unscored
    out = capsys.readouterr().out
    assert code == 1 and "8 judge errors" in out
