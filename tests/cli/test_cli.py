from __future__ import annotations

import io
import subprocess
import sys

import pytest

from agent_gym.cli import main
from agent_gym.cli.play import describe_image, read_message, show_messages
from agent_gym.envs.tool_use import ToolUseEnv


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


def test_check_runs_the_env_checker(monkeypatch, capsys):
    code, out, _ = run_cli(["check", "agent_gym/ToolUse-v0", "--episodes", "2", "--seeds", "0", "--skip", "pickle"],
                           monkeypatch, capsys)
    assert code == 0, out
    assert out.splitlines()[0] == "ok    agent_gym/ToolUse-v0"
    assert "ok    oracle" in out and "1 seeded tasks solved" in out and "skip  pickle" in out
    assert out.splitlines()[-1] == "1/1 envs passed"


def test_check_imports_the_module_of_a_module_colon_id(monkeypatch, capsys):
    env_id = "agent_gym.envs.tool_use:agent_gym/ToolUse-v0"
    code, out, _ = run_cli(["check", env_id, "--episodes", "1", "--seeds", "0"], monkeypatch, capsys)
    assert code == 0 and f"ok    {env_id}" in out and "agent_gym/ToolUse-v0: 8/8 checks passed" in out


def test_check_fails_for_unknown_id(monkeypatch, capsys):
    code, out, _ = run_cli(["check", "agent_gym/Nope-v0"], monkeypatch, capsys)
    assert code == 1 and "FAIL  agent_gym/Nope-v0" in out and "registered agent_gym ids: agent_gym/" in out


class _AnyAnswerEnv(ToolUseEnv):
    __doc__ = ToolUseEnv.__doc__

    def score_answer(self, task, answer):
        return 1.0


def test_check_reports_a_failing_env_and_exits_non_zero(monkeypatch, capsys):
    import gymnasium as gym

    env_id = "agent_gym_cli_test/AnyAnswer-v0"
    gym.register(id=env_id, entry_point=_AnyAnswerEnv, max_episode_steps=10)
    try:
        code, out, _ = run_cli(["check", env_id, "agent_gym/ToolUse-v0", "--episodes", "1", "--seeds", "0"],
                               monkeypatch, capsys)
    finally:
        gym.registry.pop(env_id)
    assert code == 1
    assert f"FAIL  {env_id}" in out and "ok    agent_gym/ToolUse-v0" in out
    assert "FAIL  random_actions" in out and "the outcome reward must need a correct answer" in out
    assert out.splitlines()[-1] == f"1/2 envs passed; failed: {env_id}"


def test_check_refuses_an_unknown_check_name(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        run_cli(["check", "--skip", "orcale"], monkeypatch, capsys)


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


def test_play_env_kwargs(monkeypatch, capsys):
    code, out, _ = run_cli(["play", "agent_gym/ToolUse-v0", "--seed", "1", "--env-kwargs", '{"max_steps": 1}'],
                           monkeypatch, capsys, "just words\n")
    assert code == 0 and "status MAX_STEPS" in out
    for bad in ("[1]", "{nope"):
        code, _, err = run_cli(["play", "agent_gym/ToolUse-v0", "--env-kwargs", bad], monkeypatch, capsys)
        assert code == 2 and "--env-kwargs: expected a JSON object" in err


def test_play_shows_an_image_as_one_line_never_its_data():
    from agent_gym.messages import image_part

    part = image_part(b"\x89PNG\r\n\x1a\n" + bytes(90))
    assert describe_image(part) == "[image: image/png, 98 bytes]"
    assert describe_image({"type": "image_url", "image_url": {"url": "https://e.org/a.png"}}) == (
        "[image: https://e.org/a.png]")
    out = io.StringIO()
    show_messages([{"role": "tool", "content": "Clicked e1.", "images": [part]}, {"role": "user", "content": "u"}], out)
    assert out.getvalue() == "[tool]\nClicked e1.\n[image: image/png, 98 bytes]\n\n[user]\nu\n\n"
    assert "base64" not in out.getvalue()


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
