"""pass^k, the Wilson interval over tasks, and the per-env statistics of an evaluation."""

from __future__ import annotations

import math

import pytest

from agent_gym.errors import ConfigError
from agent_gym.evaluation import k_values, summarize
from agent_gym.report.stats import mean_pass_hat_k, mean_wilson_interval, pass_at_k, pass_hat_k, wilson_interval


def test_pass_hat_k_equals_the_combinatorial_formula():
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_hat_k(n, c, k) == pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-12)


def test_pass_hat_1_is_pass_at_1_and_pass_hat_k_never_exceeds_pass_at_k():
    for n in range(1, 8):
        for c in range(n + 1):
            assert pass_hat_k(n, c, 1) == pytest.approx(pass_at_k(n, c, 1))
            for k in range(1, n + 1):
                assert pass_hat_k(n, c, k) <= pass_at_k(n, c, k) + 1e-12


def test_mean_pass_hat_k_leaves_out_tasks_short_of_k_samples():
    assert mean_pass_hat_k([(4, 4), (4, 2), (1, 1)], 2) == pytest.approx((1.0 + 1 / 6) / 2)
    assert mean_pass_hat_k([(1, 1)], 2) is None


def test_pass_hat_k_checks_its_counts():
    with pytest.raises(ConfigError):
        pass_hat_k(3, 4, 1)
    with pytest.raises(TypeError):
        pass_hat_k(3.0, 1, 1)


def test_the_interval_over_tasks_is_wilsons_for_0_1_values_and_contains_the_mean():
    assert mean_wilson_interval([1, 0, 0, 1, 1]) == pytest.approx(wilson_interval(3, 5))
    low, high = mean_wilson_interval([0.25, 0.5, 1.0])
    assert low < (0.25 + 0.5 + 1.0) / 3 < high
    assert mean_wilson_interval([]) == (0.0, 1.0)
    with pytest.raises(ConfigError):
        mean_wilson_interval([1.5])


def test_k_values():
    assert k_values(1) == [1]
    assert k_values(4) == [1, 2, 4]
    assert k_values(10) == [1, 2, 4, 8, 10]


def _record(task: int, sample: int, success: bool) -> dict:
    return {"key": ["E", task, sample], "success": success, "res_reward": 1.0 if success else 0.0}


def test_summarize_groups_by_task_and_counts_what_is_missing():
    records = [_record(0, 0, True), _record(0, 1, False), _record(1, 0, False), _record(1, 1, False),
               _record(2, 0, True)]  # task 2 lost a sample to an infrastructure failure
    stats = summarize(records, {"E": [0, 1, 2]}, 2, {"E": 3})["envs"]["E"]
    assert stats["scored_episodes"] == 5 and stats["missing_episodes"] == 1 and stats["infra_failures"] == 3
    assert stats["success_rate"] == pytest.approx(2 / 5)
    assert stats["pass_at_k"]["1"]["value"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert stats["pass_at_k"]["2"] == {"value": pytest.approx(0.5), "ci95": stats["pass_at_k"]["2"]["ci95"],
                                       "tasks": 2}
    assert stats["pass_hat_k"]["2"]["value"] == 0.0


def test_summarize_does_not_depend_on_record_order():
    records = [_record(t, s, (t + s) % 3 == 0) for t in range(5) for s in range(4)]
    forward = summarize(records, {"E": range(5)}, 4)
    assert summarize(records[::-1], {"E": range(5)}, 4) == forward
