"""The batched token chooser ``draw_tokens``: per-row draws that do not depend on the other rows."""

from __future__ import annotations

import math

import pytest
import torch

from agent_gym.inference import draw_token, draw_tokens

SETTINGS = [
    dict(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0),
    dict(temperature=0.7, top_k=5, top_p=1.0, min_p=0.0),
    dict(temperature=1.3, top_k=-1, top_p=0.8, min_p=0.0),
    dict(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.05),
    dict(temperature=0.0, top_k=-1, top_p=1.0, min_p=0.0),
]


def _logits(rows: int, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 2.5


@pytest.mark.parametrize("settings", SETTINGS)
def test_a_row_draws_the_same_id_alone_or_in_a_batch(settings):
    logits = _logits(6)
    for step in range(20):
        gens = [torch.Generator().manual_seed(100 * step + r) for r in range(6)]
        together, logp = draw_tokens(logits.clone(), generators=gens, **settings)
        for r in range(6):
            alone, logp_alone = draw_tokens(logits[r : r + 1].clone(),
                                            generators=[torch.Generator().manual_seed(100 * step + r)], **settings)
            assert alone == [together[r]]
            assert torch.equal(logp_alone[0], logp[r])


@pytest.mark.parametrize("settings", SETTINGS)
def test_the_distribution_is_the_one_draw_token_draws_from(settings):
    logits = _logits(4, seed=1)
    _, logp = draw_tokens(logits.clone(), generators=[torch.Generator() for _ in range(4)], **settings)
    for r in range(4):
        _, expected = draw_token(logits[r].clone(), generator=torch.Generator(), **settings)
        assert torch.allclose(logp[r], expected, atol=1e-6)


def test_draws_follow_the_probabilities_and_stay_in_the_support():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.0]]))
    gen = torch.Generator().manual_seed(0)
    counts = [0, 0, 0, 0]
    for _ in range(4000):
        [token], _ = draw_tokens(logits.clone(), temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, generators=[gen])
        counts[token] += 1
    assert counts[3] == 0
    assert [round(c / 4000, 1) for c in counts] == [0.5, 0.3, 0.2, 0.0]


def test_banned_ids_apply_to_the_rows_named():
    logits = torch.tensor([[0.0, 9.0, 0.0], [0.0, 9.0, 0.0]])
    tokens, logp = draw_tokens(logits, temperature=0.0, top_k=-1, top_p=1.0, min_p=0.0,
                               generators=[torch.Generator(), torch.Generator()], banned=[1], banned_rows=[True, False])
    assert tokens[1] == 1 and tokens[0] != 1
    assert logp[0, 1] == -math.inf and logp[1, 1] > -1.0


def test_one_generator_per_row_is_required():
    with pytest.raises(ValueError, match="one per row"):
        draw_tokens(torch.zeros(2, 3), temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, generators=[None])
