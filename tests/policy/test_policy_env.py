"""Policies driving ToolUse-v0 through TrajectoryWrapper: token-exact trajectories end to end."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from policy_helpers import recording

import agent_gym  # noqa: F401  (registers the env ids)
from agent_gym.policy import SamplingParams, TransformersPolicy, VLLMPolicy
from agent_gym.wrappers import TrajectoryWrapper

SAMPLING = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, max_tokens=16, logprobs=0, seed=7)


def _play(policy, *, seed: int = 0, max_steps: int = 3):
    env = TrajectoryWrapper(gym.make("agent_gym/ToolUse-v0", max_steps=max_steps))
    obs, info = env.reset(seed=seed)
    session = info["episode_id"]
    turns = []
    while True:
        out = policy.act(obs, session_id=session, tools=info["policy_tools"])
        turns.append((obs, info["policy_tools"], out))
        obs, _, terminated, truncated, info = env.step(out)
        if terminated or truncated:
            break
    policy.close_session(session)
    env.close()
    return info["trajectory"], turns


def _check_trajectory(traj, turns, builder, tokenizer):
    assert not traj.retokenized
    assert len(traj.segments) == 1  # the prefix invariant held on every turn
    sampled = [t for _, _, out in turns for t in out.token_ids]
    masks = traj.response_masks.tolist()
    assert [t for t, m in zip(traj.response_tokens.tolist(), masks, strict=False) if m] == sampled
    assert traj.prompt_tokens.tolist() == turns[0][2].prompt_token_ids
    for obs, tools, out in turns:
        assert tokenizer.decode(out.prompt_token_ids) == builder.render_text(list(obs), tools)
    lp = traj.response_logprobs.tolist()
    expected = [v for _, _, out in turns for v in out.logprobs]
    assert [v for v, m in zip(lp, masks, strict=True) if m] == pytest.approx(expected)
    assert all(v == 0.0 for v, m in zip(lp, masks, strict=False) if not m)


def _rescore_error(model_dir, traj) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.cat([traj.prompt_tokens, traj.response_tokens]).unsqueeze(0)
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    scored = logp.gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1)[len(traj.prompt_tokens) - 1 :]
    mask = traj.response_masks.bool()
    return float((scored[mask] - traj.response_logprobs[mask]).abs().max())


def test_tool_use_episode_through_vllm_policy(reference_server, qwen_tokenizer, tiny_model_dir):
    with recording(VLLMPolicy, [reference_server], qwen_tokenizer, SAMPLING) as policy:
        traj, turns = _play(policy)
        for (_, _, out), (_, data) in zip(turns, policy.client.responses, strict=False):
            assert out.token_ids == data["choices"][0]["token_ids"]
            assert out.prompt_token_ids == data["choices"][0]["prompt_token_ids"]
        _check_trajectory(traj, turns, policy.builder, qwen_tokenizer)
    assert traj.status and len(traj.steps) == len(turns)
    assert _rescore_error(tiny_model_dir, traj) < 1e-3


def test_transformers_policy_gives_the_same_kind_of_trajectory(reference_server, qwen_tokenizer, tiny_model_dir):
    local = TransformersPolicy(str(tiny_model_dir), sampling=SAMPLING)
    with VLLMPolicy([reference_server], qwen_tokenizer, SAMPLING) as remote:
        traj_remote, turns_remote = _play(remote)
    traj_local, turns_local = _play(local)
    _check_trajectory(traj_local, turns_local, local.builder, qwen_tokenizer)
    _check_trajectory(traj_remote, turns_remote, remote.builder, qwen_tokenizer)
    assert type(traj_local) is type(traj_remote)
    assert traj_local.prompt_tokens.tolist() == traj_remote.prompt_tokens.tolist()  # same env seed, same builder
    for traj in (traj_local, traj_remote):
        assert traj.response_tokens.dtype == torch.long and traj.response_logprobs.dtype == torch.float32
        assert set(traj.metrics) == {"steps", "toolcall_reward", "res_reward", "reward_time", "env_time",
                                     "llm_time", "total_time"}
    assert _rescore_error(tiny_model_dir, traj_local) < 1e-3
