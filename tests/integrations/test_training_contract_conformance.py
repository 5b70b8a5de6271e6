"""Every trainer path over one batch with every kind of infrastructure failure: no masked id, no fake reward.

The batch (:func:`training_faults.build_batch`) holds, per failure kind (server down before the first
turn, server lost mid-episode, env error, tool-runner failure, timeout, grader failure, a request the
server aborted, server lost after the episode fanned out into segments), real episodes of one task:
the failed one and, except for the first group (three episodes whose server was down), one that solved
the task and one that answered wrongly. Each adapter turns the batch into what its trainer takes, the
trainer's own advantage computation runs on it (TRL's inside a real ``GRPOTrainer`` step), and per
adapter and failure kind the test counts:

* unmasked ids: ids of a failed episode with loss mask 1 in the trainer's tensors;
* fake rewards: failed rows whose advantage is not 0, plus groups whose healthy rows' advantages
  (or baseline) differ from what they are without the failed rows.

Both must be 0 everywhere; the counts are printed (``pytest -s``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import pytest
import torch
from slime_types import Sample
from training_faults import FAILURE_KINDS, Episode, build_batch

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.engine import training_records
from agent_gym.export import read_jsonl, read_parquet, to_slime_samples, write_jsonl, write_parquet
from agent_gym.integrations.contract import filler_token_id
from agent_gym.integrations.skyrl import AgentGymGenerator
from agent_gym.integrations.slime import episode_samples, reward_post_process
from agent_gym.integrations.slime_samples import SAMPLE_METADATA_KEYS
from agent_gym.integrations.verl import agent_loop_fields, grpo_advantages
from agent_gym.models import default_model_path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

Row = tuple[str, str, int, float]
"""``(kind, group, ids in the loss, advantage)`` of one trainer row; kind "" for a healthy episode."""


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_path())


@pytest.fixture(scope="module")
def groups(tokenizer) -> list[list[Episode]]:
    env = gym.make("agent_gym/ToolUse-v0")
    tasks = env.unwrapped.tasks
    lookup = [t for t in tasks if t["family"] == "lookup"]
    arithmetic = [t for t in tasks if t["family"] == "arithmetic"]
    # tool-runner failure on the second call turn, fan-out over three turns: two-call tasks there
    groups = build_batch(tokenizer, lookup[:3] + arithmetic[1:2] + lookup[3:6] + arithmetic[:1])
    statuses = {g[0].kind: g[0].trajectory.status for g in groups}
    assert statuses == {"server_down": "POLICY_ERROR", "server_lost": "POLICY_ERROR", "env_error": "ENV_ERROR",
                        "tool_runner": "ENV_ERROR", "timeout": "TIMEOUT", "grader": "ENV_ERROR",
                        "server_abort": "POLICY_ERROR", "lost_after_fanout": "POLICY_ERROR"}
    assert all(e.trajectory.status == "ENV_DONE" for g in groups for e in g if not e.failed)
    return groups


@pytest.fixture(scope="module")
def episodes(groups) -> list[Episode]:
    return [e for g in groups for e in g]


def test_the_batch_has_sampled_ids_and_rewards_a_trainer_could_wrongly_use(episodes):
    failed = [e for e in episodes if e.failed]
    with_ids = {e.kind for e in failed if any(int(s.response_masks.sum()) for s in e.trajectory.segments)}
    assert with_ids == set(FAILURE_KINDS) - {"server_down"}  # every other failure sampled ids before it failed
    assert {e.kind for e in failed if e.trajectory.trajectory_reward != 0} == with_ids  # shaping paid before
    fanned = [e for e in episodes if e.kind == "lost_after_fanout" or len(e.trajectory.segments) > 1]
    assert all(len(e.trajectory.segments) >= 2 for e in fanned) and len(fanned) == 3


# ---------------------------------------------------------------------------------------------- counting
COUNTS: dict[str, dict[str, tuple[int, int, int]]] = {}


def _tally(adapter: str, rows: Sequence[Row], reference: Callable[[Sequence[Row]], dict[int, float]],
           *, tolerance: float = 1e-5) -> dict[str, tuple[int, int, int]]:
    """Count, per failure kind, rows, unmasked ids and fake rewards; ``reference`` gives the advantages of
    the healthy rows computed without the failed ones (keyed by row position)."""
    expected = reference(rows)
    kinds: dict[str, str] = {}
    for kind, group, _, _ in rows:
        if kind:
            kinds[group] = kind
    counts = {kind: [0, 0, 0] for kind in FAILURE_KINDS}
    for i, (kind, group, ids, advantage) in enumerate(rows):
        if kind:
            counts[kind][0] += 1
            counts[kind][1] += ids
            counts[kind][2] += int(abs(advantage) > tolerance)
        elif group in kinds and abs(advantage - expected[i]) > tolerance:
            counts[kinds[group]][2] += 1  # a healthy sibling whose advantage the failed row moved
    result = {kind: (c[0], c[1], c[2]) for kind, c in counts.items()}
    COUNTS[adapter] = result
    print(f"\n{adapter}: " + ", ".join(f"{k}: {c[0]} rows, {c[1]} unmasked ids, {c[2]} fake rewards"
                                       for k, c in result.items()))
    return result


def _assert_clean(counts: dict[str, tuple[int, int, int]]) -> None:
    assert all(rows > 0 for rows, _, _ in counts.values()), counts  # every failure kind reached the trainer
    assert {k: (ids, fake) for k, (_, ids, fake) in counts.items()} == {k: (0, 0) for k in counts}


def _grpo(rows: Sequence[Row], scores: Sequence[float], *, eps: float = 1e-6) -> dict[int, float]:
    """GRPO advantages of the healthy rows over the healthy rows of their group alone."""
    out: dict[int, float] = {}
    by_group: dict[str, list[int]] = {}
    for i, (kind, group, _, _) in enumerate(rows):
        if not kind:
            by_group.setdefault(group, []).append(i)
    for members in by_group.values():
        values = torch.tensor([scores[i] for i in members], dtype=torch.float64)
        std = values.std() if len(members) > 1 else torch.tensor(0.0)
        for i in members:
            out[i] = float((scores[i] - values.mean()) / (std + eps)) if len(members) > 1 else 0.0
    return out


# ---------------------------------------------------------------------------------------------- slime
def _slime_rows(samples: Sequence[Any], kinds: dict[str, str]) -> tuple[list[Row], list[float]]:
    args = SimpleNamespace(rewards_normalization=True, grpo_std_normalization=True)
    raw, advantages = reward_post_process(args, samples)
    rows = []
    for sample, advantage in zip(samples, advantages, strict=True):
        metadata = sample.metadata
        ids = sum(sample.loss_mask) if not sample.remove_sample else 0  # slime zeroes a removed sample's loss
        rows.append((kinds[metadata["agent_gym_rollout_id"]], metadata["group_key"], ids, advantage))
    return rows, raw


def _reference_post_process(samples: Sequence[Any]) -> Callable[[Sequence[Row]], dict[int, float]]:
    def reference(rows: Sequence[Row]) -> dict[int, float]:
        healthy = [i for i, row in enumerate(rows) if not row[0]]
        args = SimpleNamespace(rewards_normalization=True, grpo_std_normalization=True)
        _, advantages = reward_post_process(args, [samples[i] for i in healthy])
        return dict(zip(healthy, advantages, strict=True))

    return reference


def _kinds(episodes: Sequence[Episode]) -> dict[str, str]:
    return {e.trajectory.rollout_id: e.kind for e in episodes}


def _live_samples(episodes: Sequence[Episode], tokenizer: Any) -> list[Any]:
    samples: list[Any] = []
    for index, episode in enumerate(episodes):
        group = str((episode.trajectory.task or {}).get("id"))
        sample = Sample(group_index=hash(group) % 10_000, index=index, metadata={"task": episode.trajectory.task})
        out = episode_samples(sample, episode.trajectory, env_id=episode.trajectory.env_id,
                              sampling={"max_new_tokens": 64}, pad_token_id=filler_token_id(tokenizer))
        samples.extend(out if isinstance(out, list) else [out])
    return samples


def test_slime_export(episodes, tokenizer):
    samples = [SimpleNamespace(**s) for s in to_slime_samples([e.trajectory for e in episodes],
                                                               pad_token_id=filler_token_id(tokenizer))]
    assert all(s.tokens and s.response_length >= 1 for s in samples)  # never an empty prompt or response
    rows, _ = _slime_rows(samples, _kinds(episodes))
    for sample, row in zip(samples, rows, strict=True):
        if row[0]:
            assert sample.remove_sample and set(sample.loss_mask) == {0} and sample.reward == 0.0
            assert sample.status in ("failed", "aborted") and sample.metadata["masked"]
    _assert_clean(_tally("slime export (to_slime_samples)", rows, _reference_post_process(samples)))


def test_slime_generate(episodes, tokenizer):
    samples = _live_samples(episodes, tokenizer)
    rows, _ = _slime_rows(samples, _kinds(episodes))
    for sample, row in zip(samples, rows, strict=True):
        if row[0]:
            assert sample.remove_sample and set(sample.loss_mask) == {0} and sample.reward == 0.0
            assert sample.status in (Sample.Status.FAILED, Sample.Status.ABORTED)
    _assert_clean(_tally("slime generate (episode_samples)", rows, _reference_post_process(samples)))


def test_both_slime_paths_give_the_same_samples(episodes, tokenizer):
    pad = filler_token_id(tokenizer)
    exported = to_slime_samples([e.trajectory for e in episodes], pad_token_id=pad)
    live = _live_samples(episodes, tokenizer)
    assert len(exported) == len(live) == sum(max(len(e.trajectory.segments), 1) for e in episodes)
    assert any(s["metadata"]["num_segments"] > 1 and s["metadata"]["masked"] for s in exported)  # failed fan-out
    for ours, theirs in zip(exported, live, strict=True):
        for name in ("tokens", "response_length", "loss_mask", "rollout_log_probs", "reward", "remove_sample",
                     "weight_versions"):
            assert ours[name] == getattr(theirs, name), name
        assert ours["status"] == theirs.status.value
        for name in (*SAMPLE_METADATA_KEYS, "env_id", "sampling"):
            assert ours["metadata"][name] == theirs.metadata[name], name
    # the files a trainer reads back give the same samples
    batch = [e.trajectory for e in episodes]
    assert exported == to_slime_samples(read_jsonl(write_jsonl(batch, _tmp("b.jsonl"))), pad_token_id=pad)
    assert exported == to_slime_samples(read_parquet(write_parquet(batch, _tmp("b.parquet"))), pad_token_id=pad)


def _tmp(name: str) -> str:
    import tempfile

    return os.path.join(tempfile.mkdtemp(), name)


# ---------------------------------------------------------------------------------------------- TRL
def _trl_step(model: Any, tokenizer: Any, prompts: list[str], rollout: Callable[..., dict], tmp_path: Any,
              generations: int, rows: int) -> dict[str, Any]:
    """One real GRPOTrainer step; returns what TRL scored (its loss mask and advantages) and the loss."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agent_gym.integrations.trl import episode_reward

    captured: dict[str, Any] = {}

    class Recording(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            mask = output["completion_mask"] * output.get("tool_mask", torch.ones_like(output["completion_mask"]))
            captured.update(loss_mask=mask.clone(), advantages=output["advantages"].clone(),
                            completion_ids=output["completion_ids"].clone())
            return output

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=rows, num_generations=generations,
                      max_completion_length=256, max_steps=1, use_cpu=True, report_to="none", logging_steps=1,
                      save_strategy="no", learning_rate=1e-4, bf16=False, seed=0, gradient_checkpointing=False,
                      shuffle_dataset=False, beta=0.04)
    trainer = Recording(model=model, processing_class=tokenizer, args=args,
                        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                        reward_funcs=episode_reward, rollout_func=rollout)
    trainer.train()
    captured["loss"] = next(h["loss"] for h in trainer.state.log_history if "loss" in h)
    return captured


def test_trl_rollout_func_in_a_real_grpo_trainer(groups, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    from agent_gym.integrations.trl import episode_sample, task_prompt

    pad = filler_token_id(tokenizer)
    prompts = [task_prompt(g[0].trajectory.task) for g in groups]
    queue = {p: [e for e in g] for p, g in zip(prompts, groups, strict=True)}
    served: list[Episode] = []

    def rollout(batch_prompts, trainer):
        out: dict[str, list] = {}
        for prompt in batch_prompts:
            episode = queue[prompt].pop(0)
            served.append(episode)
            for key, value in episode_sample(episode.trajectory, pad_token_id=pad).items():
                out.setdefault(key, []).append(value)
        return out

    model = AutoModelForCausalLM.from_pretrained(default_model_path(), dtype=torch.float32)
    scored = _trl_step(model, tokenizer, prompts, rollout, tmp_path, generations=3, rows=3 * len(groups))
    assert math.isfinite(scored["loss"])
    assert [e.kind for e in served[:3]] == ["server_down"] * 3  # the batch's first rows failed before a turn
    rows: list[Row] = []
    rewards: list[float] = []
    for i, episode in enumerate(served):
        group = str(episode.trajectory.task["id"])
        rows.append((episode.kind, group, int(scored["loss_mask"][i].sum()), float(scored["advantages"][i])))
        rewards.append(float(episode.trajectory.trajectory_reward))
    _assert_clean(_tally("TRL rollout_func (GRPOTrainer)", rows, lambda r: _grpo(r, rewards, eps=1e-4)))


# ---------------------------------------------------------------------------------------------- verl
def test_verl_agent_loop_with_the_agent_gym_estimator(episodes, tokenizer):
    pad = filler_token_id(tokenizer)
    outputs = [agent_loop_fields(e.trajectory, prompt_length=4096, response_length=1024, pad_token_id=pad)["output"]
               for e in episodes]
    width = max(len(o["response_ids"]) for o in outputs)
    mask = torch.zeros(len(outputs), width)
    scores = torch.zeros(len(outputs), width)
    for i, o in enumerate(outputs):  # verl's tensors: the reward on the last response id
        n = len(o["response_mask"])
        mask[i, :n] = torch.tensor(o["response_mask"], dtype=torch.float32)
        scores[i, n - 1] = o["reward_score"]
    index = [o["extra_fields"]["agent_gym_group_key"] for o in outputs]
    advantages, _ = grpo_advantages(scores, mask, index)
    rows = [(e.kind, index[i], int(mask[i].sum()), float(advantages[i].abs().max()) if e.kind else
             float(advantages[i][mask[i] > 0][0])) for i, e in enumerate(episodes)]
    for o, e in zip(outputs, episodes, strict=True):
        if e.failed:
            assert o["reward_score"] == 0.0 and o["extra_fields"]["agent_gym_masked"]
            assert len(o["prompt_ids"]) >= 1 and len(o["response_ids"]) >= 1

    def reference(rows: Sequence[Row]) -> dict[int, float]:
        healthy = [i for i, row in enumerate(rows) if not row[0]]
        alone, _ = grpo_advantages(scores[healthy], mask[healthy], [index[i] for i in healthy])
        return {i: float(alone[k][mask[i] > 0][0]) for k, i in enumerate(healthy)}

    _assert_clean(_tally("verl (agent_loop_fields + agent_gym_grpo)", rows, reference))


# ---------------------------------------------------------------------------------------------- SkyRL
def _mean_rows(episodes: Sequence[Episode], rewards: Sequence[float], ids: Sequence[int],
               groups_of: Sequence[str], owners: Sequence[int]) -> tuple[list[Row], Callable]:
    """Rows for trainers that centre rewards on their group's mean over every row (SkyRL, the engine API)."""
    per_episode: dict[int, float] = {}
    for owner, reward in zip(owners, rewards, strict=True):
        per_episode[owner] = reward  # segments of an episode carry one reward
    means: dict[str, list[float]] = {}
    for owner, reward in per_episode.items():
        means.setdefault(groups_of[owner], []).append(reward)
    rows = []
    for row, owner in enumerate(owners):
        group = groups_of[owner]
        rows.append((episodes[owner].kind, group, ids[row], rewards[row] - sum(means[group]) / len(means[group])))

    def reference(rows: Sequence[Row]) -> dict[int, float]:
        healthy: dict[str, list[float]] = {}
        for owner, reward in per_episode.items():
            if not episodes[owner].failed:
                healthy.setdefault(groups_of[owner], []).append(reward)
        return {i: rewards[i] - sum(healthy[r[1]]) / len(healthy[r[1]]) for i, r in enumerate(rows) if not r[0]}

    return rows, reference


def test_skyrl_generator(episodes, tokenizer):
    generator = AgentGymGenerator(None, pad_token_id=filler_token_id(tokenizer))
    out = generator.to_output([e.trajectory for e in episodes])
    owners = []
    by_id = {e.trajectory.rollout_id: i for i, e in enumerate(episodes)}
    for metrics in out["env_metrics"]:
        owners.append(by_id[metrics["rollout_id"]])
    assert all(p and r for p, r in zip(out["prompt_token_ids"], out["response_ids"], strict=True))
    groups_of = [str(e.trajectory.task["id"]) for e in episodes]
    ids = [sum(m) for m in out["loss_masks"]]
    rows, reference = _mean_rows(episodes, out["rewards"], ids, groups_of, owners)
    for row, reason in zip(rows, out["stop_reasons"], strict=True):
        assert (reason == "abort") == bool(row[0])
    _assert_clean(_tally("SkyRL (AgentGymGenerator)", rows, reference))


# ---------------------------------------------------------------------------------------------- engine API
def test_engine_records(episodes, tokenizer):
    records = training_records([e.trajectory for e in episodes], pad_token_id=filler_token_id(tokenizer))
    by_id = {e.trajectory.rollout_id: i for i, e in enumerate(episodes)}
    owners = [by_id[r.rollout_id] for r in records]
    assert all(len(r.prompt_tokens) and len(r.response_tokens) for r in records)
    assert all(len(r.response_masks) == len(r.response_tokens) == len(r.segments[0].response_tokens)
               for r in records)
    groups_of = [str(e.trajectory.task["id"]) for e in episodes]
    ids = [int(r.response_masks.sum()) for r in records]
    rewards = [float(r.trajectory_reward) for r in records]
    rows, reference = _mean_rows(episodes, rewards, ids, groups_of, owners)
    _assert_clean(_tally("engine API (GymEngineWrapper records)", rows, reference))
    # read back from a file, the records give the same
    again = training_records(read_jsonl(write_jsonl([e.trajectory for e in episodes], _tmp("e.jsonl"))),
                             pad_token_id=filler_token_id(tokenizer))
    assert [r.to_dict() for r in again] == [r.to_dict() for r in records]


def test_summary_of_counts():
    """Every adapter above reported 0 unmasked ids and 0 fake rewards for every failure kind."""
    if not COUNTS:
        pytest.skip("run with the adapter tests")
    for adapter, counts in COUNTS.items():
        print(f"{adapter:45s} " + " ".join(f"{k}={c[1]}/{c[2]}" for k, c in counts.items()))
    assert all(ids == fake == 0 for counts in COUNTS.values() for _, ids, fake in counts.values())
