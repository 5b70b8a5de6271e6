"""``--logprobs-mode``: raw logprobs are a plain forward pass, processed ones the distribution sampled from."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx
import pytest
import torch

PROMPT = [9707, 1879, 0]  # "Hello world!"
TEMPERATURE = 0.7
TOP_K = 5


def _sample(server: str, **extra) -> dict:
    body = {
        "prompt": PROMPT,
        "max_tokens": 8,
        "logprobs": 2,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "temperature": TEMPERATURE,
        "top_k": TOP_K,
        "seed": 11,
        "ignore_eos": True,
        **extra,
    }
    r = httpx.post(f"http://{server}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def _forward_logits(model_dir, ids: list[int]) -> torch.Tensor:
    """Next-token logits of a plain forward pass, at each sampled position."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT + ids])).logits[0].float()
    return logits[len(PROMPT) - 1 : len(PROMPT) - 1 + len(ids)]


@pytest.fixture(scope="module")
def processed_server(start_server) -> str:
    return str(start_server(max_model_len=4096, logprobs_mode="processed_logprobs"))


def test_raw_logprobs_are_the_plain_log_softmax(reference_server, tiny_model_dir):
    choice = _sample(reference_server, repetition_penalty=1.3)  # the default mode is raw, as vLLM's
    ids = choice["token_ids"]
    assert len(ids) == 8
    logp = torch.log_softmax(_forward_logits(tiny_model_dir, ids), dim=-1)
    expected = [float(logp[i, t]) for i, t in enumerate(ids)]
    got = choice["logprobs"]["token_logprobs"]
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < 1e-3
    # the top alternatives are raw too
    for i, top in enumerate(choice["logprobs"]["top_logprobs"]):
        best = int(torch.argmax(logp[i]))
        assert top[f"token_id:{best}"] == pytest.approx(float(logp[i, best]), abs=1e-3)


def test_processed_logprobs_are_the_truncated_tempered_distribution(processed_server, reference_server,
                                                                    tiny_model_dir):
    choice = _sample(processed_server)
    ids = choice["token_ids"]
    logits = _forward_logits(tiny_model_dir, ids) / TEMPERATURE
    kth = torch.topk(logits, TOP_K, dim=-1).values[:, -1:]
    processed = torch.log_softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)
    expected = [float(processed[i, t]) for i, t in enumerate(ids)]
    got = choice["logprobs"]["token_logprobs"]
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < 1e-3
    # the same seed draws the same ids in both modes; only the reported logprobs differ
    raw = _sample(reference_server)
    assert raw["token_ids"] == ids
    assert min(abs(a - b) for a, b in zip(got, raw["logprobs"]["token_logprobs"], strict=True)) > 0.1


def test_filtered_tokens_report_vllm_floor_logprob(processed_server):
    import json

    r = httpx.post(f"http://{processed_server}/v1/completions", timeout=60,
                   json={"prompt": PROMPT, "max_tokens": 3, "logprobs": 4, "top_k": 1, "seed": 0})
    assert r.status_code == 200, r.text
    body = json.loads(r.text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} in the body"))
    for top in body["choices"][0]["logprobs"]["top_logprobs"]:
        values = sorted(top.values())
        assert values[-1] == 0.0 and values[0] == -9999.0  # top_k=1 rules out every other token


def test_logprobs_mode_flag():
    from agent_gym.reference_server.main import add_server_arguments

    parser = add_server_arguments(argparse.ArgumentParser())
    assert parser.parse_args([]).logprobs_mode == "raw_logprobs"
    assert parser.parse_args(["--logprobs-mode", "processed_logprobs"]).logprobs_mode == "processed_logprobs"
    with pytest.raises(SystemExit):
        parser.parse_args(["--logprobs-mode", "processed"])


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_a_served_rollout_of_the_embedded_default_rescores(start_server, mode):
    """Episodes sampled through the server (VLLMPolicy) re-score with a plain forward pass in both modes."""
    from transformers import AutoModelForCausalLM

    from agent_gym import collect
    from agent_gym.models import default_model_path
    from agent_gym.models.evaluate_tiny_agent import held_out_tasks
    from agent_gym.models.tiny import EMBEDDED_MODEL_NAME
    from agent_gym.policy import SamplingParams, VLLMPolicy
    from agent_gym.policy.served_model import served_model_dir, served_models

    path = str(default_model_path())
    server = start_server(model=path, logprobs_mode=mode)
    # the server names the embedded model, not its directory (a host path); a client finds it by that name
    entry = served_models(str(server))[0]
    assert entry["id"] == entry["root"] == EMBEDDED_MODEL_NAME and path not in json.dumps(entry)
    assert served_model_dir([str(server)]) == str(Path(path).resolve())
    sampling = SamplingParams(temperature=TEMPERATURE, top_k=TOP_K, max_tokens=48, seed=1, truncation_ok=True)
    policy = VLLMPolicy([str(server)], path, sampling, logprobs_mode=mode)
    try:
        trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=held_out_tasks(1), n_parallel=2,
                               progress=False, max_steps=3)
    finally:
        policy.close()
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    checked = 0
    for t in trajectories:
        assert t.sampling == sampling.record(mode)
        if len(t.segments) > 1:  # one forward pass re-scores a single segment
            continue
        prompt, response = t.prompt_tokens.tolist(), t.response_tokens.tolist()
        with torch.no_grad():
            logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
        if mode == "processed_logprobs":
            logits = logits / TEMPERATURE
            kth = torch.topk(logits, TOP_K, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(response)[:, None])[:, 0]
        mask = t.response_masks.bool()
        recorded = torch.as_tensor(t.response_logprobs, dtype=torch.float32)[mask]
        assert torch.allclose(logp[mask], recorded, atol=1e-3), (logp[mask] - recorded).abs().max()
        checked += int(mask.sum())
    assert checked > 20
