"""``agent-gym rollout``: end to end against a reference server, the default model, and Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from agent_gym.cli import main
from agent_gym.export import read_trajectories


def test_rollout_to_parquet_against_a_server(start_server, tiny_model_dir, tmp_path, capsys):
    server = start_server(fake_tokens=4)
    out = tmp_path / "r.parquet"
    code = main(["rollout", "agent_gym/ToolUse-v0", "--server", str(server), "--model", str(tiny_model_dir),
                 "--episodes", "6", "--samples-per-task", "2", "--n-parallel", "4", "--max-steps", "2",
                 "--max-tokens", "8", "--out", str(out), "--seed", "3"])
    assert code == 0
    printed = capsys.readouterr().out
    for label in ("episodes", "mean reward", "success rate", "mean steps", "tokens sampled", "tokens/s",
                  "time env / llm", str(out)):
        assert label in printed
    records = read_trajectories(out)
    assert sorted(t.idx for t in records) == list(range(12))
    assert sum(int(t.response_masks.sum()) for t in records) == 12 * 2 * 4


def test_rollout_with_the_embedded_default_model(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    code = main(["rollout", "agent_gym/ToolUse-v0", "--episodes", "1", "--max-steps", "1", "--max-tokens", "2",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    assert "embedded default model" in capsys.readouterr().out
    assert len(read_trajectories(out)) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["agent_gym/NoSuchEnv-v0"], "unknown env id"),
        (["agent_gym/ToolUse-v0", "--episodes", "0"], "--episodes"),
        (["agent_gym/ToolUse-v0", "--out", "x.csv"], ".jsonl or .parquet"),
    ],
)
def test_rollout_rejects_bad_arguments(argv, message, capsys):
    assert main(["rollout", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.timeout(180)
def test_ctrl_c_leaves_a_readable_file(start_server, tiny_model_dir, tmp_path, suffix):
    server = start_server(fake_tokens=4, fake_latency_ms=100)
    out = tmp_path / f"c{suffix}"
    process = subprocess.Popen(
        [sys.executable, "-m", "agent_gym", "rollout", "agent_gym/ToolUse-v0", "--server", str(server),
         "--model", str(tiny_model_dir), "--episodes", "500", "--n-parallel", "4", "--max-steps", "2",
         "--max-tokens", "8", "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        # Wait until some episodes are done (JSONL grows per episode; Parquet: give it time).
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if suffix == ".jsonl" and out.exists() and out.read_text().count("\n") >= 3:
                break
            if suffix == ".parquet" and out.exists() and time.monotonic() > deadline - 105:
                break
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, output
    records = read_trajectories(out)
    assert 1 <= len(records) < 500
    assert f"{len(records)} finished episodes written" in output
