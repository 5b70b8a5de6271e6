"""scripts/batch_headroom.py on given pass rates: the bounds of draw weights and the simulated sampler."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "batch_headroom.py"


@pytest.fixture(scope="module")
def headroom():
    spec = importlib.util.spec_from_file_location("batch_headroom", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bounds_weigh_tasks_by_their_chance_of_an_informative_group(headroom):
    rates = {"solved": 1.0, "half": 0.5, "never": 0.0, "mostly": 0.95}
    tokens = {"solved": 50.0, "half": 100.0, "never": 25.0, "mostly": 50.0}
    out = headroom.bounds(rates, tokens, group_size=4)
    half, mostly = 1 - 2 * 0.5 ** 4, 1 - 0.95 ** 4 - 0.05 ** 4
    assert out["uniform"]["informative_share"] == pytest.approx((half + mostly) / 4)
    assert out["uniform"]["informative_per_1k_tokens"] == pytest.approx(1000 * (half + mostly) / 4 / (4 * 56.25))
    assert out["learnable_band_known"]["informative_share"] == pytest.approx(half)  # 0.95 is above too_easy
    assert out["weights_by_informative_chance"]["informative_share"] == pytest.approx(
        (half ** 2 + mostly ** 2) / (half + mostly))


def test_the_simulation_finds_no_informative_group_in_a_solved_pool_and_early_cancel_fires_without_error(headroom):
    rates, tokens = {"a": 1.0, "b": 1.0}, {"a": 40.0, "b": 60.0}
    run = headroom.simulate(rates, tokens, group_size=4, groups=50, curriculum=True, seed=3)
    assert run["informative_share"] == 0.0 and run["early_cancel_wrong"] == 0.0
    assert run["early_cancel_fires"] == pytest.approx(48 / 50)  # every group after each task's first
    assert 0.4 < run["early_cancel_token_share"] < 0.5  # two of four members of those groups


def test_a_curriculum_draws_more_informative_groups_than_uniform_draws_from_a_mixed_pool(headroom):
    rates = {f"easy{i}": 1.0 for i in range(8)} | {f"mid{i}": 0.5 for i in range(4)}
    tokens = dict.fromkeys(rates, 50.0)
    shares = {c: sum(headroom.simulate(rates, tokens, group_size=4, groups=60, curriculum=c, seed=s)
                     ["informative_share"] for s in range(5)) / 5 for c in (False, True)}
    assert shares[False] == pytest.approx(4 / 12 * 0.875, abs=0.1)
    assert shares[True] > shares[False] + 0.25
