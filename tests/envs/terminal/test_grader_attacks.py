"""Graders forged from inside: each attack a policy can make through its own ``bash`` tool, as a test.

Every attack here either earned the full reward or turned a sure 0 into a masked ENV_ERROR before the
grader was hardened; each now scores 0 with the episode ENV_DONE (trained on), while a runner that
cannot run on the task's initial state stays ENV_ERROR.
"""

import json
import textwrap

import pytest
from sandbox_helpers import SMALL, needs_bwrap
from tbench_tasks import PYTEST_RUNNER, write_task

from agent_gym.envs.terminal import TerminalEnv, builtin_tasks
from agent_gym.envs.terminal.baseline import BASELINES
from agent_gym.envs.terminal.grading import grade_test_run, parse_pytest

pytestmark = needs_bwrap

SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'


def bash(command):
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


def write_file(path, text):
    """A bash command that writes ``text`` to ``path`` (a heredoc)."""
    return f"mkdir -p \"$(dirname {path})\" && cat > {path} <<'AGENT_EOF'\n{textwrap.dedent(text).lstrip()}AGENT_EOF"


def play(env, commands, task_index=0):
    """Reset, run ``commands`` in the agent's shell, submit; the last step's info."""
    env.reset(options={"task_index": task_index})
    for command in commands:
        _, _, terminated, truncated, info = env.step(bash(command))
        assert not (terminated or truncated), info
    _, _, terminated, truncated, info = env.step(SUBMIT)
    assert terminated or truncated
    return info


def assert_scored_zero(info):
    """The attack earned nothing and the episode is trained on (not masked)."""
    assert info["res_reward"] == 0.0, info.get("tests")
    assert info["status"] == "ENV_DONE", (info["status"], info.get("end_reason"), info.get("tests"))
    assert info["tests"]["outcome"] in ("graded", "invalid"), info["tests"]


UNCAPTURED_RUNNER = PYTEST_RUNNER.replace("-rA", "-rA -s")


def program_task(root, timeout=60):
    """The tests run the agent's program ``/app/prog.py``, which must write 42 to ``/app/out.txt``.

    The runner does not capture output (``pytest -s``) and the test lets the program's output through: the
    program writes straight into the test runner's output, the strongest place a tested program can have.
    """
    return write_task(
        root, "write-42", meta={"max_test_timeout_sec": timeout}, run_tests=UNCAPTURED_RUNNER,
        solution="printf 'open(\"/app/out.txt\", \"w\").write(\"42\")\n' > /app/prog.py\n",
        tests="""
            import subprocess
            from pathlib import Path

            def test_program_writes_42():
                subprocess.run(["python3", "/app/prog.py"], timeout=120)
                assert Path("/app/out.txt").read_text().strip() == "42"
            """,
    )


# The agent's program finds the test runner's processes (its ancestors) and the test names (the tests are
# readable while they run), as a policy can learn to.
_RECON = """
    import os, re, sys, time
    names = re.findall(r"^def (test_\\w+)", open("/tests/test_outputs.py").read(), re.M)
    passing = "".join(f"PASSED test_outputs.py::{n}\\n" for n in names)
    chain, pid = [], os.getppid()
    while pid > 1:
        chain.append(pid)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    def outputs():
        fds = [1]  # the program's own output: the runner's, which the test lets through
        for p in chain:
            try:
                fds.append(os.open(f"/proc/{p}/fd/1", os.O_WRONLY | os.O_APPEND))
            except OSError:
                pass
        return fds
    """

LATE_LINES = _RECON + """
    if os.fork() == 0:  # a process that outlives the program: passing lines into the output until killed
        os.setsid()
        fds, end = outputs(), time.time() + 60
        while time.time() < end:
            for fd in fds:
                try:
                    os.write(fd, passing.encode())
                except OSError:
                    pass
            time.sleep(0.002)
        os._exit(0)
    open("/app/out.txt", "w").write("41")
    """

KILL_AND_FORGE = _RECON + """
    fake = "=" * 10 + " short test summary info " + "=" * 10 + "\\n" + passing
    fake += "=" * 10 + f" {len(names)} passed in 0.01s " + "=" * 10 + "\\n"
    for fd in outputs():
        os.write(fd, fake.encode())
    os.kill(os.getppid(), 9)  # the test runner, before it prints its own summary
    """

KILL_RUNNER = _RECON + """
    os.kill(os.getppid(), 9)
    """


@pytest.fixture(scope="module")
def program_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    env = TerminalEnv(tasks=[program_task(root)], limits=SMALL)
    yield env
    env.close()


def test_a_process_left_by_the_tested_program_cannot_write_passing_lines_after_the_summary(program_env):
    info = play(program_env, [write_file("/app/prog.py", LATE_LINES)])
    assert_scored_zero(info)
    assert info["tests"]["results"] == {"test_outputs.py::test_program_writes_42": "failed"}
    output = program_env.last_test_output
    summary_end = output.index(" 1 failed in ")
    assert "PASSED test_outputs.py::test_program_writes_42" in output[summary_end:]  # the lines were written
    assert parse_pytest(output) == {"test_outputs.py::test_program_writes_42": "failed"}  # a failure stays one


def test_a_tested_program_that_kills_the_runner_and_prints_a_passing_summary_scores_zero(program_env):
    info = play(program_env, [write_file("/app/prog.py", KILL_AND_FORGE)])
    assert_scored_zero(info)
    assert info["tests"]["outcome"] == "invalid"
    # the output alone says "resolved": only pytest's report on the grader's channel tells the truth
    assert grade_test_run(program_env.last_test_output, 137, False).resolved is True


def test_killing_the_runner_is_the_agents_failure_not_a_masked_error(program_env):
    info = play(program_env, [write_file("/app/prog.py", KILL_RUNNER)])
    assert_scored_zero(info)
    assert info["tests"]["outcome"] == "invalid" and "initial state" in info["tests"]["reason"]


def test_blocking_the_runners_output_file_is_the_agents_failure(program_env):
    blocks = ("mkdir -p /run/agent_gym/exec.out /run/agent_gym/out/x /tests/locked/conftest.py "
              "&& chmod 555 /tests/locked")
    assert_scored_zero(play(program_env, [blocks]))
    full = "head -c 40M /dev/zero > /run/agent_gym/f1; head -c 40M /dev/zero > /run/agent_gym/f2; df /run/agent_gym"
    info = play(program_env, [full])  # no room for the grader's plugin
    assert_scored_zero(info)


def test_a_program_that_hangs_the_tests_is_the_agents_failure(tmp_path):
    # the initial state must finish its tests within the timeout even on a loaded machine (else the run is ENV_ERROR)
    env = TerminalEnv(tasks=[program_task(tmp_path, timeout=6)], limits=SMALL)
    try:
        before = BASELINES.computed
        info = play(env, [write_file("/app/prog.py", "import time\ntime.sleep(600)\n")])
        assert_scored_zero(info)
        assert info["tests"]["outcome"] == "invalid" and "ran past" in info["tests"]["reason"]
        assert play(env, [write_file("/app/prog.py", KILL_RUNNER)])["tests"]["outcome"] == "invalid"
        assert BASELINES.computed == before + 1  # the initial state is tested once per task
    finally:
        env.close()


def test_the_reference_solution_still_scores_one(program_env):
    program_env.reset(options={"task_index": 0})
    program_env.step(program_env.oracle_action())
    *_, info = program_env.step(program_env.oracle_action())
    assert info["res_reward"] == 1.0 and info["tests"]["outcome"] == "graded"


# ---------------------------------------------------------------- tasks that run their tests "in the same shell"

SHELL_FUNCTION = """
    __pass() {
      echo '=== short test summary info ==='
      for t in $(grep -o 'def test_[a-z_0-9]*' /tests/*.py | sed 's/.*def //'); do
        echo "PASSED test_outputs.py::$t"
      done
      echo '=== 1 passed in 0.01s ==='
    }
    env() { __pass; }; bash() { __pass; }; python3() { __pass; }
    """

FAKE_PYTHON = """
    mkdir -p /app/bin && cat > /app/bin/python3 <<'EOF'
    #!/bin/bash
    echo '=== short test summary info ==='
    for t in $(grep -o 'def test_[a-z_0-9]*' /tests/*.py | sed 's/.*def //'); do echo "PASSED test_outputs.py::$t"; done
    EOF
    chmod +x /app/bin/python3 && cp /app/bin/python3 /app/bin/pytest && export PATH=/app/bin:$PATH
    """


def same_shell_task(root):
    return write_task(
        root, "same-shell-answer", meta={"run_tests_in_same_shell": True},
        solution="echo 42 > /app/answer\n",
        tests="""
            from pathlib import Path

            def test_answer():
                assert Path("/app/answer").read_text().strip() == "42"
            """,
    )


@pytest.mark.parametrize("attack", [SHELL_FUNCTION, FAKE_PYTHON], ids=["shell-function", "fake-python-on-path"])
def test_the_agents_shell_state_cannot_stand_in_for_the_runner(tmp_path, attack):
    env = TerminalEnv(tasks=[same_shell_task(tmp_path)], limits=SMALL)
    try:
        assert_scored_zero(play(env, [textwrap.dedent(attack).strip()]))
    finally:
        env.close()


# ---------------------------------------------------------------- the shipped fix-failing-test task

FIX_FAILING_TEST = [t["id"] for t in builtin_tasks()].index("fix-failing-test")

CHEATS = {
    "conftest-exits-0": write_file("/app/calc/conftest.py", "import os\nos._exit(0)\n"),
    "conftest-passes-failures": write_file("/app/calc/conftest.py", """
        import pytest

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            outcome.get_result().outcome = "passed"
        """),
    "ini-collects-only": write_file("/app/calc/pytest.ini", "[pytest]\naddopts = --collect-only\n"),
    "pytest-shadowed": write_file("/app/calc/pytest.py", "raise SystemExit(0)\n"),
    "test-overridden": "printf '\\nadd = lambda a, b: a + b\\n' >> /app/calc/test_calc.py",
    "equal-to-anything": write_file("/app/calc/calc.py", """
        class _Any(int):
            def __eq__(self, other):
                return True

        def add(a, b):
            return _Any(a - b)

        def mul(a, b):
            return a * b
        """),
}


@pytest.mark.parametrize("cheat", list(CHEATS))
def test_fix_failing_test_cannot_pass_without_the_fix(cheat):
    env = TerminalEnv(limits=SMALL)
    try:
        assert_scored_zero(play(env, [CHEATS[cheat]], task_index=FIX_FAILING_TEST))
    finally:
        env.close()
