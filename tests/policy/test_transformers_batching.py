"""TransformersPolicy: concurrent turns decoded as one batch; raw and processed logprobs re-score exactly."""

from __future__ import annotations

import pytest
import torch

from agent_gym import collect
from agent_gym.models import default_model_path
from agent_gym.models.evaluate_tiny_agent import held_out_tasks
from agent_gym.policy import SamplingParams, TransformersPolicy


@pytest.fixture(scope="module")
def agent_dir():
    return str(default_model_path())


def test_a_batch_samples_what_each_prompt_samples_alone(agent_dir):
    policy = TransformersPolicy(agent_dir, sampling=SamplingParams(temperature=1.0, top_k=-1, seed=3))
    tok = policy.tokenizer
    prompts = [tok.encode(text) for text in ("Compute 12 + 30.", "<|im_start|>user\nHi", "What day is 2020-01-01?")]
    budgets, seeds = [12, 3, 20], [7, 8, 9]
    alone = [policy.generate_ids(p, n, seed=s) for p, n, s in zip(prompts, budgets, seeds, strict=True)]
    together = policy.generate_batch(prompts, budgets, seeds)
    for (ids_a, lps_a, fin_a), (ids_b, lps_b, fin_b) in zip(alone, together, strict=True):
        assert ids_a == ids_b and fin_a == fin_b
        assert max(abs(a - b) for a, b in zip(lps_a, lps_b, strict=True)) < 1e-4
    assert [len(ids) <= n for (ids, _, _), n in zip(together, budgets, strict=True)] == [True] * 3


def test_concurrent_episodes_share_batches(agent_dir):
    policy = TransformersPolicy(agent_dir, sampling=SamplingParams(temperature=0.0, max_tokens=64, seed=0))
    sizes: list[int] = []
    inner = policy.generate_batch

    def recording(prompts, max_tokens, seeds, sessions=None):
        sizes.append(len(prompts))
        return inner(prompts, max_tokens, seeds, sessions=sessions)

    policy.generate_batch = recording
    tasks = held_out_tasks(2)
    batched = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=8, progress=False, max_steps=4)
    assert max(sizes) > 1
    sizes.clear()
    policy.generate_batch = inner
    alone = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=1, progress=False, max_steps=4)
    policy.close()
    assert [t.response_tokens.tolist() for t in batched] == [t.response_tokens.tolist() for t in alone]


def _rescore(model, trajectory, temperature: float, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    prompt = trajectory.prompt_tokens.tolist()
    response = trajectory.response_tokens.tolist()
    mask = trajectory.response_masks.bool()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    if temperature > 0:
        logits = logits / temperature
        if top_k > 0:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(response)[:, None])[:, 0]
    return logp[mask], torch.as_tensor(trajectory.response_logprobs, dtype=torch.float32)[mask]


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_rollout_logprobs_rescore_with_a_plain_forward_pass(agent_dir, mode):
    from transformers import AutoModelForCausalLM

    sampling = SamplingParams(temperature=0.7, top_k=5, max_tokens=48, seed=1)
    policy = TransformersPolicy(agent_dir, sampling=sampling, logprobs_mode=mode)
    trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=held_out_tasks(1), n_parallel=4,
                           progress=False, max_steps=3)
    policy.close()
    model = AutoModelForCausalLM.from_pretrained(agent_dir).eval()
    checked = 0
    for t in trajectories:
        if len(t.segments) > 1:
            continue
        if mode == "raw_logprobs":
            rescored, recorded = _rescore(model, t, 0.0, -1)
        else:
            rescored, recorded = _rescore(model, t, sampling.temperature, sampling.top_k)
        assert torch.allclose(rescored, recorded, atol=1e-3), (rescored - recorded).abs().max()
        checked += int(t.response_masks.sum())
    assert checked > 20


def test_logprobs_mode_is_checked(agent_dir):
    with pytest.raises(ValueError, match="logprobs_mode"):
        TransformersPolicy(agent_dir, logprobs_mode="logits")
