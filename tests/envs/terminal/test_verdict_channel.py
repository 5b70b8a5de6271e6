"""The grader's private channel and how a run that did not grade is judged.

The sandbox half (``LocalSandbox.exec_with_channel``), the pytest plugin that reports on it, and
:func:`~agent_gym.envs.terminal.baseline.judge` on runs made up here (no sandbox needed).
"""

import hashlib
import hmac
import json

import pytest
from sandbox_helpers import SMALL, needs_bwrap
from tbench_tasks import write_task

from agent_gym.envs.terminal import TerminalEnv
from agent_gym.envs.terminal.baseline import Baseline, judge
from agent_gym.envs.terminal.grading import TestReport, grade_test_run, parse_pytest
from agent_gym.envs.terminal.runner import TestRun
from agent_gym.envs.terminal.verdict import ChannelReport, Verdict, channel_env, new_key, read_channel
from agent_gym.sandbox import LocalSandbox

SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'


def bash(command):
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


# ---------------------------------------------------------------- the sandbox's channel


@needs_bwrap
def test_the_channel_is_private_and_the_output_cannot_be_blocked_or_reopened():
    probe = ("import os\n"
             "for path in ('/proc/%d/fd/1' % os.getppid(), '/proc/%d/fd/3' % os.getppid()):\n"
             "    try:\n"
             "        os.open(path, os.O_WRONLY)\n"
             "        print('opened', path)\n"
             "    except OSError as exc:\n"
             "        print('refused', exc.errno)\n")
    with LocalSandbox(SMALL) as box:
        box.run("mkdir -p /run/agent_gym/exec.out")  # what blocks the file-based exec
        box.write_file("/tmp/probe.py", probe)
        script = ("read -r key <&3; echo \"key=$key\"; python3 /tmp/probe.py; echo report >&3; "
                  "(sleep 60; echo late) & echo done")
        result, back = box.exec_with_channel(script, b"k1\n", timeout=20)
        assert result.ok and back == b"report\n"
        lines = result.output.splitlines()
        assert lines[0] == "key=k1" and lines[-1] == "done" and "late" not in result.output
        assert not any(line.startswith("opened") for line in lines), lines  # neither stream reopens
        assert box.exec("echo x").exit_code == 125  # the old file-based exec is blocked; the channel's is not


def test_read_channel_keeps_only_reports_with_the_runs_key():
    key = new_key()
    good = json.dumps({"results": {"t::a": "passed"}, "exitstatus": 0, "collected": 1, "private": True})
    mac = hmac.new(key, good.encode(), hashlib.sha256).hexdigest()
    forged = hmac.new(b"guess", good.encode(), hashlib.sha256).hexdigest()
    data = f"{mac} {good}\n- {good}\n{forged} {good}\ngarbage\n".encode()
    report = read_channel(data, key)
    assert report.verdicts == [Verdict({"t::a": "passed"}, 0, 1, True)] and report.unauthenticated == 3
    env = channel_env({"PYTHONPATH": "/app", "PATH": "/bin"}, "/run/x")
    assert env["PYTHONPATH"] == "/run/x:/app" and env["AGENT_GYM_SAVED_PYTHONPATH"] == "1/app"
    assert env["AGENT_GYM_SAVED_PYTEST_ADDOPTS"] == "0" and env["PYTHONSAFEPATH"] == "1"


# ---------------------------------------------------------------- the plugin inside a real test run

PLUGIN_CHECKS = """
    import os, subprocess, sys
    import pytest

    def test_pass():
        pass

    def test_fail():
        assert False

    @pytest.mark.skip
    def test_skip():
        pass

    @pytest.mark.xfail
    def test_xfail():
        assert False

    @pytest.mark.xfail
    def test_xpass():
        pass

    @pytest.fixture
    def broken():
        raise RuntimeError

    def test_error(broken):
        pass

    def test_runner_is_private_and_the_environment_is_the_tasks():
        assert "AGENT_GYM_VERDICT_FD" not in os.environ and "PYTHONSAFEPATH" not in os.environ
        assert os.environ.get("PYTEST_ADDOPTS") is None and os.environ["PYTHONPATH"] == "/opt/task"
        assert sys.path[-1] == "/app"  # the start directory, after the library
        child = subprocess.run(["cat", f"/proc/{os.getpid()}/environ"], capture_output=True)
        assert child.returncode != 0  # a child of the runner cannot read its memory or environment
        # nor inherit the channel
        assert subprocess.run(["sh", "-c", "test -e /proc/self/fd/3"], close_fds=False).returncode != 0
    """


@needs_bwrap
def test_the_plugin_reports_as_terminal_bench_counts(tmp_path):
    runner = "#!/bin/bash\ncd /app && python3 -m pytest /tests/test_outputs.py -rA -p no:cacheprovider\n"
    task = write_task(tmp_path, "plugin-checks", tests=PLUGIN_CHECKS, run_tests=runner)
    env = TerminalEnv(tasks=[task], limits=SMALL)
    env.test_env = {**env.test_env, "PYTHONPATH": "/opt/task"}
    try:
        env.reset(options={"task_index": 0})
        # a pytest.py in the start directory would read the key and forge the report: it is never imported
        env.step(bash("printf 'raise SystemExit(\"shadowed\")\\n' > /app/pytest.py"))
        *_, info = env.step(SUBMIT)
        results = {k.split("::")[-1]: v for k, v in info["tests"]["results"].items()}
        assert results == {"test_pass": "passed", "test_fail": "failed", "test_skip": "passed",
                           "test_xfail": "passed", "test_xpass": "failed", "test_error": "failed",
                           "test_runner_is_private_and_the_environment_is_the_tasks": "passed"}, env.last_test_output
        text = grade_test_run(env.last_test_output, 1, False)
        assert sorted(text.results.values()) == sorted(results.values())  # the output says the same (a skip is
        # keyed by its reason there)
    finally:
        env.close()


@needs_bwrap
def test_two_pytest_sessions_are_graded_from_the_output_when_the_task_has_two(tmp_path):
    runner = ("#!/bin/bash\ncd /tests\npython3 -m pytest test_outputs.py -rA -p no:cacheprovider -k one\n"
              "python3 -m pytest test_outputs.py -rA -p no:cacheprovider -k two\n")
    tests = ("from pathlib import Path\n\ndef test_one():\n    pass\n\n"
             "def test_two():\n    assert Path('/app/two').exists()\n")
    env = TerminalEnv(tasks=[write_task(tmp_path, "two-sessions", tests=tests, run_tests=runner,
                                        solution="touch /app/two\n")], limits=SMALL)
    try:
        env.reset(options={"task_index": 0})
        assert env.run_tests()[:2] == (1, 2) and env.last_report.outcome == "graded"
        env.step(env.oracle_action())
        *_, info = env.step(env.oracle_action())
        assert info["res_reward"] == 1.0 and info["tests"]["total"] == 2
    finally:
        env.close()


# ---------------------------------------------------------------- judging runs (no sandbox)


def verdict(results, exitstatus=1):
    return Verdict(results, exitstatus, len(results), True)


FAILED = {"t::a": "failed"}
PASSED_TEXT = TestReport("graded", results={"t::a": "passed"})
NO_SUMMARY = TestReport("parse_error", reason="no summary")


def run(text=NO_SUMMARY, verdicts=(), others=0, channel=True, **kw):
    return TestRun(text, ChannelReport(list(verdicts), others) if channel else None, **kw)


def base(via, seconds=1.0):
    return lambda: Baseline(via, seconds, TestReport("graded" if via != "none" else "could_not_run", reason="x"))


def no_baseline():
    raise AssertionError("a run that graded by itself needs no baseline")


@pytest.mark.parametrize("case, expected", [
    # pytest's authenticated report decides; the output (however passing) does not
    (run(PASSED_TEXT, [verdict(FAILED)]), ("graded", 0.0)),
    # no report where the initial state has one: the agent killed or replaced the runner
    (run(PASSED_TEXT), ("invalid", 0.0)),
    # extra unauthenticated sessions the initial state does not have are not the task's
    (run(PASSED_TEXT, [verdict(FAILED)], others=2), ("graded", 0.0)),
    # a runner that does not grade the initial state either: not graded (ENV_ERROR)
    (run(NO_SUMMARY), ("parse_error", None)),
    # a timeout where the initial state took at most half the limit is the agent's; else not graded
    (run(TestReport("timeout"), timed_out=True), ("invalid", 0.0)),
])
def test_judge(case, expected):
    via = "none" if expected[0] == "parse_error" else "channel"
    report = judge(case, base(via), timeout=60)
    assert (report.outcome, report.score()) == expected, report


def test_judge_without_a_channel_and_when_nobody_can_tell():
    assert judge(run(PASSED_TEXT, channel=False), no_baseline, 60).graded
    text_failed = TestReport("graded", results=FAILED)
    assert judge(run(text_failed, channel=False), no_baseline, 60).score() == 0.0
    slow = judge(run(TestReport("timeout"), timed_out=True), base("channel", seconds=40.0), 60)
    assert slow.outcome == "timeout" and "too close" in slow.reason
    assert judge(run(NO_SUMMARY, sandbox_alive=False), no_baseline, 60).outcome == "parse_error"
    assert judge(run(NO_SUMMARY), lambda: None, 60).outcome == "parse_error"
    assert judge(run(PASSED_TEXT, [verdict({"t::a": "passed"}, 0)], others=1), lambda: None, 60).score() == 1.0
    # a task with two pytest sessions (the initial state has one unauthenticated): read from the output
    assert judge(run(PASSED_TEXT, [verdict(FAILED)], others=1), base("text"), 60).score() == 1.0


def test_a_failure_stays_a_failure_whatever_lines_follow():
    out = ("== short test summary info ==\nFAILED t.py::test_a - boom\n== 1 failed in 0.1s ==\n"
           "PASSED t.py::test_a\nPASSED t.py::test_b\n")
    assert parse_pytest(out) == {"t.py::test_a": "failed", "t.py::test_b": "passed"}
