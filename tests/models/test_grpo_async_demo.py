"""A shortened run of ``scripts/train_grpo_demo.py --async`` against a reference server it starts in dev mode."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_grpo_demo.py"
ASYNC_SCRIPT = SCRIPT.with_name("grpo_async_demo.py")


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("train_grpo_demo_async", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def async_demo():
    spec = importlib.util.spec_from_file_location("grpo_async_demo_test", ASYNC_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_task_rounds_follow_the_synchronous_draws(async_demo):
    import random

    pool = [{"id": f"t{i}"} for i in range(6)]
    rounds = async_demo.task_rounds(pool, 3, seed=4)
    rng = random.Random(4)
    for r in range(3):
        expected = [f"{t['id']}~{r}" for t in rng.sample(pool, 3)]
        assert [next(rounds)["id"] for _ in range(3)] == expected


@pytest.mark.timeout(600)
def test_short_async_grpo_run(demo, async_demo, tmp_path):
    record = demo.main(["--async", "--family", "lookup", "--iterations", "2", "--tasks", "2", "--group-size", "2",
                        "--pool", "4", "--lr", "1e-3", "--reward", "total", "--max-staleness", "1",
                        "--out", str(tmp_path)])
    assert record == 0
    saved = json.loads((tmp_path / "rewards.json").read_text())
    rows = saved["iterations"]
    assert [r["iteration"] for r in rows] == [0, 1] and all(r["episodes"] == 4 for r in rows)
    assert saved["loss"] == "tis" and saved["tis_clip"] == async_demo.TIS_CLIP
    # ids sampled under the trainer's own weights re-score to a ratio of 1, before and after a reload
    assert saved["first_ratio_error"] < 1e-3
    assert all(r["current_max_ratio_error"] < 1e-3 for r in rows)
    assert saved["post_update_rescore_error"] < 1e-3
    # the first step trains on version-0 samples only: every ratio is 1, none truncated
    assert rows[0]["staleness_max"] == 0 and rows[0]["clipped_fraction"] == 0.0
    assert rows[0]["ratio_max"] == pytest.approx(1.0, abs=1e-3)
    for r in rows:
        assert math.isfinite(r["loss"]) and r["version"] == r["iteration"]
        assert sum(r["staleness_samples"].values()) == r["episodes"]  # every sample's version is known
        assert 0 <= r["staleness_max"] <= 1  # --max-staleness 1
        assert r["tokens"] > 0 and 0.0 <= r["clipped_fraction"] <= 1.0
    assert saved["stream"]["updates"] == 2 and saved["stream"]["dropped"] == 0
