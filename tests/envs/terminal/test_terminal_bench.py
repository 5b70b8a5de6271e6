"""Terminal-Bench's grading rules, each on a task directory written here: the reference solution scores 1, doing
nothing scores 0, and a test run that cannot grade is its own outcome (ENV_ERROR), never a wrong answer."""

import json
from pathlib import Path

import pytest
from sandbox_helpers import SMALL, needs_bwrap
from tbench_tasks import dockerfile_task, fraction_task, same_shell_task, swebench_task, write_task

from agent_gym.envs.terminal import TerminalEnv, load_task
from agent_gym.envs.terminal.dockerfile import expand, parse_dockerfile, resolve_dockerfile
from agent_gym.envs.terminal.grading import grade_test_run, parse_pytest, parse_swebench, register_parser
from agent_gym.envs.terminal.loader import read_compose
from agent_gym.errors import ConfigError, SandboxError, TestOutputError
from agent_gym.integrations.contract import INFRA_FAILURE_STATUSES
from agent_gym.sandbox import LocalSandbox, SandboxLimits
from agent_gym.sandbox.rootfs import writable_root_unavailable_reason

SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
needs_writable_root = pytest.mark.skipif(writable_root_unavailable_reason() is not None,
                                         reason=f"no writable root here: {writable_root_unavailable_reason()}")


def bash(command):
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


def episode(env, actions):
    """Run ``actions`` (strings; None: the oracle's next action) after a reset; the last step's info."""
    env.reset(options={"task_index": 0})
    info = {}
    for action in actions:
        _, _, terminated, truncated, info = env.step(env.oracle_action() if action is None else action)
        if terminated or truncated:
            return info
    raise AssertionError("the episode did not end")


def solved_and_empty(env):
    """(info of the reference solution's episode, info of an episode that only submits)."""
    return episode(env, [None, None]), episode(env, [SUBMIT])


# ---------------------------------------------------------------- parsing, without a sandbox


def test_pytest_summary_is_read_line_by_line():
    out = ("=========== short test summary info ===========\nPASSED\ntest_outputs.py::test_a\n"
           "PASSED test_outputs.py::test_b\nFAILED test_outputs.py::test_c - assert 1 == 2\n"
           "SKIPPED [1] test_outputs.py:9: no gpu\nXFAIL test_outputs.py::test_d - known\n"
           "XPASS test_outputs.py::test_e\nERROR test_outputs.py::test_f\n======= 2 passed in 0.1s =======\n")
    assert parse_pytest(out) == {"test_outputs.py::test_b": "passed", "test_outputs.py::test_c": "failed",
                                 "[1] test_outputs.py:9: no gpu": "passed", "test_outputs.py::test_d": "passed",
                                 "test_outputs.py::test_e": "failed", "test_outputs.py::test_f": "failed"}
    one = "== short test summary info ==\nPASSED\nFAILED\ntest_outputs.py::test_x\nPASSED t.py::test_x\n"
    report = grade_test_run(one, 0, False)
    assert (report.passed, report.total, report.resolved) == (1, 1, True)  # a bare PASSED/FAILED line is no test
    with pytest.raises(TestOutputError):
        parse_pytest("PASSED t.py::a\n")


def test_swebench_parser_reads_only_its_block():
    noise = "PASSED a::b\nPASSED a::c\n"
    assert parse_swebench(noise + "SWEBench results starts here\nPASSED\nSWEBench results ends here\n") == {
        "tests": "passed"}
    assert parse_swebench(noise + "SWEBench results starts here\nFAILED\nSWEBench results ends here") == {
        "tests": "failed"}
    report = grade_test_run(noise + "cannot fetch the repository\n", 1, False, "swebench")
    assert report.outcome == "parse_error" and report.score() is None


def test_outcomes_of_runs_that_grade_nothing():
    assert grade_test_run("", 124, True).outcome == "timeout"
    assert grade_test_run("/usr/bin/python3: No module named pytest\n", 1, False).outcome == "could_not_run"
    assert grade_test_run("bash: pytest: command not found\n", 127, False).outcome == "could_not_run"
    assert grade_test_run("collected 0 items\n", 5, False).outcome == "parse_error"
    assert grade_test_run("== short test summary info ==\n== no tests ran ==\n", 5, False).outcome == "no_tests"
    graded = grade_test_run("== short test summary info ==\nPASSED t::a\nFAILED t::b\n", 1, False)
    assert (graded.score(), graded.score("fraction"), graded.resolved) == (0.0, 0.5, False)
    register_parser("exit-code", lambda out: {"run": "passed" if "ok" in out else "failed"})
    assert grade_test_run("ok", 0, False, "exit-code").score() == 1.0
    with pytest.raises(ValueError, match="parser_name"):
        grade_test_run("", 0, False, "no-such-parser")


def test_dockerfile_variables_expand_in_order(tmp_path):
    assert expand("${A}/x:$B:${C:-dflt}:${A:+alt}:\\$A", {"A": "1", "B": "2"}) == "1/x:2:dflt:alt:$A"
    (tmp_path / "Dockerfile").write_text(
        "ARG V=3.11\nFROM python:${V}-slim\nENV A=1\nENV A=2 B=$A\nENV PATH=/opt/bin:$PATH\nRUN echo $A\n"
        "ARG LATE=x\nWORKDIR /a\nWORKDIR b/../c\nRUN pwd\nENV C late\n")
    resolved = resolve_dockerfile(parse_dockerfile(tmp_path / "Dockerfile"), {"PATH": "/usr/bin"}, tmp_path)
    assert resolved["image"] == "python:3.11-slim" and resolved["workdir"] == "/a/c"
    assert resolved["env"] == {"PATH": "/opt/bin:/usr/bin", "A": "2", "B": "1", "C": "late"}  # ARG not kept
    runs = [s for s in resolved["steps"] if s[0] == "run"]
    assert runs[0][2] == {"env": {"PATH": "/opt/bin:/usr/bin", "A": "2", "B": "1"}, "cwd": "/"}
    assert runs[1][2]["env"]["LATE"] == "x" and runs[1][2]["cwd"] == "/a/c" and "C" not in runs[1][2]["env"]
    (tmp_path / "Dockerfile").write_text("FROM x\nCOPY --from=builder /out /app\n")
    with pytest.raises(ConfigError, match="--from"):
        resolve_dockerfile(parse_dockerfile(tmp_path / "Dockerfile"), {}, tmp_path)


def test_compose_one_service_is_read_and_more_is_an_error(tmp_path):
    task = write_task(tmp_path, "composed", dockerfile="FROM python:3.11\n", compose="""
        services:
          client:
            build:
              dockerfile: Dockerfile
            image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
            environment:
              - TEST_DIR=${T_BENCH_TEST_DIR}
              - MODE=fast
            working_dir: /work
            mem_limit: 4g
        """)
    loaded = load_task(task)
    assert loaded["image"] is None and loaded["memory_mb"] == 4096
    assert loaded["compose"]["env"] == {"TEST_DIR": "/tests", "MODE": "fast"} and loaded["workdir"] == "/work"
    (task / "docker-compose.yaml").write_text("services:\n  client: {image: a}\n  db: {image: postgres}\n")
    with pytest.raises(ConfigError, match="2 services"):
        read_compose(task)


# ---------------------------------------------------------------- graded in the local sandbox


@needs_bwrap
@needs_writable_root
def test_dockerfile_semantics_local(tmp_path):
    env = TerminalEnv(tasks=[dockerfile_task(tmp_path)], limits=SMALL)
    try:
        env.reset(options={"task_index": 0})
        assert env.sandbox.run("pwd; command -v mytool").output == "/srv/work\n/opt/tool/bin/mytool\n"
        assert env.run_tests()[2] == 0.0 and env.last_report.outcome == "graded"  # doing nothing fails
        env.step(env.oracle_action())
        _, _, _, _, solved = env.step(env.oracle_action())
        assert solved["res_reward"] == 1.0 and solved["tests"]["resolved"], env.last_test_output[-1500:]
    finally:
        env.close()
    for path in ("/opt/tool", "/etc/mytool", "/usr/local/share/mytool", "/srv/work"):
        assert not Path(path).exists()  # nothing of the task reached the host


@needs_bwrap
def test_read_only_root_names_the_instruction_and_the_backend(tmp_path):
    env = TerminalEnv(tasks=[dockerfile_task(tmp_path)], limits=SMALL, writable_root=False)
    try:
        with pytest.raises(SandboxError, match=r"dockerfile-semantics.*(RUN|COPY).*read-only root.*backend='docker'"):
            env.reset(options={"task_index": 0})
    finally:
        env.close()


@needs_bwrap
def test_swebench_parser_task(tmp_path):
    env = TerminalEnv(tasks=[swebench_task(tmp_path)], limits=SMALL)
    try:
        solved, empty = solved_and_empty(env)
        assert solved["res_reward"] == 1.0 and solved["tests"]["results"] == {"tests": "passed"}
        assert empty["res_reward"] == 0.0 and empty["tests"]["results"] == {"tests": "failed"}
    finally:
        env.close()


@needs_bwrap
def test_run_tests_in_same_shell_still_runs_them_in_a_fresh_process(tmp_path):
    # the agent's shell state (here an exported variable; a function or PATH could stand in for the runner)
    # never reaches the tests, whatever the task says (see test_grader_attacks for the attacks)
    for same_shell in (True, False):
        env = TerminalEnv(tasks=[same_shell_task(tmp_path, same_shell)], limits=SMALL)
        try:
            info = episode(env, [bash("export ANSWER=42; cd /tmp"), SUBMIT])
            assert info["res_reward"] == 0.0 and info["tests"]["outcome"] == "graded", env.last_test_output[-800:]
        finally:
            env.close()


@needs_bwrap
def test_reward_is_resolved_by_default_and_the_fraction_on_request(tmp_path):
    env = TerminalEnv(tasks=[fraction_task(tmp_path)], limits=SMALL)
    try:
        info = episode(env, [None, None])
        assert info["res_reward"] == 0.0 and (info["tests"]["passed"], info["tests"]["total"]) == (1, 2)
        env.reward_mode = "fraction"  # as TerminalEnv(reward_mode="fraction") grades
        assert env.run_tests() == (1, 2, 0.5)
    finally:
        env.close()
    with pytest.raises(ValueError, match="reward_mode"):
        TerminalEnv(reward_mode="partial")


@needs_bwrap
def test_a_runner_that_cannot_run_is_masked_not_a_wrong_answer(tmp_path):
    missing = write_task(tmp_path, "no-runner", run_tests="#!/bin/bash\npython3 -m no_such_runner test_outputs.py\n",
                         tests="def test_a():\n    pass\n")
    slow = write_task(tmp_path, "slow-runner", meta={"max_test_timeout_sec": 1}, run_tests="#!/bin/bash\nsleep 30\n")
    for task, outcome in ((missing, "could_not_run"), (slow, "timeout")):
        env = TerminalEnv(tasks=[task], limits=SMALL)
        try:
            info = episode(env, [None, None])
            assert info["tests"]["outcome"] == outcome and info["res_reward"] == 0.0
            assert info["status"] == "ENV_ERROR" and info["status"] in INFRA_FAILURE_STATUSES
            assert info["end_reason"] == f"tests_{outcome}"
        finally:
            env.close()


@needs_bwrap
@needs_writable_root
def test_memory_is_bounded_for_the_sandbox_not_per_address_space():
    """A JVM reserves GiBs of address space at start; the sandbox's memory cgroup lets it, and says who was killed."""
    limits = SandboxLimits(memory_mb=256, output_bytes=4000)
    reserve = ("python3 -c 'import mmap; m = mmap.mmap(-1, 16 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, "
               "prot=mmap.PROT_READ); print(\"reserved\", len(m) >> 30, \"GiB\")'")
    with LocalSandbox(limits, writable_root=True) as box:
        assert box.memory_limited_by_cgroup and box.run(reserve).output == "reserved 16 GiB\n"
        result = box.run("python3 -c 'b = bytearray(600 << 20)'; echo exit=$?")
        assert result.killed == "memory" and "exit=137" in result.output
        assert "the sandbox reached its memory limit of 256 MiB" in result.output
    with LocalSandbox(limits) as box:  # per-process address space: the reservation alone fails
        output = box.run(reserve).output
        assert "reserved" not in output and ("Cannot allocate" in output or "MemoryError" in output)
