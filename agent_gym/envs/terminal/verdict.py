"""The test run's private verdict channel: pytest's own results, authenticated by a key of the run.

A test run's output is text that any process of the run can write to (the agent's programs the
tests start included), so a summary read from it can be forged. Where the sandbox offers a private
channel (:meth:`~agent_gym.sandbox.LocalSandbox.exec_with_channel`), the grader loads a pytest plugin
(``_verdict_plugin.py``, written into the sandbox as :data:`PLUGIN_MODULE`) that reads a fresh key
from the channel before any test code runs, makes its process non-dumpable, and sends pytest's
results back on the channel with an HMAC of that key. The processes the tests start do not inherit
the channel, cannot open a socket again through ``/proc``, and cannot read the key from the
runner's memory; what they print no longer counts.

:func:`channel_env` gives the test command's environment with the plugin loaded; :func:`read_channel`
checks what came back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PLUGIN_MODULE", "VERDICT_FD", "ChannelReport", "Verdict", "channel_env", "new_key", "plugin_source",
           "read_channel"]

PLUGIN_MODULE = "agent_gym_verdict"
"""Module name of the plugin inside the sandbox (``pytest -p agent_gym_verdict``)."""

VERDICT_FD = 3
"""The test command's file descriptor that holds the channel."""

_PLUGIN_PATH = Path(__file__).with_name("_verdict_plugin.py")
_SAVED = "AGENT_GYM_SAVED_"
_MAX_LINE = 1 << 22


def plugin_source() -> bytes:
    """The plugin's source, as written into the sandbox."""
    return _PLUGIN_PATH.read_bytes()


def new_key() -> bytes:
    """A fresh key for one test run (64 hex digits)."""
    return secrets.token_hex(32).encode()


def channel_env(env: Mapping[str, str], plugin_dir: str) -> dict[str, str]:
    """``env`` (the test command's variables) with the plugin loaded from ``plugin_dir``.

    ``PYTEST_ADDOPTS`` gets ``-p agent_gym_verdict`` first, ``PYTHONPATH`` gets ``plugin_dir`` first
    and ``PYTHONSAFEPATH=1`` keeps the start directory (where the agent may have written a
    ``pytest.py``) off ``sys.path`` until the plugin has the key; the task's own values are saved
    (``AGENT_GYM_SAVED_<NAME>``) and the plugin restores them for the tests.
    """
    out = dict(env)
    additions = {"PYTEST_ADDOPTS": f"-p {PLUGIN_MODULE}", "PYTHONPATH": plugin_dir, "PYTHONSAFEPATH": "1"}
    for name, value in additions.items():
        old = env.get(name)
        out[_SAVED + name] = "0" if old is None else "1" + old
        if name == "PYTHONSAFEPATH":
            out[name] = value
        else:
            out[name] = value if not old else f"{value} {old}" if name == "PYTEST_ADDOPTS" else f"{value}:{old}"
    out["AGENT_GYM_VERDICT_FD"] = str(VERDICT_FD)
    return out


@dataclass(frozen=True)
class Verdict:
    """One pytest session's report.

    Attributes:
        results: ``{test id: "passed" | "failed"}`` (Terminal-Bench's reading: skipped and xfail pass).
        exitstatus: pytest's exit status (0 passed, 1 failures, 2 interrupted, 3 internal error,
            4 usage error, 5 no tests collected).
        collected: Tests collected.
        private: Whether the runner made its process non-dumpable.
    """

    results: dict[str, str]
    exitstatus: int
    collected: int
    private: bool


@dataclass(frozen=True)
class ChannelReport:
    """What came back on the channel.

    Attributes:
        verdicts: The reports carrying the run's key (one per run: the key is read once).
        unauthenticated: Reports or lines without the key (a second pytest session of the run, or
            bytes written by something else).
    """

    verdicts: list[Verdict] = field(default_factory=list)
    unauthenticated: int = 0


def _verdict(report: Any) -> Verdict | None:
    if not isinstance(report, dict) or not isinstance(report.get("results"), dict):
        return None
    results = {str(k): "passed" if v == "passed" else "failed" for k, v in report["results"].items()}
    try:
        return Verdict(results, int(report.get("exitstatus", -1)), int(report.get("collected", 0)),
                       bool(report.get("private")))
    except (TypeError, ValueError):
        return None


def read_channel(data: bytes, key: bytes) -> ChannelReport:
    """The reports in ``data`` (one per line) that carry ``key``'s HMAC; the others are counted."""
    verdicts: list[Verdict] = []
    others = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        mac, _, payload = line.partition(b" ")
        expected = hmac.new(key, payload, hashlib.sha256).hexdigest().encode()
        if len(line) > _MAX_LINE or not hmac.compare_digest(mac, expected):
            others += 1
            continue
        try:
            verdict = _verdict(json.loads(payload))
        except ValueError:
            verdict = None
        if verdict is None:
            others += 1
        else:
            verdicts.append(verdict)
    return ChannelReport(verdicts, others)
