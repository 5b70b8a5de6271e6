"""Patches that try to score without fixing the bug, one per attack class (shared by the attack tests).

Every patch here leaves the bug of :func:`swe_helpers.hidden_task` (``truncate`` cuts a text whose
length equals the width) in ``textkit/text.py`` and tries to make the hidden tests pass anyway, or to
turn a sure 0 into a masked ENV_ERROR. Before the grader's hardening each of them scored 1 (or
``outcome == "error"``); the tests check that each now scores 0 with its reason.
"""

from __future__ import annotations

import importlib.util
import py_compile
import subprocess
import sys
import tempfile
from pathlib import Path

from swe_helpers import BUGGY, CORRECT, TEXT, hidden_task

from agent_gym.envs.swe.generate import file_diff
from agent_gym.envs.swe.repo import library_path

INIT = "textkit/__init__.py"
TEST_TEXT = "tests/test_text.py"
NEW_TEST = '''

def test_truncate_equal_width():
    assert truncate("equal", 5) == "equal"
'''


def source(path: str) -> str:
    """A file of the clean textkit library."""
    return (library_path("textkit") / path).read_text()


def buggy(path: str) -> str:
    """A file of the task's base (the clean library with the bug in ``truncate``)."""
    text = source(path)
    return text.replace(CORRECT, BUGGY) if path == TEXT else text


def prepend(path: str, code: str) -> str:
    """A patch putting ``code`` at the top of ``path`` (a file of the base)."""
    text = buggy(path)
    return file_diff(path, text, code + text)


def edited_tests_task() -> dict:
    """The bug of :func:`hidden_task` with a test patch that edits an existing test file (as SWE-bench's do).

    Its tests run ``tests/test_case.py`` (which imports textkit first) and ``tests/test_text.py``.
    """
    text = source(TEST_TEXT)
    return {
        **hidden_task(),
        "id": "textkit-truncate-edited-tests",
        "test_patch": file_diff(TEST_TEXT, text, text + NEW_TEST),
        "FAIL_TO_PASS": [f"{TEST_TEXT}::test_truncate_equal_width", f"{TEST_TEXT}::test_truncate_exact"],
        "PASS_TO_PASS": [f"{TEST_TEXT}::test_truncate_short", "tests/test_case.py::test_camel_simple"],
        "test_targets": ["tests/test_case.py", TEST_TEXT],
    }


# --------------------------------------------------------------------------- shadowing

def shadow_package() -> str:
    """A package ``textkit/text/`` (the fixed module) beside the unchanged buggy ``textkit/text.py``."""
    return file_diff("textkit/text/__init__.py", None, source(TEXT))


SHADOW_STDLIB = '''import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "cmd", [p for p in sys.path if p and os.path.abspath(p) != _here])
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})

_reports = sys.modules["_py" + "test.reports"]
_init = _reports.TestReport.__init__


def _forced(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if self.when == "call":
        self.outcome, self.longrepr = "passed", None


_reports.TestReport.__init__ = _forced
'''


def shadow_stdlib() -> str:
    """A top-level ``cmd.py`` (pytest imports ``cmd`` as it starts): the real module, and reports forged."""
    return file_diff("cmd.py", None, SHADOW_STDLIB)


# --------------------------------------------------------------------------- the test runner's internals

RUNNER_ONE_LINE = "import _pytest.python as _p; _p.Function.runtest = lambda self: None\n"
"""The issue's one line: every test passes without running (names the runner: caught before any run)."""

RUNNER_CLASS = ('import sys as _s\n'
                'setattr(getattr(_s, "mod" + "ules")["_py" + "test.python"].Function, "run" + "test", '
                'lambda self: None)\n')
"""The same, written so that no runner name appears in the patch (caught while the tests run)."""

RUNNER_MODULE_GLOBAL = '''import sys as _s
_r = getattr(_s, "mod" + "ules")["_py" + "test.runner"]
_real = _r.CallInfo


class _Shim:
    @staticmethod
    def from_call(func, when, reraise=None):
        return _real.from_call((lambda: None) if when == "call" else func, when, reraise)


_r.CallInfo = _Shim
'''
"""A module global of the runner replaced: the test body never runs."""

RUNNER_REPORT = '''import sys as _s
_rep = getattr(_s, "mod" + "ules")["_py" + "test.reports"].TestReport
_init = _rep.__init__


def _forced(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if self.when == "call":
        self.outcome, self.longrepr = "passed", None


_rep.__init__ = _forced
'''
"""Reports forged as they are made (what a reporter reads)."""

FRAMES_PLUGIN = '''import sys as _s


def _register():
    frame = getattr(_s, "_get" + "frame")()
    while frame is not None:
        names = getattr(frame, "f_" + "locals")
        session = names.get("session") or names.get("self")
        if type(session).__name__ == "Session":
            break
        frame = getattr(frame, "f_" + "back")

    class _Pass:
        def pytest_runtest_logreport(self, report):
            if report.when == "call":
                report.outcome, report.longrepr = "passed", None

    session.config.pluginmanager.register(_Pass(), "textkit-pass")


_register()
'''
"""Library code that walks the stack to pytest's session and registers a plugin forging every report."""


def runner(code: str) -> str:
    """``code`` at the top of ``textkit/__init__.py`` (imported by the tests)."""
    return prepend(INIT, code)


# --------------------------------------------------------------------------- configuration files

EVIL_PLUGIN = '''def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        report.outcome, report.longrepr = "passed", None


pytest_runtest_makereport.pytest_impl = {"hookwrapper": True, "wrapper": False, "optionalhook": False,
                                         "tryfirst": False, "trylast": False, "specname": None}
'''


def config_plugin(name: str) -> str:
    """A configuration file pytest reads (``name``) loading a repository module as a plugin that forges reports."""
    config = ('[pytest]\npythonpath = ["."]\naddopts = ["-p", "textkit._plugin"]\n' if name.endswith(".toml")
              else "[pytest]\npythonpath = .\naddopts = -p textkit._plugin\n")
    return file_diff(name, None, config) + file_diff("textkit/_plugin.py", None, EVIL_PLUGIN)


# --------------------------------------------------------------------------- compiled files

def compiled_fix() -> str:
    """A ``__pycache__`` file compiled from the fixed module (unchecked hash) beside the unchanged buggy source."""
    tag = sys.implementation.cache_tag
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        git = ["git", "-c", "user.name=a", "-c", "user.email=a@b", "-c", "core.hooksPath=/dev/null"]
        subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "base"], cwd=repo, check=True)
        fixed = repo / "fixed.py"
        fixed.write_text(source(TEXT))
        target = repo / "textkit" / "__pycache__" / f"text.{tag}.pyc"
        target.parent.mkdir(parents=True)
        py_compile.compile(str(fixed), cfile=str(target), dfile="textkit/text.py", doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        fixed.unlink()
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        out = subprocess.run([*git, "diff", "--cached", "--binary", "HEAD"], cwd=repo, check=True,
                             capture_output=True)
        assert importlib.util.MAGIC_NUMBER  # the pyc is for this interpreter, which the local sandbox runs
        return out.stdout.decode()


# --------------------------------------------------------------------------- attributes files

def attributes_file() -> str:
    """A ``.gitattributes`` under which the hidden test patch no longer applies to the test file it edits."""
    return file_diff(".gitattributes", None, "* whitespace=tab-in-indent,indent-with-non-tab\n")


# --------------------------------------------------------------------------- the results channel

FORGE_CHANNEL = '''import atexit
import glob
import json
import os

_PASS = {"tests/test_hidden.py::test_exact_width": "passed", "tests/test_hidden.py::test_shorter": "passed"}
_WHERE = "/tmp/agent" + "_gym" + "_swe_*/"


def _forge():
    paths = glob.glob(_WHERE + "*.json") + glob.glob(_WHERE + "*verdict*")
    body = json.dumps({"results": _PASS, "messages": {}, "collect_errors": [], "exitstatus": 0, "collected": 2})
    for path in paths:
        try:
            with open(path, "w") as f:
                f.write(body)
        except OSError:
            pass
    line = ("0 " + "0" * 64 + " " + repr(("test", "tests/test_hidden.py::test_exact_width", "call", "passed", ""))
            + "\\n").encode()
    for fd in range(3, 256):
        try:
            os.write(fd, line)
        except OSError:
            pass


atexit.register(_forge)
if os.fork() == 0:  # a daemon that outlives the test process and forges again
    os.setsid()
    import time
    for _ in range(40):
        time.sleep(0.05)
        _forge()
    os._exit(0)
'''
"""Results written where the grader reads them, after the run and from a process that outlives it."""


def forge_channel() -> str:
    """:data:`FORGE_CHANNEL` at the top of ``textkit/__init__.py``."""
    return runner(FORGE_CHANNEL)


# --------------------------------------------------------------------------- the hidden tests rewritten

REWRITE_TESTS = '''import os as _os

_path = _os.path.join(_os.getcwd(), "tests", "test_text.py")
if _os.path.exists(_path):
    with open(_path) as _f:
        _text = _f.read()
    _text = _text.replace('assert truncate("equal", 5) == "equal"', "pass")
    _text = _text.replace('assert truncate("exact", 5) == "exact"', "pass")
    with open(_path, "w") as _f:
        _f.write(_text)
'''
"""Library code rewriting the hidden test file on disk before pytest imports it."""

REWRITE_TESTS_CHILD = '''import os as _os
import subprocess as _sp

_path = _os.path.join(_os.getcwd(), "tests", "test_text.py")
_sp.run(["sed", "-i", "-e", 's/assert truncate("equal", 5) == "equal"/pass/',
         "-e", 's/assert truncate("exact", 5) == "exact"/pass/', _path], check=False)
'''
"""The same through a child process (which the in-process guard does not see)."""


RICH_TESTS = '''import logging
import unittest
import warnings

import pytest

from textkit import truncate

log = logging.getLogger(__name__)


class TestTruncate:
    def test_exact_width(self):
        log.warning("checking %s", "exact")
        assert truncate("exact", 5) == "exact"

    @pytest.mark.parametrize("n", [10, 11])
    def test_shorter(self, n, tmp_path, monkeypatch, caplog, capsys):
        monkeypatch.setenv("X", "1")
        (tmp_path / "f").write_text("x")
        print("hello")
        warnings.warn("careful", UserWarning)
        assert truncate("abc", n) == "abc"

    @pytest.mark.xfail(reason="known")
    def test_xfail(self):
        assert False

    @pytest.mark.skip(reason="no")
    def test_skip(self):
        pass


class UnitTests(unittest.TestCase):
    def test_unit_shorter(self):
        self.assertEqual(truncate("abc", 9), "abc")

    def test_unit_exact(self):
        self.assertEqual(truncate("exact", 5), "exact")


@pytest.fixture
def value():
    yield 3


def test_fixture(value):
    with pytest.raises(ValueError):
        truncate("x", -1)
    assert value == 3
'''
"""A hidden test file using what real suites use: classes, unittest cases, fixtures, logging, warnings, xfail, skip."""


def rich_tests_task() -> dict:
    """The bug of :func:`hidden_task` graded by :data:`RICH_TESTS`."""
    from swe_helpers import HIDDEN

    return {**hidden_task(), "id": "textkit-truncate-rich-tests", "test_patch": file_diff(HIDDEN, None, RICH_TESTS),
            "FAIL_TO_PASS": [f"{HIDDEN}::TestTruncate::test_exact_width", f"{HIDDEN}::UnitTests::test_unit_exact"],
            "PASS_TO_PASS": [f"{HIDDEN}::TestTruncate::test_shorter[10]", f"{HIDDEN}::TestTruncate::test_shorter[11]",
                             f"{HIDDEN}::UnitTests::test_unit_shorter", f"{HIDDEN}::test_fixture",
                             f"{HIDDEN}::TestTruncate::test_xfail"]}
