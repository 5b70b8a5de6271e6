"""SWE-v0 graders against a policy that tries: every attack class scores 0 with its reason, never a masked error.

Each patch of :mod:`swe_attacks` leaves the bug in place; before the grader's hardening each scored 1 (or
ended in an unmasked-as-wrong ``outcome == "error"``). A runner that cannot run on the base is the task's
fault: ENV_ERROR whatever the patch.
"""

from __future__ import annotations

import dis
import hmac
import types

import pytest
import swe_attacks as attacks
from swe_helpers import HIDDEN, hidden_task

from agent_gym.envs.swe import SWEEnv
from agent_gym.envs.swe.baseline import clear_base_runs
from agent_gym.envs.swe.policy import (
    CONFIG_NAMES,
    shadowing_violations,
    static_violations,
    tree_violations,
)
from agent_gym.parsers import format_tool_call
from agent_gym.types import EpisodeStatus

F2P = f"{HIDDEN}::test_exact_width"
FIX = format_tool_call("str_replace_editor", {"command": "str_replace", "path": "/app/textkit/text.py",
                                              "old_str": "    if len(text) < width:",
                                              "new_str": "    if len(text) <= width:"})


@pytest.fixture(scope="module")
def env():
    environment = SWEEnv(tasks=[hidden_task(), attacks.edited_tests_task()], grading_timeout=60,
                         max_patch_bytes=20_000)
    yield environment
    environment.close()


def hidden(env):
    return env.tasks[0]


def edited(env):
    return env.tasks[1]


def rejected(report, *words):
    assert report.outcome == "invalid" and report.score() == 0.0, report.as_info()
    text = report.reason + " ".join(report.apply.get("policy", []))
    assert all(word in text for word in words), report.as_info()


# --------------------------------------------------------------------------- cannot grade vs wrong

BROKEN_RUNNERS = {
    "pytest target missing": {"test_targets": ["tests/test_missing.py"]},
    "test command that cannot start": {"test_patch": "", "test_command": "python3 -m no_such_runner",
                                       "parser_name": "swebench", "FAIL_TO_PASS": ["tests"]},
}


@pytest.mark.parametrize("name", sorted(BROKEN_RUNNERS))
def test_a_runner_that_cannot_run_on_the_base_is_env_error_whatever_the_patch(name):
    task = {**hidden_task(), "id": f"broken-{name}", **BROKEN_RUNNERS[name]}
    environment = SWEEnv(tasks=[task], grading_timeout=60)
    try:
        task = environment.tasks[0]
        for patch in (task["patch"], attacks.runner("import os\nos._exit(3)\n"), ""):
            report = environment.grade_patch(task, patch)
            assert report.outcome == "error" and report.score() is None, report.as_info()
            assert "the base" in report.reason, report.reason
        environment.reset(seed=0)
        environment.step(FIX)
        *_, terminated, truncated, info = environment.step(format_tool_call("submit", {}))
        assert info["status"] == EpisodeStatus.ENV_ERROR and info["end_reason"] == "grading_error", info["swe"]
        assert truncated and not terminated and info["res_reward"] == 0.0
    finally:
        environment.close()


def test_the_hidden_tests_blocked_from_applying_by_the_patch_score_zero_not_error(env):
    report = env.grade_patch(edited(env), attacks.attributes_file())
    rejected(report, ".gitattributes")


def test_the_oracle_still_resolves_and_the_empty_patch_uses_the_cached_base_run(env):
    for task in (hidden(env), edited(env)):
        gold = env.grade_patch(task, task["patch"])
        assert gold.resolved and gold.score() == 1.0, gold.as_info()
        empty = env.grade_patch(task, "")
        assert empty.outcome == "graded" and empty.score() == 0.0 and empty.apply["method"] == "empty"
        assert empty.base["cached"], empty.as_info()  # graded from the base run: no second run


def test_a_realistic_test_file_grades_with_nothing_found_by_the_guard():
    environment = SWEEnv(tasks=[attacks.rich_tests_task()], grading_timeout=60)
    try:
        task = environment.tasks[0]
        gold = environment.grade_patch(task, task["patch"])
        assert gold.resolved and gold.violations == [], gold.as_info()
        assert gold.results[f"{HIDDEN}::TestTruncate::test_skip"] == "skipped"
        # what the base run saw is pytest adjusting its own classes as it configures, nothing of the tests
        assert all(key.startswith("runner-changed@_pytest.") for key in gold.base["tolerated"]), gold.base
        empty = environment.grade_patch(task, "")
        assert empty.score() == 0.0 and empty.fail_to_pass == {
            f"{HIDDEN}::TestTruncate::test_exact_width": "failed", f"{HIDDEN}::UnitTests::test_unit_exact": "failed"}
    finally:
        environment.close()


# --------------------------------------------------------------------------- shadowing

@pytest.mark.parametrize("attack", ["package beside a module", "standard library module"])
def test_a_module_shadowing_another_scores_zero(env, attack):
    patch = attacks.shadow_package() if attack == "package beside a module" else attacks.shadow_stdlib()
    report = env.grade_patch(hidden(env), patch)
    rejected(report, "shadows")


# --------------------------------------------------------------------------- the runner's internals

def test_library_code_naming_the_test_runner_is_rejected_before_any_run(env):
    report = env.grade_patch(hidden(env), attacks.runner(attacks.RUNNER_ONE_LINE))
    rejected(report, "_pytest")
    assert report.exit_code is None and not report.results  # no test ran


@pytest.mark.parametrize("name", ["RUNNER_CLASS", "RUNNER_MODULE_GLOBAL", "RUNNER_REPORT", "FRAMES_PLUGIN"])
def test_tampering_with_the_runner_while_the_tests_run_scores_zero(env, name):
    report = env.grade_patch(hidden(env), attacks.runner(getattr(attacks, name)))
    assert report.outcome == "invalid" and report.score() == 0.0, report.as_info()
    assert report.apply["method"] == "git apply" and "tamper" in report.reason, report.as_info()


@pytest.mark.parametrize("name", [".pytest.ini", "pytest.toml"])
def test_a_pytest_configuration_file_loading_a_plugin_is_dropped(env, name):
    report = env.grade_patch(hidden(env), attacks.config_plugin(name))
    assert report.score() == 0.0 and name in report.apply["dropped_files"], report.as_info()
    assert report.fail_to_pass == {F2P: "failed"}, report.as_info()


def test_a_compiled_file_carrying_the_fix_is_rejected(env):
    rejected(env.grade_patch(hidden(env), attacks.compiled_fix()), "compiled")


def test_forging_the_results_channel_from_after_the_run_or_another_process_scores_zero(env):
    report = env.grade_patch(hidden(env), attacks.forge_channel())
    assert report.score() == 0.0, report.as_info()
    # forged records seen on the channel, a verdict file rewritten after the run, or (when the forgeries came
    # after the run's end) the real results: never the forged ones
    assert (report.outcome == "invalid" and ("tamper" in report.reason or "not written by the grader" in report.reason)
            or report.fail_to_pass == {F2P: "failed"}), report.as_info()


@pytest.mark.parametrize("name", ["REWRITE_TESTS", "REWRITE_TESTS_CHILD"])
def test_rewriting_the_hidden_tests_on_disk_scores_zero(env, name):
    report = env.grade_patch(edited(env), attacks.runner(getattr(attacks, name)))
    assert report.outcome == "invalid" and report.score() == 0.0, report.as_info()
    assert "tamper" in report.reason and "tests/test_text.py" in report.reason, report.as_info()


# --------------------------------------------------------------------------- the policy's rules

def test_every_configuration_file_name_pytest_reads_is_protected():
    findpaths = pytest.importorskip("_pytest.config.findpaths")
    names = getattr(findpaths, "CONFIG_LOADERS_BY_NAME", None) or {}
    assert set(names) <= set(CONFIG_NAMES), set(names) - set(CONFIG_NAMES)
    assert {"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml"} <= set(CONFIG_NAMES)


def test_static_rules_name_what_they_reject():
    base = {"pkg/mod.py": "import os\n\n\ndef f():\n    return 1\n", "pkg/plug.py": "import pytest\n"}
    patch = attacks.file_diff("pkg/mod.py", base["pkg/mod.py"], base["pkg/mod.py"].replace(
        "return 1", "import sys; return sys._getframe(1).f_back"))
    violations = static_violations(patch, base.get)
    assert any("_getframe" in v and "pkg/mod.py" in v for v in violations), violations
    # a name the base file already uses may be used again (a library of pytest helpers)
    patch = attacks.file_diff("pkg/plug.py", base["pkg/plug.py"], base["pkg/plug.py"] + "x = pytest.raises\n")
    assert static_violations(patch, base.get) == []
    changes = [("A", "100644", "pkg/extra.pth"), ("A", "100644", "pkg/sitecustomize.py"), ("A", "120000", "pkg/ln"),
               ("A", "100644", "pkg/__pycache__/mod.cpython-311.pyc"), ("A", "100644", "pkg/fast.so"),
               ("A", "100644", "sub/.gitattributes"), ("M", "100644", "pkg/mod.py"), ("M", "100644", "pkg/other.py")]
    found = tree_violations(changes, {"pkg/mod.py"})
    for word in ("extra.pth", "sitecustomize", "symbolic link", "compiled", "fast.so", ".gitattributes",
                 "does not show"):
        assert any(word in v for v in found), (word, found)


def test_shadowing_rules_cover_the_repository_the_standard_library_and_installed_distributions():
    base = {"pkg/__init__.py", "pkg/util.py", "src/other/__init__.py", "tests/test_a.py"}
    roots = ["", "src"]
    found = shadowing_violations(
        ["pkg/util/__init__.py", "json.py", "pluggy/__init__.py", "other.py", "pkg/new.py", "pkg/sub/util.py"],
        base, set(), roots, stdlib={"json"}, installed={"pluggy"})
    text = "\n".join(found)
    for path in ("pkg/util/__init__.py", "json.py", "pluggy/__init__.py", "other.py"):
        assert path in text, (path, found)
    assert "pkg/new.py" not in text and "pkg/sub/util.py" not in text
    # replacing a module by a package (the module deleted) is a move, not a shadow
    assert shadowing_violations(["pkg/util/__init__.py"], base, {"pkg/util.py"}, roots, set(), set()) == []


def test_base_runs_are_cached_per_task_and_cleared_on_demand(env):
    clear_base_runs()
    first = env.grade_patch(hidden(env), "")
    again = env.grade_patch(hidden(env), "")
    assert not first.base["cached"] and again.base["cached"]


# --------------------------------------------------------------------------- the guarded run's own rules

def _record(seq: int, payload: tuple, key: bytes) -> bytes:
    text = repr(payload)
    return f"{seq} {hmac.new(key, f'{seq} {text}'.encode(), 'sha256').hexdigest()} {text}".encode()


def test_the_verdict_counts_authenticated_records_in_order_up_to_the_first_end():
    from agent_gym.envs.swe.scripts import guarded_pytest

    key = b"k" * 32
    lines = [_record(0, ("test", "t::a", "call", "failed", False, "boom"), key),
             _record(1, ("test", "t::a", "call", "passed", False, ""), b"x" * 32),  # not the guard's key
             _record(1, ("end", 1), key),
             _record(2, ("test", "t::a", "call", "passed", False, ""), key)]  # after the end: not counted
    verdict = guarded_pytest._tally(lines, key, guarded_pytest._hmac_function(), guarded_pytest._literal)
    assert verdict["complete"] and verdict["results"] == {"t::a": "failed"}, verdict
    assert len(verdict["channel_problems"]) == 1, verdict


def test_the_guard_reads_no_global_name_a_patch_could_replace():
    from agent_gym.envs.swe.scripts import guarded_pytest

    guard = guarded_pytest._guard.__code__
    found = {}

    def walk(code):
        for instruction in dis.get_instructions(code):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and code.co_name != "Reporter":
                found.setdefault(getattr(code, "co_qualname", code.co_name), set()).add(instruction.argval)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    for const in guard.co_consts:
        if isinstance(const, types.CodeType):
            walk(const)
    assert found == {}, found


def test_no_process_the_agent_started_survives_into_grading(env):
    env.reset(seed=0)
    env.step(format_tool_call("bash", {"command": "setsid nohup sh -c 'while :; do sleep 0.05; done' "
                                                  ">/dev/null 2>&1 & echo started"}))
    *_, info = env.step(format_tool_call("submit", {}))
    assert info["status"] == EpisodeStatus.ENV_DONE and info["swe"]["outcome"] == "graded", info["swe"]
    names = env.unwrapped.sandbox.exec("ps -eo comm=").output.split()
    assert "sh" not in names and "sleep" not in names, names  # killed before the patch was captured
