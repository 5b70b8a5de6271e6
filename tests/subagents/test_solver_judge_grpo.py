"""The GRPO demo trains on solver-judge episodes (``--env solver-judge``): per-segment records, advantages by
(task, role), the importance ratio 1 on every agent's ids."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_grpo_demo.py"


@pytest.mark.timeout(600)
def test_grpo_demo_trains_on_solver_judge_episodes(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("train_grpo_demo", SCRIPT)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    code = demo.main(["--env", "solver-judge", "--iterations", "2", "--tasks", "2", "--group-size", "2",
                      "--solvers", "2", "--out", str(tmp_path)])
    assert code == 0
    record = json.loads((tmp_path / "rewards.json").read_text())
    assert record["env"] == "solver-judge" and len(record["iterations"]) == 2
    for row in record["iterations"]:
        assert row["episodes"] == 4 and row["segments"] >= 12  # a judge and two solvers per episode
        assert set(row["role_reward"]) == {"judge", "solver"}
        assert math.isfinite(row["loss"]) and row["trained"] > 0
        assert row["max_ratio_error"] < 1e-3  # every agent's logprobs are the trainer's: token-exact
    assert record["first_ratio_error"] < 1e-3
