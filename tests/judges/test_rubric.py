import asyncio

import pytest
import torch
from judge_faults import ScriptedJudge

from agent_gym.errors import ConfigError, JudgeError
from agent_gym.integrations.contract import is_infra_failure, training_segments
from agent_gym.judges import (
    JudgeCriterion,
    JudgedEpisode,
    LLMJudge,
    RankingCriterion,
    Rubric,
    RuleCriterion,
    VerdictCache,
    judge_records,
    judge_trajectories,
)
from agent_gym.types import Segment, Step, StepTrajectory


def _episode(rollout_id: str, answer: str, *, task_id: str = "t1", reference: str = "Paris") -> StepTrajectory:
    segment = Segment(prompt_tokens=[1, 2], response_tokens=[3, 4], response_masks=[1, 1],
                      response_logprobs=[-0.1, -0.2])
    steps = [Step(chat_completions=[{"role": "user", "content": "Capital of France?"}],
                  model_response=f"<answer>{answer}</answer>", reward=0.1,
                  info={"res_reward": 0.0, "toolcall_reward": 0.1, "status": "ENV_DONE", "end_reason": "answer"},
                  done=True)]
    return StepTrajectory(prompt_tokens=[1, 2], response_tokens=[3, 4], response_masks=[1, 1],
                          trajectory_reward=0.1, metrics={"res_reward": 0.0, "toolcall_reward": 0.1},
                          rollout_id=rollout_id, status="ENV_DONE", steps=steps, segments=[segment],
                          task={"id": task_id, "question": "Capital of France?", "ground_truth": reference})


def test_outcome_and_shaping_are_kept_apart():
    judge = LLMJudge(ScriptedJudge())
    rubric = Rubric([
        JudgeCriterion("correct", judge, weight=3.0),
        RuleCriterion("short", lambda e: len(e.answer) < 20, weight=1.0),
        RuleCriterion("no_hedging", lambda e: "maybe" not in e.answer, weight=0.05, outcome=False),
    ])
    right, wrong = rubric.score([JudgedEpisode("q", "Paris", "Paris"), JudgedEpisode("q", "Paris", "maybe Lyon")])
    assert right.scores == {"correct": 1.0, "short": 1.0, "no_hedging": 1.0}
    assert (right.outcome, right.shaping) == (1.0, 0.05)
    assert wrong.outcome == pytest.approx(0.25) and wrong.shaping == 0.0
    assert right.log.usage()["calls"] == 1 and right.failure is None


def test_a_failed_judge_is_no_score():
    judge = LLMJudge(ScriptedJudge(fail_answers=["Lyon"]), parse_retries=1)
    rubric = Rubric([JudgeCriterion("correct", judge), RuleCriterion("any", lambda e: 1.0)])
    ok, failed = rubric.score([JudgedEpisode("q", "Paris", "Paris"), JudgedEpisode("q", "Paris", "Lyon")])
    assert ok.outcome == 1.0
    assert failed.outcome is None and isinstance(failed.failure, JudgeError) and failed.failure.kind == "unparseable"
    assert failed.log.usage()["calls"] == 2 and failed.log.usage()["failed_calls"] == 2  # one bounded retry
    assert failed.info()["failure"]["kind"] == "unparseable"


def test_judged_trajectories_get_rewards_or_the_judge_error_status():
    judge = LLMJudge(ScriptedJudge(fail_answers=["Lyon"]))
    episodes = [_episode("a", "Paris"), _episode("b", "Rome"), _episode("c", "Lyon")]
    report = judge_trajectories(episodes, Rubric([JudgeCriterion("correct", judge)]))
    assert (report.scored, report.failed, report.failures) == (2, 1, {"unparseable": 1})
    right, wrong, failed = episodes
    assert right.metrics["res_reward"] == 1.0 and right.trajectory_reward == pytest.approx(1.1)
    assert right.steps[-1].mc_return == pytest.approx(1.1) and right.steps[-1].info["rubric"]["scores"] == {
        "correct": 1.0}
    assert wrong.metrics["res_reward"] == 0.0 and wrong.status == "ENV_DONE"
    assert failed.status == "JUDGE_ERROR" and is_infra_failure(failed)
    assert failed.steps[-1].info["error"].startswith("judge failed: unparseable")
    assert all(s.masked for s in training_segments(failed)) and not training_segments(right)[0].masked
    assert judge_records(report, episodes) == []  # the scripted judge returns no token ids (see the HTTP tests)


def test_a_regrade_retries_the_judge_error_episodes():
    flaky = ScriptedJudge(fail_answers=["Paris"])
    episode = _episode("a", "Paris")
    rubric = Rubric([JudgeCriterion("correct", LLMJudge(flaky))])
    judge_trajectories([episode], rubric)
    assert episode.status == "JUDGE_ERROR"
    flaky.fail_answers.clear()  # the judge is back
    report = judge_trajectories([episode], Rubric([JudgeCriterion("correct", LLMJudge(flaky))]))
    assert report.scored == 1 and episode.status == "ENV_DONE" and episode.metrics["res_reward"] == 1.0
    assert "error" not in episode.steps[-1].info and episode.steps[-1].info["end_reason"] == "answer"


def test_the_cache_judges_identical_answers_of_a_group_once():
    scripted = ScriptedJudge()
    cache = VerdictCache()
    judge = LLMJudge(scripted, cache=cache)
    answers = ["Paris", "Paris", "Lyon", "Paris", "Lyon", "Paris", "Paris", "Rome"]  # a group of 8, 3 distinct
    episodes = [_episode(f"r{i}", a) for i, a in enumerate(answers)]
    report = judge_trajectories(episodes, Rubric([JudgeCriterion("correct", judge)]))
    assert scripted.requests == 3 and (cache.misses, cache.hits) == (3, 5)
    assert report.usage["calls"] == 3 and report.usage["cache_hits"] == 5
    assert [e.metrics["res_reward"] for e in episodes] == [1.0 if a == "Paris" else 0.0 for a in answers]
    uncached = ScriptedJudge()
    judge_trajectories([_episode(f"r{i}", a) for i, a in enumerate(answers)],
                       Rubric([JudgeCriterion("correct", LLMJudge(uncached, cache=False))]))
    assert uncached.requests == 8


def test_group_ranking_and_pairwise_are_position_swapped():
    judge = LLMJudge(ScriptedJudge())
    verdict = judge.rank("q", "Paris", ["Lyon", "Paris", "Rome"])
    assert verdict.scores == [0.0, 1.0, 0.0] and verdict.position_shift == 0.0
    pair = judge.compare("q", "Paris", "Rome", "Paris")
    assert (pair.winner, pair.flipped) == ("B", False)
    ranking = RankingCriterion("relative", judge, outcome=False)
    scores = Rubric([RuleCriterion("any", lambda e: 1.0), ranking]).score(
        [JudgedEpisode("q", "Paris", a) for a in ("Paris", "Lyon")])
    assert [s.shaping for s in scores] == [1.0, 0.0] and ranking.position_shifts == [0.0]
    judge.close()


def test_bad_rubrics_are_refused():
    with pytest.raises(ConfigError, match="distinct"):
        Rubric([RuleCriterion("a", lambda e: 1.0), RuleCriterion("a", lambda e: 0.0)])
    with pytest.raises(ConfigError, match="weight"):
        RuleCriterion("a", lambda e: 1.0, weight=-1)
    with pytest.raises(TypeError):
        Rubric([])


def test_concurrent_identical_requests_join_one_call():
    scripted = ScriptedJudge()
    judge = LLMJudge(scripted)

    async def main():
        return await asyncio.gather(*(judge.ascore("q", "Paris", "Paris") for _ in range(8)))

    assert asyncio.run(main()) == [1.0] * 8 and scripted.requests == 1


def test_judge_segments_are_token_exact_records():
    from agent_gym.judges import JudgeCall

    call = JudgeCall(kind="pointwise", messages=[{"role": "user", "content": "x"}], text='{"score": 1}',
                     prompt_token_ids=[5, 6], token_ids=[7, 8, 9], logprobs=[-0.1, -0.2, -0.3])
    segment = call.segment(reward=1.0)
    assert segment.role == "judge" and segment.response_tokens.tolist() == [7, 8, 9]
    assert segment.response_masks.tolist() == [1, 1, 1] and torch.allclose(
        segment.response_logprobs, torch.tensor([-0.1, -0.2, -0.3]))


def test_requests_that_join_a_failing_call_are_cache_hits_not_calls():
    judge = LLMJudge(ScriptedJudge(fail_answers=["Lyon"]))
    episodes = [_episode(f"r{i}", "Lyon") for i in range(8)]
    report = judge_trajectories(episodes, Rubric([JudgeCriterion("correct", judge)]))
    assert report.failed == 8 and report.usage["calls"] == 2 and report.usage["cache_hits"] == 7


def test_required_criterion_zeroes_the_outcome():
    rubric = Rubric([RuleCriterion("facts", lambda e: float("Grathia" in e.answer), 2.0, required=True),
                     RuleCriterion("style", lambda e: 1.0)])
    scores = rubric.score([JudgedEpisode("q", "r", "Grathia"), JudgedEpisode("q", "r", "x")])
    assert [s.outcome for s in scores] == [1.0, 0.0] and scores[1].scores == {"facts": 0.0, "style": 1.0}
    with pytest.raises(ConfigError, match="outcome criterion"):
        RuleCriterion("shaping", lambda e: 1.0, outcome=False, required=True)
