"""The shared token chooser: filters, greedy choice, banned ids, penalties (also kept as running state)."""

import math

import pytest
import torch

from agent_gym.inference import Penalties, draw_token, sample_next, sample_with_penalties
from agent_gym.policy import SamplingParams


def draw(logits, **kwargs):
    params = dict(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, generator=torch.Generator().manual_seed(0))
    params.update(kwargs)
    return draw_token(torch.tensor(logits, dtype=torch.float32), **params)


def test_greedy_returns_argmax_and_raw_distribution():
    token, logp = draw([0.0, 3.0, 1.0], temperature=0.0)
    assert token == 1
    assert torch.allclose(logp, torch.log_softmax(torch.tensor([0.0, 3.0, 1.0]), -1))


def test_banned_ids_are_never_drawn():
    token, logp = draw([0.0, 10.0, 1.0], temperature=0.0, banned=[1])
    assert token == 2 and logp[1] == -math.inf


@pytest.mark.parametrize("kwargs, allowed", [({"top_k": 2}, {1, 2}), ({"top_p": 0.3}, {1}), ({"min_p": 0.5}, {1, 2})])
def test_filters_restrict_the_support(kwargs, allowed):
    logits = [0.0, 2.0, 1.9, -5.0]
    _, logp = draw(logits, **kwargs)
    assert {i for i, v in enumerate(logp.tolist()) if v > -math.inf} == allowed
    assert math.isclose(float(logp.exp().sum()), 1.0, rel_tol=1e-5)


def test_temperature_scales_the_processed_logprobs():
    _, logp = draw([0.0, 1.0], temperature=0.5)
    assert torch.allclose(logp, torch.log_softmax(torch.tensor([0.0, 2.0]), -1))


def test_penalties_follow_the_sequence():
    params = SamplingParams(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
    state = Penalties(params, 4, context=[0], generated=())
    base = torch.tensor([2.0, 2.0, -2.0, 1.0])
    out = state.apply(base.clone())
    assert out.tolist() == [1.0, 2.0, -2.0, 1.0]  # only the prompt id is repetition-penalized
    state.add(2)
    out = state.apply(base.clone())
    # id 2: negative logit times the penalty, then 0.5 * 1 count + 0.25 presence
    assert out.tolist() == [1.0, 2.0, -4.75, 1.0]


PENALTIES = [
    dict(repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.3),
    dict(repetition_penalty=0.8),
    dict(frequency_penalty=-0.4),
    dict(),
]


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
        token, logp = sample_with_penalties(logits, sampling, state, (), g)
        out.append(token)
        lps.append(logp)
        state.add(token)
    assert out == out_ref and lps == lp_ref
