"""scripts/batch_comparison.py on written records: equal tokens, groups trained on, the update-matched ratio."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "batch_comparison.py"


@pytest.fixture(scope="module")
def comparison():
    spec = importlib.util.spec_from_file_location("batch_comparison", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(rows):
    tokens, out = 0, []
    for i, (sampled, informative, sampling_s, update_s, carried) in enumerate(rows):
        tokens += sampled
        out.append({"iteration": i, "cumulative_tokens": tokens, "sampled_tokens": sampled, "sampled_episodes": 16,
                    "groups": 4, "informative_groups": informative, "sampling_s": sampling_s,
                    "iteration_s": sampling_s + update_s, "mean_reward": 0.5, "success": 0.5,
                    "carried_groups": len(carried), "carried_staleness": carried})
    return {"family": "lookup", "iterations": out}


def test_compare_only_cuts_at_equal_tokens_and_matches_the_update_cost(comparison, tmp_path):
    unfiltered = _record([(1000, 2, 2.0, 1.0, [])] * 4)
    # the filtered run's updates met a loaded machine: ten times slower, the same work
    filtered = _record([(1000, 4, 2.0, 10.0, []), (1000, 4, 2.0, 10.0, [1]), (1000, 4, 2.0, 10.0, [1, 1])])
    for name, record in (("unfiltered", unfiltered), ("filtered", filtered)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rewards.json").write_text(json.dumps(record))
    assert comparison.main(["--token-budget", "3000", "--compare-only", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "comparison.json").read_text())
    runs = result["runs"]
    assert runs["unfiltered"]["iterations"] == 3 and runs["unfiltered"]["sampled_tokens"] == 3000
    assert (runs["filtered"]["informative_groups"], runs["filtered"]["carried_groups"]) == (12, 3)
    assert runs["filtered"]["max_carried_staleness"] == 1
    assert result["informative_per_wall_s_ratio"] == pytest.approx((12 / 36) / (6 / 9))
    assert result["pooled_median_update_s"] == pytest.approx(5.5)  # 3 updates of 1 s, 3 of 10 s
    assert result["update_matched_ratio"] == pytest.approx(2.0)  # same sampling and updates: twice the groups


def test_an_iteration_that_sampled_nothing_has_no_reward(comparison):
    # the second iteration trained on carried groups only: no episode sampled, no reward to average
    record = _record([(1000, 4, 2.0, 1.0, []), (0, 4, 0.0, 1.0, [1, 1, 1, 1]), (1000, 4, 2.0, 1.0, [])])
    record["iterations"][1].update(mean_reward=None, success=None, sampled_episodes=0)
    record["iterations"][2].update(mean_reward=0.75, success=0.75)
    figures = comparison.summarize(record)
    assert figures["informative_groups"] == 12 and figures["iterations"] == 3
    assert figures["second_half_mean_reward"] == pytest.approx(0.75)  # the last iteration alone is past 1000
    assert figures["last_mean_reward"] == 0.75
    record["iterations"][2].update(mean_reward=None, success=None, sampled_episodes=0)
    assert comparison.summarize(record)["last_mean_reward"] == 0.5
