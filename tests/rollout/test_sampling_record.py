"""Trajectories record the logprobs mode and sampling; collect warns once about truncated sampling."""

from __future__ import annotations

import json
import logging

import pytest

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.export import read_jsonl, read_parquet, to_slime_samples, write_jsonl, write_parquet
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.report.load import load_file
from agent_gym.rollout import collect

ENV_ID = "agent_gym/ToolUse-v0"
WARNING = "off-policy for a trainer scoring the full distribution"


@pytest.fixture(scope="module")
def fake_server(start_server):
    return str(start_server(fake_tokens=4))


def _collect(server, tokenizer, sampling, caplog, **policy_kwargs):
    policy = VLLMPolicy([server], tokenizer, sampling, **policy_kwargs)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agent_gym.rollout.collection"):
        try:
            batch = collect(ENV_ID, policy, num_episodes=3, n_parallel=3, max_steps=2, progress=False, seed=2)
        finally:
            policy.close()
    warnings = [r for r in caplog.records if WARNING in r.getMessage()]
    return batch, warnings


def test_truncated_sampling_warns_once_per_collect_and_is_recorded(fake_server, qwen_tokenizer, caplog):
    batch, warnings = _collect(fake_server, qwen_tokenizer, SamplingParams(max_tokens=8), caplog)  # seed top_k 50
    assert len(warnings) == 1
    assert "truncated (top_k=50)" in warnings[0].getMessage()
    assert all(t.sampling["top_k"] == 50 and t.sampling["logprobs_mode"] == "raw_logprobs" for t in batch)
    assert set(batch[0].sampling) == {"logprobs_mode", "temperature", "top_k", "top_p", "min_p",
                                      "repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens"}
    assert all(s.info.get("finish_reason") for t in batch for s in t.steps)


@pytest.mark.parametrize(
    "sampling",
    [SamplingParams(max_tokens=8, top_k=-1), SamplingParams(max_tokens=8, top_p=0.9, truncation_ok=True)],
)
def test_full_distribution_or_an_opt_in_does_not_warn(fake_server, qwen_tokenizer, caplog, sampling):
    batch, warnings = _collect(fake_server, qwen_tokenizer, sampling, caplog, logprobs_mode="processed_logprobs")
    assert warnings == []
    record = batch[0].sampling
    assert record["logprobs_mode"] == "processed_logprobs"
    assert (record["top_k"], record["top_p"]) == (sampling.top_k, sampling.top_p)
    assert "truncation_ok" not in sampling.to_request()


def test_the_record_survives_jsonl_parquet_slime_and_the_report(fake_server, qwen_tokenizer, caplog, tmp_path):
    sampling = SamplingParams(max_tokens=8, top_k=-1, temperature=0.9, min_p=0.05)
    batch, _ = _collect(fake_server, qwen_tokenizer, sampling, caplog)
    expected = sampling.record("raw_logprobs")
    assert batch[0].sampling == expected
    jsonl, parquet = write_jsonl(batch, tmp_path / "b.jsonl"), write_parquet(batch, tmp_path / "b.parquet")
    assert json.loads(jsonl.read_text().splitlines()[0])["sampling"] == expected
    for back in (read_jsonl(jsonl), read_parquet(parquet)):
        assert [t.sampling for t in back] == [t.sampling for t in batch]
        assert back == batch
    assert to_slime_samples(batch)[0]["metadata"]["sampling"] == expected
    for path in (jsonl, parquet):
        assert len(load_file(path).episodes) == 3


def test_parquet_without_the_sampling_column_still_reads(tmp_path):
    import pyarrow.parquet as pq

    from agent_gym.types import Step, StepTrajectory

    step = Step(chat_completions=[], thought="", action="", observation="q", model_response="a", info={},
                reward=0.0, done=True)
    traj = StepTrajectory(prompt_tokens=[1], response_tokens=[2], response_masks=[1], steps=[step])
    path = write_parquet([traj], tmp_path / "a.parquet")
    table = pq.read_table(path)
    pq.write_table(table.drop(["sampling"]), path)
    (back,) = read_parquet(path)
    assert back.sampling == {}


def test_transformers_policy_turns_carry_the_record():
    from agent_gym.models import default_model_path
    from agent_gym.policy import TransformersPolicy

    sampling = SamplingParams(max_tokens=2, top_k=-1, temperature=0.8, seed=0)
    policy = TransformersPolicy(str(default_model_path()), sampling=sampling, logprobs_mode="processed_logprobs")
    try:
        out = policy.act([{"role": "user", "content": "hi"}], session_id="s")
    finally:
        policy.close()
    assert out.sampling == {**sampling.record("raw_logprobs"), "logprobs_mode": "processed_logprobs"}
