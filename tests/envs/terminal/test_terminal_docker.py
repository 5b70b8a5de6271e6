"""Terminal-v0 on the Docker backend, against a Docker engine the tests start (vfs storage, an image built offline).

The engine and its image are made once per test session (sandbox_helpers.docker_engine); the tests skip with the
reason where no engine can start. Two shipped tasks run by default; AGENT_GYM_DOCKER_ALL_TASKS=1 runs all of them
(each task is one container: about 10-20 s apiece with the vfs driver).
"""

import os

import pytest
from sandbox_helpers import DOCKER_IMAGE
from tbench_tasks import dockerfile_task, swebench_task

from agent_gym.envs.terminal import TerminalEnv, builtin_tasks
from agent_gym.sandbox import SandboxLimits

LIMITS = SandboxLimits(memory_mb=1024, output_bytes=8000, cpus=1.0)
SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
DEFAULT_TASKS = ("git-find-bad-commit", "makefile-build")
TASK_IDS = [t["id"] for t in builtin_tasks()]
SHIPPED = TASK_IDS if os.environ.get("AGENT_GYM_DOCKER_ALL_TASKS") == "1" else [t for t in TASK_IDS
                                                                                  if t in DEFAULT_TASKS]


def docker_env(tasks):
    return TerminalEnv(tasks=tasks, backend="docker", docker_image=DOCKER_IMAGE, docker_pool_size=0, limits=LIMITS)


def empty_then_solved(env, index=0, check=None):
    """In one container: the tests on the untouched task, then the reference solution's episode."""
    env.reset(options={"task_index": index})
    if check is not None:
        check(env)
    passed, total, score = env.run_tests()
    empty = (score, env.last_report.outcome, env.last_test_output[-800:])
    env.step(env.oracle_action())
    _, _, terminated, truncated, info = env.step(env.oracle_action())
    return empty, info


@pytest.mark.parametrize("task_id", SHIPPED)
def test_shipped_task_on_docker(docker_host, task_id):
    env = docker_env(None)
    try:
        empty, info = empty_then_solved(env, TASK_IDS.index(task_id))
        assert empty[0] == 0.0 and empty[1] == "graded", empty
        assert info["res_reward"] == 1.0 and info["tests"]["resolved"], env.last_test_output[-1500:]
    finally:
        env.close()


def test_dockerfile_semantics_and_swebench_parser_on_docker(docker_host, tmp_path):
    def check(env):
        if env.task["id"] == "dockerfile-semantics":
            assert env.sandbox.run("pwd; command -v mytool; echo $SHOUT").output == (
                "/srv/work\n/opt/tool/bin/mytool\nhello-fallback\n")

    env = docker_env([dockerfile_task(tmp_path), swebench_task(tmp_path)])
    try:
        for index in (0, 1):
            empty, info = empty_then_solved(env, index, check)
            assert empty[0] == 0.0 and empty[1] == "graded", empty
            assert info["res_reward"] == 1.0, env.last_test_output[-1500:]
    finally:
        env.close()
