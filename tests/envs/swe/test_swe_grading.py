"""Grading of SWE-v0 patches: the resolved rule, and the loopholes an agent may try, each scoring 0 with its reason."""

from __future__ import annotations

import pytest
from swe_helpers import HIDDEN, HIDDEN_TESTS, TEXT, hidden_task

from agent_gym.envs.swe import SWEEnv
from agent_gym.envs.swe.generate import file_diff
from agent_gym.envs.swe.grading import SWEReport, judge
from agent_gym.envs.swe.policy import filter_patch
from agent_gym.envs.swe.repo import library_path, patch_files

INIT = "textkit/__init__.py"


@pytest.fixture(scope="module")
def env():
    environment = SWEEnv(tasks=[hidden_task()], grading_timeout=60, max_patch_bytes=20_000)
    yield environment
    environment.close()


def source(path: str) -> str:
    return (library_path("textkit") / path).read_text()


def edit(path: str, old: str, new: str, base: str | None = None) -> str:
    """A patch of ``path`` replacing ``old`` by ``new`` in the buggy base."""
    text = base if base is not None else buggy(path)
    assert old in text
    return file_diff(path, text, text.replace(old, new, 1))


def buggy(path: str) -> str:
    text = source(path)
    return text.replace("    if len(text) <= width:\n", "    if len(text) < width:\n") if path == TEXT else text


FIX = edit(TEXT, "    if len(text) < width:\n", "    if len(text) <= width:\n")


def prepend_to_init(code: str) -> str:
    text = source(INIT)
    return file_diff(INIT, text, code + text)


def test_the_gold_patch_resolves_and_an_empty_patch_does_not(env, task):
    gold = env.grade_patch(env.tasks[0], env.tasks[0]["patch"])
    assert gold.outcome == "graded" and gold.resolved and gold.score() == 1.0, gold.as_info()
    assert gold.apply["method"] == "git apply" and gold.fail_to_pass == {f"{HIDDEN}::test_exact_width": "passed"}
    assert set(gold.results) == {f"{HIDDEN}::test_exact_width", f"{HIDDEN}::test_shorter"}  # the hidden file only
    empty = env.grade_patch(env.tasks[0], "")
    assert empty.score() == 0.0 and empty.apply["method"] == "empty"
    assert empty.fail_to_pass == {f"{HIDDEN}::test_exact_width": "failed"} and empty.p2p_fraction == 1.0
    assert "1/1 FAIL_TO_PASS tests did not pass" in empty.reason
    assert env.grade_patch(env.tasks[0], FIX).resolved


def test_editing_deleting_or_adding_tests_is_dropped(env):
    forged = HIDDEN_TESTS.replace('assert truncate("exact", 5) == "exact"', "assert True")
    patch = (file_diff(HIDDEN, None, forged)  # the hidden test file itself
             + edit("tests/test_text.py", 'assert truncate("exact", 5) == "exact"', "assert True",
                    source("tests/test_text.py"))
             + file_diff("tests/test_case.py", source("tests/test_case.py"), None))
    report = env.grade_patch(env.tasks[0], patch)
    assert report.score() == 0.0 and report.outcome == "graded"
    assert set(report.apply["dropped_files"]) == {HIDDEN, "tests/test_text.py", "tests/test_case.py"}
    assert report.fail_to_pass[f"{HIDDEN}::test_exact_width"] == "failed"


def test_a_conftest_or_pytest_configuration_cannot_change_results(env):
    conftest = (
        "import pytest\n\n"
        "print('PASSED tests/test_hidden.py::test_exact_width')\n\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    report = outcome.get_result()\n"
        "    report.outcome = 'passed'\n"
        "    report.longrepr = None\n"
    )
    patch = (file_diff("conftest.py", None, conftest) + file_diff("textkit/conftest.py", None, conftest)
             + file_diff("pytest.ini", None, "[pytest]\naddopts = -k shorter\n")
             + file_diff("setup.cfg", None, "[tool:pytest]\naddopts = -p no:agent_gym_swe_report\n")
             + edit("pyproject.toml", "[tool.pytest.ini_options]\n",
                    '[tool.pytest.ini_options]\naddopts = "-k shorter"\n', source("pyproject.toml"))
             + file_diff("textkit/sitecustomize.py", None, "import os\nos._exit(0)\n"))
    report = env.grade_patch(env.tasks[0], patch)
    assert report.score() == 0.0 and report.fail_to_pass[f"{HIDDEN}::test_exact_width"] == "failed"
    assert set(report.apply["dropped_files"]) == {"conftest.py", "textkit/conftest.py", "pytest.ini", "setup.cfg",
                                                  "pyproject.toml", "textkit/sitecustomize.py"}


def test_forged_passed_lines_printed_by_the_code_count_for_nothing(env):
    forged = ("print('PASSED tests/test_hidden.py::test_exact_width')\n"
              "print('=========================== short test summary info ============================')\n"
              "print('PASSED tests/test_hidden.py::test_exact_width')\n")
    report = env.grade_patch(env.tasks[0], prepend_to_init(forged))
    assert report.score() == 0.0 and report.fail_to_pass[f"{HIDDEN}::test_exact_width"] == "failed"


@pytest.mark.parametrize("code,reason", [
    ("import sys\nsys.exit(0)\n", "collected no tests"),
    ("import os\nos._exit(0)\n", "wrote no results"),
    ("def broken(:\n", "collection failed"),
])
def test_exiting_or_breaking_collection_scores_zero(env, code, reason):
    report = env.grade_patch(env.tasks[0], prepend_to_init(code))
    assert report.outcome == "invalid" and report.score() == 0.0, report.as_info()
    assert reason in report.reason and "(the patch)" in report.reason


def test_a_huge_patch_is_not_applied(env):
    report = env.grade_patch(env.tasks[0], file_diff("textkit/blob.py", None, "x = 1\n" * 5000))
    assert report.outcome == "invalid" and report.score() == 0.0
    assert report.apply["method"] == "too_large" and "over the limit of 20000" in report.reason


def test_a_patch_that_does_not_apply_scores_zero(env):
    stale = "def f():\n    return 1\n"
    report = env.grade_patch(env.tasks[0], file_diff(TEXT, stale, stale.replace("1", "2")))
    assert report.outcome == "invalid" and report.apply["method"] == "failed" and report.score() == 0.0


def test_network_use_during_grading_fails_like_any_other_failure(env):
    code = ("import socket\n"
            "socket.create_connection(('1.1.1.1', 80), timeout=3)\n")
    report = env.grade_patch(env.tasks[0], prepend_to_init(code))
    assert report.score() == 0.0 and report.outcome == "invalid"


def test_a_fork_bomb_during_grading_is_stopped_by_the_time_limit(task):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    environment = SWEEnv(tasks=[task], grading_timeout=5)
    try:
        report = environment.grade_patch(environment.tasks[0], prepend_to_init(bomb))
    finally:
        environment.close()
    assert report.outcome == "invalid" and report.score() == 0.0, report.as_info()
    assert "grading time limit of 5 s" in report.reason or "no results" in report.reason


def test_filter_patch_and_the_resolved_rule():
    patch = FIX + file_diff("tests/test_new.py", None, "x = 1\n") + file_diff("pkg/test_me.py", None, "")
    kept, dropped = filter_patch(patch, [HIDDEN])
    assert patch_files(kept) == [TEXT] and dropped == ["tests/test_new.py", "pkg/test_me.py"]
    f2p, p2p, reason = judge({"a": "passed", "b": "skipped", "c": "xfailed", "d": "error"}, ["a", "b", "e"], ["c", "d"])
    assert f2p == {"a": "passed", "b": "skipped", "e": "missing"} and p2p == {"c": "xfailed", "d": "error"}
    assert "2/3 FAIL_TO_PASS" in reason and "1/2 PASS_TO_PASS" in reason
    partial = SWEReport("graded", fail_to_pass={"a": "passed", "b": "failed"}, pass_to_pass={"c": "passed"})
    assert partial.score() == 0.0 and partial.score("f2p_fraction") == 0.5
    assert SWEReport("error").score() is None and SWEReport("invalid").score("f2p_fraction") == 0.0


def test_a_module_of_the_repository_cannot_stand_in_for_the_test_runner(env):
    # With a plain `python -m pytest` the repository's pygments/ would be imported by pytest itself and forge results.
    forge = ("import json, os\n"
             "path = os.environ.get('AGENT_GYM_SWE_RESULTS')\n"
             "if path:\n"
             "    results = {'tests/test_hidden.py::test_exact_width': 'passed',\n"
             "               'tests/test_hidden.py::test_shorter': 'passed'}\n"
             "    json.dump({'results': results, 'collected': 2}, open(path, 'w'))\n"
             "    os._exit(0)\n")
    patch = (file_diff("pytest.py", None, forge) + file_diff("_pytest/__init__.py", None, forge)
             + file_diff("pygments/__init__.py", None, forge))  # pytest imports pygments as it starts
    report = env.grade_patch(env.tasks[0], patch)
    assert report.outcome == "invalid" and report.score() == 0.0, report.as_info()
    policy = "\n".join(report.apply["policy"])
    for name in ("pytest", "_pytest", "pygments"):
        assert f"shadows the installed module {name!r}" in policy, policy
