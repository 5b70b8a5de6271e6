"""TransformersPolicy's sampling loop: penalties kept incrementally, identical to ``sample_next``."""

from __future__ import annotations

import pytest
import torch

from agent_gym.policy import SamplingParams, TransformersPolicy, sample_next
from agent_gym.policy.logits import Penalties
from agent_gym.policy.transformers_policy import _sample

PENALTIES = [
    dict(repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.3),
    dict(repetition_penalty=0.8),
    dict(frequency_penalty=-0.4),
    dict(),
]


class _CountingPrompt(list):
    """A prompt that counts how often it is concatenated or iterated."""

    passes = 0

    def __add__(self, other):
        type(self).passes += 1
        return list.__add__(self, other)

    def __iter__(self):
        type(self).passes += 1
        return list.__iter__(self)


@pytest.mark.parametrize("penalties", PENALTIES)
def test_generation_does_not_rescan_the_prompt_per_token(tiny_model_dir, penalties):
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=24, min_tokens=24, seed=3, **penalties)
    policy = TransformersPolicy(str(tiny_model_dir), sampling=sampling)
    prompt = _CountingPrompt(list(range(100, 600)))
    _CountingPrompt.passes = 0
    ids, logprobs, _ = policy.generate_ids(prompt, 24)
    assert len(ids) == 24
    assert _CountingPrompt.passes <= 2  # O(1) passes over the prompt per turn, not one per token
    again = policy.generate_ids(list(range(100, 600)), 24)
    assert again == (ids, logprobs, "length")  # still reproducible under the seed


@pytest.mark.parametrize("penalties", PENALTIES)
def test_incremental_penalties_match_sample_next_bit_for_bit(penalties):
    sampling = SamplingParams(temperature=0.9, top_k=-1, top_p=0.9, min_p=0.01, **penalties)
    vocab = 64
    prompt = [1, 5, 5, 9, 30, 63]
    torch.manual_seed(0)
    steps = [torch.randn(vocab) * 3 for _ in range(40)]
    out_ref: list[int] = []
    lp_ref: list[float] = []
    g = torch.Generator().manual_seed(7)
    for logits in steps:
        token, logp = sample_next(logits, sampling, out_ref, prompt + out_ref, (), g)
        out_ref.append(token)
        lp_ref.append(logp)
    state = Penalties(sampling, vocab, prompt, ())
    out: list[int] = []
    lps: list[float] = []
    g = torch.Generator().manual_seed(7)
    for logits in steps:
        token, logp = _sample(logits, sampling, state, (), g)
        out.append(token)
        lps.append(logp)
        state.add(token)
    assert out == out_ref and lps == lp_ref


def test_fixed_seed_differs_across_sessions_and_replays_per_session(tiny_model_dir):
    sampling = SamplingParams(temperature=1.0, top_k=-1, max_tokens=12, min_tokens=12, seed=5)
    policy = TransformersPolicy(str(tiny_model_dir), sampling=sampling)
    messages = [{"role": "user", "content": "What is 17*3?"}]
    outs = {}
    for session in ("sibling-0", "sibling-1"):
        outs[session] = policy.act(messages, session_id=session).token_ids
        policy.close_session(session)
    assert outs["sibling-0"] != outs["sibling-1"]
    assert policy.act(messages, session_id="sibling-0").token_ids == outs["sibling-0"]
