"""SWE-v0 episodes: the repository the agent gets, the editor, the captured patch, the oracle, the shipped tasks."""

from __future__ import annotations

import json

import pytest
from swe_helpers import HIDDEN, TEXT, hidden_task

from agent_gym.envs.swe import SWEEnv
from agent_gym.envs.swe.env import hidden_package_paths
from agent_gym.envs.swe.repo import library_path
from agent_gym.envs.swe.tasks import SPLITS, TASKS_PATH, shipped_tasks
from agent_gym.parsers import format_tool_call
from agent_gym.sandbox import SandboxLimits
from agent_gym.sandbox.cgroup import cgroup_unavailable_reason
from agent_gym.types import EpisodeStatus

SUBMIT = format_tool_call("submit", {})


def bash(command: str) -> str:
    return format_tool_call("bash", {"command": command})


def editor(**arguments) -> str:
    return format_tool_call("str_replace_editor", arguments)


@pytest.fixture(scope="module")
def env():
    environment = SWEEnv(tasks=[hidden_task()], max_patch_bytes=20_000)
    yield environment
    environment.close()


def last(observation) -> str:
    return observation[-1]["content"]


def test_the_repository_has_one_commit_and_nothing_to_read_the_fix_from(env):
    _, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == ["bash", "str_replace_editor", "submit"]
    obs, *_ = env.step(bash(
        "git rev-list --all --count; git reflog | wc -l; git remote | wc -l; ls .git/logs 2>&1 | wc -l; "
        f"ls {HIDDEN} 2>&1 | grep -c 'No such'; git status --porcelain | wc -l; "
        "git cat-file --batch-all-objects --batch | grep -c 'if len(text) <= width' ; "
        "grep -rn 'if len(text) <= width' /app /tmp /home 2>/dev/null | wc -l; "
        f"ls {library_path('textkit')} {TASKS_PATH} 2>&1 | grep -c 'No such'"))
    counts = last(obs).split("\n")[:9]
    # one commit, no reflog, no remote, no logs, no hidden test file, a clean tree, no object or file with the fix,
    # and neither the clean library nor the task file (gold patches) of this package in sight
    assert counts == ["1", "0", "0", "1", "1", "0", "0", "0", "2"], last(obs)
    # hidden even where the package lies under the Python prefix the sandbox shows (a regular install)
    assert {p.rsplit("/", 1)[-1] for p in hidden_package_paths()} == {"data", "libraries"}
    assert str(library_path("textkit")).startswith(hidden_package_paths()[1])
    assert str(TASKS_PATH).startswith(hidden_package_paths()[0])


def test_the_editor_views_edits_and_undoes_with_clear_messages(env):
    env.reset(seed=0)
    path = f"/app/{TEXT}"
    text = last(env.step(editor(command="view", path=path, view_range=[30, 33]))[0])
    assert text.startswith(f"Here is {path} (lines 30-33 of") and "    33\t" in text
    assert "not absolute" in last(env.step(editor(command="view", path=TEXT))[0])
    assert "does not exist" in last(env.step(editor(command="view", path="/app/nope.py"))[0])
    assert "Files and directories" in last(env.step(editor(command="view", path="/app"))[0])
    assert "outside the file's lines" in last(env.step(editor(command="view", path=path, view_range=[0, 3]))[0])
    missing = last(env.step(editor(command="str_replace", path=path, old_str="no such text", new_str="x"))[0])
    assert "was not found" in missing
    twice = last(env.step(editor(command="str_replace", path=path, old_str="return text", new_str="x"))[0])
    assert "occurs" in twice and "at lines [" in twice
    done = last(env.step(editor(command="str_replace", path=path, old_str="    if len(text) < width:",
                                new_str="    if len(text) <= width:"))[0])
    assert done.startswith(f"Edited {path}") and "if len(text) <= width:" in done
    inserted = last(env.step(editor(command="insert", path=path, insert_line=0, new_str="# fixed"))[0])
    assert "Inserted 1 line(s) after line 0" in inserted
    assert "Undid the last edit" in last(env.step(editor(command="undo_edit", path=path))[0])
    assert "already exists" in last(env.step(editor(command="create", path=path, file_text="x"))[0])
    assert "Created /app/notes/new.txt" in last(env.step(editor(command="create", path="/app/notes/new.txt",
                                                                file_text="hello\n"))[0])
    assert "unknown command" in last(env.step(editor(command="delete", path=path))[0])
    obs, reward, terminated, _, info = env.step(
        bash("printf '\\x00\\x01\\xff' > /app/blob.bin; echo outside > /tmp/outside.txt") + SUBMIT)
    assert terminated and info["status"] == EpisodeStatus.ENV_DONE
    swe = info["swe"]
    assert swe["resolved"] and reward >= 1.0 and swe["apply"]["method"] == "git apply"
    patch = env.unwrapped.last_patch if hasattr(env, "unwrapped") else env.last_patch
    assert "notes/new.txt" in patch and "GIT binary patch" in patch and "outside" not in patch
    assert "# fixed" not in patch and swe["patch_bytes"] == len(patch.encode())


def test_writing_outside_the_repository_and_the_network_do_not_help(env):
    env.reset(seed=0)
    fixed = "import textkit.text as t\\nt.truncate = lambda text, width, ellipsis='...': text\\n"
    obs, *_ = env.step(bash(
        f"mkdir -p /root/.local/lib && printf \"{fixed}\" > /tmp/sitecustomize.py; "
        "python -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\" 2>&1 | tail -1"))
    assert "Network is unreachable" in last(obs) or "Errno" in last(obs)
    *_, info = env.step(SUBMIT)
    assert info["swe"]["resolved"] is False and info["res_reward"] == 0.0 and info["swe"]["patch_bytes"] == 0


@pytest.mark.skipif(cgroup_unavailable_reason() is not None, reason="the host cannot make sandbox cgroups")
def test_the_episode_memory_limit_holds_for_all_its_processes_together():
    """Three processes of 120 MiB each are under a per-process limit of 256 MiB, not under the episode's."""
    environment = SWEEnv(tasks=[hidden_task()], limits=SandboxLimits(memory_mb=256, output_bytes=4000))
    try:
        environment.reset(seed=0)
        hold = "python3 -c 'import time; b = bytearray(120 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(4)'"
        obs, *_ = environment.step(bash(f"{hold} & {hold} & {hold} & wait; echo done"))
        assert "memory limit of 256 MiB" in last(obs), last(obs)
        obs, *_ = environment.step(bash("echo alive"))
        assert "alive" in last(obs)
    finally:
        environment.close()


def test_committing_or_deleting_git_history_does_not_hide_or_fake_the_patch(env):
    env.reset(seed=0)
    env.step(bash("sed -i 's/    if len(text) < width:/    if len(text) <= width:/' textkit/text.py && "
                  "git add -A && git commit -qm fix && git tag v1"))
    *_, info = env.step(SUBMIT)
    assert info["swe"]["resolved"]  # the diff is against the base commit, not HEAD
    env.reset(seed=0)
    env.step(bash("rm -rf .git"))
    *_, info = env.step(SUBMIT)
    assert info["res_reward"] == 0.0 and "could not be captured" in info["swe"]["reason"]


def test_a_huge_change_scores_zero(env):
    env.reset(seed=0)
    *_, info = env.step(bash("head -c 100000 /dev/zero | tr '\\0' 'x' > big.txt") + SUBMIT)
    assert info["res_reward"] == 0.0 and info["swe"]["apply"]["method"] == "too_large"


def test_random_text_never_raises_and_the_step_limit_grades(task):
    environment = SWEEnv(tasks=[task], max_steps=3)
    try:
        environment.reset(seed=1)
        for text in ("", "<tool_call>{not json</tool_call>", '<tool_call>{"name": "str_replace_editor", '
                     '"arguments": {"command": "view", "path": "/app", "view_range": "x"}}</tool_call>'):
            _, _, terminated, truncated, info = environment.step(text)
        assert truncated and info["status"] == EpisodeStatus.MAX_STEPS and info["swe"]["outcome"] == "graded"
        assert info["res_reward"] == 0.0
    finally:
        environment.close()


def test_shipped_tasks_are_split_by_library_and_a_sample_grades_right():
    tasks = shipped_tasks()
    assert len(tasks) >= 200
    for split, libraries in SPLITS.items():
        assert {t["library"] for t in shipped_tasks(split)} == set(libraries)
    for task in tasks:
        assert task["FAIL_TO_PASS"] and task["PASS_TO_PASS"] and task["patch"] not in task["problem_statement"]
        removed = [line[1:].strip() for line in task["patch"].splitlines()
                   if line.startswith("+") and not line.startswith("+++") and line[1:].strip()]
        assert not any(line in task["problem_statement"] for line in removed if len(line) > 12)
    # every shipped task was checked offline (python -m agent_gym.envs.swe.generate --check shipped); here a sample:
    # the gold and an empty patch of a test-split task, the oracle through the env on a train-split one
    sample = [shipped_tasks("test")[0], shipped_tasks("train")[0]]
    environment = SWEEnv(tasks=sample)
    try:
        task = environment.tasks[0]
        assert environment.grade_patch(task, task["patch"]).score() == 1.0, task["id"]
        assert environment.grade_patch(task, "").score() == 0.0, task["id"]
        environment.reset(seed=0, options={"task_index": 1})
        while True:
            *_, terminated, truncated, info = environment.step(environment.oracle_action())
            if terminated or truncated:
                break
        assert info["swe"]["resolved"] and info["res_reward"] == 1.0, json.dumps(info["swe"])[:500]
    finally:
        environment.close()
