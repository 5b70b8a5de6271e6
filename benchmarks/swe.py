"""SWE-v0 costs: episode setup (base repository + sandbox) beside a fresh ``git clone``, grading per task, episodes/s.

Setup is ``env.reset`` (the packed one-commit base extracted into a new sandbox's ``/app``),
measured interleaved with the alternative: a new sandbox in which the same repository is
``git clone``-d from a read-only bind of it (no checkout of history to trim, so the clone is
the cheaper case of cloning). Grading is ``env.grade_patch`` of the gold patch (a fresh
sandbox, the patch applied, the suite run). Throughput is ``collect`` at ``--parallel``
episodes in flight, each applying the gold patch with ``bash`` and submitting (graded).

With ``--repo PATH`` (a local git repository) the setup comparison is also made for that
repository at ``HEAD``: its one-commit base extracted into a new sandbox, beside a new sandbox
that clones the repository with its whole history.

Run: python benchmarks/swe.py [--setups 10] [--gradings 6] [--episodes 32] [--parallel 16] [--repo PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tarfile
import tempfile
import time
from io import BytesIO

from agent_gym.envs.swe import SWEEnv
from agent_gym.envs.swe.env import oracle_solution
from agent_gym.envs.swe.repo import snapshot_for
from agent_gym.envs.swe.runs import GIT_ENV
from agent_gym.envs.swe.tasks import shipped_tasks
from agent_gym.parsers import format_tool_call
from agent_gym.rollout import collect
from agent_gym.sandbox import LocalSandbox, SandboxLimits


def median_ms(values):
    return statistics.median(values) * 1000


class GoldPolicy:
    """Applies the task's gold patch (found from the session id) with bash, then submits."""

    def __init__(self, tasks):
        self.tasks = tasks

    def act(self, messages, *, session_id, tools=None):
        if any(m["role"] == "tool" for m in messages):
            return format_tool_call("submit", {})
        task = next(t for t in self.tasks if t["id"] in session_id)
        call = oracle_solution(task["patch"])[0][0]
        return format_tool_call(call["name"], call["arguments"])

    async def aact(self, messages, *, session_id, tools=None):
        return self.act(messages, session_id=session_id, tools=tools)

    def close_session(self, session_id):
        pass


def compare_repo(path: str, rounds: int) -> None:
    """Setup of a one-commit base of ``path`` (what reset does) beside a clone of it with its history."""
    snapshot = snapshot_for({"repo_path": path, "commit": "HEAD"})
    limits = SandboxLimits(workspace_mb=1024)
    ours, clone = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        with LocalSandbox(limits, env=GIT_ENV) as box:
            box.write_file("/tmp/base.tar", snapshot.archive)
            assert box.exec("tar -xf /tmp/base.tar -C /app && rm /tmp/base.tar", timeout=120).ok
            ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        with LocalSandbox(limits, env=GIT_ENV, binds=(path,)) as box:
            upload = "git -c safe.directory='*' upload-pack"
            result = box.exec(f'git clone -q -u "{upload}" {path} /app/repo', timeout=300)
            assert result.ok, result.output
            clone.append(time.perf_counter() - t)
    print(f"repository {path}: {snapshot.files} files, one-commit archive {len(snapshot.archive) >> 20} MiB")
    print(f"  setup: sandbox + one-commit base extracted  median {median_ms(ours):7.1f} ms")
    print(f"  setup: sandbox + git clone with history     median {median_ms(clone):7.1f} ms  "
          f"ratio clone/ours {statistics.median(clone) / statistics.median(ours):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setups", type=int, default=10)
    parser.add_argument("--gradings", type=int, default=6)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--repo", default=None)
    args = parser.parse_args()
    if args.repo:
        compare_repo(os.path.abspath(args.repo), args.setups)

    tasks = list(shipped_tasks("train")[:: max(1, len(shipped_tasks("train")) // max(args.gradings, 1))])
    env = SWEEnv(tasks=tasks)
    task = env.tasks[0]
    snapshot = snapshot_for(task["source"], task["bug_patch"])
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the sandbox user reads it
        with tarfile.open(fileobj=BytesIO(snapshot.archive)) as tar:
            tar.extractall(tmp)
        ours, clone = [], []
        env.reset(seed=0, options={"task_index": 0})  # warm the snapshot cache
        for _ in range(args.setups):
            t = time.perf_counter()
            env.reset(seed=0, options={"task_index": 0})
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            with LocalSandbox(env=GIT_ENV, binds=(tmp,)) as box:
                upload = "git -c safe.directory='*' upload-pack"  # the bind belongs to another user
                result = box.exec(f'git clone -q -u "{upload}" {tmp} /app/repo', timeout=60)
                assert result.ok, result.output
                clone.append(time.perf_counter() - t)
        env.release_episode()
    print(f"repository: {task['source']}  files: {snapshot.files}  archive: {len(snapshot.archive) // 1024} KiB")
    print(f"setup (reset: sandbox + base extracted)  median {median_ms(ours):7.1f} ms")
    print(f"setup (sandbox + git clone)              median {median_ms(clone):7.1f} ms  "
          f"ratio clone/ours {statistics.median(clone) / statistics.median(ours):.2f}")

    grading = []
    for t in env.tasks[: args.gradings]:
        report = env.grade_patch(t, t["patch"])
        assert report.resolved, report.as_info()
        grading.append(report.seconds)
    print(f"grading (gold patch, {len(grading)} tasks)       median {median_ms(grading):7.1f} ms  "
          f"max {max(grading) * 1000:.1f} ms")

    picked = [env.tasks[i % len(env.tasks)] for i in range(args.episodes)]
    t = time.perf_counter()
    batch = collect(lambda: SWEEnv(tasks=tasks), GoldPolicy(env.tasks), tasks=picked, n_parallel=args.parallel,
                    progress=False, seed=0)
    wall = time.perf_counter() - t
    solved = sum(traj.steps[-1].info.get("swe", {}).get("resolved", False) for traj in batch)
    print(f"episodes at n_parallel {args.parallel}: {len(batch)} in {wall:.1f} s = {len(batch) / wall:.2f} episodes/s "
          f"(each graded; {solved} resolved)")
    env.close()


if __name__ == "__main__":
    main()
