"""Rollout throughput benchmark: concurrency efficiency, blocking tools, and resource stability.

Run:  python benchmarks/rollout_throughput.py [--quick] [--repeats R]

(a) Episodes/s at n_parallel 1, 8, 64 against a policy that answers after a fixed 50 ms with
    fixed tokens, versus the ideal n_parallel / episode latency; each point is the median of
    ``--repeats`` runs of ``max(4 x n_parallel, 8)`` episodes (each run is one ``collect`` call,
    so it includes building ``n_parallel`` envs and their worker threads). Two policies:
    * ``scheduler``: an in-process policy (``asyncio.sleep(0.05)``, fixed token ids): what the
      rollout loop itself costs;
    * ``http``: ``VLLMPolicy`` against the reference server in fake mode (``--fake-tokens 8
      --fake-latency-ms 50``, its own process): the whole stack, including token bookkeeping
      and HTTP. The CPU used by the client and by the server process is reported (per wall
      second and per turn), since both share this machine's cores: one Python process runs
      at most about one core of Python at a time, so 1 / (client CPU per turn) bounds turns/s.
(b) 64 episodes x 5 steps, each step calling a tool that blocks for 10 ms, with the 50 ms policy:
    median wall time of 5 runs versus the ideal concurrent time 5 x (50 + 10) ms.
(c) 2,000 episodes in one process (10 consecutive batches of 200 through ``VLLMPolicy`` and a
    fake server): resident memory and open file descriptors after each batch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil
from server_process import start_reference_server

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.env.core import AgentEnv
from agent_gym.rollout import collect
from agent_gym.tools import FunctionTool
from agent_gym.types import PolicyOutput

LATENCY = 0.05
TASKS = [{"id": f"b{i}", "question": f"Compute item {i}.", "ground_truth": str(i)} for i in range(16)]
TOOL_CALL = '<tool_call>\n{"name": "wait", "arguments": {"x": 1}}\n</tool_call>'


def wait(x: int) -> int:
    """Block for 10 ms and return x.

    Args:
        x: Any integer.

    Returns:
        x.
    """
    time.sleep(0.010)
    return x


class FixedPolicy:
    """Answers every turn after ``latency`` seconds with the same text and 8 fixed token ids."""

    def __init__(self, latency: float, text: str = "ok ok ok") -> None:
        self.latency = latency
        self.text = text
        self._prompts: dict[str, list[int]] = {}

    async def aact(self, messages: Any, *, session_id: str, tools: Any = None) -> PolicyOutput:
        started = time.perf_counter()
        await asyncio.sleep(self.latency)
        prompt = self._prompts.get(session_id, [1, 2, 3, 4])
        sampled = [11, 12, 13, 14, 15, 16, 17, 2]
        self._prompts[session_id] = prompt + sampled + [5, 6, 7]
        return PolicyOutput(text=self.text, prompt_token_ids=list(prompt), token_ids=sampled, logprobs=[-0.1] * 8,
                            llm_time=time.perf_counter() - started)

    def close_session(self, session_id: str) -> None:
        self._prompts.pop(session_id, None)


def plain_env(max_steps: int = 3) -> AgentEnv:
    return AgentEnv(tasks=TASKS, tools=[FunctionTool(wait, time_limit=None)], max_steps=max_steps)


def start_fake_server(latency_ms: int) -> tuple[subprocess.Popen, str]:
    return start_reference_server(["--fake-tokens", "8", "--fake-latency-ms", str(latency_ms)], timeout=120)


def _cpu_seconds(process: psutil.Process | None) -> float:
    if process is None:
        return 0.0
    times = process.cpu_times()
    return times.user + times.system


def _median_ratio(numerators: list[float], walls: list[float]) -> float:
    return round(statistics.median(c / w for c, w in zip(numerators, walls, strict=True)), 2)


def bench_a(policy: Any, env: Any, label: str, sizes: tuple[int, ...], turns: int, env_kwargs: Any = None,
            repeats: int = 3, server: psutil.Process | None = None) -> list:
    rows = []
    single = None
    client = psutil.Process()
    for n in sizes:
        episodes = max(4 * n, 8)
        collect(env, policy, num_episodes=min(n, 8), n_parallel=n, progress=False, env_kwargs=env_kwargs)  # warm up
        walls, client_cpu, server_cpu = [], [], []
        for _ in range(repeats):
            cpu0, srv0 = _cpu_seconds(client), _cpu_seconds(server)
            started = time.perf_counter()
            result = collect(env, policy, num_episodes=episodes, n_parallel=n, progress=False, env_kwargs=env_kwargs)
            walls.append(time.perf_counter() - started)
            client_cpu.append(_cpu_seconds(client) - cpu0)
            server_cpu.append(_cpu_seconds(server) - srv0)
            assert all(len(t.steps) == turns for t in result), {len(t.steps) for t in result}
        wall = statistics.median(walls)
        rate = episodes / wall
        if single is None:
            single = wall / episodes * 1  # measured single-episode latency at n_parallel=1
        ideal_fixed = n / (turns * LATENCY)
        ideal_measured = n / single
        row = {"policy": label, "n_parallel": n, "episodes": episodes, "repeats": repeats,
               "episodes_per_s": round(rate, 2), "ideal_50ms": round(ideal_fixed, 2),
               "ratio_50ms": round(rate / ideal_fixed, 3), "ratio_measured_latency": round(rate / ideal_measured, 3),
               "runs_episodes_per_s": [round(episodes / w, 1) for w in walls],
               "client_cpu_per_wall": _median_ratio(client_cpu, walls),
               "client_cpu_ms_per_turn": round(statistics.median(client_cpu) / (episodes * turns) * 1000, 3)}
        if server is not None:
            row["server_cpu_per_wall"] = _median_ratio(server_cpu, walls)
            row["server_cpu_ms_per_turn"] = round(statistics.median(server_cpu) / (episodes * turns) * 1000, 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bench_b(repeats: int = 5) -> dict:
    factory = lambda: plain_env(max_steps=5)  # noqa: E731
    policy = FixedPolicy(LATENCY, text=TOOL_CALL)
    collect(factory, policy, num_episodes=8, n_parallel=64, progress=False)
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = collect(factory, policy, num_episodes=64, n_parallel=64, progress=False)
        walls.append(time.perf_counter() - started)
        calls = sum(len(s.info.get("tool_calls") or []) for t in result for s in t.steps)
        assert calls == 64 * 5, calls
    wall = statistics.median(walls)
    ideal = 5 * (LATENCY + 0.010)
    row = {"case": "64 episodes x 5 steps, 10 ms blocking tool", "repeats": repeats, "wall_s": round(wall, 3),
           "ideal_s": round(ideal, 3), "ratio": round(wall / ideal, 3),
           "runs_ratio": [round(w / ideal, 2) for w in walls]}
    print(json.dumps(row), flush=True)
    return row


def bench_c(address: str, batches: int, per_batch: int) -> list:
    from agent_gym.models import load_qwen_tokenizer
    from agent_gym.policy import SamplingParams, VLLMPolicy

    policy = VLLMPolicy([address], load_qwen_tokenizer(), SamplingParams(max_tokens=16))
    process = psutil.Process()
    rows = []
    done = 0
    for b in range(batches):
        result = collect("agent_gym/ToolUse-v0", policy, num_episodes=per_batch, n_parallel=32, max_steps=2,
                         progress=False, seed=b * per_batch)
        done += len(result)
        del result
        rows.append({"episodes": done, "rss_mb": round(process.memory_info().rss / 2**20, 1),
                     "open_fds": process.num_fds(), "threads": process.num_threads()})
        print(json.dumps(rows[-1]), flush=True)
    policy.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller (c): 5 batches of 100")
    parser.add_argument("--repeats", type=int, default=3, help="runs per (a) point; the median is reported")
    args = parser.parse_args()
    print(f"cpus={os.cpu_count()} python={sys.version.split()[0]}", flush=True)
    print("(a) scheduler: in-process 50 ms policy, 3 turns per episode", flush=True)
    bench_a(FixedPolicy(LATENCY), lambda: plain_env(3), "scheduler", (1, 8, 64), 3, repeats=args.repeats)
    proc, address = start_fake_server(int(LATENCY * 1000))
    try:
        from agent_gym.models import load_qwen_tokenizer
        from agent_gym.policy import SamplingParams, VLLMPolicy

        print("(a) http: VLLMPolicy + reference server --fake-latency-ms 50, 3 turns per episode", flush=True)
        policy = VLLMPolicy([address], load_qwen_tokenizer(), SamplingParams(max_tokens=16))
        bench_a(policy, "agent_gym/ToolUse-v0", "http", (1, 8, 64), 3, env_kwargs={"max_steps": 3},
                repeats=args.repeats, server=psutil.Process(proc.pid))
        policy.close()
        print("(b) blocking tool", flush=True)
        bench_b()
        print("(c) resource stability", flush=True)
        bench_c(address, 5 if args.quick else 10, 100 if args.quick else 200)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
