"""The shared token chooser: filters, greedy choice, banned ids, penalties."""

import math

import pytest
import torch

from agent_gym.policy import SamplingParams
from agent_gym.policy.logits import Penalties, draw_token


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
