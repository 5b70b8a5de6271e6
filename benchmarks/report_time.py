"""Time and peak memory of ``load_report`` + ``to_text`` on synthetic trajectory files.

Each episode has 3 steps (growing conversations, one tool call per step, one error
in a quarter of the episodes), two samples per task, 1-2 segments. Files are written
with the export schema (Parquet) or as export records (JSONL), without building
``StepTrajectory`` objects. Every measurement runs in a fresh process; the median of
``--repeat`` runs is printed with each run listed.

    python benchmarks/report_time.py --episodes 10000 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _record(i: int, rng: random.Random) -> dict:
    steps, chat = [], [{"role": "system", "content": "You are a helpful agent." * 4},
                       {"role": "user", "content": f"What is {i} + {i + 1}?"}]
    n_steps = rng.randint(1, 3)
    for s in range(n_steps):
        ok = rng.random() > 0.25
        call = {"name": "calculator", "arguments": {"expression": f"{i}+{i + 1}"}, "ok": ok,
                "error": None if ok else "invalid arguments: missing 'expression'", "output": str(2 * i + 1)}
        info = {"toolcall_reward": 0.1 if ok else -0.1, "res_reward": 0.0, "tool_calls": [call],
                "num_prompt_tokens": 200 + 60 * s, "num_sampled_tokens": rng.randint(10, 200), "llm_time": 0.3}
        if not ok:
            info["error"] = call["error"]
        steps.append({"chat_completions": list(chat), "thought": "", "action": "calc", "observation": "x",
                      "model_response": "<tool_call>...</tool_call>", "info": info, "reward": 0.1,
                      "done": s == n_steps - 1, "mc_return": 0.1})
        chat.append({"role": "assistant", "content": "<tool_call>{...}</tool_call>"})
        chat.append({"role": "tool", "content": str(2 * i + 1)})
    sampled = [1] * 40 + [0] * 20
    seg = {"prompt_tokens": list(range(200)), "response_tokens": list(range(60)), "response_masks": sampled,
           "response_logprobs": [0.0] * 60, "first_step": 0, "last_step": n_steps - 1}
    res = float(rng.random() < 0.4)
    return {
        "_kind": "StepTrajectory", "idx": i, "rollout_id": f"r{i}", "group_id": f"0-{i // 2}", "status": "ENV_DONE",
        "retokenized": False, "trajectory_reward": res + 0.1, "prompt_tokens": seg["prompt_tokens"],
        "response_tokens": seg["response_tokens"], "response_masks": sampled, "response_logprobs": [0.0] * 60,
        "metrics": {"steps": n_steps, "toolcall_reward": 0.1, "res_reward": res, "reward_time": 0.001,
                    "env_time": 0.01, "llm_time": 0.3 * n_steps, "total_time": 1.0},
        "segments": [seg] * rng.randint(1, 2), "chat_completions": chat,
        "task": {"id": f"t{i // 2}", "family": ["arithmetic", "units", "dates", "lookup"][(i // 2) % 4]},
        "steps": steps,
    }


def write_files(n: int, folder: Path) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agent_gym.export import _schema

    rng = random.Random(0)
    jsonl, parquet = folder / f"r{n}.jsonl", folder / f"r{n}.parquet"
    schema = _schema()
    with jsonl.open("w") as fh, pq.ParquetWriter(str(parquet), schema) as writer:
        rows = []
        for i in range(n):
            record = _record(i, rng)
            fh.write(json.dumps(record) + "\n")
            row = {k: record.get(k) for k in schema.names}
            row["reward_is_int"] = False
            for name in ("chat_completions", "task", "steps"):
                row[name] = json.dumps(record[name])
            rows.append(row)
            if len(rows) == 256:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                rows = []
        if rows:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    return jsonl, parquet


_CHILD = """
import resource, sys, time
started = time.perf_counter()
from agent_gym.report import load_report
report = load_report(sys.argv[1])
text = report.to_text()
elapsed = time.perf_counter() - started
print(elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def measure(path: Path) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], check=True, capture_output=True, text=True)
    seconds, mib = out.stdout.split()
    return float(seconds), float(mib)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.episodes:
            files = write_files(n, Path(tmp))
            for path in files:
                runs = [measure(path) for _ in range(args.repeat)]
                times = [t for t, _ in runs]
                print(f"{n:>7} episodes {path.suffix:<8} {path.stat().st_size / 2**20:7.1f} MiB file | "
                      f"median {statistics.median(times):6.2f} s, peak RSS {max(m for _, m in runs):7.0f} MiB | "
                      f"runs {', '.join(f'{t:.2f}' for t in times)}", flush=True)


if __name__ == "__main__":
    main()
