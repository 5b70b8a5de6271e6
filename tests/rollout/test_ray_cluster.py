"""The sharded Ray backend on a simulated multi-node cluster with a node killed mid-run (in its own process)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HAS_RAY = importlib.util.find_spec("ray") is not None
SCRIPT = Path(__file__).with_name("ray_cluster_run.py")


@pytest.mark.skipif(not HAS_RAY, reason="the 'ray' extra is not installed (pip install 'agent-gym[ray]')")
@pytest.mark.timeout(600)
def test_a_node_killed_mid_run_loses_and_duplicates_no_episode(tmp_path: Path):
    # ray.cluster_utils.Cluster cannot share a process with the suite's Ray instance: the script runs
    # a head and two one-CPU worker nodes, one shard on each, and kills one node at half way
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run([sys.executable, str(SCRIPT), "--episodes", "240", "--nodes", "2"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=540, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"ok"')]
    assert lines, f"no report (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert report["returned"] == report["unique"] == report["seen_unique"] == 240, report
    assert report["statuses"] == {"ENV_DONE": 240}, report  # the lost shard's episodes ran again elsewhere
    assert report["stats"]["shards_lost"] == 1 and report["stats"]["reruns"] >= 1, report
    assert report["ok"] and done.returncode == 0, report
