"""Client CPU per turn of ``collect``: what one single-turn episode costs the process that drives it.

A reference server in its fake fixed-token mode (``--fake-tokens 40``: no model runs) answers every
``/v1/completions`` request at once, so the figure is the client's own work per episode: env reset,
the prompt's render and tokenization, the request and its answer, the env step and the trajectory
with its tensors. ``time.process_time`` of this process (every thread) over ``--episodes`` episodes
at ``--parallel`` in flight, ``--rounds`` times; medians reported, for independent tasks
(``samples_per_task=1``) and for groups of ``--group`` samples of one task (GRPO's shape: the
members share their first prompt). Beside them, the floor: a plain asyncio loop (``aiohttp`` +
``orjson``, as in ``benchmarks/vllm_real.py``) POSTing the request bodies of the independent
tasks (captured from the policy) to the same server at the same concurrency.

On a 2-core machine the client and a local inference engine share the CPU, so this CPU is taken
from the engine (see ``benchmarks/vllm_real.py`` for the effect on a real vLLM server).

Usage:
    python benchmarks/collect_client_cpu.py [--episodes 256] [--parallel 16] [--rounds 5] [--group 8] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import aiohttp
import orjson
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


def capture_bodies(policy: VLLMPolicy, episodes: int, parallel: int) -> list[dict[str, Any]]:
    """The request bodies of one ``collect`` of independent tasks (the same tasks as the timed ones)."""
    bodies: list[dict[str, Any]] = []
    post = policy.client.post

    async def recording_post(session_id: Any, path: str, make_body: Any, **kwargs: Any) -> Any:
        async def body_for(server: str) -> dict[str, Any]:
            body = await make_body(server)
            bodies.append(dict(body))
            return body

        return await post(session_id, path, body_for, **kwargs)

    policy.client.post = recording_post  # type: ignore[method-assign]
    try:
        cpu_per_turn_ms(policy, episodes, parallel, 1)
    finally:
        del policy.client.post  # the class's method again
    return bodies


def plain_cpu_per_turn_ms(url: str, bodies: list[dict[str, Any]], parallel: int) -> float:
    """Client CPU milliseconds per request of a plain asyncio loop POSTing ``bodies``, ``parallel`` in flight."""

    async def run() -> None:
        queue = iter(bodies)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=parallel)) as session:

            async def worker() -> None:
                for body in queue:
                    async with session.post(url, data=orjson.dumps(body),
                                            headers={"Content-Type": "application/json"}) as resp:
                        payload = await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}: {payload[:300]!r}")
                    orjson.loads(payload)["choices"][0]

            await asyncio.gather(*(worker() for _ in range(parallel)))

    start = time.process_time()
    asyncio.run(run())
    return (time.process_time() - start) / len(bodies) * 1000.0


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
        bodies = capture_bodies(policy, args.episodes, args.parallel)
        url = policy.client.url(policy.client.server_addresses[0], "/v1/completions")
        figures: dict[str, list[float]] = {"independent": [], "grouped": [], "plain": []}
        for _ in range(args.rounds):  # the shapes alternate
            figures["independent"].append(cpu_per_turn_ms(policy, args.episodes, args.parallel, 1))
            figures["grouped"].append(cpu_per_turn_ms(policy, args.episodes, args.parallel, args.group))
            figures["plain"].append(plain_cpu_per_turn_ms(url, bodies, args.parallel))
    finally:
        process.kill()
        process.wait()
    summary = {name: {"median_ms": statistics.median(values), "rounds_ms": [round(v, 3) for v in values]}
               for name, values in figures.items()}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    for name, row in summary.items():
        shape = {"grouped": f"groups of {args.group}", "plain": "plain loop"}.get(name, "independent tasks")
        print(f"{shape:>18}: client CPU per turn {row['median_ms']:.2f} ms (rounds: {row['rounds_ms']})")


if __name__ == "__main__":
    main()
