import math

import pytest

from agent_gym.errors import ConfigError
from agent_gym.report import mean_pass_at_k, pass_at_k, wilson_interval


def _reference(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 0.4),
    (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (4, 1, 4, 1.0),
    (4, 0, 2, 0.0),
    (3, 3, 1, 1.0),
    (10, 3, 5, 1 - 21 / 252),  # C(7,5)=21, C(10,5)=252
])
def test_pass_at_k_hand_made(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_equals_the_combinatorial_formula():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_reference(n, c, k), abs=1e-12)


def test_pass_at_1_is_the_success_share():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


def test_mean_pass_at_k_leaves_out_tasks_with_fewer_samples():
    assert mean_pass_at_k([(2, 1), (2, 0), (1, 1)], 2) == pytest.approx((1.0 + 0.0) / 2)
    assert mean_pass_at_k([(1, 1)], 2) is None


@pytest.mark.parametrize("args, error", [
    ((0, 0, 1), ConfigError), ((3, 4, 1), ConfigError), ((3, 1, 4), ConfigError), ((3, 1, 0), ConfigError),
    ((3.0, 1, 1), TypeError), ((3, True, 1), TypeError),
])
def test_pass_at_k_rejects_inconsistent_counts(args, error):
    with pytest.raises(error, match="expected"):
        pass_at_k(*args)


@pytest.mark.parametrize("successes, n, low, high", [
    (5, 10, 0.2366, 0.7634),
    (0, 10, 0.0, 0.2775),
    (10, 10, 0.7225, 1.0),
    (81, 263, 0.2553, 0.3662),
])
def test_wilson_interval_hand_made(successes, n, low, high):
    lo, hi = wilson_interval(successes, n)
    assert lo == pytest.approx(low, abs=1e-4)
    assert hi == pytest.approx(high, abs=1e-4)


def test_wilson_interval_other_level_and_no_data():
    lo99, hi99 = wilson_interval(5, 10, 0.99)
    lo95, hi95 = wilson_interval(5, 10)
    assert lo99 < lo95 and hi99 > hi95
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, 1.5)
