"""Grading a terminal task's test run the way Terminal-Bench grades it.

A task names its parser (``parser_name`` in ``task.yaml``, ``pytest`` by default). A parser
turns the test run's output into ``{test name: "passed" | "failed"}`` or raises
:class:`~agent_gym.errors.TestOutputError` when the output holds no results it can read.
Shipped parsers (more with :func:`register_parser`):

* ``pytest``: the ``short test summary info`` section of ``pytest -rA``, read line by line:
  a line that starts with ``PASSED``, ``FAILED``, ``ERROR``, ``SKIPPED``, ``XFAIL`` or
  ``XPASS`` followed by a test id is one result (``PASSED``, ``SKIPPED`` and ``XFAIL`` pass;
  ``FAILED``, ``ERROR`` and ``XPASS`` fail); other lines are ignored. Terminal-Bench keys a
  result by the part of the test id after the last ``::``; this parser keys it by the whole id.
  A test listed more than once fails if any of its lines fails (Terminal-Bench lets the last
  line win, so passing lines printed after the summary would overrule it). Where the sandbox has
  a private channel, Terminal-v0 reads pytest's results from it instead of from this text
  (:mod:`~agent_gym.envs.terminal.verdict`).
* ``swebench``: the text between ``SWEBench results starts here`` and ``SWEBench results ends
  here`` is ``PASSED`` (one test ``tests`` passes) or anything else (it fails).

:func:`grade_test_run` gives a :class:`TestReport`. Its ``outcome`` says whether the run
graded the work at all: ``"graded"``, or ``"timeout"`` (the run passed its time limit),
``"could_not_run"`` (the runner is missing or failed before any test: no results and exit
code 126/127 or a missing module), ``"parse_error"`` (no results the parser can read),
``"no_tests"`` (a readable summary with no test in it) or ``"invalid"`` (the run failed in one of
those ways after the agent acted, while on the task's initial state it graded: the agent broke
the runner, which scores 0; see :mod:`~agent_gym.envs.terminal.baseline`). A graded or invalid run
is a verdict on the work: Terminal-Bench counts the task resolved when every test passed, which
:meth:`TestReport.score` gives by default (``mode="resolved"``); ``mode="fraction"`` gives the
fraction of tests that passed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent_gym.errors import TestOutputError

__all__ = [
    "OUTCOMES",
    "PARSERS",
    "REWARD_MODES",
    "SCORED_OUTCOMES",
    "TestReport",
    "get_parser",
    "grade_test_run",
    "parse_pytest",
    "parse_swebench",
    "register_parser",
]

OUTCOMES = ("graded", "timeout", "could_not_run", "parse_error", "no_tests", "invalid")
"""Outcomes of a test run: ``graded`` and ``invalid`` (scores 0) are verdicts on the work; the others mean
that the work was not graded."""

SCORED_OUTCOMES = ("graded", "invalid")
"""The outcomes that are a verdict on the work (see :attr:`TestReport.scored`)."""

REWARD_MODES = ("resolved", "fraction")
"""``resolved``: 1 when every test passed (Terminal-Bench's verdict), else 0; ``fraction``: passed / total."""

_PYTEST_SUMMARY = re.compile(r"=+\s*short test summary info\s*=+", re.IGNORECASE)
_PYTEST_STATUS = {"PASSED": "passed", "SKIPPED": "passed", "XFAIL": "passed",
                  "FAILED": "failed", "ERROR": "failed", "XPASS": "failed"}
_SWEBENCH_START = "SWEBench results starts here"
_SWEBENCH_END = "SWEBench results ends here"


def parse_pytest(output: str) -> dict[str, str]:
    """Results of the ``short test summary info`` section of ``pytest -rA`` output (see the module docstring).

    Raises:
        TestOutputError: If the output has no such section.
    """
    parts = _PYTEST_SUMMARY.split(output, maxsplit=1)
    if len(parts) < 2:
        raise TestOutputError("no 'short test summary info' section in the test output")
    results: dict[str, str] = {}
    for line in parts[1].splitlines():
        words = line.strip().split(maxsplit=1)
        if len(words) < 2 or words[0] not in _PYTEST_STATUS:
            continue
        name = words[1].split(" - ", 1)[0].strip()
        if not name or name.startswith("="):
            continue
        if results.get(name) != "failed":  # a test that failed stays failed, whatever follows
            results[name] = _PYTEST_STATUS[words[0]]
    return results


def parse_swebench(output: str) -> dict[str, str]:
    """``{"tests": "passed"}`` when the marked block says ``PASSED``, else ``{"tests": "failed"}``.

    Raises:
        TestOutputError: If either marker is missing.
    """
    if _SWEBENCH_START not in output or _SWEBENCH_END not in output:
        raise TestOutputError("no 'SWEBench results starts here' ... 'ends here' block in the test output")
    block = output.split(_SWEBENCH_START, 1)[1].rsplit(_SWEBENCH_END, 1)[0].strip()
    return {"tests": "passed" if block == "PASSED" else "failed"}


PARSERS: dict[str, Callable[[str], dict[str, str]]] = {"pytest": parse_pytest, "swebench": parse_swebench}
"""Test-output parsers by ``parser_name`` (see :func:`register_parser`)."""


def register_parser(name: str, parser: Callable[[str], dict[str, str]]) -> None:
    """Add (or replace) the parser for ``parser_name: name``.

    Args:
        name: The name tasks give in ``parser_name``.
        parser: ``output -> {test name: "passed" | "failed"}``; raises
            :class:`~agent_gym.errors.TestOutputError` when the output holds no results.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: expected a non-empty str, got {name!r}")
    if not callable(parser):
        raise TypeError(f"parser: expected a callable, got {type(parser).__name__}")
    PARSERS[name] = parser


def get_parser(name: str) -> Callable[[str], dict[str, str]]:
    """The parser registered as ``name``.

    Raises:
        ValueError: For an unknown name (the message lists the known ones).
    """
    try:
        return PARSERS[name]
    except KeyError:
        raise ValueError(f"parser_name: expected one of {sorted(PARSERS)}, got {name!r} "
                         "(add one with agent_gym.envs.terminal.grading.register_parser)") from None


@dataclass
class TestReport:
    """What one test run says about the work.

    Attributes:
        outcome: One of :data:`OUTCOMES`.
        results: ``{test name: "passed" | "failed"}`` (empty unless graded).
        reason: Why the run was not graded (empty when graded).
        exit_code: The test command's exit code.
        value: A reward the verifier computed itself (Harbor's ``reward.txt``), the
            ``fraction`` score when set.
    """

    __test__ = False  # not a pytest test class

    outcome: str
    results: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    exit_code: int | None = None
    value: float | None = None

    @property
    def graded(self) -> bool:
        """True when the runner read the tests' results."""
        return self.outcome == "graded"

    @property
    def scored(self) -> bool:
        """True when the run is a verdict on the work: graded, or invalid (the agent broke the runner: 0)."""
        return self.outcome in SCORED_OUTCOMES

    @property
    def passed(self) -> int:
        """Tests that passed."""
        return sum(status == "passed" for status in self.results.values())

    @property
    def total(self) -> int:
        """Tests with a result."""
        return len(self.results)

    @property
    def resolved(self) -> bool | None:
        """Terminal-Bench's verdict: every test passed (False when invalid, None when the run was not graded)."""
        if not self.scored:
            return None
        return self.graded and self.total > 0 and self.passed == self.total

    def score(self, mode: str = "resolved") -> float | None:
        """The reward in [0, 1] for ``mode`` (one of :data:`REWARD_MODES`): 0 when invalid, None when not graded."""
        if mode not in REWARD_MODES:
            raise ValueError(f"mode: expected one of {REWARD_MODES}, got {mode!r}")
        if not self.scored:
            return None
        if not self.graded:
            return 0.0
        if mode == "resolved":
            return 1.0 if self.resolved else 0.0
        if self.value is not None:
            return self.value
        return self.passed / self.total if self.total else 0.0

    def as_info(self) -> dict[str, Any]:
        """The report as plain data for ``info["tests"]``."""
        return {"outcome": self.outcome, "passed": self.passed, "total": self.total, "resolved": self.resolved,
                "reason": self.reason, "exit_code": self.exit_code, "results": dict(self.results)}


_MISSING_RUNNER = re.compile(r"No module named|command not found|: not found|No such file or directory|"
                             r"cannot execute", re.IGNORECASE)


def grade_test_run(output: str, exit_code: int | None, timed_out: bool, parser_name: str = "pytest") -> TestReport:
    """Grade one test run's output with the task's parser (see the module docstring)."""
    if timed_out:
        return TestReport("timeout", reason="the tests ran past their time limit", exit_code=exit_code)
    parser = get_parser(parser_name)
    try:
        results = parser(output)
    except TestOutputError as exc:
        tail = output.strip().splitlines()[-1:] if output.strip() else []
        missing = exit_code in (126, 127) or bool(_MISSING_RUNNER.search("\n".join(output.splitlines()[-20:])))
        outcome = "could_not_run" if missing else "parse_error"
        detail = f"{exc}; exit code {exit_code}" + (f"; last line: {tail[0][:200]!r}" if tail else "")
        return TestReport(outcome, reason=detail, exit_code=exit_code)
    if not results:
        return TestReport("no_tests", reason=f"the {parser_name} output lists no test", exit_code=exit_code)
    return TestReport("graded", results=results, exit_code=exit_code)
