"""Whose failure is a test run that did not grade: the task's initial state decides.

A run that ends without a verdict (the runner timed out, could not start, printed nothing
readable, or never reported on the grader's channel) is either the infrastructure's failure or
the agent's doing: the agent's programs can kill the runner, hang it, or fill what it needs. The
grader tells them apart by what the same runner does on the task's **initial state**: a fresh
sandbox of the task that nobody acted in (:class:`Baseline`, computed once per task and process,
and only when a run needs it). Rules of :func:`judge`:

* A run that graded (pytest's authenticated report on the channel, or, without a channel, the
  output read by the task's parser) is the verdict; no baseline is needed.
* If the runner grades the initial state, a run that did not grade after the agent acted is the
  agent's doing: outcome ``invalid``, reward 0, trained on. So is a run without the channel's
  report where the initial state has one (the agent's code killed or replaced the runner), and a
  timeout where the initial state took at most half the time limit.
* If the runner does not grade the initial state either, nobody's work can be graded: the run's
  outcome stands (``timeout``, ``could_not_run``, ...), and the episode ends ENV_ERROR (masked).
* A sandbox that died during the run (nobody can tell why) or an initial state that could not be
  checked leaves the run ungraded, except for an authenticated report of pytest.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_gym.envs.terminal.grading import TestReport
from agent_gym.envs.terminal.runner import TestRun

__all__ = ["BASELINES", "TASK_KEYS", "Baseline", "BaselineCache", "baseline_key", "judge"]

TASK_KEYS = ("id", "format", "test_files", "test_command", "parser_name", "test_timeout", "setup", "env", "workdir",
             "image", "base_image", "compose", "memory_mb")
"""The fields of a task that decide what its runner does on the initial state (the cache key)."""


@dataclass(frozen=True)
class Baseline:
    """What the task's test runner gives on the task's initial state.

    Attributes:
        via: ``"channel"`` (pytest's authenticated report, one session), ``"text"`` (the output, read by
            the task's parser) or ``"none"`` (the runner does not grade the initial state).
        seconds: How long the test command ran.
        report: The run's own report.
    """

    via: str
    seconds: float
    report: TestReport

    @classmethod
    def of(cls, run: TestRun) -> Baseline:
        """The baseline a run on the initial state gives."""
        verdict = run.verdict
        channel = run.channel
        if verdict is not None and verdict.graded and channel is not None and channel.unauthenticated == 0:
            return cls("channel", run.seconds, verdict)
        if not run.error and not run.timed_out and run.text.graded:
            return cls("text", run.seconds, run.text)
        if verdict is not None and verdict.graded:
            return cls("channel", run.seconds, verdict)
        return cls("none", run.seconds, run.report)


class BaselineCache:
    """Baselines by :func:`baseline_key`, computed once (thread-safe; a failed computation is not kept)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Baseline] = {}
        self.computed = 0
        """How many baselines were computed (probes run) in this process."""

    def get(self, key: str, compute: Callable[[], Baseline | None]) -> Baseline | None:
        """The baseline under ``key``, computed with ``compute`` the first time (None: it could not be)."""
        with self._lock:
            hit = self._items.get(key)
        if hit is not None:
            return hit
        value = compute()
        with self._lock:
            self.computed += 1
            if value is not None:
                value = self._items.setdefault(key, value)
        return value

    def clear(self) -> None:
        """Forget every baseline."""
        with self._lock:
            self._items.clear()


BASELINES = BaselineCache()
"""The process's baselines (Terminal-v0 probes a task's initial state at most once per process)."""


def baseline_key(task: Mapping[str, Any], *context: Any) -> str:
    """A key for ``task``'s baseline: its :data:`TASK_KEYS` and ``context`` (the backend, limits, test variables)."""
    parts = repr([(k, task.get(k)) for k in TASK_KEYS]) + repr(context)
    return hashlib.sha256(parts.encode("utf-8", "surrogatepass")).hexdigest()


def judge(run: TestRun, baseline: Callable[[], Baseline | None], timeout: float) -> TestReport:
    """The report that grades a run after the agent acted (see the module docstring).

    Args:
        run: The run.
        baseline: Gives the task's baseline (called only when the run did not grade by itself).
        timeout: The task's test time limit, seconds.
    """
    verdict = run.verdict
    verdict_ok = verdict is not None and verdict.graded
    if run.channel is not None:
        if verdict_ok and run.channel.unauthenticated == 0:
            assert verdict is not None
            return verdict
    elif not run.error and run.text.graded:
        return run.text
    if not run.sandbox_alive:
        return _ungraded(run, "the sandbox stopped during the test run")
    base = baseline()
    if verdict_ok and (base is None or base.via != "text" or not run.text.graded):
        assert verdict is not None
        return verdict  # a second pytest session the initial state does not have is not the task's
    if base is None:
        return _ungraded(run, "the task's initial state could not be checked")
    if base.via == "text" and not run.error and not run.timed_out and run.text.graded:
        return run.text
    if base.via == "none":
        report = run.report
        outcome = report.outcome if not report.graded else base.report.outcome
        reason = (f"{report.reason or report.outcome}; the runner does not grade the task's initial state either "
                  f"({base.report.reason or base.report.outcome})")
        return TestReport(outcome, reason=reason, exit_code=run.exit_code)
    if run.timed_out and base.seconds > timeout / 2:
        return TestReport("timeout", exit_code=run.exit_code,
                          reason=f"the tests ran past their time limit of {timeout:g} s; on the task's initial state "
                                 f"they took {base.seconds:.1f} s, too close to the limit to blame the agent")
    what = run.report.reason or run.report.outcome
    source = "pytest's report on the grader's channel" if base.via == "channel" else "its output"
    return TestReport("invalid", exit_code=run.exit_code,
                      reason=f"the test run did not grade after the agent acted ({what}), while on the task's "
                             f"initial state it graded ({source}, {base.seconds:.1f} s): the agent broke it")


def _ungraded(run: TestRun, why: str) -> TestReport:
    report = run.report
    if report.graded:
        return TestReport("could_not_run", reason=why, exit_code=run.exit_code)
    return TestReport(report.outcome, reason=f"{report.reason or report.outcome}; {why}", exit_code=run.exit_code)
