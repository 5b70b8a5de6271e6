"""Work in a grading sandbox: prepare the tree, run the tests, read the verdict (SWE-v0).

:func:`prepare` writes the base archive, the patches and the ``prepare`` program into a private
directory of the sandbox and runs it (base extracted, the agent's patch applied, the tree's changes
listed, the hidden tests applied). :func:`run_tests` runs the tests: pytest through the
``guarded_pytest`` program (whose verdict file carries an HMAC under a key written for that run only
and deleted before any code of the repository runs), or a task's own ``test_command`` whose output
its parser reads. See :mod:`agent_gym.envs.swe.scripts` for the programs.
"""

from __future__ import annotations

import functools
import hmac
import json
import marshal
import secrets
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.envs.swe.scripts import script_text
from agent_gym.errors import SandboxError

__all__ = ["GIT_ENV", "REPO_DIR", "Prepared", "TestRun", "Workspace", "apply_patch_commands", "host_python", "prepare",
           "run_tests"]

REPO_DIR = "/app"
"""Where the repository is in every sandbox."""

GIT_ENV = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*",
           "GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": "/dev/null",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@localhost",
           "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@localhost"}
"""Environment of git inside a sandbox (the repository is owned by another user than the tools')."""

VERDICT_MARK = "AGENT_GYM_SWE_VERDICT"
_GUARD_NAME = "<agent_gym swe guarded_pytest>"
_LOADER = ("import marshal,sys;sys.argv[:]=sys.argv[1:];"
           "exec(marshal.loads(open(sys.argv[0],'rb').read()),{'__name__':'__main__','__builtins__':__builtins__})")


def host_python() -> list[Any]:
    """``[cache tag, hexversion]`` of this interpreter (a sandbox's Python that matches runs code compiled here)."""
    return [sys.implementation.cache_tag, sys.hexversion]


@functools.lru_cache(maxsize=1)
def _compiled_guard() -> bytes:
    """The guarded runner compiled here once (a sandbox with the same Python loads it instead of compiling it)."""
    return marshal.dumps(compile(script_text("guarded_pytest"), _GUARD_NAME, "exec", dont_inherit=True))


def apply_patch_commands(path: str) -> list[tuple[str, str]]:
    """``[(method, shell command)]`` tried in order to apply the patch file ``path`` in the repository."""
    return [(method, shlex.join(argv)) for method, argv in _apply_argvs(path)]


def _apply_argvs(path: str) -> list[tuple[str, list[str]]]:
    return [("git apply", ["git", "apply", "--binary", "--whitespace=nowarn", path]),
            ("git apply --3way", ["git", "apply", "--binary", "--3way", "--whitespace=nowarn", path]),
            ("patch --fuzz", ["patch", "-p1", "--fuzz=3", "--batch", "--forward", "--no-backup-if-mismatch", "-i",
                              path])]


class Workspace:
    """A private directory of one grading sandbox (a random name under ``/tmp``)."""

    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox
        self.path = f"/tmp/agent_gym_swe_{secrets.token_hex(8)}"

    def file(self, name: str) -> str:
        """The path of ``name`` in the workspace."""
        return f"{self.path}/{name}"

    def write(self, name: str, data: str | bytes) -> str:
        """Write ``name`` and return its path."""
        path = self.file(name)
        self.sandbox.write_file(path, data)
        return path


@dataclass
class Prepared:
    """The tree after :func:`prepare`.

    Attributes:
        extracted: The base went in.
        method: How the agent's patch applied (``"empty"`` without one, ``"failed"``).
        errors: What each failed way of applying said.
        changes: ``(status, mode, path)`` of every file that differs from the base after the patch.
        test_patch: ``"ok"``, ``"failed"`` or ``"none"``.
        test_patch_error: What ``git apply`` said when the hidden tests did not apply.
        names: ``{"stdlib": [...], "installed": [...]}`` when asked for.
        error: A failure of the program itself.
    """

    extracted: bool = False
    method: str = "empty"
    errors: list[str] = field(default_factory=list)
    changes: list[tuple[str, str, str]] = field(default_factory=list)
    test_patch: str = "none"
    test_patch_error: str = ""
    names: dict[str, list[str]] | None = None
    error: str = ""


def prepare(work: Workspace, archive: bytes, commit: str, patch: str, test_patch: str,
            names: bool = False) -> Prepared:
    """Extract the base, apply ``patch`` and ``test_patch`` in the sandbox (see the module docstring).

    ``names``: also ask the sandbox's Python which module names a patch may not shadow.

    Raises:
        SandboxError: When the sandbox fails.
    """
    work.write("base.tar", archive)
    if patch.strip():
        work.write("agent.patch", patch)
    if test_patch.strip():
        work.write("test.patch", test_patch)
    script = work.write("prepare.sh", script_text("prepare"))
    result = work.sandbox.exec(f"bash {script} {REPO_DIR} {work.path} {shlex.quote(commit)}", timeout=300, env=GIT_ENV)
    line = next((x for x in result.output.splitlines() if x.startswith("AGENT_GYM_PREPARE ")), "")
    fields = line[len("AGENT_GYM_PREPARE "):].split("|")
    if len(fields) != 3:
        raise SandboxError(f"the grading sandbox did not prepare the tree: {result.output[-300:]}")
    status, method, tests = fields
    prepared = Prepared(extracted=status == "extracted", method=method, test_patch=tests)
    if not prepared.extracted or method == "failed":
        prepared.error = prepared.error or ("" if prepared.extracted else "the base repository did not extract")
        prepared.errors = [_read_text(work, "errors")[-900:]]
        return prepared
    if method != "empty":
        raw = work.sandbox.read_file(work.file("changes")).decode("utf-8", "surrogateescape").split("\0")
        for header, path in zip(raw[0::2], raw[1::2], strict=False):
            parts = header.lstrip(":").split()
            if len(parts) >= 5:
                prepared.changes.append((parts[4][:1], parts[1], path))
    if tests == "failed":
        prepared.test_patch_error = _read_text(work, "test_patch.err")[-300:]
    if names:
        run = work.sandbox.exec(f"python3 -I {work.write('names.py', script_text('names'))} {REPO_DIR}", timeout=120)
        try:
            prepared.names = json.loads(run.output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            prepared.error = f"the names of the sandbox's modules could not be read: {run.output[-300:]}"
    return prepared


def _read_text(work: Workspace, name: str) -> str:
    try:
        return work.sandbox.read_file(work.file(name)).decode("utf-8", "replace")
    except SandboxError:
        return ""


@dataclass
class TestRun:
    """One run of the tests.

    Attributes:
        verdict: The guarded run's verdict (None: none came back, or it did not verify), or for a
            task's own test command ``{"results": ...}`` from its parser.
        exit_code: The test command's exit code (the child's for a guarded run).
        timed_out: It ran past the time limit.
        output: The tail of its output.
        note: Why there is no verdict, when there is none.
    """

    __test__ = False  # not a pytest test class

    verdict: dict[str, Any] | None
    exit_code: int | None = None
    timed_out: bool = False
    output: str = ""
    note: str = ""


def pytest_args(targets: Sequence[str], pin: Mapping[str, Any] | None, work: Workspace) -> list[str]:
    """The arguments of pytest: no cache, the base's configuration file and root directory when known, the targets."""
    args = ["-q", "-p", "no:cacheprovider"]
    if pin and pin.get("rootdir"):
        ini = pin.get("ini") or work.write("empty.ini", "[pytest]\n")
        args += ["-c", str(ini), "--rootdir", str(pin["rootdir"])]
    return args + list(targets)


def run_tests(work: Workspace, task: Mapping[str, Any], timeout: float, *, mode: str = "enforce",
              tolerated: Sequence[str] = (), pin: Mapping[str, Any] | None = None,
              protected: Sequence[str] = (), compiled: bool = False) -> TestRun:
    """Run the task's tests in the prepared tree (see the module docstring).

    Args:
        work: The sandbox's workspace.
        task: The task (``test_command``/``parser_name``, ``test_targets``, ``test_env``).
        timeout: Seconds for the tests.
        mode: ``"observe"`` (the base run: the guard records) or ``"enforce"`` (it also refuses).
        tolerated: What the guard saw the base run do.
        pin: ``{"ini": ..., "rootdir": ...}`` of the base run.
        protected: Paths (relative to the repository) of the tests and the runner's configuration.
        compiled: The sandbox runs this interpreter: send the runner compiled.

    Raises:
        SandboxError: When the sandbox fails.
    """
    test_env = {str(k): str(v) for k, v in dict(task.get("test_env") or {}).items()}
    command = str(task.get("test_command") or "")
    env = {**GIT_ENV, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"}
    if command:
        run = work.sandbox.exec(command, timeout=timeout, env={**env, **test_env})
        return TestRun({"parse": True}, run.exit_code, run.timed_out, run.output[-4000:])
    pythonpath = [p for p in test_env.pop("PYTHONPATH", "").split(":") if p]
    nonce = secrets.token_bytes(32)
    config = {
        "repo": REPO_DIR, "private": work.path, "nonce_file": work.write("nonce", nonce),
        "verdict": work.file("verdict"), "timeout": timeout, "mode": mode, "tolerated": list(tolerated),
        "env": {**env, **test_env, **({"PYTHONPATH": ":".join(pythonpath)} if pythonpath else {})},
        "pythonpath": pythonpath, "args": pytest_args(list(task.get("test_targets") or ()), pin, work),
        "protected": [f"{REPO_DIR}/{p}" for p in protected],
    }
    work.write("run.json", json.dumps(config))
    if compiled:
        program = f"-c {shlex.quote(_LOADER)} {work.write('guarded_pytest.code', _compiled_guard())}"
    else:
        program = work.write("guarded_pytest.py", script_text("guarded_pytest"))
    run = work.sandbox.exec(f"cd {work.path} && exec python3 -s -B {program} {work.file('run.json')}",
                            timeout=timeout + 60, env={**env, **test_env})
    verdict, note = _read_verdict(work, nonce)
    exit_code = verdict.get("exit_code") if verdict else run.exit_code
    timed_out = bool(verdict.get("timed_out")) if verdict else run.timed_out
    return TestRun(verdict, exit_code if isinstance(exit_code, int) else None, timed_out, run.output[-4000:], note)


def _read_verdict(work: Workspace, nonce: bytes) -> tuple[dict[str, Any] | None, str]:
    try:
        text = work.sandbox.read_file(work.file("verdict")).decode("utf-8", "replace")
    except SandboxError:
        return None, "the test run wrote no verdict"
    head, _, body = text.partition("\n")
    body = body[:-1] if body.endswith("\n") else body
    parts = head.split(" ")
    expected = hmac.new(nonce, body.encode("utf-8"), "sha256").hexdigest()
    if len(parts) != 2 or parts[0] != VERDICT_MARK or not hmac.compare_digest(parts[1], expected):
        return None, "the verdict file was not written by the grader's program (its key does not match)"
    try:
        data = json.loads(body)
    except ValueError:
        return None, "the verdict is not JSON"
    return (data, "") if isinstance(data, dict) else (None, "the verdict is not an object")
