"""SWE-v0 in Docker: a task that names an image runs its episode and its grading in containers (a real engine)."""

from __future__ import annotations

import pytest
from swe_helpers import hidden_task

from agent_gym.envs.swe import SWEEnv
from agent_gym.parsers import format_tool_call


@pytest.fixture(scope="module")
def image():
    try:
        from sandbox_helpers import DOCKER_IMAGE, require_docker_engine
    except ImportError as exc:  # pragma: no cover - the helpers ship with the sandbox tests
        pytest.skip(f"no Docker test helpers: {exc}")
    require_docker_engine()  # skips with the reason where no engine can be started
    return DOCKER_IMAGE


def test_a_task_naming_an_image_runs_and_grades_in_containers(image):
    env = SWEEnv(tasks=[{**hidden_task(), "image": image}], docker_pool_size=0)
    try:
        task = env.tasks[0]
        assert env.image_for(task) == image
        gold = env.grade_patch(task, task["patch"])
        assert gold.resolved, gold.as_info()
        env.reset(seed=0)
        out = env.bash("git rev-list --all --count; cat /etc/debian_version | cut -d. -f1; ls tests")
        assert out.startswith("1\n12\n") and "test_hidden.py" not in out, out
        fix = format_tool_call("str_replace_editor", {"command": "str_replace", "path": "/app/textkit/text.py",
                                                      "old_str": "    if len(text) < width:",
                                                      "new_str": "    if len(text) <= width:"})
        env.step(fix)
        *_, info = env.step(format_tool_call("submit", {}))
        assert info["swe"]["resolved"] and info["res_reward"] == 1.0, info["swe"]
    finally:
        env.close()
