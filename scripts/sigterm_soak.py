"""SIGTERM ``agent-gym rollout`` at random moments and check each stop is clean.

Each run starts ``agent-gym rollout agent_gym/ToolUse-v0 --episodes N`` (the embedded default
model, offline), sends SIGTERM after a random delay (from the start, so some land while the model
loads, most while episodes run), and checks: exit status 143, no abort message, and every task in
the output file exactly once, each with a status (finished, or ``TIMEOUT`` "stopped: ..." for the
episodes the stop cut short or never started). A run that ends before the signal is counted apart.

Usage:
    python scripts/sigterm_soak.py [--runs 20] [--episodes 64] [--max-delay 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def one_run(episodes: int, delay: float, out: Path) -> dict:
    """Start a rollout, SIGTERM it after ``delay`` seconds; what happened."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agent_gym", "rollout", "agent_gym/ToolUse-v0", "--episodes", str(episodes),
         "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    time.sleep(delay)
    signalled = process.poll() is None
    if signalled:
        process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=300)
    from agent_gym.export import read_trajectories

    records = read_trajectories(out) if out.exists() else []
    indices = sorted(t.idx for t in records)
    loaded = "policy:" in output
    return {
        "delay": delay, "signalled": signalled, "code": process.returncode, "loaded": loaded,
        "abort": "terminate called" in output or process.returncode in (-6, 134),
        # before the model has loaded nothing is written (no task was handed in yet)
        "all_tasks": indices == list(range(episodes)) if loaded else not records,
        "statuses": Counter(str(t.status) for t in records),
        "output_tail": output[-400:],
    }


def main() -> None:
    """Run the soak and print its summary."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--max-delay", type=float, default=20.0, help="longest delay before the signal (s)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            result = one_run(args.episodes, rng.uniform(1.0, args.max_delay), Path(tmp) / f"run{i}.jsonl")
            results.append(result)
            ok = (not result["signalled"] and result["code"] == 0) or (result["code"] == 143 and not result["abort"]
                                                                        and result["all_tasks"])
            print(f"run {i:2d}: SIGTERM after {result['delay']:5.1f}s signalled={result['signalled']} "
                  f"exit={result['code']} all_tasks={result['all_tasks']} {dict(result['statuses'])} "
                  f"{'ok' if ok else 'FAILED'}", flush=True)
            if not ok:
                print(result["output_tail"], flush=True)
    signalled = [r for r in results if r["signalled"]]
    clean = [r for r in signalled if r["code"] == 143 and not r["abort"] and r["all_tasks"]]
    print(f"{len(signalled)} runs signalled, {len(clean)} clean (exit 143, every task in the file); "
          f"{len(results) - len(signalled)} ended before the signal")
    sys.exit(0 if len(clean) == len(signalled) else 1)


if __name__ == "__main__":
    main()
