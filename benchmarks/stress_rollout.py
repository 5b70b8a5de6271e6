"""Stress run: the README's main rollout job on the embedded default model while other processes burn CPU.

Run:  python benchmarks/stress_rollout.py [--runs 3] [--burners 4] [--episodes 32] [--samples-per-task 2]
      [--n-parallel 8] [--max-tokens 256]

Each run is ``agent-gym rollout agent_gym/ToolUse-v0 --episodes 32 --samples-per-task 2`` (the
embedded default model, ``n_parallel`` 8) in its own process, while ``--burners`` processes spin
on the CPU, so the engine's worker thread, the event loop and the environments are descheduled
at random moments and turns join and leave the running batch at ever different decode steps.
A timing-dependent fault in the batch engine (a turn joining a batch whose KV store had used up
its columns once ended 8 of 64 episodes ``POLICY_ERROR`` on a busy machine) shows up here as
episodes with a status other than the env's own endings. The script prints, per run, the wall
time and the episode statuses, and exits 1 if any episode ended ``POLICY_ERROR`` or
``ENV_ERROR``.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_gym.export import read_trajectories

FAILED = ("POLICY_ERROR", "ENV_ERROR")


def _burn(stop: multiprocessing.synchronize.Event) -> None:
    """Spin until ``stop`` is set (one busy core)."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def _rollout(args: argparse.Namespace, out: Path, seed: int) -> tuple[float, int, str]:
    argv = [sys.executable, "-m", "agent_gym", "rollout", "agent_gym/ToolUse-v0", "--episodes", str(args.episodes),
            "--samples-per-task", str(args.samples_per_task), "--n-parallel", str(args.n_parallel),
            "--max-tokens", str(args.max_tokens), "--seed", str(seed), "--out", str(out), "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done.returncode, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rollouts in a row (default 3)")
    parser.add_argument("--burners", type=int, default=4, help="CPU-burning processes during the runs (default 4)")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--samples-per-task", type=int, default=2)
    parser.add_argument("--n-parallel", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()

    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(args.burners)]
    for proc in burners:
        proc.start()
    failures = 0
    print(f"{args.runs} runs of {args.episodes} tasks x {args.samples_per_task} samples, n_parallel "
          f"{args.n_parallel}, {args.burners} CPU burners")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(args.runs):
                out = Path(tmp) / f"run{run}.jsonl"
                wall, code, log = _rollout(args, out, seed=run)
                if code != 0 or not out.exists():
                    print(f"run {run}: agent-gym rollout exited {code}\n{log[-2000:]}")
                    failures += 1
                    continue
                trajectories = read_trajectories(out)
                statuses = collections.Counter(t.status for t in trajectories)
                failed = sum(statuses[s] for s in FAILED)
                failures += failed
                shown = dict(sorted(statuses.items()))
                print(f"run {run}: {len(trajectories)} episodes in {wall:.1f} s, statuses {shown}")
                for t in trajectories:
                    if t.status in FAILED:
                        print(f"  {t.status}: {t.info.get('error', t.info)}")
    finally:
        stop.set()
        for proc in burners:
            proc.join(timeout=5)
    print("FAILED" if failures else "ok: no episode ended POLICY_ERROR or ENV_ERROR")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
