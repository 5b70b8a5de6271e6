"""SWE-v0 grading time per episode: this checkout beside another (e.g. the code before a change), side by side.

One grading is ``env.grade_patch`` of a task's gold patch, what ends every episode that changed the
repository (a fresh sandbox, the patch applied, the tests run, the verdict read). Each side runs in
its own process (``PYTHONPATH`` set to its checkout), grades every task once untimed (the task's base
repository is built and, where the grader runs the base, its base run is cached: the steady state
of training, where each task is graded many times), then ``--gradings`` timed gradings per task.
The sides alternate, ``--rounds`` times, so a busy machine weighs on both alike. The tasks: the
first shipped task of each library (the whole suite runs) and the hidden-test task of the SWE tests
(one small test file).

Run: python benchmarks/swe_grading.py [--rounds 5] [--gradings 2] [--compare PATH]

``PATH`` is another checkout, e.g. ``git worktree add --detach /tmp/before <commit>``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def worker(gradings: int) -> None:
    """Grade the tasks (untimed once, then ``gradings`` times each) and print the timings as JSON."""
    sys.path.insert(0, str(HERE / "tests" / "envs" / "swe"))
    from swe_helpers import hidden_task

    from agent_gym.envs.swe import SWEEnv
    from agent_gym.envs.swe.tasks import shipped_tasks

    tasks = [hidden_task()]
    seen = set()
    for task in shipped_tasks():
        if task["library"] not in seen:
            seen.add(task["library"])
            tasks.append(task)
    env = SWEEnv(tasks=tasks)
    timings: dict[str, list[float]] = {}
    try:
        for task in env.tasks:
            report = env.grade_patch(task, task["patch"])
            assert report.resolved, report.as_info()
        for _ in range(gradings):
            for task in env.tasks:
                started = time.perf_counter()
                report = env.grade_patch(task, task["patch"])
                timings.setdefault(task["id"], []).append(time.perf_counter() - started)
                assert report.resolved, report.as_info()
    finally:
        env.close()
    print(json.dumps(timings))


def run_side(checkout: Path, gradings: int) -> dict[str, list[float]]:
    """One worker process on ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--gradings", str(gradings)],
                          env=env, capture_output=True, text=True, check=True, cwd=str(checkout))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gradings", type=int, default=2, help="timed gradings per task and round")
    parser.add_argument("--compare", help="another checkout to time beside this one")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.gradings)
        return
    sides = {"this checkout": HERE}
    if args.compare:
        sides["compared"] = Path(args.compare).resolve()
    times: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    for i in range(args.rounds):
        for name, checkout in (sides.items() if i % 2 == 0 else reversed(sides.items())):
            for task, values in run_side(checkout, args.gradings).items():
                times[name].setdefault(task, []).extend(values)
        print(f"round {i + 1}/{args.rounds} done (load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
    names = list(sides)
    print(f"{'task':42s}" + "".join(f"{name:>16s}" for name in names) + ("      ratio" if len(names) == 2 else ""))
    overall = {name: [] for name in names}
    for task in times[names[0]]:
        medians = [statistics.median(times[name][task]) for name in names]
        for name in names:
            overall[name].extend(times[name][task])
        ratio = f"{medians[0] / medians[1]:10.2f}x" if len(names) == 2 else ""
        print(f"{task[:42]:42s}" + "".join(f"{m * 1000:14.0f}ms" for m in medians) + ratio)
    medians = [statistics.median(overall[name]) for name in names]
    ratio = f"{medians[0] / medians[1]:10.2f}x" if len(names) == 2 else ""
    print(f"{'all gradings (median)':42s}" + "".join(f"{m * 1000:14.0f}ms" for m in medians) + ratio)


if __name__ == "__main__":
    main()
