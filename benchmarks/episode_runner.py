"""Client CPU per episode of a RolloutStream, and the envs it builds.

A ``RolloutStream`` of ``--groups`` groups of ``--samples`` episodes at ``--concurrency`` episodes
in flight (``n_parallel`` the same) runs ToolUse-v0 against a fast fake policy (an async policy
whose first turn calls the calculator and whose second answers: no server, no model), so what is
measured is the client: scheduling, env construction, reset/step and recording. Each run is a
fresh process; it reports the process CPU time (user + system, ``time.process_time``) divided by
the episodes, the wall time, and the ``gym.make`` calls.

``--compare OLD_TREE`` runs the same measurement on another source tree of the package (e.g. a
``git worktree`` of an earlier commit) alternating with this one, ``--rounds`` times each, and
prints the medians side by side.

Usage:
    python benchmarks/episode_runner.py
    python benchmarks/episode_runner.py --compare ../agent_gym-before --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

__all__ = ["main", "measure"]

HERE = Path(__file__).resolve().parent.parent


def measure(groups: int, samples: int, concurrency: int) -> dict[str, float]:
    """Run the stream in this process and return its figures (the package is the one on ``sys.path``)."""
    import json as _json
    import time

    import gymnasium as gym

    import agent_gym  # noqa: F401  (registers the envs)
    from agent_gym.envs.tool_use.tasks import generate_tasks
    from agent_gym.rollout import RolloutStream

    calls = []
    make = gym.make

    def counting_make(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[0])
        return make(*args, **kwargs)

    gym.make = counting_make  # type: ignore[assignment]

    class FastPolicy:
        """Calls the calculator on the first turn, answers on the second; no I/O."""

        async def aact(self, messages, *, session_id, tools=None):  # type: ignore[no-untyped-def]
            if messages[-1]["role"] == "tool":
                return f"<answer>{messages[-1]['content'].strip()}</answer>"
            call = _json.dumps({"name": "calculator", "arguments": {"expression": "1 + 2"}})
            return f"<tool_call>\n{call}\n</tool_call>"

        def close_session(self, session_id: str) -> None:
            pass

    pool = generate_tasks(per_family=max(1, groups // 4 + 1), seed=1)
    tasks = [pool[i % len(pool)] for i in range(groups)]
    started_cpu, started_wall = time.process_time(), time.perf_counter()
    with RolloutStream("agent_gym/ToolUse-v0", FastPolicy(), tasks, samples_per_task=samples,
                       concurrency=concurrency, n_parallel=concurrency, max_steps=4) as stream:
        episodes = sum(len(group.trajectories) for group in stream)
    cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started_wall
    return {"episodes": episodes, "cpu_ms_per_episode": 1000 * cpu / episodes, "wall_s": wall,
            "gym_make_calls": len(calls)}


def _run(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    """One measurement in a fresh process on the package at ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--groups", str(args.groups),
               "--samples", str(args.samples), "--concurrency", str(args.concurrency)]
    out = subprocess.run(command, cwd=tree, env=env, check=False, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the run on {tree} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Parse the arguments and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="runs per tree (alternating with --compare)")
    parser.add_argument("--compare", metavar="OLD_TREE", default=None, help="another source tree of the package")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure(args.groups, args.samples, args.concurrency)), flush=True)
        os._exit(0)  # daemon worker threads may still hold locks: skip the interpreter's shutdown
    trees = {"now": HERE}
    if args.compare:
        trees = {"before": Path(args.compare).resolve(), "now": HERE}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            results[name].append(_run(tree, args))
    print(f"RolloutStream {args.groups} groups x {args.samples} at concurrency/n_parallel {args.concurrency}, "
          f"{args.rounds} runs per tree (medians)")
    print(f"{'tree':8} {'CPU ms/episode':>15} {'wall s':>8} {'gym.make calls':>15}  runs (CPU ms/episode)")
    for name, runs in results.items():
        cpu = [r["cpu_ms_per_episode"] for r in runs]
        print(f"{name:8} {statistics.median(cpu):15.2f} {statistics.median(r['wall_s'] for r in runs):8.2f} "
              f"{statistics.median(r['gym_make_calls'] for r in runs):15.0f}  {', '.join(f'{c:.2f}' for c in cpu)}")
    if args.compare:
        before = statistics.median(r["cpu_ms_per_episode"] for r in results["before"])
        now = statistics.median(r["cpu_ms_per_episode"] for r in results["now"])
        print(f"now / before CPU per episode: {now / before:.2f}")


if __name__ == "__main__":
    main()
