"""Embedded default model benchmark: local batched generation and the reference server.

Run:  python benchmarks/embedded_model.py [--episodes 32] [--sizes 1,8,32] [--repeats 1] [--no-server] [--no-reuse-kv]
      [--model DIR]

(a) ``TransformersPolicy`` on the embedded default (``default_model_path()``): episodes/s and
    sampled tokens/s of ``--episodes`` held-out ToolUse-v0 episodes (8 per family) at each
    ``n_parallel``, temperature 1.0, full distribution. Concurrent turns are decoded as one
    batch, so ``n_parallel`` > 1 is faster; the ratio to ``n_parallel`` 1 is printed.
    ``--no-reuse-kv`` encodes every turn's whole prompt (``TransformersPolicy(reuse_kv=False)``).
(b) The same through ``agent-gym serve``'s reference server (its own process, batched
    decoding) with ``VLLMPolicy`` in token mode.
(c) The training script's wall time, as recorded in the shipped model's ``training.json``.

Each point is the median of ``--repeats`` runs; every run is one ``collect`` call, and the sizes
take turns (1, 8, 32, 1, 8, 32, ...) so that a change of load on the machine hits them alike.
On a shared machine pin the process to one core, e.g.
``OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/embedded_model.py --repeats 5 --no-server``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from server_process import start_reference_server

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.models import default_model_path
from agent_gym.models.evaluate_tiny_agent import held_out_tasks, score_trajectories
from agent_gym.policy import SamplingParams, TransformersPolicy, VLLMPolicy
from agent_gym.rollout import collect


def _tasks(episodes: int) -> list[dict[str, Any]]:
    per_family = max(1, -(-episodes // 4))
    return held_out_tasks(per_family)[:episodes]


def run_point(make_policy: Any, tasks: list[dict[str, Any]], n_parallel: int) -> dict[str, float]:
    policy = make_policy()
    try:
        started = time.perf_counter()
        trajectories = collect("agent_gym/ToolUse-v0", policy, tasks=tasks, n_parallel=n_parallel,
                               progress=False, max_steps=6)
        wall = time.perf_counter() - started
    finally:
        policy.close()
    tokens = sum(int(t.response_masks.sum()) for t in trajectories)
    return {"wall_s": wall, "episodes_per_s": len(trajectories) / wall, "tokens_per_s": tokens / wall,
            "success": score_trajectories(trajectories)["all"]["success"]}


def bench(label: str, make_policy: Any, tasks: list[dict[str, Any]], sizes: list[int], repeats: int) -> dict:
    """Run every size once per round, ``repeats`` rounds (so a load change on the machine hits all
    sizes alike), and print the medians and the ratio of each size's median to the first's."""
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            runs[n].append(run_point(make_policy, tasks, n))
    rows = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in runs.items()}
    base = rows[sizes[0]]["episodes_per_s"]
    print(f"\n({label}) {len(tasks)} episodes per run, median of {repeats} (sizes interleaved)")
    print(f"{'n_parallel':>10} {'episodes/s':>11} {'tokens/s':>9} {'x vs first':>10} {'success':>8}  runs (episodes/s)")
    for n, row in rows.items():
        each = " ".join(f"{r['episodes_per_s']:.2f}" for r in runs[n])
        print(f"{n:>10} {row['episodes_per_s']:>11.2f} {row['tokens_per_s']:>9.1f} "
              f"{row['episodes_per_s'] / base:>10.2f} {row['success']:>8.0%}  {each}")
        row["x_vs_first"] = row["episodes_per_s"] / base
    return {str(n): row for n, row in rows.items()}


def start_server(model: str) -> tuple[subprocess.Popen, str]:
    proc, address = start_reference_server(["--model", model])
    return proc, f"http://{address}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--sizes", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-server", action="store_true", help="skip (b)")
    parser.add_argument("--no-reuse-kv", action="store_true",
                        help="(a) encodes every turn's whole prompt: no session or prompt-head KV cache")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    parser.add_argument("--model", default=None,
                        help="model directory (default: the embedded default, default_model_path())")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    model = str(args.model or default_model_path())
    tasks = _tasks(args.episodes)
    sampling = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, max_tokens=128, seed=0)
    report: dict[str, Any] = {}
    report["transformers_policy"] = bench(
        "a: TransformersPolicy, embedded default",
        lambda: TransformersPolicy(model, sampling=sampling, reuse_kv=not args.no_reuse_kv),
        tasks, sizes, args.repeats)
    if not args.no_server:
        proc, url = start_server(model)
        try:
            report["reference_server"] = bench(
                "b: reference server + VLLMPolicy", lambda: VLLMPolicy(url, model, sampling), tasks, sizes,
                args.repeats)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    record = json.loads((Path(model) / "training.json").read_text())
    report["training"] = {k: record.get(k) for k in ("wall_seconds", "train_seconds", "train_cpu_seconds",
                                                     "torch_threads", "command")}
    print(f"\n(c) training script (recorded in training.json): {record.get('wall_seconds')} s wall, "
          f"{record.get('train_seconds')} s of steps, {record.get('torch_threads')} torch thread(s)")
    if args.json:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
