"""slime/vime adapter end to end against the reference server speaking SGLang's /generate and vLLM's
/inference/v1/generate.

slime is not on PyPI: :class:`slime_types.Sample` restates the fields of ``slime/utils/types.py``; the adapter
takes any object with those attributes.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import httpx
import pytest
from slime_types import Sample

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.errors import ConfigError
from agent_gym.integrations.slime import generate, reward_func, reward_post_process, to_sampling_params
from agent_gym.memory import MemoryConfig, MemorySummary

ENV_ID = "agent_gym/ToolUse-v0"
# slime's rollout sampling dict (sglang_rollout.py GenerateState); a third of the ids stop a turn so the
# tiny random model's turns stay short and episodes run several turns.
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 64, "stop": None,
            "stop_token_ids": list(range(0, 151643, 3)), "skip_special_tokens": False, "no_stop_trim": True,
            "spaces_between_special_tokens": False, "sampling_seed": 7}


def summary_memory() -> MemorySummary:
    config = MemoryConfig(use_summary=True, max_prompt_length=250, max_summary_length=8, before_raw_message=1,
                          end_raw_message=-1, summary_system_prompt="Summarize in {max_summary_length} tokens.")
    return MemorySummary(config, chat_client=lambda messages, *, max_tokens: "notes so far")


def make_args(server: str | None, api: str, model_dir: Any, **extra: Any) -> SimpleNamespace:
    ip, port = (server.split(":") if server else ("127.0.0.1", "9"))
    router = {f"{'sglang' if api == 'sglang' else 'vllm'}_router_{k}": v for k, v in (("ip", ip), ("port", int(port)))}
    fields = dict(hf_checkpoint=str(model_dir), agent_gym_env_id=ENV_ID, agent_gym_max_steps=4,
                  agent_gym_episode_timeout=60, rollout_max_context_len=4096,
                  agent_gym_client_options={"max_retries": 0, "timeout": 30}, **router)
    return SimpleNamespace(**{**fields, **extra})


def flat(result: Any) -> list[Sample]:
    return result if isinstance(result, list) else [result]


def answers(server: str) -> list[dict]:
    return httpx.get(f"http://{server}/debug/token_answers", timeout=30).json()


def sampled_by_server(entry: dict) -> list[int]:
    if entry["path"] == "/generate":
        return [p[1] for p in entry["answer"]["meta_info"]["output_token_logprobs"]]
    return entry["answer"]["choices"][0]["token_ids"]


@pytest.fixture(scope="module")
def tasks() -> list[dict[str, Any]]:
    env = gym.make(ENV_ID)
    try:
        return [dict(t) for t in env.unwrapped.tasks[:2]]
    finally:
        env.close()


@pytest.mark.parametrize("api", ["sglang", "vllm"])
def test_samples_are_token_exact_against_the_server(reference_server, tiny_model_dir, tasks, api):
    args = make_args(str(reference_server), api, tiny_model_dir)
    sample = Sample(group_index=0, index=3, prompt="unused", metadata={"task": tasks[0]}, session_id="sess-a")
    before = len(answers(reference_server))
    result = asyncio.run(generate(args, sample, dict(SAMPLING)))
    sent = answers(reference_server)[before:]
    assert result is sample  # one segment: the given sample, filled
    assert {e["path"] for e in sent} == {"/generate" if api == "sglang" else "/inference/v1/generate"}
    n = sample.response_length
    assert n > 0 and len(sample.loss_mask) == len(sample.rollout_log_probs) == n
    response = sample.tokens[-n:]
    sampled = [t for t, m in zip(response, sample.loss_mask, strict=True) if m]
    assert sampled == [i for e in sent for i in sampled_by_server(e)]  # the ids the server sent, in order
    assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask, strict=True) if not m)
    assert all(lp < 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask, strict=True) if m)
    assert sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    assert sample.rollout_id == 3 and sample.session_id == "sess-a" and not sample.remove_sample
    md = sample.metadata
    assert md["env_id"] == ENV_ID and md["task_id"] == tasks[0]["id"] and md["task"] == tasks[0]
    assert md["reward"] == sample.reward and not md["masked"] and md["error"] is None
    assert isinstance(md["reward_parts"], dict) and md["slime_sampling_params"]["max_new_tokens"] == 64
    assert "logprobs_mode" in md["sampling"]  # the episode's recorded sampling, as in the export's metadata
    assert md["episode_status"] in ("ENV_DONE", "MAX_STEPS", "TRUNCATION", "PROMPT_TRUNCATION")
    # the reward function returns the recorded reward for a sample, a list and an empty list
    assert asyncio.run(reward_func(args, sample)) == sample.reward
    assert asyncio.run(reward_func(args, [sample, sample])) == [sample.reward] * 2
    assert asyncio.run(reward_func(args, [])) == []


def test_summarized_episodes_are_lists_with_one_rollout_id_and_grpo_by_group(reference_server, tiny_model_dir,
                                                                            tasks):
    args = make_args(str(reference_server), "sglang", tiny_model_dir, agent_gym_memory=summary_memory,
                     agent_gym_max_steps=5)

    async def main():
        samples = [Sample(group_index=g, index=4 * g + k, metadata={"task": tasks[g]}) for g in (0, 1)
                   for k in range(4)]
        return await asyncio.gather(*(generate(args, s, dict(SAMPLING)) for s in samples))

    results = asyncio.run(main())
    lists = [r for r in results if isinstance(r, list)]
    assert lists, "expected a summarized episode (several samples)"
    for group in lists:
        assert len({s.rollout_id for s in group}) == 1 and len({id(s) for s in group}) == len(group)
        assert [s.metadata["segment_index"] for s in group] == list(range(len(group)))
        assert all(len(s.loss_mask) == s.response_length for s in group)
        assert len({s.reward for s in group}) == 1  # the "episode" assignment: the full reward on each
    everything = [s for r in results for s in flat(r)]
    assert len({s.rollout_id for s in everything}) == 8
    assert len({s.session_id for s in everything}) == 8  # each episode its own routing key
    raw, adv = reward_post_process(args, everything)
    assert raw == [s.reward for s in everything]
    for g in (0, 1):  # within a group, each rollout counts once: advantages over rollouts sum to zero
        per_rollout = {s.rollout_id: a for s, a in zip(everything, adv, strict=True) if s.group_index == g}
        assert len(per_rollout) == 4 and abs(sum(per_rollout.values())) < 1e-6


def test_reward_post_process_dedups_rollouts_of_variable_size():
    def s(group, rollout, reward, **kw):
        return Sample(group_index=group, rollout_id=rollout, reward=reward, **kw)

    # group 0: rollout 1 (3 samples, reward 1), rollout 2 (1 sample, reward 0); group 1: rewards 2, 4, 6
    samples = [s(0, 1, 1.0), s(0, 1, 1.0), s(0, 1, 1.0), s(0, 2, 0.0),
               s(1, 3, 2.0), s(1, 4, 4.0), s(1, 4, 4.0), s(1, 5, 6.0),
               s(1, 6, 0.0, remove_sample=True)]  # masked: out of the statistics, advantage 0
    args = SimpleNamespace(grpo_std_normalization=True, rewards_normalization=True)
    raw, adv = reward_post_process(args, samples)
    assert raw == [1, 1, 1, 0, 2, 4, 4, 6, 0]
    one = 0.5 / (0.5 + 1e-6)
    std1 = (8 / 3) ** 0.5
    expected = [one] * 3 + [-one, -2 / (std1 + 1e-6), 0.0, 0.0, 2 / (std1 + 1e-6), 0.0]
    assert adv == pytest.approx(expected, abs=1e-6)
    _, centred = reward_post_process(SimpleNamespace(grpo_std_normalization=False), samples)
    assert centred == pytest.approx([0.5] * 3 + [-0.5, -2.0, 0.0, 0.0, 2.0, 0.0])
    assert reward_post_process(SimpleNamespace(rewards_normalization=False), samples)[1] == raw
    with pytest.raises(ValueError, match="rollout"):
        reward_post_process(args, [s(0, 1, 1.0), s(0, 1, 0.0)])


def test_server_down_and_rejected_task_are_failed_samples_with_the_reason(tiny_model_dir):
    args = make_args(None, "vllm", tiny_model_dir, agent_gym_client_options={"max_retries": 0, "timeout": 2})

    async def main():
        return await asyncio.wait_for(asyncio.gather(
            generate(args, Sample(index=0, metadata={}), dict(SAMPLING)),
            generate(args, Sample(index=1, metadata={"task": {"id": "bad"}}), dict(SAMPLING))), 60)

    down, rejected = asyncio.run(main())
    for sample, status, words in ((down, "POLICY_ERROR", "127.0.0.1:9"), (rejected, "ENV_ERROR", "question")):
        assert sample.status == Sample.Status.FAILED and sample.remove_sample is True
        assert sample.reward == 0.0 and set(sample.loss_mask or [0]) == {0}
        assert len(sample.loss_mask) == sample.response_length
        assert sample.metadata["masked"] is True and sample.metadata["episode_status"] == status
        assert words in sample.metadata["error"]


def test_bad_configuration_is_a_clear_error(tiny_model_dir):
    sample = Sample(index=0)
    args = make_args("127.0.0.1:9", "sglang", tiny_model_dir)
    cases = [
        (dict(agent_gym_env_id="agent_gym/NoSuch-v0"), "registered env id"),
        (dict(agent_gym_env_id=None), "agent_gym_env_id"),
        (dict(sglang_router_ip=None, sglang_router_port=None), "router"),
        (dict(sglang_router_port=None), "sglang_router_port"),
        (dict(vllm_router_ip="127.0.0.1", vllm_router_port=9), "both"),
        (dict(hf_checkpoint=None), "hf_checkpoint"),
        (dict(agent_gym_env_kwargs="not json"), "agent_gym_env_kwargs"),
        (dict(agent_gym_reward_assignment="half"), "reward_assignment"),
    ]
    for change, words in cases:
        bad = SimpleNamespace(**{**vars(args), **change})
        with pytest.raises(ConfigError, match=words):
            asyncio.run(generate(bad, sample, dict(SAMPLING)))
    del args.agent_gym_env_id
    with pytest.raises(ConfigError, match="agent_gym_env_id"):
        asyncio.run(generate(args, sample, dict(SAMPLING)))
    with pytest.raises(ConfigError, match="bogus"):
        to_sampling_params({"bogus": 1})
    with pytest.raises(ConfigError, match="temperature"):
        to_sampling_params({"temperature": -1.0})
    assert to_sampling_params(SAMPLING).max_tokens == 64 and to_sampling_params(SAMPLING).seed == 7
    with pytest.raises(ValueError, match="reward"):
        asyncio.run(reward_func(args, Sample(index=5)))


def _episode(status: str, error: str | None = None, reward: float = 0.1) -> Any:
    import torch

    from agent_gym.types import Segment, Step, StepTrajectory

    segment = Segment(prompt_tokens=torch.tensor([1, 2]), response_tokens=torch.tensor([3, 4, 5]),
                      response_masks=torch.tensor([1, 0, 1]), response_logprobs=torch.tensor([-0.5, 0.0, -0.25]))
    return StepTrajectory(prompt_tokens=segment.prompt_tokens, response_tokens=segment.response_tokens,
                          response_masks=segment.response_masks, trajectory_reward=reward, rollout_id="r",
                          status=status, task={"id": "t", "question": "q", "ground_truth": "a"}, segments=[segment],
                          steps=[Step(reward=reward, info={"error": error} if error else {})])


def test_an_aborted_request_is_removed_and_a_regenerated_sample_is_not():
    from agent_gym.integrations.slime import episode_samples

    sample = Sample(index=4, metadata={"task": {"id": "t"}})
    aborted = _episode("POLICY_ERROR", "policy raised: the server aborted the request (finish_reason='abort')")
    episode_samples(sample, aborted, env_id=ENV_ID, pad_token_id=0)
    assert sample.status == Sample.Status.ABORTED and sample.remove_sample  # slime trains ABORTED samples otherwise
    assert sample.loss_mask == [0, 0, 0] and sample.rollout_log_probs == [0.0] * 3 and sample.reward == 0.0
    assert sample.metadata["masked"] and "abort" in sample.metadata["error"] and sample.metadata["task"] == {"id": "t"}
    # slime hands an aborted sample back for another try: a healthy episode is trained on again
    episode_samples(sample, _episode("ENV_DONE", reward=1.0), env_id=ENV_ID, pad_token_id=0)
    assert sample.status == Sample.Status.COMPLETED and not sample.remove_sample and sample.loss_mask == [1, 0, 1]
    assert sample.reward == 1.0 and not sample.metadata["masked"] and sample.metadata["error"] is None
    # a sample slime itself removed stays removed
    other = Sample(index=5, remove_sample=True)
    episode_samples(other, _episode("ENV_DONE", reward=1.0), env_id=ENV_ID, pad_token_id=0)
    assert other.remove_sample
