"""One run of a terminal task's tests on a sandbox, as the grader makes it.

:func:`run_tests_on`:

1. stops every process of the sandbox: the agent's shell and everything it started (whatever the
   task's ``run_tests_in_same_shell`` says: a live process of the agent's could kill the runner,
   trace it or write into its output);
2. empties ``/tests`` and ``/logs`` (also what the agent made unwritable there), checks that they
   are empty and writes the task's test files;
3. runs the test command in a fresh process with the task's environment and the grader's own
   variables, never the agent's shell state (its functions, aliases, variables and ``PATH``);
4. where the sandbox has a private channel and the task's parser is ``pytest``, loads the
   verdict plugin (:mod:`~agent_gym.envs.terminal.verdict`) and keeps pytest's own report from
   the channel beside the output (the output goes through a pipe that nothing in the sandbox can
   block or replace, and every process the run left is killed before it is read).

It returns a :class:`TestRun`; whether a run that did not grade is the agent's doing is decided
against the task's initial state (:mod:`~agent_gym.envs.terminal.baseline`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_gym.envs.terminal.grading import TestReport, grade_test_run
from agent_gym.envs.terminal.verdict import (
    PLUGIN_MODULE,
    ChannelReport,
    Verdict,
    channel_env,
    new_key,
    plugin_source,
    read_channel,
)
from agent_gym.errors import SandboxError

__all__ = ["WIPE_COMMAND", "TestRun", "has_channel", "run_tests_on", "verdict_report"]

WIPE_COMMAND = ("chmod -R u+rwX /tests /logs 2>/dev/null; find /tests /logs -mindepth 1 -delete 2>/dev/null; "
                "mkdir -p /tests /logs/verifier && find /tests /logs -mindepth 1 ! -path /logs/verifier -print -quit")
"""Empties ``/tests`` and ``/logs`` (``/logs/verifier`` made again); prints a path that could not be removed."""

_PLUGIN_ROOT = "/run/agent_gym"
_EXIT_STATUS = {2: "pytest was interrupted", 3: "pytest failed with an internal error",
                4: "pytest was called wrongly (usage error)", 5: "pytest collected no tests"}


def has_channel(sandbox: Any, task: Mapping[str, Any]) -> bool:
    """True when the test run can report through the private channel: a sandbox that has one and pytest's parser."""
    return (callable(getattr(sandbox, "exec_with_channel", None)) and task.get("format") != "harbor"
            and str(task.get("parser_name") or "pytest") == "pytest")


def verdict_report(verdict: Verdict, exit_code: int | None) -> TestReport:
    """The :class:`TestReport` of pytest's own report (``graded`` when it ran tests and ended normally)."""
    if verdict.exitstatus in (0, 1) and verdict.results:
        return TestReport("graded", results=dict(verdict.results), exit_code=exit_code)
    if verdict.exitstatus in (0, 1, 5):
        return TestReport("no_tests", reason="pytest reported no test", exit_code=exit_code)
    why = _EXIT_STATUS.get(verdict.exitstatus, f"pytest ended with exit status {verdict.exitstatus}")
    return TestReport("could_not_run", reason=why, exit_code=exit_code)


@dataclass(frozen=True)
class TestRun:
    """What one test run gave.

    Attributes:
        text: The output read by the task's parser (``timeout`` when the run timed out).
        channel: What came back on the private channel; None when the run had none.
        output: The test command's output.
        exit_code: Its exit code (None when it did not run).
        timed_out: It ran past the task's test time limit.
        seconds: How long the test command ran.
        error: Why the run could not be made (the sandbox failed, ``/tests`` could not be
            emptied); empty when it was.
        sandbox_alive: The sandbox still ran after the run (False: it died, nobody can tell why).
    """

    __test__ = False  # not a pytest test class

    text: TestReport
    channel: ChannelReport | None = None
    output: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    error: str = ""
    sandbox_alive: bool = True

    @property
    def verdict(self) -> TestReport | None:
        """The report of the run's one authenticated pytest session (None without exactly one, or when it timed out)."""
        if self.channel is None or len(self.channel.verdicts) != 1 or self.timed_out or self.error:
            return None
        return verdict_report(self.channel.verdicts[0], self.exit_code)

    @property
    def report(self) -> TestReport:
        """The run's own reading, before any judgement: the channel's verdict where there is one, else the output's."""
        if self.error:
            return TestReport("could_not_run", reason=self.error, exit_code=self.exit_code)
        verdict = self.verdict
        if verdict is not None:
            return verdict
        if self.channel is not None and not self.timed_out and self.text.graded:
            return TestReport("parse_error", reason="the runner sent no report on the grader's channel",
                              exit_code=self.exit_code)
        return self.text


def run_tests_on(sandbox: Any, task: Mapping[str, Any], env: Mapping[str, str]) -> TestRun:
    """Run ``task``'s tests on ``sandbox`` now (see the module docstring); never raises for what the sandbox holds.

    Args:
        sandbox: The sandbox (its processes are stopped; its files stay).
        task: A task from :func:`~agent_gym.envs.terminal.loader.load_task`.
        env: The test command's variables (on top of the sandbox's own).
    """
    timeout = float(task.get("test_timeout", 60.0))
    parser_name = str(task.get("parser_name") or "pytest")
    channel = has_channel(sandbox, task)
    started = time.monotonic()
    try:
        sandbox.stop_shell()
        if channel:
            wipe, _ = sandbox.exec_with_channel(WIPE_COMMAND, b"", timeout=60)
        else:
            wipe = sandbox.exec(WIPE_COMMAND, timeout=60)
        if not wipe.ok or wipe.output.strip():
            why = f"/tests and /logs could not be emptied ({wipe.output.strip()[-300:] or wipe.exit_code})"
            return TestRun(TestReport("could_not_run", reason=why), error=why, sandbox_alive=_alive(sandbox))
        for path, data in dict(task.get("test_files") or {}).items():
            sandbox.write_file(path, data, mode=0o755 if path.endswith(".sh") else 0o644)
        command = str(task["test_command"])
        if channel:
            plugin_dir = f"{_PLUGIN_ROOT}/verdict-{secrets.token_hex(8)}"
            root = {"as_root": True} if getattr(sandbox, "as_root", False) else {}
            sandbox.write_file(f"{plugin_dir}/{PLUGIN_MODULE}.py", plugin_source(), 0o644, **root)
            key = new_key()
            started = time.monotonic()
            result, back = sandbox.exec_with_channel(command, key + b"\n", timeout=timeout,
                                                     env=channel_env(env, plugin_dir))
            report: ChannelReport | None = read_channel(back, key)
        else:
            started = time.monotonic()
            result, report = sandbox.exec(command, timeout=timeout, env=dict(env)), None
    except SandboxError as exc:
        why = f"the sandbox failed: {exc}"
        return TestRun(TestReport("could_not_run", reason=why), error=why, seconds=time.monotonic() - started,
                       sandbox_alive=_alive(sandbox))
    seconds = time.monotonic() - started
    if task.get("format") == "harbor":
        text = _harbor_report(sandbox, result)
    else:
        text = grade_test_run(result.output, result.exit_code, result.timed_out, parser_name)
    if result.exit_code == 125 and result.output.startswith("[sandbox error:"):
        return TestRun(text, report, result.output, result.exit_code, result.timed_out, seconds,
                       error=result.output.strip(), sandbox_alive=_alive(sandbox))
    return TestRun(text, report, result.output, result.exit_code, result.timed_out, seconds,
                   sandbox_alive=_alive(sandbox))


def _alive(sandbox: Any) -> bool:
    return bool(getattr(sandbox, "alive", True))


def _harbor_report(sandbox: Any, result: Any) -> TestReport:
    """Harbor's verdict: the reward its verifier wrote to ``/logs/verifier/reward.txt``."""
    if result.timed_out:
        return TestReport("timeout", reason="the verifier ran past its time limit", exit_code=result.exit_code)
    try:
        text = sandbox.read_file("/logs/verifier/reward.txt").decode().strip()
        value = min(max(float(text), 0.0), 1.0)
    except (SandboxError, ValueError) as exc:
        return TestReport("could_not_run", reason=f"no reward in /logs/verifier/reward.txt ({exc})",
                          exit_code=result.exit_code)
    # Harbor's verifier writes the reward itself: one "test" that passes when it is 1
    return TestReport("graded", results={"reward": "passed" if value == 1.0 else "failed"},
                      exit_code=result.exit_code, value=value)
