"""The base run of a SWE task: its tests on the unpatched base, once per task and process.

Before a patch is graded, the grader runs the task's tests on the base with the hidden tests
applied and nothing else (:func:`agent_gym.envs.swe.grading.run_base`). What it learns decides
what a patch's run means:

* a base on which the runner cannot run (the hidden tests do not apply, nothing is collected,
  no results, the time limit, a ``FAIL_TO_PASS`` test that is not collected) makes every patch of
  the task ``outcome == "error"`` (ENV_ERROR, masked): the task cannot be graded here;
* otherwise a failure of the patched run that the base did not have is the patch's (score 0);
* ``PASS_TO_PASS`` tests that fail on the base are not the patch's to break (reported, not counted);
* the base's pytest configuration file and root directory are passed to the patched run explicitly,
  and what the guard saw the base do (a library that reads frames, pytest adjusting its own
  classes) is tolerated in the patched run.

The result is cached in this process (:func:`base_run_for`), keyed by the task, its base and
everything that shapes the run (:func:`base_key`); a run that failed for the machine (the sandbox)
is not cached.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BaseRun", "base_key", "base_run_for", "clear_base_runs"]

_CACHE_SIZE = 512
_cache: OrderedDict[str, BaseRun] = OrderedDict()
_lock = threading.Lock()
_key_locks: dict[str, threading.Lock] = {}


@dataclass
class BaseRun:
    """What the tests did on the unpatched base.

    Attributes:
        ok: True when the runner ran the tests on the base (a patch can be graded).
        reason: Why not, when not.
        results: ``{test: outcome}`` on the base.
        messages: ``{test: first line of its failure}``.
        config: ``{"ini": path or None, "rootdir": path}`` pytest used (pytest runs only).
        tolerated: Keys of what the guard saw the base do (see the module docstring).
        stdlib / installed: Top-level module names of the standard library and of what is installed.
        python: ``[cache tag, hexversion]`` of the Python that runs the tests.
        exit_code: The test command's exit code.
        seconds: Wall time of the base run.
        test_output: The tail of its output.
        machine_error: True when the sandbox, not the task, failed (not cached).
    """

    ok: bool
    reason: str = ""
    results: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    tolerated: list[str] = field(default_factory=list)
    stdlib: set[str] = field(default_factory=set)
    installed: set[str] = field(default_factory=set)
    exit_code: int | None = None
    seconds: float = 0.0
    test_output: str = ""
    machine_error: bool = False
    python: list[Any] | None = None

    def summary(self, cached: bool) -> dict[str, Any]:
        """Plain data for a report's ``base``."""
        return {"ok": self.ok, "reason": self.reason, "cached": cached, "seconds": round(self.seconds, 3),
                "p2p_failing_on_base": [], "tolerated": list(self.tolerated)}


def base_key(task: Mapping[str, Any], commit: str, context: str) -> str:
    """The cache key of a task's base run: its id, base commit, hidden tests, test command, and ``context``."""
    fields = {k: task.get(k) for k in ("id", "test_patch", "test_command", "parser_name", "test_targets", "test_env",
                                       "FAIL_TO_PASS", "protected_files")}
    text = json.dumps({"task": fields, "commit": commit, "context": context}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def base_run_for(key: str, compute: Callable[[], BaseRun]) -> tuple[BaseRun, bool]:
    """``(base run, whether it came from the cache)``: ``compute()`` once per key (concurrent callers wait)."""
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key], True
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        with _lock:
            if key in _cache:
                return _cache[key], True
        run = compute()
        with _lock:
            if not run.machine_error:
                _cache[key] = run
                while len(_cache) > _CACHE_SIZE:
                    _cache.popitem(last=False)
            _key_locks.pop(key, None)
        return run, False


def clear_base_runs() -> None:
    """Forget every cached base run (the next grading of each task runs its base again)."""
    with _lock:
        _cache.clear()
