"""``SandboxedEnv``: the sandbox lifecycle shared by Terminal-v0 and SWE-v0, on a sandbox made up here."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from agent_gym.env.grade import Grade
from agent_gym.envs.sandboxed import SandboxedEnv
from agent_gym.envs.swe.env import SWEEnv
from agent_gym.envs.terminal.env import TerminalEnv
from agent_gym.errors import SandboxError
from agent_gym.parsers.hermes import format_tool_call
from agent_gym.sandbox import Result, SandboxLimits
from agent_gym.types import EpisodeStatus

TASKS = [{"id": "t", "question": "Make it work.", "ground_truth": ""}]


class FakeSandbox:
    """Records the commands; ``run`` echoes them."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, float]] = []
        self.closed = 0

    def run(self, command: str, timeout: float) -> Result:
        self.commands.append((command, timeout))
        return Result(exit_code=3 if command == "false" else 0, output=f"ran {command}")

    def close(self) -> None:
        self.closed += 1


class Shell(SandboxedEnv):
    """A sandboxed env on :class:`FakeSandbox`, graded by a test command; no ``step`` override."""

    def __init__(self, grade: Grade | None = None, fail_open: bool = False, **kwargs: Any) -> None:
        self.command_timeout = 7.0
        self.limits = SandboxLimits(output_bytes=100)
        self.grade, self.fail_open = grade or Grade.scored(1.0), fail_open
        self.opened: list[FakeSandbox] = []
        super().__init__(TASKS, **kwargs)

    def open_sandbox(self, task: Any) -> FakeSandbox:
        if self.fail_open:
            raise SandboxError("no sandbox today")
        self.opened.append(FakeSandbox())
        return self.opened[-1]

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade:
        info["graded"] = (status, reason, self.bash("run-tests"))
        return self.grade


def bash(command: str) -> str:
    return format_tool_call("bash", {"command": command})


SUBMIT = format_tool_call("submit", {})


def test_bash_runs_in_the_episode_sandbox_and_submit_ends_the_episode_graded():
    assert "step" not in vars(Shell)
    env = Shell()
    _, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == ["bash", "submit"]
    obs, _, terminated, truncated, info = env.step(bash("ls") + bash("false"))
    assert not (terminated or truncated)
    assert [m["content"] for m in obs[-2:]] == ["ran ls\n[exit code: 0]", "ran false\n[exit code: 3]"]
    assert env.sandbox.commands == [("ls", 7.0), ("false", 7.0)]
    obs, reward, terminated, truncated, info = env.step(SUBMIT + bash("late"))
    assert terminated and not truncated and (info["status"], info["end_reason"]) == ("ENV_DONE", "submit")
    assert obs[-2]["content"] == "Submitted; the tests run now." and "skipped" in obs[-1]["content"]
    assert info["graded"][2] == "[the work was already submitted]" and env.submitted
    assert info["res_reward"] == 1.0


def test_an_infra_failure_grade_ends_the_sandboxed_episode_env_error():
    env = Shell(Grade.infra_failure("tests_could_not_run"))
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(SUBMIT)
    assert truncated and not terminated
    assert (info["status"], info["end_reason"]) == (EpisodeStatus.ENV_ERROR, "tests_could_not_run")
    assert info["res_reward"] == 0.0


def test_release_closes_the_sandbox_once_and_reset_opens_a_fresh_one():
    env = Shell()
    env.reset(seed=0)
    first = env.sandbox
    env.reset(seed=0)
    assert first.closed == 1 and env.sandbox is not first and not env.submitted
    env.close()
    env.close()
    assert env.sandbox is None and [s.closed for s in env.opened] == [1, 1]
    assert env.bash("ls") == "[no sandbox: this environment was copied or closed; call reset()]"


def test_a_copy_has_no_sandbox():
    env = Shell()
    env.reset(seed=0)
    clone = pickle.loads(pickle.dumps(env))
    assert clone.sandbox is None and env.sandbox is not None
    assert clone.bash("ls") == "[no sandbox: this environment was copied or closed; call reset()]"


def test_a_sandbox_that_does_not_open_fails_reset():
    env = Shell(fail_open=True)
    with pytest.raises(SandboxError, match="no sandbox today"):
        env.reset(seed=0)
    env.close()


def test_the_command_time_limit_is_a_hook():
    class Capped(Shell):
        def command_time_limit(self) -> float:
            return 2.0

    env = Capped()
    env.reset(seed=0)
    env.step(bash("ls"))
    assert env.sandbox.commands == [("ls", 2.0)]


def test_terminal_and_swe_share_the_lifecycle():
    for cls in (TerminalEnv, SWEEnv):
        assert issubclass(cls, SandboxedEnv)
        assert not {"step", "bash", "submit", "release_episode", "__getstate__"} & set(vars(cls))
    assert SWEEnv.episode_handles == ("sandbox", "editor")
