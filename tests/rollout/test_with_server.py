"""collect against real reference-server processes: a 64-episode batch, exports, faults, a real tiny model."""

from __future__ import annotations

import pytest

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.export import read_jsonl, read_parquet, to_slime_samples, write_jsonl, write_parquet
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect
from agent_gym.types import EpisodeStatus

ENV_ID = "agent_gym/ToolUse-v0"


@pytest.fixture(scope="module")
def fake_server(start_server):
    return start_server(fake_tokens=6, fake_latency_ms=20)


@pytest.fixture(scope="module")
def batch(fake_server, qwen_tokenizer):
    policy = VLLMPolicy([str(fake_server)], qwen_tokenizer, SamplingParams(max_tokens=16))
    try:
        return collect(ENV_ID, policy, num_episodes=32, samples_per_task=2, n_parallel=16, max_steps=3,
                       progress=False, seed=1)
    finally:
        policy.close()


def test_batch_of_64_episodes_at_n_parallel_16(batch):
    assert len(batch) == 64
    assert [t.idx for t in batch] == list(range(64))
    assert all(t.status == EpisodeStatus.MAX_STEPS for t in batch)  # fixed tokens never answer
    assert all(len(t.steps) == 3 for t in batch)
    assert all(t.group_id == batch[2 * (i // 2)].group_id for i, t in enumerate(batch))
    for t in batch:
        assert not t.retokenized
        masks = t.response_masks.tolist()
        assert sum(masks) == 3 * 6  # three turns of six sampled ids
        assert len(t.response_tokens) == len(masks) == len(t.response_logprobs)


def test_batch_round_trips_through_jsonl_and_parquet(batch, tmp_path):
    write_jsonl(batch, tmp_path / "b.jsonl")
    write_parquet(batch, tmp_path / "b.parquet")
    assert read_jsonl(tmp_path / "b.jsonl") == batch
    assert read_parquet(tmp_path / "b.parquet") == batch


def test_slime_samples_match_trajectories(batch):
    samples = to_slime_samples(batch)
    assert len(samples) == sum(len(t.segments) for t in batch)
    by_rollout = {t.rollout_id: t for t in batch}
    for sample in samples:
        assert sample["response_length"] == len(sample["loss_mask"]) == len(sample["rollout_log_probs"])
        trajectory = by_rollout[sample["rollout_id"]]
        segment = trajectory.segments[sample["metadata"]["segment_index"]]
        assert sample["loss_mask"] == segment.response_masks.tolist()
        assert sample["tokens"] == segment.prompt_tokens.tolist() + segment.response_tokens.tolist()
        assert sample["reward"] == trajectory.trajectory_reward
        assert sample["status"] == "completed"
        assert all(lp == 0.0 for lp, m in zip(sample["rollout_log_probs"], sample["loss_mask"], strict=True) if m == 0)


@pytest.mark.timeout(300)
def test_killed_server_loses_no_episode(start_servers, qwen_tokenizer):
    dying, healthy = start_servers({"fake_tokens": 6, "fake_latency_ms": 30, "die_after": 25},
                                   {"fake_tokens": 6, "fake_latency_ms": 30})
    policy = VLLMPolicy([str(dying), str(healthy)], qwen_tokenizer, SamplingParams(max_tokens=16),
                        client_options={"max_retries": 3, "backoff": 0.05, "timeout": 10.0})
    try:
        result = collect(ENV_ID, policy, num_episodes=32, n_parallel=16, max_steps=3, progress=False)
    finally:
        policy.close()
    assert not dying.alive()
    assert len(result) == 32 and [t.idx for t in result] == list(range(32))
    statuses = [t.status for t in result]
    assert set(statuses) <= {EpisodeStatus.MAX_STEPS, EpisodeStatus.POLICY_ERROR}
    finished = [t for t in result if t.status == EpisodeStatus.MAX_STEPS]
    assert len(finished) >= 24
    servers = {step.info.get("server") for t in finished for step in t.steps} - {None}
    assert not servers or str(healthy) in " ".join(map(str, servers))
    for t in result:
        if t.status == EpisodeStatus.POLICY_ERROR:
            assert "error" in t.steps[-1].info


@pytest.mark.timeout(300)
def test_real_tiny_model_batch(reference_server, qwen_tokenizer):
    policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, SamplingParams(max_tokens=8, temperature=1.0))
    try:
        result = collect(ENV_ID, policy, num_episodes=4, n_parallel=4, max_steps=2, progress=False)
    finally:
        policy.close()
    assert len(result) == 4
    for t in result:
        assert t.status in (EpisodeStatus.MAX_STEPS, EpisodeStatus.TRUNCATION, EpisodeStatus.ENV_DONE)
        assert int(t.response_masks.sum()) >= 1
        assert t.response_logprobs is not None and bool((t.response_logprobs <= 0).all())
