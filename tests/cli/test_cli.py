from __future__ import annotations

import io
import subprocess
import sys

import pytest

from agent_gym.cli import main
from agent_gym.cli.play import read_message


def run_cli(argv, monkeypatch, capsys, stdin=""):
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list(monkeypatch, capsys):
    code, out, _ = run_cli(["list"], monkeypatch, capsys)
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("agent_gym/ToolUse-v0"))
    assert "tool" in line.lower()


def test_check_passes_for_every_id(monkeypatch, capsys):
    code, out, _ = run_cli(["check"], monkeypatch, capsys)
    assert code == 0 and "ok    agent_gym/ToolUse-v0" in out


def test_check_fails_for_unknown_id(monkeypatch, capsys):
    code, out, _ = run_cli(["check", "agent_gym/Nope-v0"], monkeypatch, capsys)
    assert code == 1 and "FAIL  agent_gym/Nope-v0" in out


def test_play_oracle(monkeypatch, capsys):
    code, out, _ = run_cli(["play", "agent_gym/ToolUse-v0", "--seed", "3", "--oracle"], monkeypatch, capsys)
    assert code == 0
    assert "# Tools" in out and "[assistant (oracle)]" in out
    assert "status ENV_DONE" in out and '"res_reward": 1.0' in out


def test_play_reads_multiline_messages_from_stdin(monkeypatch, capsys):
    stdin = (
        "<think>use the calculator\n</think>\n"
        '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>\n'
        "\n"
        "<answer>42</answer>\n"
    )
    code, out, _ = run_cli(["play", "agent_gym/ToolUse-v0", "--task-index", "0"], monkeypatch, capsys, stdin)
    assert code == 0
    assert "[tool]\n42" in out and "episode over: terminated" in out and "reward +0.100" in out


def test_play_end_of_input_abandons(monkeypatch, capsys):
    code, out, _ = run_cli(["play", "agent_gym/ToolUse-v0", "--seed", "0"], monkeypatch, capsys, "")
    assert code == 0 and "end of input" in out


def test_play_max_steps_and_tools_in_prompt(monkeypatch, capsys):
    code, out, _ = run_cli(["play", "agent_gym/ToolUse-v0", "--seed", "1", "--max-steps", "1", "--tools-in-prompt"],
                           monkeypatch, capsys, "just words\n")
    assert code == 0 and "status MAX_STEPS" in out and "error: the message has no" in out
    assert out.count("## calculator") == 1


def test_play_bad_id(monkeypatch, capsys):
    code, _, err = run_cli(["play", "agent_gym/Nope-v0"], monkeypatch, capsys)
    assert code == 2 and "cannot make" in err


def test_read_message():
    assert read_message(io.StringIO("\n\na\nb\n\nc\n")) == "a\nb"
    assert read_message(io.StringIO("tail without newline")) == "tail without newline"
    assert read_message(io.StringIO("")) is None


@pytest.mark.timeout(120)
def test_play_through_a_pipe_in_a_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "agent_gym", "play", "agent_gym/ToolUse-v0", "--seed", "0"],
        input="<answer>0</answer>\n", capture_output=True, text=True, timeout=110, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "episode over: terminated" in proc.stdout
