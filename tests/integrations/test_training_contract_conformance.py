"""Every trainer path over one batch with every kind of infrastructure failure: no masked id, no fake reward.

The batch (the ``fault_groups`` fixture, :func:`training_faults.build_batch`) holds, per failure kind
(server down before the first turn, server lost mid-episode, env error, tool-runner failure, timeout,
grader failure, a request the server aborted, a judge that failed to score the episode, server lost after the
episode fanned out into segments), real episodes of one task: the failed one and, except for the first group
(three episodes whose server was down), one that solved the task and one that answered wrongly. Each path
turns the batch into what its trainer takes and the trainer's own advantage computation runs on it (TRL's inside a real
``GRPOTrainer`` step; :mod:`contract_paths` for the others). Per path and failure kind the test counts:

* unmasked ids: ids of a failed episode with loss mask 1 in the trainer's tensors;
* fake rewards: failed rows whose advantage is not 0, plus healthy rows whose advantage (or baseline)
  differs from what it is without the failed rows.

Both must be 0 everywhere; the counts are printed (``pytest -s``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from contract_paths import PATHS, PathRun, counts, grpo_reference, live_samples
from training_faults import FAILURE_KINDS, Episode

from agent_gym.export import read_jsonl, read_parquet, to_slime_samples, write_jsonl, write_parquet
from agent_gym.integrations.contract import filler_token_id
from agent_gym.integrations.slime_samples import SAMPLE_METADATA_KEYS
from agent_gym.models import default_model_path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _report(path: str, tally: dict[str, tuple[int, int, int]]) -> None:
    print(f"\n{path}:\n" + "\n".join(f"  {kind:18s} {rows} rows, {ids} unmasked ids, {fake} fake rewards"
                                      for kind, (rows, ids, fake) in tally.items()))
    assert all(rows > 0 for rows, _, _ in tally.values()), tally  # every failure kind reached the trainer
    assert {k: (ids, fake) for k, (_, ids, fake) in tally.items()} == {k: (0, 0) for k in tally}


def test_the_batch_has_sampled_ids_and_rewards_a_trainer_could_wrongly_use(fault_episodes):
    failed = [e for e in fault_episodes if e.failed]
    with_ids = {e.kind for e in failed if any(int(s.response_masks.sum()) for s in e.trajectory.segments)}
    assert with_ids == set(FAILURE_KINDS) - {"server_down"}  # every other failure sampled ids before it failed
    assert {e.kind for e in failed if e.trajectory.trajectory_reward != 0} == with_ids  # shaping paid before
    fanned = [e for e in fault_episodes if len(e.trajectory.segments) > 1]
    assert len(fanned) == 3 and {e.kind for e in fanned} == {"lost_after_fanout", ""}


@pytest.mark.parametrize("path", list(PATHS))
def test_no_failed_episode_trains_on_any_path(path, fault_episodes, tiny_agent_tokenizer):
    run = PATHS[path](fault_episodes, filler_token_id(tiny_agent_tokenizer))
    _report(path, counts(run))


def test_failed_rows_are_well_formed_and_say_why(fault_episodes, tiny_agent_tokenizer):
    pad = filler_token_id(tiny_agent_tokenizer)
    runs = {name: PATHS[name](fault_episodes, pad) for name in PATHS}
    for sample in runs["slime export (to_slime_samples)"].failed(fault_episodes):
        assert sample.status in ("failed", "aborted") and sample.metadata["masked"] and sample.metadata["error"]
        assert sample.response_length >= 1 and len(sample.tokens) > sample.response_length
    for output in runs["verl (agent_loop_fields + agent_gym_grpo)"].failed(fault_episodes):
        assert output["reward_score"] == 0.0 and output["extra_fields"]["agent_gym_masked"]
        assert output["prompt_ids"] and output["response_ids"] and output["extra_fields"]["agent_gym_error"]
    for row in runs["SkyRL (AgentGymGenerator)"].failed(fault_episodes):
        assert row["stop_reasons"] == "abort" and row["prompt_token_ids"] and row["response_ids"]
    for record in runs["engine API (training_records)"].failed(fault_episodes):
        assert record.status in ("ENV_ERROR", "POLICY_ERROR", "TIMEOUT", "JUDGE_ERROR") and len(record.prompt_tokens)
        assert record.segments[0].response_masks.tolist() == record.response_masks.tolist()


# ------------------------------------------------------------------------------ slime: one implementation
def test_both_slime_paths_give_the_same_samples(fault_episodes, tiny_agent_tokenizer, tmp_path):
    pad = filler_token_id(tiny_agent_tokenizer)
    batch = [e.trajectory for e in fault_episodes]
    exported = to_slime_samples(batch, pad_token_id=pad)
    live = live_samples(fault_episodes, pad)
    assert len(exported) == len(live) == sum(max(len(t.segments), 1) for t in batch)
    assert any(s["metadata"]["num_segments"] > 1 and s["metadata"]["masked"] for s in exported)  # failed fan-out
    for ours, theirs in zip(exported, live, strict=True):
        for name in ("tokens", "response_length", "loss_mask", "rollout_log_probs", "reward", "remove_sample",
                     "weight_versions"):
            assert ours[name] == getattr(theirs, name), name
        assert ours["status"] == theirs.status.value
        for name in (*SAMPLE_METADATA_KEYS, "env_id", "sampling"):
            assert ours["metadata"][name] == theirs.metadata[name], name
    # a trainer reading the episodes back from a file gets the same samples
    assert exported == to_slime_samples(read_jsonl(write_jsonl(batch, tmp_path / "b.jsonl")), pad_token_id=pad)
    assert exported == to_slime_samples(read_parquet(write_parquet(batch, tmp_path / "b.parquet")), pad_token_id=pad)
    # without a pad id the episodes that never sampled give no sample at all
    dropped = to_slime_samples(batch)
    assert len(dropped) == len(exported) - 3 and not any(s["response_length"] == 0 for s in dropped)


def test_engine_records_read_back_from_a_file_are_the_same(fault_episodes, tiny_agent_tokenizer, tmp_path):
    from agent_gym.integrations.engine import training_records

    pad = filler_token_id(tiny_agent_tokenizer)
    batch = [e.trajectory for e in fault_episodes]
    again = training_records(read_parquet(write_parquet(batch, tmp_path / "e.parquet")), pad_token_id=pad)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in training_records(batch, pad_token_id=pad)]


# ---------------------------------------------------------------------------------------------- TRL
def _trl_step(prompts: list[str], rollout: Any, tokenizer: Any, tmp_path: Any, generations: int) -> dict[str, Any]:
    """One real GRPOTrainer step over ``prompts`` (each ``generations`` times); what TRL scored, and its loss."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from agent_gym.integrations.trl_data import episode_reward

    scored: dict[str, Any] = {}

    class Recording(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            mask = output["completion_mask"]
            if output.get("tool_mask") is not None:
                mask = mask * output["tool_mask"]
            scored.update(loss_mask=mask.clone(), advantages=output["advantages"].clone())
            return output

    model = AutoModelForCausalLM.from_pretrained(default_model_path(), dtype=torch.float32)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=generations * len(prompts),
                      num_generations=generations, max_completion_length=256, max_steps=1, use_cpu=True,
                      report_to="none", logging_steps=1, save_strategy="no", learning_rate=1e-4, bf16=False, seed=0,
                      gradient_checkpointing=False, shuffle_dataset=False, beta=0.04)
    trainer = Recording(model=model, processing_class=tokenizer, args=args,
                        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                        reward_funcs=episode_reward, rollout_func=rollout)
    trainer.train()
    scored["loss"] = next(h["loss"] for h in trainer.state.log_history if "loss" in h)
    return scored


def test_trl_rollout_func_in_a_real_grpo_trainer(fault_groups, tiny_agent_tokenizer, tmp_path):
    from agent_gym.integrations.trl import episode_sample
    from agent_gym.integrations.trl_data import task_prompt

    pad = filler_token_id(tiny_agent_tokenizer)
    prompts = [task_prompt(g[0].trajectory.task) for g in fault_groups]
    queue = {p: list(g) for p, g in zip(prompts, fault_groups, strict=True)}
    served: list[Episode] = []

    def rollout(batch_prompts: Sequence[str], trainer: Any) -> dict[str, list]:
        out: dict[str, list] = {}
        for prompt in batch_prompts:
            served.append(queue[prompt].pop(0))
            for key, value in episode_sample(served[-1].trajectory, pad_token_id=pad).items():
                out.setdefault(key, []).append(value)
        return out

    scored = _trl_step(prompts, rollout, tiny_agent_tokenizer, tmp_path, generations=3)
    assert math.isfinite(scored["loss"])
    assert [e.kind for e in served[:3]] == ["server_down"] * 3  # the batch's first rows failed before a turn
    rows = [(e.kind, str(e.trajectory.task["id"]), int(scored["loss_mask"][i].sum()), float(scored["advantages"][i]))
            for i, e in enumerate(served)]
    rewards = [float(e.trajectory.trajectory_reward) for e in served]
    run = PathRun(served, list(range(len(served))), rows, grpo_reference(rows, rewards, eps=1e-4))
    _report("TRL rollout_func (GRPOTrainer)", counts(run))
