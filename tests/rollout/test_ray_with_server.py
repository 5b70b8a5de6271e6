"""The Ray backend with a real policy: ``VLLMPolicy`` shipped to actors, against the reference server."""

from __future__ import annotations

import importlib.util

import pytest

from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect
from agent_gym.types import EpisodeStatus

ENV_ID = "agent_gym/ToolUse-v0"
HAS_RAY = importlib.util.find_spec("ray") is not None

pytestmark = pytest.mark.skipif(not HAS_RAY, reason="the 'ray' extra is not installed (pip install 'agent-gym[ray]')")


def _tokens(trajectory):
    return [
        (s.prompt_tokens.tolist(), s.response_tokens.tolist(), s.response_masks.tolist())
        for s in trajectory.segments
    ]


@pytest.mark.timeout(400)
def test_vllm_policy_on_ray_samples_the_same_tokens_as_locally(reference_server, qwen_tokenizer, local_ray):
    # Temperature 1 with a seed: each turn's sampling seed derives from the episode id, which
    # the plan gives every episode on either backend, so the sampled tokens must be equal.
    sampling = SamplingParams(max_tokens=8, temperature=1.0, seed=11)
    policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, sampling)
    run = dict(num_episodes=3, samples_per_task=2, n_parallel=3, max_steps=2, seed=4, progress=False)
    try:
        local = collect(ENV_ID, policy, **run)
        remote = collect(ENV_ID, policy, backend="ray", **run)  # the policy object itself is shipped
    finally:
        policy.close()
    assert [t.idx for t in remote] == list(range(6))
    assert [t.status for t in remote] == [t.status for t in local]
    assert all(t.status != EpisodeStatus.POLICY_ERROR for t in remote), [t.steps[-1].info for t in remote]
    assert [_tokens(t) for t in remote] == [_tokens(t) for t in local]
    for a, b in zip(remote, local, strict=True):
        assert a.response_logprobs.tolist() == pytest.approx(b.response_logprobs.tolist(), abs=1e-4)
        assert a.group_id == b.group_id and a.task == b.task
    # Siblings share the task but not the seeds: the comparison above is not between constants.
    assert any(_tokens(local[2 * g]) != _tokens(local[2 * g + 1]) for g in range(3))
