"""Generate SWE tasks from a repository with a pytest suite: seeded mutations kept when the tests say so.

For every source file (not tests, not ``conftest.py`` / ``setup.py``) the candidates of
:func:`~agent_gym.envs.swe.mutate.mutations` are drawn in a seeded order; each is applied in a
sandbox holding the repository and the whole test suite runs. A candidate becomes a task when
at least one test that passes on the clean repository fails (``FAIL_TO_PASS``) and at least one
still passes (``PASS_TO_PASS``). The task's ``bug_patch`` is the mutation, its ``patch`` (the fix)
the reverse, and its problem statement is written from the failing tests' names and messages
(never from the fix).

Command line (writes JSON lines)::

    python -m agent_gym.envs.swe.generate --repo PATH [--out tasks.jsonl] [--seed 0] [--max-tasks N]
    python -m agent_gym.envs.swe.generate --shipped   # regenerate the shipped task file
    python -m agent_gym.envs.swe.generate --check FILE|shipped [--workers 2]   # gold scores 1, empty 0, per task
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_gym.envs.swe.grading import REPORTER_SOURCE
from agent_gym.envs.swe.mutate import Mutation, apply_mutation, mutations
from agent_gym.envs.swe.policy import is_test_path
from agent_gym.envs.swe.repo import LIBRARIES, git, snapshot_for
from agent_gym.envs.swe.runs import GIT_ENV
from agent_gym.envs.swe.tasks import SPLITS, TASKS_PATH
from agent_gym.errors import ConfigError
from agent_gym.sandbox import LocalSandbox, SandboxLimits

__all__ = ["check_tasks", "file_diff", "generate_tasks", "issue_text", "main"]

_WORK = "/tmp/.agent_gym_generate"
_SKIP_NAMES = ("conftest.py", "setup.py", "noxfile.py", "__main__.py")


def file_diff(path: str, before: str | None, after: str | None) -> str:
    """A git-style unified diff of one file (``before`` None: a new file; ``after`` None: a deleted one)."""
    old_name = "/dev/null" if before is None else f"a/{path}"
    new_name = "/dev/null" if after is None else f"b/{path}"
    lines = list(difflib.unified_diff((before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True),
                                      old_name, new_name, n=3))
    fixed = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
    mode = "new file mode 100644\n" if before is None else ("deleted file mode 100644\n" if after is None else "")
    return f"diff --git a/{path} b/{path}\n{mode}" + "".join(fixed)


_OPENINGS = (
    "Since the last change, part of `{name}` no longer behaves as its tests expect.",
    "Something in `{name}` broke: its test suite now has failures.",
    "A regression crept into `{name}`; running the tests shows it.",
    "Users report wrong results from `{name}`, and the test suite agrees.",
)


def issue_text(name: str, failing: Sequence[str], messages: Mapping[str, str], rng: random.Random) -> str:
    """A problem statement from the failing tests' names and messages (see the module docstring)."""
    lines = [rng.choice(_OPENINGS).format(name=name), "", "These tests fail:"]
    for test in failing[:6]:
        message = messages.get(test, "").strip()
        lines.append(f"- `{test}`" + (f": {message}" if message else ""))
    if len(failing) > 6:
        lines.append(f"- ... and {len(failing) - 6} more")
    files = sorted({t.split("::", 1)[0] for t in failing})
    lines += ["", f"Reproduce with `python -m pytest {' '.join(files)}`. The tests describe the intended "
              "behaviour; please fix the library code so that they pass without breaking the other tests."]
    return "\n".join(lines)


_BATCH_SOURCE = '''
import json, os, signal, sys
sys.path[0] = os.getcwd()  # as python -m pytest: the repository's root is importable
import pytest
work, limit = os.environ["AGENT_GYM_WORK"], int(os.environ["AGENT_GYM_TIMEOUT"])
edits = json.load(open(work + "/edits.json"))
for i, (path, text) in enumerate(edits):
    original = open("/app/" + path).read() if path else None
    if path:
        open("/app/" + path, "w").write(text)
    pid = os.fork()
    if pid == 0:
        os.environ["AGENT_GYM_SWE_RESULTS"] = "%s/results-%d.json" % (work, i)
        signal.alarm(limit)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        code = pytest.main(["-q", "-p", "agent_gym_swe_report", "-p", "no:cacheprovider"])
        os._exit(int(code))
    os.waitpid(pid, 0)
    if path:
        open("/app/" + path, "w").write(original)
'''


class _Runner:
    """One sandbox holding the repository; runs the suite and reports each test's outcome."""

    def __init__(self, archive: bytes, timeout: float) -> None:
        self.timeout = timeout
        self.box = LocalSandbox(SandboxLimits(processes=256, output_bytes=20000), timeout=timeout, env=GIT_ENV)
        self.box.write_file(f"{_WORK}/base.tar", archive)
        result = self.box.exec(f"tar -xf {_WORK}/base.tar -C /app", timeout=120)
        if not result.ok:
            raise ConfigError(f"the repository did not extract: {result.output[-300:]}")
        self.box.write_file(f"{_WORK}/plugin/agent_gym_swe_report.py", REPORTER_SOURCE)

    def run_batch(self, edits: Sequence[tuple[str, str]]) -> list[tuple[dict[str, str], dict[str, str]]]:
        """Each edit ``(path, new text)`` applied alone (the file restored after), the suite run on it.

        One Python process in the sandbox imports pytest once and forks a child per run, which
        costs a fraction of a fresh interpreter per candidate; an empty edit list is not allowed,
        ``("", "")`` runs the clean repository.
        """
        self.box.write_file(f"{_WORK}/edits.json", json.dumps(list(edits)))
        self.box.write_file(f"{_WORK}/batch.py", _BATCH_SOURCE)
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": f"{_WORK}/plugin", "HOME": "/tmp",
               "PYTHONDONTWRITEBYTECODE": "1", "AGENT_GYM_WORK": _WORK, "AGENT_GYM_TIMEOUT": str(int(self.timeout))}
        run = self.box.exec(f"python {_WORK}/batch.py", timeout=self.timeout * (len(edits) + 1), env=env)
        if not run.ok:
            raise ConfigError(f"the test runner failed: {run.output[-500:]}")
        outcomes: list[tuple[dict[str, str], dict[str, str]]] = []
        for i in range(len(edits)):
            try:
                data = json.loads(self.box.read_file(f"{_WORK}/results-{i}.json"))
            except Exception:  # noqa: BLE001 - no results: the candidate broke the run
                outcomes.append(({}, {}))
                continue
            outcomes.append((dict(data.get("results") or {}), dict(data.get("messages") or {})))
        self.box.exec(f"rm -f {_WORK}/results-*.json", timeout=60)
        return outcomes

    def write(self, path: str, text: str) -> None:
        self.box.write_file(f"/app/{path}", text)

    def close(self) -> None:
        self.box.close()


def generate_tasks(
    source: Mapping[str, Any],
    *,
    name: str,
    seed: int = 0,
    max_tasks: int | None = None,
    max_candidates: int | None = None,
    timeout: float = 120.0,
    extra: Mapping[str, Any] | None = None,
    log: Any = None,
) -> list[dict[str, Any]]:
    """Validated tasks of one repository (see the module docstring).

    Args:
        source: The repository (``{"library": ...}``, ``{"repo_path": ..., "commit": ...}`` or ``{"dir": ...}``).
        name: The repository's name in ids and problem statements.
        seed: Seeds the order of the candidates and the wording.
        max_tasks: Stop after this many tasks.
        max_candidates: Try at most this many candidates.
        timeout: Seconds per test run.
        extra: Keys added to every task (e.g. ``library``, ``split``).
        log: A callable taking one line of progress, or None.

    Raises:
        ConfigError: When the clean repository has no passing test.
    """
    snapshot = snapshot_for(source)
    rng = random.Random(seed)
    runner = _Runner(snapshot.archive, timeout)
    tasks: list[dict[str, Any]] = []
    try:
        baseline, _ = runner.run_batch([("", "")])[0]
        passing = sorted(t for t, outcome in baseline.items() if outcome == "passed")
        if not passing:
            raise ConfigError(f"{name}: no test passes on the clean repository; nothing to validate bugs against")
        listing = runner.box.exec("git ls-files -z -- '*.py'", timeout=60, env=GIT_ENV).output.split("\0")
        files = sorted(f for f in listing if f.endswith(".py") and not is_test_path(f)
                       and f.rsplit("/", 1)[-1] not in _SKIP_NAMES)
        candidates: list[tuple[str, str, Mutation]] = []
        for path in files:
            text = runner.box.read_file(f"/app/{path}").decode("utf-8")
            try:
                candidates += [(path, text, m) for m in mutations(text)]
            except SyntaxError:
                continue
        rng.shuffle(candidates)
        if max_candidates is not None:
            candidates = candidates[:max_candidates]
        outcomes: list[tuple[dict[str, str], dict[str, str]]] = []
        for first in range(0, len(candidates), 50):
            chunk = candidates[first:first + 50]
            outcomes += runner.run_batch([(path, apply_mutation(text, m)) for path, text, m in chunk])
            if max_tasks is not None and sum(_valid(passing, r) for r, _ in outcomes) >= max_tasks:
                break
        for i, ((path, text, mutation), (results, messages)) in enumerate(zip(candidates, outcomes, strict=False)):
            if max_tasks is not None and len(tasks) >= max_tasks:
                break
            mutated = apply_mutation(text, mutation)
            f2p = [t for t in passing if results.get(t) != "passed"]
            p2p = [t for t in passing if results.get(t) == "passed"]
            if log is not None:
                log(f"[{i + 1}/{len(candidates)}] {path}:{mutation.line} {mutation.kind}: "
                    f"{len(f2p)} fail, {len(p2p)} pass{' -> task' if f2p and p2p else ''}")
            if not f2p or not p2p or not results:
                continue
            digest = hashlib.sha256(f"{path}\0{mutated}".encode()).hexdigest()[:8]
            stem = path.rsplit("/", 1)[-1].removesuffix(".py")
            tasks.append({
                "id": f"{name}.{stem}.{mutation.kind}.{digest}",
                "problem_statement": issue_text(name, f2p, messages, rng),
                "source": dict(source),
                "bug_patch": file_diff(path, text, mutated),
                "patch": file_diff(path, mutated, text),
                "FAIL_TO_PASS": f2p,
                "PASS_TO_PASS": p2p,
                "mutation": {"file": path, "line": mutation.line, "kind": mutation.kind,
                             "description": mutation.description},
                **dict(extra or {}),
            })
    finally:
        runner.close()
    return tasks


def check_tasks(tasks: Sequence[Mapping[str, Any]], workers: int = 2, log: Any = None) -> list[tuple[str, str]]:
    """Grade each task's gold patch (must score 1) and an empty patch (must score 0); ``[(id, problem)]``."""
    from concurrent.futures import ThreadPoolExecutor

    from agent_gym.envs.swe.env import SWEEnv

    env = SWEEnv(tasks=list(tasks))

    def one(task: dict[str, Any]) -> tuple[str, str]:
        gold = env.grade_patch(task, task["patch"])
        empty = env.grade_patch(task, "")
        problem = "" if gold.score() == 1.0 and empty.score() == 0.0 else \
            f"gold {gold.score()} ({gold.reason[:200]}), empty {empty.score()}"
        return str(task["id"]), problem

    problems = []
    try:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            for i, (task_id, problem) in enumerate(pool.map(one, env.tasks)):
                if log is not None:
                    log(f"[{i + 1}/{len(env.tasks)}] {task_id}: {problem or 'ok'}")
                if problem:
                    problems.append((task_id, problem))
    finally:
        env.close()
    return problems


def _valid(passing: Sequence[str], results: Mapping[str, str]) -> bool:
    return bool(results) and any(results.get(t) != "passed" for t in passing) and \
        any(results.get(t) == "passed" for t in passing)


def _repo_source(path: str) -> tuple[dict[str, Any], str]:
    root = Path(path).resolve()
    if not root.is_dir():
        raise ConfigError(f"--repo: {path} is not a directory")
    if (root / ".git").exists():
        commit = git(["rev-parse", "HEAD"], cwd=root).stdout.decode().strip()
        return {"repo_path": str(root), "commit": commit}, root.name
    return {"dir": str(root)}, root.name


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m agent_gym.envs.swe.generate",
                                     description="Generate validated bug-fixing tasks by mutating a repository.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--repo", help="a local repository (or directory) with a pytest suite")
    group.add_argument("--shipped", action="store_true", help="regenerate the shipped task file")
    group.add_argument("--check", help="grade the gold and an empty patch of every task of a file ('shipped': "
                                       "the package's); exit status 1 if any disagrees")
    parser.add_argument("--workers", type=int, default=2, help="--check: gradings in parallel")
    parser.add_argument("--out", help="output JSON lines (default: standard output; --shipped: the package's file)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tasks", type=int, default=None, help="tasks per repository")
    parser.add_argument("--max-candidates", type=int, default=None, help="candidates tried per repository")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test run")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    tasks: list[dict[str, Any]] = []
    if args.check:
        path = TASKS_PATH if args.check == "shipped" else Path(args.check)
        loaded = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        problems = check_tasks(loaded, workers=args.workers, log=log)
        print(f"{len(loaded) - len(problems)}/{len(loaded)} tasks: gold patch 1, empty patch 0")
        for task_id, problem in problems:
            print(f"  {task_id}: {problem}")
        return 1 if problems else 0
    if args.shipped:
        split_of = {lib: split for split, libs in SPLITS.items() for lib in libs}
        for lib in LIBRARIES:
            tasks += generate_tasks({"library": lib}, name=lib, seed=args.seed, max_tasks=args.max_tasks,
                                    max_candidates=args.max_candidates, timeout=args.timeout,
                                    extra={"library": lib, "split": split_of[lib]}, log=log)
    else:
        source, name = _repo_source(args.repo)
        tasks = generate_tasks(source, name=name, seed=args.seed, max_tasks=args.max_tasks,
                               max_candidates=args.max_candidates, timeout=args.timeout, log=log)
    text = "".join(json.dumps(task, sort_keys=True) + "\n" for task in tasks)
    out = args.out or (str(TASKS_PATH) if args.shipped else None)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")
        log(f"wrote {len(tasks)} tasks to {out}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
