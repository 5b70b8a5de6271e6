"""200 judged episodes, 30% of judge calls failing (down, timeout, malformed): nothing unmasked reaches a trainer.

Every path of the training contract (:mod:`contract_paths`: slime export and generate, verl, SkyRL, the
engine API) and TRL's rows get the batch after :func:`agent_gym.judges.judge_trajectories` scored it with a
judge whose calls fail at a seeded 30% rate. Per path: the ``JUDGE_ERROR`` rows, their unmasked ids (must
be 0) and fake rewards (a failed row with an advantage, or a healthy row whose advantage it moved: must be 0).
"""

from __future__ import annotations

import random

import pytest
from contract_paths import PATHS, counts
from judge_faults import ScriptedJudge
from training_faults import Episode

from agent_gym.integrations.trl import episode_sample
from agent_gym.judges import JudgeCriterion, LLMJudge, Rubric, judge_trajectories
from agent_gym.types import Step, StepTrajectory

GROUPS, PER_GROUP = 25, 8


def _episode(task: int, sample: int, answer: str) -> StepTrajectory:
    rng = random.Random(task * 100 + sample)
    n = rng.randint(3, 9)
    steps = [Step(chat_completions=[{"role": "user", "content": f"Question {task}?"}], reward=0.1, done=True,
                  model_response=f"<answer>{answer}</answer>",
                  info={"status": "ENV_DONE", "end_reason": "answer", "res_reward": 0.0, "toolcall_reward": 0.1})]
    return StepTrajectory(prompt_tokens=[1, 2, 3], response_tokens=[rng.randint(4, 900) for _ in range(n)],
                          response_masks=[1] * n, response_logprobs=[-0.5] * n, trajectory_reward=0.1,
                          metrics={"toolcall_reward": 0.1, "steps": 1}, rollout_id=f"t{task}-{sample}",
                          group_id=f"g{task}", status="ENV_DONE", steps=steps,
                          task={"id": f"t{task}", "question": f"Question {task}?", "ground_truth": f"answer {task}"})


@pytest.fixture(scope="module")
def judged_batch() -> tuple[list[Episode], ScriptedJudge]:
    rng = random.Random(11)
    trajectories = [_episode(t, s, rng.choice([f"answer {t}", f"answer {t}", "wrong", f"other {s}"]))
                    for t in range(GROUPS) for s in range(PER_GROUP)]
    scripted = ScriptedJudge(fault_rate=0.3, seed=5)
    report = judge_trajectories(trajectories, Rubric([JudgeCriterion("judge", LLMJudge(scripted, cache=False))]))
    print(f"\n{len(trajectories)} episodes, {scripted.requests} judge calls, injected faults {scripted.faults}, "
          f"scored {report.scored}, JUDGE_ERROR {report.failed} {report.failures}")
    assert report.scored + report.failed == GROUPS * PER_GROUP and report.failed > 30
    assert {"down", "timeout"} <= set(report.failures) and sum(scripted.faults.values()) > 50
    return [Episode("judge" if t.status == "JUDGE_ERROR" else "", t) for t in trajectories], scripted


@pytest.mark.parametrize("path", list(PATHS))
def test_no_judge_failure_reaches_a_trainer_unmasked(path, judged_batch):
    episodes, _ = judged_batch
    tally = counts(PATHS[path](episodes, 0))
    rows, unmasked, fake = tally["judge"]
    print(f"{path}: {rows} JUDGE_ERROR rows, {unmasked} unmasked ids, {fake} fake rewards")
    assert rows == sum(e.failed for e in episodes) and (unmasked, fake) == (0, 0)


def test_trl_rows_of_judge_failures_have_no_reward(judged_batch):
    episodes, _ = judged_batch
    for episode in episodes:
        row = episode_sample(episode.trajectory, pad_token_id=0)
        if episode.failed:
            assert row["episode_reward"] is None and row["episode_status"] == "JUDGE_ERROR"
            assert row["env_mask"] and not any(row["env_mask"]) and "judge failed" in row["episode_failure"]
        else:
            assert row["episode_reward"] == episode.trajectory.trajectory_reward and all(row["env_mask"])
