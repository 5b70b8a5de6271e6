"""``agent-gym eval`` end to end: kill -9 and resume, torn lines, infrastructure failures, reverify, arguments."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_gym.cli import main
from agent_gym.evaluation import EpisodeStore

ENV = "agent_gym/ToolUse-v0"


def _eval_argv(server: str, model_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", ENV, "--server", str(server), "--model", str(model_dir), "--k", "3", "--tasks", "4",
            "--max-steps", "2", "--max-tokens", "8", "--n-parallel", "4", "--seed", "5", "--no-progress",
            "--out", str(out), *extra]


def _lines(out: Path) -> int:
    log = out / "episodes.jsonl"
    return log.read_bytes().count(b"\n") if log.exists() else 0


def _by_key(store: EpisodeStore) -> dict:
    return {tuple(r["key"]): (r["status"], r["success"], r["res_reward"], r["trajectory"]["response_tokens"])
            for r in store.iter_scored()}


@pytest.fixture(scope="module")
def fake_server(start_server):
    """One answering server for the tests that need no faults (started once for the module)."""
    return start_server(fake_tokens=4, fake_latency_ms=150)


@pytest.mark.timeout(400)
def test_kill_9_at_random_moments_then_resume_equals_an_uninterrupted_run(fake_server, tiny_model_dir, tmp_path):
    server = fake_server
    full = tmp_path / "full"
    assert main(_eval_argv(server, tiny_model_dir, full, "--n-parallel", "2")) == 0
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    out = tmp_path / "killed"
    argv = [sys.executable, "-m", "agent_gym", *_eval_argv(server, tiny_model_dir, out, "--n-parallel", "2")]
    kills = 0
    for _ in range(3):
        before = _lines(out)
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None and _lines(out) <= before:
                time.sleep(0.05)  # until this run has recorded an episode: it is sampling
            time.sleep(rng.uniform(0.0, 0.6))
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                kills += 1
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        argv = [sys.executable, "-m", "agent_gym", "eval", "--resume", str(out), "--no-progress"]
    assert kills >= 1, f"every run ended before its kill (seed {seed})"
    assert main(["eval", "--resume", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads((full / "summary.json").read_text()), f"seed {seed}"
    assert _by_key(EpisodeStore(out)) == _by_key(EpisodeStore(full))
    assert summary["envs"][ENV]["scored_episodes"] == 12


def test_a_torn_last_line_is_ignored_on_resume(fake_server, tiny_model_dir, tmp_path, capsys):
    server = fake_server
    out = tmp_path / "torn"
    argv = _eval_argv(server, tiny_model_dir, out)
    argv[argv.index("--tasks") + 1] = "2"
    assert main(argv) == 0
    log = out / "episodes.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-2]) + lines[-2][:40])  # the last episode lost, the one before torn
    assert main(["eval", "--resume", str(out), "--server", str(server), "--no-progress"]) == 0  # endpoint given again
    assert "scored 2 episodes this run" in capsys.readouterr().out
    records = EpisodeStore(out).records()
    assert len(records) == 6 == len({tuple(r["key"]) for r in records})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_is_down_is_retried_never_scored_and_counted(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "down"
    argv = ["eval", ENV, "--server", f"127.0.0.1:{_closed_port()}", "--model", str(tiny_model_dir), "--tasks", "1",
            "--retries", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 1
    printed = capsys.readouterr().out
    assert "1 episodes not scored after 1 retries" in printed
    stats = json.loads((out / "summary.json").read_text())["envs"][ENV]
    assert stats["infra_failures"] == 2 and stats["scored_episodes"] == 0 and stats["missing_episodes"] == 1
    assert stats["success_rate"] is None and stats["pass_at_k"]["1"]["value"] is None
    records = EpisodeStore(out).records()
    assert [(r["status"], r["scored"], r["attempt"]) for r in records] == [("POLICY_ERROR", False, 1),
                                                                           ("POLICY_ERROR", False, 2)]


def test_a_server_failing_for_a_while_is_retried_then_scored(start_server, tiny_model_dir, tmp_path):
    server = start_server(fake_tokens=4, fail_first=4)  # one attempt's request and its 3 client retries fail
    out = tmp_path / "flaky"
    argv = ["eval", ENV, "--server", str(server), "--model", str(tiny_model_dir), "--tasks", "1", "--max-steps", "2",
            "--n-parallel", "1", "--retries", "2", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    stats = json.loads((out / "summary.json").read_text())["envs"][ENV]
    assert stats["infra_failures"] == 1 and stats["scored_episodes"] == 1


def test_reverify_of_stored_episodes_equals_the_stored_grades(tmp_path, capsys):
    """The embedded model answers ToolUse tasks; its stored grades are re-derived from the answers."""
    out = tmp_path / "embedded"
    argv = ["eval", ENV, "--k", "2", "--tasks", "1", "--max-steps", "3", "--max-tokens", "40", "--n-parallel", "2",
            "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["eval", "--reverify", str(out)]) == 0
    assert f"{ENV}: 2 episodes re-graded, 2 agree, 0 changed" in capsys.readouterr().out
    result = json.loads((out / "reverify.json").read_text())
    assert result["summary"] == json.loads((out / "summary.json").read_text())


def test_reverify_skips_envs_graded_by_state_it_does_not_store(tmp_path, capsys):
    store = EpisodeStore(tmp_path / "conv")
    store.write_json("config.json", {"envs": ["agent_gym/Conversation-v0"], "k": 1})
    store.write_json("manifest.json", {"envs": {"agent_gym/Conversation-v0": {"env_kwargs": {}, "task_indices": [0]}}})
    with store.open_append() as log:
        log.append({"key": ["agent_gym/Conversation-v0", 0, 0], "scored": True, "success": True, "res_reward": 1.0,
                    "trajectory": {"steps": []}})
    assert main(["eval", "--reverify", str(store.root)]) == 0
    assert "agent_gym/Conversation-v0: skipped: " in capsys.readouterr().out
    assert "cannot be re-verified" in json.loads((store.root / "reverify.json").read_text())["envs"][
        "agent_gym/Conversation-v0"]["skipped"]


@pytest.mark.parametrize("argv, message", [
    (["eval", ENV], "exactly one of --out"),
    (["eval", "--out", "x"], "at least one ENV_ID"),
    (["eval", ENV, "--out", "x", "--k", "0"], "--k: expected an int >= 1"),
    (["eval", ENV, "--out", "x", "--server", "a:1", "--base-url", "http://b"], "--base-url or --server"),
    (["eval", ENV, "--resume", "x"], "ENV_IDs come from the results directory"),
])
def test_bad_arguments_exit_2(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_resume_of_a_directory_without_an_evaluation_exits_2(tmp_path, capsys):
    assert main(["eval", "--resume", str(tmp_path)]) == 2
    assert "holds no evaluation" in capsys.readouterr().err


def test_base_url_needs_the_key_variable_set(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("AGENT_GYM_TEST_UNSET_KEY", raising=False)
    argv = ["eval", ENV, "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--api-key-env",
            "AGENT_GYM_TEST_UNSET_KEY", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "AGENT_GYM_TEST_UNSET_KEY is not set" in capsys.readouterr().err


def test_a_strict_openai_endpoint_accepts_every_request_of_an_eval(start_server, tmp_path, monkeypatch):
    """Through ``--base-url``: each request passes the ``openai`` package's own types (no unknown field, every
    tool result paired with a call of the turn before it) and is answered by the embedded model, which calls
    tools; earlier turns are replayed with the call ids the endpoint returned."""
    from openai_strict_server import StrictOpenAIServer

    from agent_gym.models import default_model_path

    model = str(default_model_path())
    backend = start_server(model=model, enable_auto_tool_choice=True, tool_call_parser="hermes")
    monkeypatch.setenv("AGENT_GYM_TEST_KEY", "sekret-key")
    out = tmp_path / "chat"
    with StrictOpenAIServer(str(backend), api_key="sekret-key") as endpoint:
        argv = ["eval", ENV, "--base-url", endpoint.base_url, "--model", "agent_gym/tiny-agent",
                "--api-key-env", "AGENT_GYM_TEST_KEY",
                "--tasks", "1", "--k", "2", "--max-steps", "2", "--max-tokens", "40", "--n-parallel", "2",
                "--retries", "0", "--no-progress", "--out", str(out)]
        assert main(argv) == 0
    seen = endpoint.seen
    assert seen.refused == [], seen.refused[:2]
    assert seen.structured_turns > 0 and seen.tool_results > 0  # tool turns were replayed
    assert seen.replayed_ids and set(seen.replayed_ids) <= seen.issued_ids
    assert all(set(body) <= {"model", "messages", "max_completion_tokens", "temperature", "seed", "tools",
                             "tool_choice"} for body in seen.bodies)
    stats = json.loads((out / "summary.json").read_text())["envs"][ENV]
    assert stats["scored_episodes"] == 2 and stats["infra_failures"] == 0
    config = (out / "config.json").read_text()
    assert "AGENT_GYM_TEST_KEY" in config and "sekret-key" not in config
    assert main(argv) == 2  # the directory holds an evaluation: --resume it instead


def test_sampling_an_openai_endpoint_cannot_express_exits_2(tmp_path, capsys):
    argv = ["eval", ENV, "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--top-k", "5",
            "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "has no top_k=5" in capsys.readouterr().err
