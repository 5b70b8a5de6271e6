"""SWE-bench and SWE-smith instances against a repository the test creates, the generator, parallel episodes."""

from __future__ import annotations

import json
import subprocess

import pytest

from agent_gym.envs.swe import SWEEnv
from agent_gym.envs.swe.generate import check_tasks
from agent_gym.envs.swe.generate import main as generate_main
from agent_gym.envs.swe.tasks import load_instances, normalize_task
from agent_gym.parsers import format_tool_call
from agent_gym.rollout import collect
from agent_gym.types import EpisodeStatus, PolicyOutput

BUGGY = "def area(w, h):\n    return w + h\n\n\ndef double(x):\n    return 2 * x\n"
FIXED = "def area(w, h):\n    return w * h\n\n\ndef double(x):\n    return 2 * x\n"
OLD_TESTS = "from calc import double\n\n\ndef test_double():\n    assert double(4) == 8\n"
NEW_TESTS = ("from calc import area\n\n\ndef test_area():\n    assert area(3, 4) == 12\n\n\n"
             "def test_square():\n    assert area(2, 2) == 4\n")


def sh(cwd, *args) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """repos/acme__calc: commit 1 has the bug, commit 2 the fix and a new test file (the future history)."""
    root = tmp_path_factory.mktemp("repos")
    repo = root / "acme__calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text(BUGGY)
    (repo / "tests" / "test_calc.py").write_text(OLD_TESTS)
    sh(repo, "git", "init", "-q")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "base")
    base = sh(repo, "git", "rev-parse", "HEAD").strip()
    (repo / "calc" / "__init__.py").write_text(FIXED)
    (repo / "tests" / "test_area.py").write_text(NEW_TESTS)
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "fix area")
    fix = sh(repo, "git", "rev-parse", "HEAD").strip()
    instance = {
        "instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": base,
        "patch": sh(repo, "git", "diff", base, fix, "--", "calc"),
        "test_patch": sh(repo, "git", "diff", base, fix, "--", "tests"),
        "problem_statement": "area() adds instead of multiplying",
        "FAIL_TO_PASS": json.dumps(["tests/test_area.py::test_area", "tests/test_area.py::test_square"]),
        "PASS_TO_PASS": "[]", "version": "1.0", "created_at": "2024-01-01",
    }
    return root, instance, fix


def test_a_swe_bench_instance_loads_and_grades_against_a_local_repository(repos, tmp_path):
    root, instance, fix = repos
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(instance) + "\n")
    [task] = load_instances(path, repos=root)
    assert task["FAIL_TO_PASS"] == ["tests/test_area.py::test_area", "tests/test_area.py::test_square"]
    assert task["test_targets"] == ["tests/test_area.py"] and task["source"]["commit"] == instance["base_commit"]
    env = SWEEnv(tasks=[instance], repos=root)
    try:
        assert env.grade_patch(env.tasks[0], env.tasks[0]["patch"]).resolved
        empty = env.grade_patch(env.tasks[0], "")
        assert empty.score() == 0.0 and empty.fail_to_pass["tests/test_area.py::test_area"] == "failed"
        env.reset(seed=0)
        out = env.bash(f"git rev-list --all --count; git cat-file -e {fix} 2>/dev/null || echo missing; "
                       "ls tests; grep -c 'w + h' calc/__init__.py")
        assert out.split("\n")[:4] == ["1", "missing", "test_calc.py", "1"], out
        while True:
            *_, terminated, truncated, info = env.step(env.oracle_action())
            if terminated or truncated:
                break
        assert info["swe"]["resolved"] and info["res_reward"] == 1.0
    finally:
        env.close()
    with pytest.raises(ValueError, match="no local repository"):
        normalize_task({**instance, "repo": "acme/other"}, repos=root)
    with pytest.raises(ValueError, match="FAIL_TO_PASS"):
        normalize_task({**instance, "FAIL_TO_PASS": "[]"}, repos=root)


def test_a_swe_smith_instance_applies_its_bug_to_the_clean_repository(repos):
    root, instance, _ = repos
    bug = instance["patch"].replace("-    return w + h\n+    return w * h", "-    return w * h\n+    return w + h")
    smith = {"instance_id": "acme__calc.func_pm_op_swap__1", "repo": "acme/calc", "patch": bug,
             "problem_statement": "area is wrong", "FAIL_TO_PASS": ["tests/test_area.py::test_area"],
             "PASS_TO_PASS": ["tests/test_calc.py::test_double"]}
    env = SWEEnv(tasks=[smith], repos=root)
    try:
        task = env.tasks[0]
        assert task["bug_patch"] == bug and "+    return w * h" in task["patch"]  # the fix is the bug reversed
        assert env.grade_patch(task, task["patch"]).resolved and env.grade_patch(task, "").score() == 0.0
    finally:
        env.close()


def test_the_generator_runs_on_any_local_repository(repos, tmp_path):
    root, _, _ = repos
    out = tmp_path / "tasks.jsonl"
    assert generate_main(["--repo", str(root / "acme__calc"), "--out", str(out), "--max-candidates", "5",
                          "--timeout", "60", "--quiet"]) == 0
    tasks = [json.loads(line) for line in out.read_text().splitlines()]
    assert tasks, "no candidate broke a test"
    for task in tasks:
        assert task["FAIL_TO_PASS"] and task["PASS_TO_PASS"]
        assert set(task["FAIL_TO_PASS"]).isdisjoint(task["PASS_TO_PASS"])
        statement = task["problem_statement"]
        assert task["FAIL_TO_PASS"][0] in statement and task["bug_patch"] not in statement
    assert check_tasks(tasks[:1], workers=1) == []  # the gold patch scores 1 and an empty one 0


class _Marker:
    """Writes a file named after its session, lists the repository's markers, then is cut short (not graded)."""

    def act(self, messages, *, session_id, tools=None):
        name = session_id.replace("/", "_")
        if not any(m["role"] == "tool" for m in messages):
            return format_tool_call("bash", {"command": f"touch /app/{name}.mark; ls /app/*.mark; git status -s"})
        return PolicyOutput(text="...", finish_reason="length")

    async def aact(self, messages, *, session_id, tools=None):
        return self.act(messages, session_id=session_id, tools=tools)

    def close_session(self, session_id):
        pass


def test_16_parallel_episodes_under_collect_see_only_their_own_repository(repos):
    root, instance, _ = repos
    batch = collect(lambda: SWEEnv(tasks=[instance], repos=root), _Marker(), tasks=[instance], num_episodes=16,
                    n_parallel=16, progress=False, seed=5)
    assert len(batch) == 16
    names = set()
    for trajectory in batch:
        assert trajectory.status == EpisodeStatus.TRUNCATION, trajectory.status
        listing = trajectory.steps[1].observation  # the output of its one bash call
        lines = listing.split("\n")
        assert len(lines) >= 3 and lines[0].endswith(".mark") and lines[1].startswith("?? "), listing
        assert lines[2] == "[exit code: 0]", listing  # one marker: its own
        names.add(lines[0])
    assert len(names) == 16


def test_a_task_with_its_own_test_command_and_parser():
    from swe_helpers import hidden_task

    check = ("if python3 -c 'from textkit import truncate; assert truncate(\"exact\", 5) == \"exact\"'; "
             "then r=PASSED; else r=FAILED; fi; "
             "printf 'SWEBench results starts here\\n%s\\nSWEBench results ends here\\n' $r")
    task = {**hidden_task(), "test_patch": "", "test_command": check, "parser_name": "swebench",
            "FAIL_TO_PASS": ["tests"], "PASS_TO_PASS": []}
    env = SWEEnv(tasks=[task])
    try:
        gold = env.grade_patch(env.tasks[0], env.tasks[0]["patch"])
        assert gold.resolved and gold.results == {"tests": "passed"}, gold.as_info()
        assert env.grade_patch(env.tasks[0], "").fail_to_pass == {"tests": "failed"}
    finally:
        env.close()
