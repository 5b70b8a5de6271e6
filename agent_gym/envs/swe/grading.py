"""Grading a SWE task: the agent's patch applied to a clean base, the hidden tests run, SWE-bench's rule.

:func:`grade_patch` grades one patch in fresh sandboxes (never the one the agent used):

1. **The base run** (:mod:`agent_gym.envs.swe.baseline`, once per task and process): the tests on the
   base with the hidden tests applied. A base on which they cannot run makes the patch's grading
   ``outcome == "error"`` (not a verdict: the episode ends ENV_ERROR and is masked), whatever the patch.
2. **The policy** (:mod:`agent_gym.envs.swe.policy`): tests and runner configuration are dropped from
   the patch (``dropped_files``); library code naming the test runner or the interpreter's
   introspection, and modules that shadow others, are rejected (score 0, ``apply["policy"]``).
   A patch over ``max_patch_bytes`` is not applied at all.
3. **The patched tree** (:func:`agent_gym.envs.swe.runs.prepare`): the base extracted, the patch
   applied with ``git apply``, then ``git apply --3way``, then ``patch -p1 --fuzz=3``; the tree's
   changes checked against the policy (compiled files, start-up hooks, attribute files, links, files the
   diff does not show, shadowing); the hidden tests applied (a patch that keeps them from applying,
   when they apply to the base, scores 0).
4. **The run** (:func:`agent_gym.envs.swe.runs.run_tests`): pytest in a guarded child process with the
   base's configuration file and root directory, its verdict authenticated by a key written for that
   run (:mod:`agent_gym.envs.swe.scripts.guarded_pytest`); or the task's own ``test_command``, whose
   output its ``parser_name`` reads.

Outcomes per test: ``passed``, ``failed``, ``error`` (setup, teardown or collection failed),
``skipped``, ``xfailed`` and ``missing`` (never ran). SWE-bench's rule: the task is **resolved** when
every ``FAIL_TO_PASS`` test and every ``PASS_TO_PASS`` test passed (an expected failure counts for
``PASS_TO_PASS`` only); missing, skipped and errored ``FAIL_TO_PASS`` tests fail; ``PASS_TO_PASS``
tests that fail on the base are not counted. A patched run that collected no test, wrote no verdict,
ran out of time, or whose guard saw the runner tampered with, is **invalid** (score 0): the base run
showed that the tests run without the patch.
"""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.envs.swe.baseline import BaseRun, base_key, base_run_for
from agent_gym.envs.swe.policy import (
    CONFIG_NAMES,
    added_files,
    filter_patch,
    is_test_path,
    patch_paths,
    shadowing_violations,
    static_violations,
    test_roots,
    tree_violations,
)
from agent_gym.envs.swe.repo import Snapshot, patch_files
from agent_gym.envs.swe.runs import TestRun, Workspace, host_python, prepare, run_tests
from agent_gym.envs.terminal.grading import get_parser
from agent_gym.errors import SandboxError, TestOutputError

__all__ = [
    "DEFAULT_MAX_PATCH_BYTES",
    "REPORTER_SOURCE",
    "REWARD_MODES",
    "SWEReport",
    "base_tree",
    "grade_patch",
    "judge",
    "run_base",
]

REWARD_MODES = ("resolved", "f2p_fraction")
"""``resolved``: 1 when SWE-bench's rule holds; ``f2p_fraction``: the fraction of FAIL_TO_PASS tests
that pass, when every PASS_TO_PASS test passes (else 0) - named partial credit."""

DEFAULT_MAX_PATCH_BYTES = 1 << 20
"""Largest patch graded (1 MiB); a bigger one scores 0 unapplied."""

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
"""A pytest plugin writing each test's outcome to a file (the task generator's runner; grading uses the guarded run)."""


@dataclass
class SWEReport:
    """What grading said about one patch.

    Attributes:
        outcome: ``"graded"``, ``"invalid"`` (the patch broke the test run or the policy: scores 0) or
            ``"error"`` (the task or the machine failed: not a verdict).
        apply: How the patch went in: ``method`` (``"git apply"``, ``"git apply --3way"``,
            ``"patch --fuzz"``, ``"empty"``, ``"failed"``, ``"too_large"``, ``"rejected"``),
            ``dropped_files``, ``policy`` (why it was rejected), ``error``.
        results: ``{test: outcome}``.
        fail_to_pass / pass_to_pass: ``{test: outcome}`` of the task's lists (``missing`` if not run).
        reason: Why it is not resolved (empty when it is).
        exit_code: The test command's exit code.
        seconds: Wall time of the grading.
        test_output: The tail of the test command's output.
        base: The base run: ``ok``, ``reason``, ``cached``, ``seconds``, ``p2p_failing_on_base``.
        violations: What the guard of the test run found (``[key, detail]``).
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
    base: dict[str, Any] = field(default_factory=dict)
    violations: list[list[str]] = field(default_factory=list)

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
                "results": dict(self.results), "exit_code": self.exit_code, "seconds": round(self.seconds, 3),
                "base": dict(self.base), "violations": [list(v) for v in self.violations]}


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


# --------------------------------------------------------------------------- the base tree


class BaseTree:
    """The files of a base repository (from its archive): paths and, on demand, texts."""

    def __init__(self, archive: bytes) -> None:
        self._tar = tarfile.open(fileobj=io.BytesIO(archive))
        self._members = {m.name.removeprefix("./"): m for m in self._tar.getmembers()
                         if m.isfile() and not m.name.removeprefix("./").startswith(".git/")}
        self.paths = frozenset(self._members)
        self._lock = threading.Lock()

    def text(self, path: str) -> str | None:
        """The text of ``path`` in the base, or None when it has none."""
        member = self._members.get(path)
        if member is None:
            return None
        with self._lock:
            handle = self._tar.extractfile(member)
            data = handle.read() if handle is not None else b""
        return data.decode("utf-8", "replace")


_trees: OrderedDict[str, BaseTree] = OrderedDict()
_trees_lock = threading.Lock()


def base_tree(snapshot: Snapshot) -> BaseTree:
    """The :class:`BaseTree` of ``snapshot`` (the last 16 are kept)."""
    with _trees_lock:
        if snapshot.commit in _trees:
            _trees.move_to_end(snapshot.commit)
            return _trees[snapshot.commit]
    tree = BaseTree(snapshot.archive)
    with _trees_lock:
        _trees[snapshot.commit] = tree
        while len(_trees) > 16:
            _trees.popitem(last=False)
    return tree


def _protected(tree: BaseTree, task: Mapping[str, Any]) -> list[str]:
    """Files whose content the guarded run checks: hidden tests, targets, tests beside them, configuration."""
    hidden = set(patch_files(str(task.get("test_patch") or "")))
    targets = [t.split("::")[0] for t in task.get("test_targets") or ()]
    dirs = {t.rsplit("/", 1)[0] if "/" in t else "" for t in [*hidden, *targets]}
    tests = [p for p in tree.paths if is_test_path(p)]
    near = tests if len(tests) <= 500 else [p for p in tests if (p.rsplit("/", 1)[0] if "/" in p else "") in dirs]
    config = [p for p in tree.paths if p.rsplit("/", 1)[-1] in CONFIG_NAMES]
    return sorted(hidden | set(targets) | set(near) | set(config))


def _roots(tree: BaseTree, task: Mapping[str, Any]) -> list[str]:
    """The ``sys.path`` entries inside the repository when the tests run."""
    env = dict(task.get("test_env") or {})
    extra = [p.strip("/") for p in str(env.get("PYTHONPATH", "")).split(":") if p and not p.startswith("/")]
    return sorted({"", *extra, *test_roots(tree.paths)})


# --------------------------------------------------------------------------- runs


def _tail(run: TestRun) -> str:
    return run.output[-4000:]


def _results(task: Mapping[str, Any], run: TestRun) -> tuple[dict[str, str], dict[str, str], str]:
    """``(results, messages, why there are none)`` of a run."""
    if run.verdict is not None and run.verdict.get("parse"):
        try:
            return get_parser(str(task.get("parser_name") or "pytest"))(run.output), {}, ""
        except TestOutputError as exc:
            return {}, {}, f"the test output has no results: {exc}"
    if run.verdict is None:
        return {}, {}, f"the test run wrote no results ({run.note}; exit code {run.exit_code})"
    verdict = run.verdict
    results = {str(k): str(v) for k, v in dict(verdict.get("results") or {}).items()}
    messages = {str(k): str(v) for k, v in dict(verdict.get("messages") or {}).items()}
    if not verdict.get("complete"):
        return results, messages, f"the test run wrote no results (it did not finish; exit code {run.exit_code})"
    if verdict.get("collect_errors") and not results:
        return results, messages, f"test collection failed: {', '.join(map(str, verdict['collect_errors'][:5]))}"
    if not results or verdict.get("collected") == 0:
        return results, messages, "the test run collected no tests"
    return results, messages, ""


def run_base(task: Mapping[str, Any], snapshot: Snapshot, sandbox_factory: Callable[[], Any],
             timeout: float = 120.0) -> BaseRun:
    """The tests on the unpatched base with the hidden tests applied (see :mod:`~agent_gym.envs.swe.baseline`)."""
    started = time.monotonic()
    tree = base_tree(snapshot)
    try:
        sandbox = sandbox_factory()
    except SandboxError as exc:
        return BaseRun(False, f"the grading sandbox did not start: {exc}", machine_error=True)
    try:
        work = Workspace(sandbox)
        prepared = prepare(work, snapshot.archive, snapshot.commit, "", str(task.get("test_patch") or ""), names=True)
        names = prepared.names or {}
        base = BaseRun(False, stdlib=set(names.get("stdlib") or ()), installed=set(names.get("installed") or ()),
                       python=names.get("python"))
        if not prepared.extracted:
            base.reason = prepared.error or "the base repository did not extract"
        elif prepared.test_patch == "failed":
            base.reason = f"the hidden tests do not apply to the base: {prepared.test_patch_error}"
        else:
            run = run_tests(work, task, timeout, mode="observe", protected=_protected(tree, task))
            base.exit_code, base.test_output = run.exit_code, _tail(run)
            results, messages, problem = _results(task, run)
            base.results, base.messages = results, messages
            verdict = run.verdict or {}
            base.config = {"ini": verdict.get("ini"), "rootdir": verdict.get("rootdir")}
            base.tolerated = sorted({str(v[0]) for v in verdict.get("violations") or ()}
                                    | {f"changed@{p}" for p in verdict.get("changed_files") or ()})
            missing = [t for t in task.get("FAIL_TO_PASS") or () if t not in results]
            if run.timed_out:
                base.reason = f"the tests ran past the grading time limit of {timeout:g} s"
            elif problem:
                base.reason = problem
            elif missing:
                base.reason = f"FAIL_TO_PASS tests are not collected: {', '.join(missing[:5])}"
            else:
                base.ok = True
    except SandboxError as exc:
        base = BaseRun(False, f"the grading sandbox failed: {exc}", machine_error=True)
    finally:
        sandbox.close()
    base.seconds = time.monotonic() - started
    return base


def _machine_ok(sandbox_factory: Callable[[], Any]) -> bool:
    """Whether a fresh grading sandbox starts and runs a command (the machine works)."""
    try:
        sandbox = sandbox_factory()
    except SandboxError:
        return False
    try:
        return bool(sandbox.exec("true", timeout=30).ok)
    except SandboxError:
        return False
    finally:
        sandbox.close()


def grade_patch(
    task: Mapping[str, Any],
    snapshot: Snapshot,
    patch: str,
    sandbox_factory: Callable[[], Any],
    *,
    timeout: float = 120.0,
    max_patch_bytes: int = DEFAULT_MAX_PATCH_BYTES,
    context: str = "",
) -> SWEReport:
    """Grade ``patch`` for ``task`` in fresh sandboxes from ``sandbox_factory()`` (see the module docstring).

    ``context`` names what else shapes the test run (the image, the limits) in the key of the cached
    base run. Never raises for what the patch does; a sandbox that fails before the patch's code
    runs, or a base on which the tests cannot run, gives ``outcome == "error"``.
    """
    started = time.monotonic()
    report = _grade(task, snapshot, patch, sandbox_factory, timeout, max_patch_bytes, context)
    report.seconds = time.monotonic() - started
    return report


def _grade(task: Mapping[str, Any], snapshot: Snapshot, patch: str, sandbox_factory: Callable[[], Any],
           timeout: float, max_patch_bytes: int, context: str) -> SWEReport:
    size = len(patch.encode("utf-8", "surrogateescape"))
    if size > max_patch_bytes:
        return SWEReport("invalid", apply={"method": "too_large", "dropped_files": [], "bytes": size},
                         reason=f"the patch has {size} bytes, over the limit of {max_patch_bytes}")
    test_patch = str(task.get("test_patch") or "")
    kept, dropped = filter_patch(patch, patch_files(test_patch), list(task.get("protected_files") or ()))
    key = base_key(task, snapshot.commit, f"{context}|{timeout}")
    base, cached = base_run_for(key, lambda: run_base(task, snapshot, sandbox_factory, timeout))
    summary = base.summary(cached)
    apply: dict[str, Any] = {"method": "empty", "dropped_files": dropped}
    if not base.ok:
        return SWEReport("error", apply=apply, base=summary, test_output=base.test_output, exit_code=base.exit_code,
                         reason=f"cannot grade: the tests do not run on the base ({base.reason})")
    p2p = list(task.get("PASS_TO_PASS") or ())
    summary["p2p_failing_on_base"] = [t for t in p2p if base.results.get(t) not in ("passed", "xfailed")]
    p2p = [t for t in p2p if t not in summary["p2p_failing_on_base"]]
    tree = base_tree(snapshot)
    roots = _roots(tree, task)
    shown, new_files, gone = patch_paths(kept)
    policy = static_violations(kept, tree.text) + shadowing_violations(
        new_files, tree.paths, gone, roots, base.stdlib, base.installed)
    if policy:
        apply.update(method="rejected", policy=policy)
        return SWEReport("invalid", apply=apply, base=summary,
                         reason=f"the patch breaks the grading policy: {'; '.join(policy[:3])}")
    if not kept.strip():
        f2p, p2p_out, reason = judge(base.results, list(task.get("FAIL_TO_PASS") or ()), p2p)
        return SWEReport("graded", apply=apply, results=dict(base.results), fail_to_pass=f2p, pass_to_pass=p2p_out,
                         reason=reason, exit_code=base.exit_code, test_output=base.test_output, base=summary)
    try:
        sandbox = sandbox_factory()
    except SandboxError as exc:
        return SWEReport("error", apply=apply, base=summary, reason=f"the grading sandbox did not start: {exc}")
    ran = False
    try:
        work = Workspace(sandbox)
        prepared = prepare(work, snapshot.archive, snapshot.commit, kept, test_patch)
        if not prepared.extracted:
            return SWEReport("error", apply=apply, base=summary, reason=prepared.error or "the base did not extract")
        if prepared.method == "failed":
            apply.update(method="failed", error="\n".join(prepared.errors))
            return SWEReport("invalid", apply=apply, base=summary, reason="the patch does not apply to the base commit")
        apply["method"] = prepared.method
        added, deleted = added_files(prepared.changes)
        policy = tree_violations(prepared.changes, shown) + shadowing_violations(
            added, tree.paths, deleted, roots, base.stdlib, base.installed)
        if prepared.error:
            policy.append(f"the tree could not be checked: {prepared.error}")
        if policy:
            apply.update(method="rejected", policy=policy)
            return SWEReport("invalid", apply=apply, base=summary,
                             reason=f"the patch breaks the grading policy: {'; '.join(policy[:3])}")
        if prepared.test_patch == "failed":
            return SWEReport("invalid", apply=apply, base=summary,
                             reason="the patch keeps the hidden tests from applying (they apply to the base): "
                                    f"{prepared.test_patch_error}")
        ran = True
        run = run_tests(work, task, timeout, tolerated=base.tolerated, pin=base.config,
                        protected=_protected(tree, task), compiled=base.python == host_python())
    except SandboxError as exc:
        if not ran or not _machine_ok(sandbox_factory):
            return SWEReport("error", apply=apply, base=summary, reason=f"the grading sandbox failed: {exc}")
        return SWEReport("invalid", apply=apply, base=summary,
                         reason=f"the grading sandbox failed while the patch's code ran (the patch): {exc}")
    finally:
        sandbox.close()
    return _verdict_report(task, run, apply, summary, base, p2p, timeout)


def _verdict_report(task: Mapping[str, Any], run: TestRun, apply: dict[str, Any], summary: dict[str, Any],
                    base: BaseRun, p2p: list[str], timeout: float) -> SWEReport:
    """The report of a patched run (the base ran the tests, so a broken run is the patch's)."""
    tail = _tail(run)
    verdict = run.verdict or {}
    tolerated = set(base.tolerated)
    violations = [[str(k), str(d)] for k, d in verdict.get("violations") or () if str(k) not in tolerated]
    violations += [[f"changed@{p}", f"{p} changed while the tests ran"] for p in verdict.get("changed_files") or ()
                   if f"changed@{p}" not in tolerated]
    violations += [["channel", str(p)] for p in verdict.get("channel_problems") or ()]

    def bad(reason: str) -> SWEReport:
        return SWEReport("invalid", apply=apply, reason=f"{reason} (the patch)", exit_code=run.exit_code,
                         test_output=tail, base=summary, violations=violations)

    if violations:
        return bad(f"the test run was tampered with: {'; '.join(d for _, d in violations[:3])}")
    if run.timed_out:
        return bad(f"the tests ran past the grading time limit of {timeout:g} s")
    results, _, problem = _results(task, run)
    if problem:
        return bad(problem)
    f2p, p2p_out, reason = judge(results, list(task.get("FAIL_TO_PASS") or ()), p2p)
    return SWEReport("graded", apply=apply, results=results, fail_to_pass=f2p, pass_to_pass=p2p_out, reason=reason,
                     exit_code=run.exit_code, test_output=tail, base=summary)
