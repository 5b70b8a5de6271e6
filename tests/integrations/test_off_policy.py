"""The truncated importance-sampling (TIS) loss: weights, statistics and gradients checked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agent_gym.integrations.off_policy import RatioStats, tis_policy_gradient_loss, truncated_importance_weights

# current probabilities 0.3, 0.2, 0.9 of three sampled ids; the behaviour policy gave 0.6, 0.1, 0.3:
# ratios 0.5, 2.0, 3.0; with the clip at 2.5 the weights are 0.5, 2.0, 2.5 (one id of three truncated)
CURRENT = [0.3, 0.2, 0.9]
BEHAVIOUR = [0.6, 0.1, 0.3]


def _logp(probs, grad=False):
    return torch.tensor([math.log(p) for p in probs], dtype=torch.float64, requires_grad=grad)


def test_weights_and_statistics_by_hand():
    weights, stats = truncated_importance_weights(_logp(CURRENT), _logp(BEHAVIOUR), torch.ones(3), clip=2.5)
    assert weights.tolist() == pytest.approx([0.5, 2.0, 2.5])
    assert stats.tokens == 3 and stats.clipped == 1
    assert stats.ratio_mean == pytest.approx(5.5 / 3) and stats.ratio_max == pytest.approx(3.0)
    assert stats.clipped_fraction == pytest.approx(1 / 3)


def test_loss_and_gradient_by_hand():
    logp = _logp(CURRENT, grad=True)
    loss, _ = tis_policy_gradient_loss(logp, _logp(BEHAVIOUR), 1.0, torch.ones(3), clip=2.5)
    # -(0.5 ln 0.3 + 2 ln 0.2 + 2.5 ln 0.9) / 3
    assert loss.item() == pytest.approx(1.3614212, abs=1e-6)
    loss.backward()
    # d loss / d logp = -w * A / 3: the weight carries no gradient
    assert logp.grad.tolist() == pytest.approx([-0.5 / 3, -2.0 / 3, -2.5 / 3])


def test_masked_ids_count_nowhere():
    logp = _logp(CURRENT, grad=True)
    loss, stats = tis_policy_gradient_loss(logp, _logp(BEHAVIOUR), -2.0, torch.tensor([1.0, 0.0, 1.0]), clip=2.5)
    assert stats.tokens == 2 and stats.ratio_mean == pytest.approx(1.75) and stats.ratio_max == pytest.approx(3.0)
    assert stats.clipped_fraction == pytest.approx(0.5)
    # -(0.5 * -2 * ln 0.3 + 2.5 * -2 * ln 0.9) / 2
    assert loss.item() == pytest.approx(-0.8653877, abs=1e-6)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([0.5, 0.0, 2.5])


def test_below_the_clip_the_gradient_is_the_importance_weighted_one():
    """For ratios under the clip, the gradient equals that of the surrogate -A * exp(logp - logp_mu)."""
    behaviour = _logp([0.25, 0.5])
    a = _logp([0.3, 0.4], grad=True)
    loss, stats = tis_policy_gradient_loss(a, behaviour, 1.5, torch.ones(2), clip=2.0)
    loss.backward()
    b = _logp([0.3, 0.4], grad=True)
    (-(1.5 * torch.exp(b - behaviour)).sum() / 2).backward()
    assert stats.clipped == 0
    assert a.grad.tolist() == pytest.approx(b.grad.tolist())


def test_stats_add_up_over_calls_and_bad_inputs_are_rejected():
    _, one = truncated_importance_weights(_logp([0.5]), _logp([0.5]), torch.ones(1), clip=2.0)
    _, two = truncated_importance_weights(_logp(CURRENT), _logp(BEHAVIOUR), torch.ones(3), clip=2.5)
    total = RatioStats().add(one).add(two)
    assert total.tokens == 4 and total.ratio_mean == pytest.approx(6.5 / 4) and total.clipped == 1
    assert RatioStats().as_dict() == {"ratio_mean": 0.0, "ratio_max": 0.0, "clipped_fraction": 0.0, "tokens": 0.0}
    with pytest.raises(ValueError, match="clip"):
        truncated_importance_weights(_logp([0.5]), _logp([0.5]), torch.ones(1), clip=0.0)
    with pytest.raises(ValueError, match="one shape"):
        truncated_importance_weights(_logp([0.5, 0.5]), _logp([0.5]), torch.ones(2), clip=2.0)
