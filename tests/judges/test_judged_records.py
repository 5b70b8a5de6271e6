"""Judged episodes in files, the report and every exporter: criterion scores kept, judge failures masked and counted."""

from __future__ import annotations

import pytest
from judge_faults import ScriptedJudge

from agent_gym.export import read_jsonl, read_parquet, to_slime_samples, write_jsonl, write_parquet
from agent_gym.integrations.engine import training_records
from agent_gym.integrations.verl import agent_loop_fields
from agent_gym.judges import JudgeCriterion, LLMJudge, Rubric, RuleCriterion, judge_trajectories
from agent_gym.report.file_summary import FileSummary
from agent_gym.report.load import load_file
from agent_gym.report.summary import Report
from agent_gym.types import Step, StepTrajectory


def _episode(i: int, answer: str) -> StepTrajectory:
    steps = [Step(chat_completions=[{"role": "user", "content": "Capital of France?"}], done=True,
                  model_response=f"<answer>{answer}</answer>", info={"status": "ENV_DONE", "end_reason": "answer"})]
    return StepTrajectory(prompt_tokens=[1, 2], response_tokens=[3, 4, 5], response_masks=[1, 1, 1],
                          response_logprobs=[-0.1, -0.2, -0.3], rollout_id=f"r{i}", group_id="g", status="ENV_DONE",
                          steps=steps, task={"id": "t", "question": "Capital of France?", "ground_truth": "Paris"})


@pytest.fixture(scope="module")
def judged():
    episodes = [_episode(i, a) for i, a in enumerate(["Paris", "Lyon", "Paris", "Rome"])]
    judge = LLMJudge(ScriptedJudge(fail_answers=["Rome"]))
    rubric = Rubric([JudgeCriterion("judge", judge), RuleCriterion("brief", lambda e: len(e.answer) < 6, 0.5)])
    judge_trajectories(episodes, rubric)
    return episodes


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_files_and_the_report_keep_criterion_scores_and_count_judge_failures(judged, fmt, tmp_path):
    path = (write_jsonl if fmt == "jsonl" else write_parquet)(judged, tmp_path / f"e.{fmt}")
    back = (read_jsonl if fmt == "jsonl" else read_parquet)(path)
    assert [t.status for t in back] == ["ENV_DONE", "ENV_DONE", "ENV_DONE", "JUDGE_ERROR"]
    assert back[0].steps[-1].info["rubric"]["scores"] == {"judge": 1.0, "brief": 1.0}
    summary = FileSummary(fmt, load_file(path).episodes)
    rows = dict((row[0], row[1]) for row in Report([summary]).error_rows()[1])
    assert rows["judge failures (JUDGE_ERROR)"] == "1" and rows["judge failure: unparseable"] == "1"
    assert rows["judge calls"] == "4" and rows["judge cache hits"] == "1"  # Paris twice: judged once
    assert rows["rubric judge (mean)"] == "0.667" and "JUDGE_ERROR=1" in Report([summary]).to_text()


def test_every_exporter_masks_the_judge_failure(judged):
    samples = to_slime_samples(judged)
    failed = [s for s in samples if s["metadata"]["episode_status"] == "JUDGE_ERROR"]
    assert len(failed) == 1 and failed[0]["remove_sample"] and not any(failed[0]["loss_mask"])
    assert failed[0]["status"] == "failed" and "judge failed" in failed[0]["metadata"]["error"]
    records = training_records(judged)
    assert [r.status for r in records][-1] == "JUDGE_ERROR" and not records[-1].response_masks.any()
    fields = agent_loop_fields(judged[-1], prompt_length=4, response_length=4)["output"]
    assert fields["extra_fields"]["agent_gym_masked"] and set(fields["response_mask"]) == {0}
    assert fields["reward_score"] == 0.0  # masked: no advantage comes from it
