"""``agent-gym rollout``: end to end against a reference server, the default model, and Ctrl-C."""

from __future__ import annotations

import importlib.util
import logging
import signal
import subprocess
import sys
import time

import pytest

from agent_gym.cli import main
from agent_gym.export import read_trajectories
from agent_gym.rollout.reporting import STOPPED_REASON


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


@pytest.mark.parametrize(
    "extra, line, top_k",
    [([], "full distribution, temperature 1, raw_logprobs", -1),
     (["--top-k", "5", "--min-p", "0.1", "--logprobs-mode", "processed_logprobs"],
      "truncated (top_k=5, min_p=0.1), temperature 1, processed_logprobs", 5)],
)
def test_rollout_samples_the_full_distribution_unless_asked(start_server, tiny_model_dir, tmp_path, capsys, caplog,
                                                            extra, line, top_k):
    server = start_server(fake_tokens=4)
    out = tmp_path / "s.jsonl"
    with caplog.at_level(logging.WARNING, logger="agent_gym.rollout.collection"):
        code = main(["rollout", "agent_gym/ToolUse-v0", "--server", str(server), "--model", str(tiny_model_dir),
                     "--episodes", "2", "--max-steps", "1", "--max-tokens", "8", "--out", str(out), "--no-progress",
                     *extra])
    assert code == 0
    printed = capsys.readouterr().out
    assert any(row.startswith("sampling") and row.endswith(line) for row in printed.splitlines()), printed
    assert not [r for r in caplog.records if "off-policy" in r.getMessage()]  # the default, or asked for
    records = read_trajectories(out)
    assert [t.sampling["top_k"] for t in records] == [top_k, top_k]
    assert records[0].sampling["logprobs_mode"] == line.rsplit(", ", 1)[1]


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
        (["agent_gym/ToolUse-v0", "--top-p", "1.5"], "top_p: expected a value in"),
        (["agent_gym/ToolUse-v0", "--episode-timeout", "-1"], "--episode-timeout: expected seconds >= 0"),
    ],
)
def test_rollout_rejects_bad_arguments(argv, message, capsys):
    assert main(["rollout", *argv]) == 2
    assert message in capsys.readouterr().err


def test_episodes_have_a_time_limit_by_default(monkeypatch, tmp_path):
    """A server that accepts and never answers holds an episode at most the default limit; 0 lifts it."""
    import agent_gym.cli.rollout as rollout_cli
    import agent_gym.rollout as rollout_pkg

    seen = []

    async def fake_collect(*args, **kwargs):
        seen.append(kwargs["episode_timeout"])
        return []

    monkeypatch.setattr(rollout_pkg, "collect_async", fake_collect)
    monkeypatch.setattr(rollout_cli, "build_policy", lambda args: (type("P", (), {"sampling": None})(), "p"))
    monkeypatch.setattr(rollout_cli, "sampling_text", lambda *a: "")
    monkeypatch.setattr(rollout_cli, "parser_line", lambda *a: "")
    for extra in ([], ["--episode-timeout", "0"], ["--episode-timeout", "30"]):
        main(["rollout", "agent_gym/ToolUse-v0", "--out", str(tmp_path / "x.jsonl"), "--no-progress", *extra])
    assert seen == [rollout_cli.DEFAULT_EPISODE_TIMEOUT, None, 30.0]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the 'ray' extra is not installed")
@pytest.mark.timeout(400)
def test_rollout_with_ray_actors(start_server, tiny_model_dir, tmp_path, capsys, local_ray):
    server = start_server(fake_tokens=4)
    out = tmp_path / "ray.jsonl"
    code = main(["rollout", "agent_gym/ToolUse-v0", "--server", str(server), "--model", str(tiny_model_dir),
                 "--episodes", "3", "--samples-per-task", "2", "--n-parallel", "2", "--max-steps", "2",
                 "--max-tokens", "8", "--out", str(out), "--no-progress", "--ray"])
    assert code == 0, capsys.readouterr()
    assert "wrote 6 episodes" in capsys.readouterr().out
    records = read_trajectories(out)
    assert sorted(t.idx for t in records) == list(range(6))
    assert sum(int(t.response_masks.sum()) for t in records) == 6 * 2 * 4


def _ignore_sigint() -> None:
    """Run in the child before exec: start it with SIGINT ignored, as a shell's background job is."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    "suffix, signum, code",
    [
        (".parquet", signal.SIGTERM, 143),
        (".jsonl", signal.SIGINT, 130),
    ],
    ids=["parquet-sigterm", "jsonl-sigint"],
)
@pytest.mark.timeout(240)
def test_a_signal_stops_the_rollout_and_leaves_a_readable_file(
    start_server, tiny_model_dir, tmp_path, suffix, signum, code
):
    """SIGTERM and SIGINT end a rollout the same way: finished episodes written (Parquet footer
    included), the episodes in flight and those not started written as stopped TIMEOUT records, so
    every task is in the file; the counts printed, exit 128 + signal. The child always starts with SIGINT ignored,
    so the outcome does not depend on how the test runner itself was started, and SIGINT must be
    handled explicitly."""
    server = start_server(fake_tokens=4, fake_latency_ms=100)
    out = tmp_path / f"c{suffix}"
    process = subprocess.Popen(
        [sys.executable, "-m", "agent_gym", "rollout", "agent_gym/ToolUse-v0", "--server", str(server),
         "--model", str(tiny_model_dir), "--episodes", "500", "--n-parallel", "4", "--max-steps", "2",
         "--max-tokens", "8", "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_ignore_sigint,
    )
    try:
        deadline = time.monotonic() + 180
        # Wait until some episodes are on disk: JSONL grows per episode, Parquet per row group of 16.
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
            if suffix == ".jsonl" and out.exists() and out.read_text().count("\n") >= 3:
                break
            if suffix == ".parquet" and out.exists() and out.stat().st_size > 1000:
                break
        assert process.poll() is None, process.communicate()[0]
        process.send_signal(signum)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, output
    records = read_trajectories(out)
    assert sorted(t.idx for t in records) == list(range(500))  # every task once
    stopped = [t for t in records if t.steps and t.steps[-1].info.get("error") == STOPPED_REASON]
    finished = [t for t in records if t not in stopped]
    assert len(finished) >= 3 and 0 < len(stopped) < 500 and {str(t.status) for t in stopped} == {"TIMEOUT"}
    assert f"interrupted: {len(finished)} finished and {len(stopped)} stopped episodes written" in output
    cut_short = [t for t in stopped if int(t.response_masks.sum()) > 0]
    assert len(cut_short) <= 4  # at most n_parallel were in flight, with their turns so far


@pytest.mark.timeout(300)
def test_sigterm_of_the_embedded_default_exits_143_with_every_task_written(tmp_path):
    """The default policy samples in a worker thread: the stop waits for it to leave the model, so the
    process exits by its own code (143), never by an abort at interpreter shutdown."""
    out = tmp_path / "d.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "agent_gym", "rollout", "agent_gym/ToolUse-v0", "--episodes", "300",
         "--n-parallel", "8", "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_ignore_sigint,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
            if out.exists() and out.read_text().count("\n") >= 2:
                break
        assert process.poll() is None, process.communicate()[0]
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, output
    assert "terminate called" not in output
    assert sorted(t.idx for t in read_trajectories(out)) == list(range(300))


def test_stop_on_signal_in_process():
    """The handler itself: a signal during ``guard`` cancels the awaited work and is recorded;
    the previous handlers come back afterwards."""
    import asyncio
    import os

    from agent_gym.cli.rollout import StopOnSignal

    before = signal.getsignal(signal.SIGTERM)
    cancelled = []

    async def work():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    stop = StopOnSignal()
    with stop:
        assert asyncio.run(stop.guard(work())) is True
    assert cancelled == [True] and stop.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before
