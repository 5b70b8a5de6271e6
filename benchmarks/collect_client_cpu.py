"""Client CPU per turn of ``collect``: what one single-turn episode costs the process that drives it.

A reference server in its fake fixed-token mode (``--fake-tokens 40``: no model runs) answers every
``/v1/completions`` request at once, so the figure is the client's own work per episode: env reset,
the prompt's render and tokenization, the request and its answer, the env step and the trajectory
with its tensors. ``time.process_time`` of this process (every thread) over ``--episodes`` episodes
at ``--parallel`` in flight, ``--rounds`` times; medians reported, for independent tasks
(``samples_per_task=1``) and for groups of ``--group`` samples of one task (GRPO's shape: the
members share their first prompt).

On a 2-core machine the client and a local inference engine share the CPU, so this CPU is taken
from the engine (see ``benchmarks/vllm_real.py`` for the effect on a real vLLM server).

Usage:
    python benchmarks/collect_client_cpu.py [--episodes 256] [--parallel 16] [--rounds 5] [--group 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from server_process import start_reference_server

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.envs.tool_use.tasks import generate_tasks
from agent_gym.models import default_model_path
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect

ENV_ID = "agent_gym/ToolUse-v0"


def cpu_per_turn_ms(policy: VLLMPolicy, episodes: int, parallel: int, group: int) -> float:
    """Client CPU milliseconds per single-turn episode of one ``collect`` call."""
    options: dict[str, Any] = {}
    if group > 1:
        options = {"tasks": generate_tasks(per_family=max(1, episodes // group), seed=1)[: episodes // group],
                   "samples_per_task": group}
    else:
        options = {"num_episodes": episodes}
    start = time.process_time()
    trajectories = collect(ENV_ID, policy, n_parallel=parallel, max_steps=1, progress=False, **options)
    return (time.process_time() - start) / len(trajectories) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--group", type=int, default=8, help="samples per task in the grouped runs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    process, address = start_reference_server(["--fake-tokens", "40"])
    try:
        policy = VLLMPolicy([address], str(default_model_path()),
                            SamplingParams(temperature=1.0, top_k=-1, max_tokens=64))
        cpu_per_turn_ms(policy, 32, args.parallel, 1)  # warm-up: imports, tokenizer, connections
        figures: dict[str, list[float]] = {"independent": [], "grouped": []}
        for _ in range(args.rounds):  # the two shapes alternate
            figures["independent"].append(cpu_per_turn_ms(policy, args.episodes, args.parallel, 1))
            figures["grouped"].append(cpu_per_turn_ms(policy, args.episodes, args.parallel, args.group))
    finally:
        process.kill()
        process.wait()
    summary = {name: {"median_ms": statistics.median(values), "rounds_ms": [round(v, 3) for v in values]}
               for name, values in figures.items()}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    for name, row in summary.items():
        shape = f"groups of {args.group}" if name == "grouped" else "independent tasks"
        print(f"{shape:>18}: client CPU per turn {row['median_ms']:.2f} ms (rounds: {row['rounds_ms']})")


if __name__ == "__main__":
    main()
