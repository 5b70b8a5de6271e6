"""Start-up cost of agent_gym: fresh-process wall times, current tree and an older checkout side by side.

Each case runs ``python -c <code>`` in a new process (``--runs`` times, median
reported) with ``PYTHONPATH`` pointing at the tree under test, so the figures
include interpreter start-up and every import the code triggers:

* ``gym.make``: ``import gymnasium as gym, agent_gym; gym.make('agent_gym/ToolUse-v0')``
* ``TrajectoryWrapper``: ``import agent_gym; agent_gym.TrajectoryWrapper``
* ``make_vec async (fork|spawn)``: ``gym.make_vec(..., num_envs=4, vectorization_mode="async")``
  followed by ``reset`` and ``close``: the four workers start, build their env and
  answer once. With ``spawn`` every worker imports agent_gym itself.

The baseline is any other checkout of the repository, e.g.
``git worktree add /tmp/old <commit>``; it is put first on ``PYTHONPATH`` and the
script checks that the subprocess really imported it.

Usage:
    python benchmarks/import_time.py [--old PATH] [--new PATH] [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "aiohttp", "pyarrow")

CASES: dict[str, str] = {
    "gym.make": "import gymnasium as gym, agent_gym; gym.make('agent_gym/ToolUse-v0')",
    "TrajectoryWrapper": "import agent_gym; agent_gym.TrajectoryWrapper",
}
VEC = (
    "import gymnasium as gym, agent_gym\n"
    "envs = gym.make_vec('agent_gym/ToolUse-v0', num_envs=4, vectorization_mode='async',"
    " vector_kwargs={{'context': {context!r}, 'shared_memory': False}})\n"
    "envs.reset(seed=0)\n"
    "envs.close()"
)
CASES["make_vec async (fork)"] = VEC.format(context="fork")
CASES["make_vec async (spawn)"] = VEC.format(context="spawn")


def run(code: str, tree: Path) -> float:
    """Wall seconds of one fresh ``python -c code`` with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tree, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def check_tree(tree: Path) -> list[str]:
    """Import agent_gym from ``tree``; return the heavy modules ``gym.make`` loaded there."""
    code = (
        "import sys, gymnasium as gym, agent_gym; gym.make('agent_gym/ToolUse-v0')\n"
        f"print(agent_gym.__file__); print(*[m for m in {HEAVY!r} if m in sys.modules])"
    )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tree, capture_output=True, text=True)
    path, heavy = (out.stdout.splitlines() + [""])[:2]
    if not Path(path).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree}: the subprocess imported agent_gym from {path}, not from this tree")
    return heavy.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a checkout to compare with (its repository root)")
    parser.add_argument("--new", type=Path, default=REPO, help="the checkout under test (default: this one)")
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per case (default 10)")
    args = parser.parse_args()
    trees = {"current": args.new}
    if args.old is not None:
        trees = {"old": args.old, **trees}
    for label, tree in trees.items():
        print(f"{label}: {tree}; gym.make loads: {', '.join(check_tree(tree)) or 'none of ' + ', '.join(HEAVY)}")
    results: dict[str, dict[str, list[float]]] = {case: {label: [] for label in trees} for case in CASES}
    for case, code in CASES.items():
        run(code, args.new)  # warm the file cache
        for _ in range(args.runs):
            for label, tree in trees.items():  # interleaved, so load changes hit both alike
                results[case][label].append(run(code, tree))
    header = (
        "| case | "
        + " | ".join(f"{label} median" for label in trees)
        + (" | old / current |" if len(trees) > 1 else " |")
    )
    print(f"\nmedian wall time of a fresh process, {args.runs} runs\n")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for case, by_tree in results.items():
        medians = {label: statistics.median(times) for label, times in by_tree.items()}
        row = f"| {case} | " + " | ".join(f"{m * 1000:.0f} ms" for m in medians.values())
        if len(trees) > 1:
            row += f" | {medians['old'] / medians['current']:.1f}x"
        print(row + " |")


if __name__ == "__main__":
    main()
