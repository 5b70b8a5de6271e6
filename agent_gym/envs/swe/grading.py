"""Grading a SWE task: the agent's patch applied to a clean base, the hidden tests run, SWE-bench's rule.

:func:`grade_patch` starts a fresh sandbox (never the one the agent used), extracts the task's
base repository (:mod:`agent_gym.envs.swe.repo`), and then:

1. **Filters the patch.** Changes to files that decide how the tests run are dropped and listed
   in the report (``dropped_files``): the task's test files (its test patch's files and every
   test file by name: ``test_*.py``, ``*_test.py``, files under ``tests/`` or ``test/``), pytest's
   configuration and plugin hooks (``conftest.py``, ``pytest.ini``, ``tox.ini``, ``setup.cfg``,
   ``pyproject.toml``), start-up hooks of Python (``sitecustomize.py``, ``usercustomize.py``,
   ``*.pth``) and what the task marks (``protected_files``). A patch over ``max_patch_bytes`` is not
   applied at all.
2. **Applies it** with ``git apply``, then ``git apply --3way``, then ``patch -p1 --fuzz=3``
   (the first that works; the tree is reset between tries).
3. **Applies the test patch** (the hidden tests) to the files, reset to base by step 1.
4. **Runs the tests** (pytest, with plugins from the host's environment off and a reporter of
   this module that writes each test's outcome to a file; or the task's own ``test_command``,
   whose output its ``parser_name`` reads) under the grading time limit.

Outcomes per test: ``passed``, ``failed``, ``error`` (setup, teardown or collection failed),
``skipped``, ``xfailed`` and ``missing`` (never ran). SWE-bench's rule: the task is
**resolved** when every ``FAIL_TO_PASS`` test and every ``PASS_TO_PASS`` test passed (an
expected failure counts for ``PASS_TO_PASS`` only); missing, skipped and errored ``FAIL_TO_PASS``
tests fail. A run that collected no test, wrote no results or ran out of time is **invalid**:
with the agent's patch applied it scores 0 (the base collects the tests; the patch broke them),
with nothing applied it is the task's fault (``outcome == "error"``, not graded).
"""

from __future__ import annotations

import fnmatch
import json
import secrets
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.envs.swe.repo import Snapshot, patch_files, split_patch
from agent_gym.envs.terminal.grading import get_parser
from agent_gym.errors import SandboxError, TestOutputError

__all__ = [
    "DEFAULT_MAX_PATCH_BYTES",
    "GIT_ENV",
    "PROTECTED_NAMES",
    "REPORTER_SOURCE",
    "RUNNER",
    "SHADOWING_ROOTS",
    "REWARD_MODES",
    "SWEReport",
    "apply_patch_commands",
    "filter_patch",
    "grade_patch",
    "is_test_path",
    "judge",
]

REWARD_MODES = ("resolved", "f2p_fraction")
"""``resolved``: 1 when SWE-bench's rule holds; ``f2p_fraction``: the fraction of FAIL_TO_PASS tests
that pass, when every PASS_TO_PASS test passes (else 0) - named partial credit."""

DEFAULT_MAX_PATCH_BYTES = 1 << 20
"""Largest patch graded (1 MiB); a bigger one scores 0 unapplied."""

PROTECTED_NAMES = ("conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py",
                   "usercustomize.py", "*.pth", ".pytest_cache")
"""File names (any directory) whose changes the grader drops: they decide how tests run."""

SHADOWING_ROOTS = ("pytest.py", "pytest", "_pytest", "pluggy.py", "pluggy", "py.py", "iniconfig.py", "iniconfig")
"""Top-level names in the repository that would stand in for the test runner itself: changes under them are dropped
(the runner is also imported before the repository is on ``sys.path``)."""

RUNNER = ("python3 -c 'import sys; sys.path[:] = [p for p in sys.path if p not in (\"\", \".\")]; import pytest; "
          "raise SystemExit(pytest.main())'")
"""The default test runner: ``python3 -m pytest`` except that pytest and its plugins are imported before the
repository is importable (the reporter plugin then puts the working directory first on ``sys.path``, as ``-m``
would), so a module of the repository cannot stand in for pytest."""

GIT_ENV = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*",
           "GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": "/dev/null",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@localhost",
           "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@localhost"}
"""Environment of git inside a sandbox (the repository is owned by another user than the tools')."""

REPORTER_SOURCE = '''
import json, os, sys
_path = os.environ.pop("AGENT_GYM_SWE_RESULTS", "")
if os.environ.pop("AGENT_GYM_SWE_CWD_FIRST", "") and os.getcwd() not in sys.path:
    sys.path.insert(0, os.getcwd())
_results, _errors, _messages = {}, [], {}

def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(report.longrepr or "")
    return text.strip().splitlines()[0][:300] if text.strip() else ""

def pytest_runtest_logreport(report):
    when, nodeid = report.when, report.nodeid
    if when == "call":
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "failed"
        else:
            outcome = "passed" if report.passed else ("skipped" if report.skipped else "failed")
        if _results.get(nodeid) != "error":
            _results[nodeid] = outcome
        if report.failed:
            _messages[nodeid] = _message(report)
    elif report.failed:
        _results[nodeid] = "error"
        _messages[nodeid] = _message(report)
    elif report.skipped and when == "setup":
        _results[nodeid] = "xfailed" if hasattr(report, "wasxfail") else "skipped"

def pytest_collectreport(report):
    if report.failed:
        _errors.append(report.nodeid)

def pytest_sessionfinish(session, exitstatus):
    if _path:
        with open(_path, "w") as f:
            json.dump({"results": _results, "messages": _messages, "collect_errors": _errors,
                       "exitstatus": int(exitstatus), "collected": session.testscollected}, f)
'''
"""The pytest plugin the grader loads (``-p agent_gym_swe_report``): each test's outcome to a file."""


@dataclass
class SWEReport:
    """What grading said about one patch.

    Attributes:
        outcome: ``"graded"``, ``"invalid"`` (the patch broke the test run: scores 0) or ``"error"``
            (the task or the machine failed: not a verdict).
        apply: How the patch went in: ``method`` (``"git apply"``, ``"git apply --3way"``,
            ``"patch --fuzz"``, ``"empty"``, ``"failed"``, ``"too_large"``), ``dropped_files``, ``error``.
        results: ``{test: outcome}``.
        fail_to_pass / pass_to_pass: ``{test: outcome}`` of the task's lists (``missing`` if not run).
        reason: Why it is not resolved (empty when it is).
        exit_code: The test command's exit code.
        seconds: Wall time of the grading.
        test_output: The tail of the test command's output.
    """

    outcome: str
    apply: dict[str, Any] = field(default_factory=dict)
    results: dict[str, str] = field(default_factory=dict)
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    exit_code: int | None = None
    seconds: float = 0.0
    test_output: str = ""

    @property
    def f2p_fraction(self) -> float:
        """Fraction of FAIL_TO_PASS tests that passed (1 when there are none)."""
        values = list(self.fail_to_pass.values())
        return sum(v == "passed" for v in values) / len(values) if values else 1.0

    @property
    def p2p_fraction(self) -> float:
        """Fraction of PASS_TO_PASS tests that passed (or failed as expected; 1 when there are none)."""
        values = list(self.pass_to_pass.values())
        return sum(v in ("passed", "xfailed") for v in values) / len(values) if values else 1.0

    @property
    def resolved(self) -> bool:
        """SWE-bench's rule (False unless graded)."""
        return (self.outcome == "graded" and bool(self.fail_to_pass)
                and self.f2p_fraction == 1.0 and self.p2p_fraction == 1.0)

    def score(self, mode: str = "resolved") -> float | None:
        """The reward of ``mode`` (one of :data:`REWARD_MODES`); None for an ``error`` outcome."""
        if mode not in REWARD_MODES:
            raise ValueError(f"reward_mode: expected one of {REWARD_MODES}, got {mode!r}")
        if self.outcome == "error":
            return None
        if self.outcome != "graded":
            return 0.0
        if mode == "resolved":
            return 1.0 if self.resolved else 0.0
        return self.f2p_fraction if self.p2p_fraction == 1.0 else 0.0

    def as_info(self) -> dict[str, Any]:
        """Plain data for ``info["swe"]``."""
        return {"outcome": self.outcome, "resolved": self.resolved, "reason": self.reason, "apply": dict(self.apply),
                "f2p_fraction": self.f2p_fraction, "p2p_fraction": self.p2p_fraction,
                "fail_to_pass": dict(self.fail_to_pass), "pass_to_pass": dict(self.pass_to_pass),
                "results": dict(self.results), "exit_code": self.exit_code, "seconds": round(self.seconds, 3)}


def is_test_path(path: str) -> bool:
    """True for a test file by name: ``test_*.py``, ``*_test.py``, or any file under ``tests/`` or ``test/``."""
    parts = path.split("/")
    name = parts[-1]
    return (fnmatch.fnmatch(name, "test_*.py") or fnmatch.fnmatch(name, "*_test.py")
            or any(p in ("tests", "test", "testing") for p in parts[:-1]))


def _protected(path: str, extra: Sequence[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    if any(fnmatch.fnmatch(name, pattern) for pattern in PROTECTED_NAMES) or path.split("/")[0] in SHADOWING_ROOTS:
        return True
    return is_test_path(path) or any(fnmatch.fnmatch(path, pattern) for pattern in extra)


def filter_patch(patch: str, test_files: Sequence[str] = (), protected: Sequence[str] = ()) -> tuple[str, list[str]]:
    """``(kept patch, dropped paths)``: the patch without the files the grader protects (module docstring)."""
    kept: list[str] = []
    dropped: list[str] = []
    hidden = set(test_files)
    for path, text in split_patch(patch):
        if path in hidden or _protected(path, protected):
            dropped.append(path)
        else:
            kept.append(text)
    return "".join(kept), dropped


def apply_patch_commands(path: str) -> list[tuple[str, str]]:
    """``[(method, shell command)]`` tried in order to apply the patch file ``path`` in the repository."""
    q = shlex.quote(path)
    return [("git apply", f"git apply --binary --whitespace=nowarn {q}"),
            ("git apply --3way", f"git apply --binary --3way --whitespace=nowarn {q}"),
            ("patch --fuzz", f"patch -p1 --fuzz=3 --batch --forward --no-backup-if-mismatch -i {q}")]


def judge(results: Mapping[str, str], fail_to_pass: Sequence[str],
          pass_to_pass: Sequence[str]) -> tuple[dict[str, str], dict[str, str], str]:
    """``(F2P outcomes, P2P outcomes, reason)`` under SWE-bench's rule (reason empty when resolved)."""
    f2p = {name: results.get(name, "missing") for name in fail_to_pass}
    p2p = {name: results.get(name, "missing") for name in pass_to_pass}
    bad_f2p = [f"{k} ({v})" for k, v in f2p.items() if v != "passed"]
    bad_p2p = [f"{k} ({v})" for k, v in p2p.items() if v not in ("passed", "xfailed")]
    reasons = []
    if not f2p:
        reasons.append("the task has no FAIL_TO_PASS test")
    if bad_f2p:
        reasons.append(f"{len(bad_f2p)}/{len(f2p)} FAIL_TO_PASS tests did not pass: {', '.join(bad_f2p[:5])}")
    if bad_p2p:
        reasons.append(f"{len(bad_p2p)}/{len(p2p)} PASS_TO_PASS tests broke: {', '.join(bad_p2p[:5])}")
    return f2p, p2p, "; ".join(reasons)


def grade_patch(
    task: Mapping[str, Any],
    snapshot: Snapshot,
    patch: str,
    sandbox_factory: Callable[[], Any],
    *,
    timeout: float = 120.0,
    max_patch_bytes: int = DEFAULT_MAX_PATCH_BYTES,
) -> SWEReport:
    """Grade ``patch`` for ``task`` in a fresh sandbox from ``sandbox_factory()`` (see the module docstring).

    Never raises for what the patch does; a sandbox that fails gives ``outcome == "error"``.
    """
    started = time.monotonic()
    size = len(patch.encode("utf-8", "surrogateescape"))
    if size > max_patch_bytes:
        return SWEReport("invalid", apply={"method": "too_large", "dropped_files": [], "bytes": size},
                         reason=f"the patch has {size} bytes, over the limit of {max_patch_bytes}",
                         seconds=time.monotonic() - started)
    test_patch = str(task.get("test_patch") or "")
    kept, dropped = filter_patch(patch, patch_files(test_patch), list(task.get("protected_files") or ()))
    try:
        sandbox = sandbox_factory()
    except SandboxError as exc:
        return SWEReport("error", reason=f"the grading sandbox did not start: {exc}")
    try:
        report = _grade_in(sandbox, task, snapshot, kept, dropped, test_patch, timeout)
    except SandboxError as exc:
        report = SWEReport("error", reason=f"the grading sandbox failed: {exc}")
    finally:
        sandbox.close()
    report.seconds = time.monotonic() - started
    return report


def _grade_in(sandbox: Any, task: Mapping[str, Any], snapshot: Snapshot, kept: str, dropped: list[str],
              test_patch: str, timeout: float) -> SWEReport:
    work = f"/tmp/agent_gym_swe_{secrets.token_hex(6)}"
    sandbox.write_file(f"{work}/base.tar", snapshot.archive)
    result = sandbox.exec(f"tar -xf {work}/base.tar -C /app && rm -f {work}/base.tar", timeout=120, env=GIT_ENV)
    if not result.ok:
        return SWEReport("error", reason=f"the base repository did not extract: {result.output[-300:]}")
    apply: dict[str, Any] = {"method": "empty", "dropped_files": dropped}
    if kept.strip():
        sandbox.write_file(f"{work}/agent.patch", kept)
        errors = []
        for method, command in apply_patch_commands(f"{work}/agent.patch"):
            result = sandbox.exec(command, timeout=60, env=GIT_ENV)
            if result.ok:
                apply["method"] = method
                break
            errors.append(f"{method}: {result.output.strip()[-300:]}")
            sandbox.exec("git reset -q --hard && git clean -fdxq", timeout=60, env=GIT_ENV)
        else:
            apply.update(method="failed", error="\n".join(errors))
            return SWEReport("invalid", apply=apply, reason="the patch does not apply to the base commit")
    if test_patch.strip():
        sandbox.write_file(f"{work}/test.patch", test_patch)
        result = sandbox.exec(f"git apply --binary --whitespace=nowarn {work}/test.patch", timeout=60, env=GIT_ENV)
        if not result.ok:
            return SWEReport("error", apply=apply, reason=f"the test patch does not apply: {result.output[-300:]}")
    sandbox.write_file(f"{work}/plugin/agent_gym_swe_report.py", REPORTER_SOURCE)
    results_path = f"{work}/results.json"
    env = {**GIT_ENV, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": f"{work}/plugin",
           "PYTEST_ADDOPTS": "-p agent_gym_swe_report -p no:cacheprovider", "AGENT_GYM_SWE_RESULTS": results_path,
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp",
           **{str(k): str(v) for k, v in dict(task.get("test_env") or {}).items()}}
    command = str(task.get("test_command") or "")
    if not command:
        targets = " ".join(shlex.quote(t) for t in task.get("test_targets") or ())
        command = f"{RUNNER} -q -rA {targets}".strip()
        env["AGENT_GYM_SWE_CWD_FIRST"] = "1"
    run = sandbox.exec(command, timeout=timeout, env=env)
    tail = run.output[-4000:]
    applied = apply["method"] != "empty"
    blame = "the patch" if applied else "the task"

    def bad(reason: str) -> SWEReport:
        return SWEReport("invalid" if applied else "error", apply=apply, reason=f"{reason} ({blame})",
                         exit_code=run.exit_code, test_output=tail)

    if run.timed_out:
        return bad(f"the tests ran past the grading time limit of {timeout:g} s")
    results: dict[str, str] = {}
    collected = None
    try:
        data = json.loads(sandbox.read_file(results_path).decode("utf-8", "replace"))
        results = {str(k): str(v) for k, v in dict(data.get("results") or {}).items()}
        collected = int(data.get("collected") or 0)
        if data.get("collect_errors") and not results:
            return bad(f"test collection failed: {', '.join(map(str, data['collect_errors'][:5]))}")
    except (SandboxError, ValueError, TypeError, AttributeError):
        if task.get("parser_name") and task.get("parser_name") != "pytest-reporter":
            try:
                results = get_parser(str(task["parser_name"]))(run.output)
            except TestOutputError as exc:
                return bad(f"the test output has no results: {exc}")
        else:
            return bad(f"the test run wrote no results (exit code {run.exit_code})")
    if not results or collected == 0:
        return bad("the test run collected no tests")
    f2p, p2p, reason = judge(results, list(task.get("FAIL_TO_PASS") or ()), list(task.get("PASS_TO_PASS") or ()))
    return SWEReport("graded", apply=apply, results=results, fail_to_pass=f2p, pass_to_pass=p2p, reason=reason,
                     exit_code=run.exit_code, test_output=tail)
