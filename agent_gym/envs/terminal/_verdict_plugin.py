"""The pytest plugin Terminal-v0's grader loads into a task's test run (``-p agent_gym_verdict``).

This file is not imported by the host: its text is written into the sandbox (a directory only
root can write, made for one test run) and pytest imports it from there, before any conftest
file or test module. It uses the standard library only and runs on any Python 3.

At import, when the grader's variable ``AGENT_GYM_VERDICT_FD`` names a socket:

1. reads the run's key from that socket (the grader wrote it there before the command started;
   a second pytest session in the same run finds it already taken and reports without it);
2. keeps the socket to itself (not inherited by the processes the tests start) and makes its
   process non-dumpable, so that no other process of the sandbox user can read its memory or
   open its files through ``/proc``;
3. restores the variables the grader set (``PYTEST_ADDOPTS``, ``PYTHONPATH``,
   ``PYTHONSAFEPATH``) to the task's values, so the tests and their child processes see the
   environment they would see without it, and puts the start directory on ``sys.path`` the way
   the interpreter would have, but after the standard library and installed packages.

At the end of the session it sends ``HMAC-SHA256(key, report) + " " + report`` (one line; the
report is JSON: ``results`` ``{test id: "passed" | "failed"}`` as Terminal-Bench counts them,
``exitstatus``, ``collected``, ``private``) on the socket. Without a key it sends ``"- " + report``.
"""

import hashlib
import hmac
import json
import os
import stat
import sys

__all__ = ["pytest_collectreport", "pytest_runtest_logreport", "pytest_sessionfinish"]

_FD_VAR = "AGENT_GYM_VERDICT_FD"
_SAVED = "AGENT_GYM_SAVED_"
_RESTORED = ("PYTEST_ADDOPTS", "PYTHONPATH", "PYTHONSAFEPATH")


def _restore_environment():
    """The task's values of the variables the grader set (``"1" + value``, or ``"0"`` when unset)."""
    for name in _RESTORED:
        saved = os.environ.pop(_SAVED + name, None)
        if saved is None:
            continue
        if saved.startswith("1"):
            os.environ[name] = saved[1:]
        else:
            os.environ.pop(name, None)
            if name == "PYTHONSAFEPATH" and getattr(sys.flags, "safe_path", False):
                _start_directory_last()


def _start_directory_last():
    """The entry the interpreter would have put first on ``sys.path``, appended (never ahead of the library)."""
    main = sys.argv[0] if sys.argv else ""
    if main in ("", "-c"):
        entry = os.getcwd()
    elif main.endswith("__main__.py"):  # python -m pytest
        entry = os.getcwd()
    else:  # a script (the pytest console script)
        entry = os.path.dirname(os.path.realpath(main))
    if entry not in sys.path:
        sys.path.append(entry)


def _take_key(fd):
    """The key waiting on ``fd`` (b"" when another session took it); the socket stays this process's own."""
    os.set_inheritable(fd, False)
    os.set_blocking(fd, False)
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) < 256:
            chunk = os.read(fd, 256 - len(data))
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    os.set_blocking(fd, True)
    return data.strip()


def _make_private():
    """Make this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``); True when it is."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)
        return libc.prctl(3, 0, 0, 0, 0) == 0
    except Exception:
        return False


def _open_channel():
    text = os.environ.pop(_FD_VAR, "")
    if not text.isdigit():
        return None, b"", False
    fd = int(text)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return None, b"", False
        key = _take_key(fd)
    except OSError:
        return None, b"", False
    return fd, key, _make_private() if key else False


_FD, _KEY, _PRIVATE = _open_channel()
_restore_environment()
_results = {}  # type: dict[str, str]


def _status(report):
    """Terminal-Bench's reading of a report: PASSED, SKIPPED and XFAIL pass; FAILED, ERROR and XPASS fail."""
    if report.failed:
        return "failed"
    if hasattr(report, "wasxfail") and report.passed:
        return "failed"
    return "passed"


def pytest_runtest_logreport(report):
    if report.when == "call" or report.failed or report.skipped:
        if _results.get(report.nodeid) != "failed":
            _results[report.nodeid] = _status(report)


def pytest_collectreport(report):
    if report.failed:
        _results[report.nodeid or "<collection>"] = "failed"


def pytest_sessionfinish(session, exitstatus):
    if _FD is None:
        return
    report = json.dumps({"results": _results, "exitstatus": int(exitstatus),
                         "collected": int(getattr(session, "testscollected", 0)), "private": _PRIVATE},
                        sort_keys=True)
    mac = hmac.new(_KEY, report.encode(), hashlib.sha256).hexdigest() if _KEY else "-"
    view = memoryview((mac + " " + report + "\n").encode())
    try:
        while view:
            view = view[os.write(_FD, view):]
    except OSError:
        pass
