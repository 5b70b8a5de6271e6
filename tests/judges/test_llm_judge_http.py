"""The LLM judge over real HTTP: the reference server as the judge endpoint, and the ways a judge endpoint fails."""

import socket

import pytest

from agent_gym.errors import JudgeError
from agent_gym.judges import JudgeCriterion, JudgeLog, LLMJudge, Rubric, judge_records, judge_trajectories
from agent_gym.policy import VLLMPolicy
from agent_gym.types import Segment, Step, StepTrajectory


@pytest.fixture(scope="module")
def hanging_server():
    """An endpoint that takes connections and never answers (a judge server stuck on a request)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def _episode(answer: str) -> StepTrajectory:
    steps = [Step(model_response=f"<answer>{answer}</answer>", done=True, info={"status": "ENV_DONE"})]
    segment = Segment(prompt_tokens=[1], response_tokens=[2], response_masks=[1], response_logprobs=[-0.1])
    return StepTrajectory(prompt_tokens=[1], response_tokens=[2], response_masks=[1], rollout_id=f"ep-{answer}",
                          status="ENV_DONE", steps=steps, segments=[segment],
                          task={"id": "t", "question": "Why is the sky blue?", "ground_truth": "Rayleigh scattering"})


def test_a_real_judge_call_is_a_verdict_or_a_classified_failure_and_is_recorded_token_exact(reference_server,
                                                                                            qwen_tokenizer):
    judge = LLMJudge.from_server(reference_server, tokenizer=qwen_tokenizer, max_tokens=12, timeout=120)
    assert isinstance(judge.policy, VLLMPolicy)
    log = JudgeLog()
    try:
        try:
            score = judge.score("Why is the sky blue?", "Rayleigh scattering", "Rayleigh scattering", log)
        except JudgeError as exc:  # the tiny random model writes no verdict: classified, never a score
            assert exc.kind in ("unparseable", "schema", "truncated", "ambiguous", "out_of_range")
        else:
            assert 0.0 <= score <= 1.0
        assert 1 <= len(log.calls) <= 2  # one bounded retry at most
        call = log.calls[0]
        rendered = qwen_tokenizer.apply_chat_template(call.messages, add_generation_prompt=True, tokenize=False)
        assert call.prompt_token_ids == qwen_tokenizer.encode(rendered, add_special_tokens=False)
        assert call.token_ids and len(call.logprobs) == len(call.token_ids) <= 12
        segment = call.segment()
        assert segment.role == "judge" and segment.response_tokens.tolist() == call.token_ids
        usage = log.usage()
        assert usage["prompt_tokens"] >= len(call.prompt_token_ids) and usage["seconds"] > 0
    finally:
        judge.close()


def test_judge_records_of_a_real_judge_train_with_the_same_adapters(reference_server, qwen_tokenizer):
    from agent_gym.export import to_slime_samples

    judge = LLMJudge.from_server(reference_server, tokenizer=qwen_tokenizer, max_tokens=8, timeout=120,
                                 parse_retries=0)
    episodes = [_episode("light bends")]
    try:
        report = judge_trajectories(episodes, Rubric([JudgeCriterion("correct", judge)]))
    finally:
        judge.close()
    assert report.scored + report.failed == 1 and report.usage["calls"] == 1
    records = judge_records(report, episodes)
    assert len(records) == 1 and records[0].segments[0].role == "judge"
    (sample,) = to_slime_samples(records)
    assert sample["metadata"]["role"] == "judge" and sample["tokens"][-len(report.calls[0][1].token_ids):] == \
        report.calls[0][1].token_ids
    if report.failed:  # a call that gave no verdict: its own record is masked too, and so is the episode
        assert episodes[0].status == "JUDGE_ERROR" and sample["remove_sample"] and not any(sample["loss_mask"])


@pytest.mark.parametrize("where", ["down", "timeout"])
def test_a_judge_endpoint_that_fails_is_a_classified_judge_error(where, hanging_server, qwen_tokenizer):
    server = "127.0.0.1:9" if where == "down" else hanging_server
    judge = LLMJudge.from_server(server, tokenizer=qwen_tokenizer, max_tokens=8, timeout=1.0, max_retries=1)
    episodes = [_episode("light bends")]
    try:
        report = judge_trajectories(episodes, Rubric([JudgeCriterion("correct", judge)]))
    finally:
        judge.close()
    assert report.failures == {where: 1} and episodes[0].status == "JUDGE_ERROR"
    assert where in episodes[0].steps[-1].info["error"] and report.usage["failed_calls"] == 1
