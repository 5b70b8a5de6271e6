"""Ray scale-out: episodes/s and driver memory against shard count and episodes in flight, and a node-loss run.

Run:  python benchmarks/ray_scale.py sweep [--episodes 400] [--shards 1,2,4] [--per-shard 8,32] [--actors 8]
      python benchmarks/ray_scale.py demo [--episodes 10000] [--nodes 4] [--per-shard 32] [--kill-at 0.5]
      (either with [--server HOST:PORT]: a fake-mode reference server already running, e.g. on cores of its own)

Both drive ``VLLMPolicy`` against the reference server in fake mode (``--fake-tokens 8
--fake-latency-ms 50``, its own process) on ``agent_gym/ToolUse-v0`` with ``max_steps=2``.

``sweep`` (one local Ray instance) runs, one after the other and each after a warm-up of its
shards or actors: a single process (``backend="local"``, ``n_parallel`` = each in-flight size);
today's Ray backend (``backend="ray"``: ``--actors`` actors, one episode at a time each); the
sharded backend (``backend="ray_sharded"``) for every shard count x episodes per shard. Per run:
episodes/s, the driver's resident memory (start, peak sampled every 50 ms, end), and the CPU
seconds the client side used (the driver plus, for shards, the shard processes; the fake server's
CPU is left out). ``episodes_per_client_cpu_s`` is the efficiency measure on a small machine: a
shard that needs more CPU per episode than a single process does is less efficient whatever the
core count; ``efficiency_per_core`` is a shard run's episodes per client CPU second over the
single process's at the same episodes in flight per process (see benchmarks/README.md for the
method on a machine with the cores for it).

``demo`` starts a simulated cluster (``ray.cluster_utils.Cluster``: a head without CPUs and
``--nodes`` worker nodes of one CPU and one ``env_worker`` each, all on this machine), one shard
per node, streams ``--episodes`` episodes through :meth:`ShardedRunner.iterate` (written to
nothing: the driver keeps one byte per episode to check each came back exactly once), kills the
node of the first shard once ``--kill-at`` of them are back, and prints the driver's memory at every
tenth, the statuses and the runner's counters.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import threading
import time
from typing import Any

import psutil
from server_process import start_reference_server

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.rollout import collect
from agent_gym.rollout.options import RolloutOptions
from agent_gym.rollout.planning import plan_episodes
from agent_gym.rollout.shard_config import RayShards
from agent_gym.rollout.sharded_runner import ShardedRunner

ENV_ID = "agent_gym/ToolUse-v0"
MAX_STEPS = 2
LATENCY_MS = 50


class RssSampler:
    """The driver's resident memory, sampled every ``period`` seconds on a thread while in a ``with`` block."""

    def __init__(self, period: float = 0.05) -> None:
        self.process = psutil.Process()
        self.period = period
        self.start_mb = self.peak_mb = self.end_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _mb(self) -> float:
        return self.process.memory_info().rss / 2**20

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.peak_mb = max(self.peak_mb, self._mb())

    def __enter__(self) -> RssSampler:
        self.start_mb = self.peak_mb = self._mb()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.end_mb = self._mb()
        self.peak_mb = max(self.peak_mb, self.end_mb)

    def row(self) -> dict[str, float]:
        return {"rss_start_mb": round(self.start_mb, 1), "rss_peak_mb": round(self.peak_mb, 1),
                "rss_end_mb": round(self.end_mb, 1)}


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def _policy(address: str) -> Any:
    from agent_gym.models import load_qwen_tokenizer
    from agent_gym.policy import SamplingParams, VLLMPolicy

    return VLLMPolicy([address], load_qwen_tokenizer(), SamplingParams(max_tokens=16))


def _statuses(trajectories: Any) -> dict[str, int]:
    return dict(collections.Counter(str(t.status) for t in trajectories))


def run_local(policy: Any, episodes: int, in_flight: int) -> dict[str, Any]:
    collect(ENV_ID, policy, num_episodes=in_flight, n_parallel=in_flight, max_steps=MAX_STEPS, progress=False)
    me = [os.getpid()]
    cpu0, started = _cpu_s(me), time.perf_counter()
    with RssSampler() as rss:
        out = collect(ENV_ID, policy, num_episodes=episodes, n_parallel=in_flight, max_steps=MAX_STEPS,
                      progress=False, seed=1)
    wall, cpu = time.perf_counter() - started, _cpu_s(me) - cpu0
    return {"backend": "local", "processes": 1, "in_flight": in_flight, "episodes": episodes,
            "episodes_per_s": round(episodes / wall, 1), "client_cpu_s": round(cpu, 1),
            "episodes_per_client_cpu_s": round(episodes / cpu, 1), **rss.row(), "statuses": _statuses(out)}


def run_ray_today(policy: Any, episodes: int, actors: int) -> dict[str, Any]:
    collect(ENV_ID, policy, num_episodes=actors, n_parallel=actors, max_steps=MAX_STEPS, progress=False,
            backend="ray")  # the actors start (and their imports run) before the clock
    started = time.perf_counter()
    with RssSampler() as rss:
        out = collect(ENV_ID, policy, num_episodes=episodes, n_parallel=actors, max_steps=MAX_STEPS,
                      progress=False, backend="ray", seed=1)
    wall = time.perf_counter() - started
    return {"backend": "ray (one episode per actor)", "processes": actors, "in_flight": actors,
            "episodes": episodes, "episodes_per_s": round(episodes / wall, 1),
            "note": "includes starting the actors: each collect call starts its own", **rss.row(),
            "statuses": _statuses(out)}


def run_sharded(policy: Any, episodes: int, shards: int, per_shard: int) -> dict[str, Any]:
    layout = RayShards(shards=shards, episodes_per_shard=per_shard, num_cpus=0, spread=False)
    runner = ShardedRunner(ENV_ID, policy, RolloutOptions(max_steps=MAX_STEPS), shards=layout)

    async def main() -> dict[str, Any]:
        try:
            await runner.run(plan_episodes(None, shards * per_shard, seed=10_000))  # warm-up: shards and envs
            shard_pids = [s["pid"] for s in await runner.shard_stats()]
            pids = [os.getpid(), *shard_pids]
            cpu0, shard_cpu0, started = _cpu_s(pids), _cpu_s(shard_pids), time.perf_counter()
            statuses: collections.Counter[str] = collections.Counter()
            with RssSampler() as rss:
                async for trajectory in runner.iterate(plan_episodes(None, episodes, seed=1)):
                    statuses[str(trajectory.status)] += 1
            wall, cpu = time.perf_counter() - started, _cpu_s(pids) - cpu0
            shard_cpu = _cpu_s(shard_pids) - shard_cpu0
            return {"backend": "ray_sharded", "driver_cpu_s": round(cpu - shard_cpu, 2),
                    "shards_cpu_s": round(shard_cpu, 2), "processes": shards, "in_flight": shards * per_shard,
                    "per_shard": per_shard, "episodes": episodes, "episodes_per_s": round(episodes / wall, 1),
                    "client_cpu_s": round(cpu, 1), "episodes_per_client_cpu_s": round(episodes / cpu, 1),
                    **rss.row(), "statuses": dict(statuses)}
        finally:
            await runner.aclose()

    return asyncio.run(main())


def sweep(args: argparse.Namespace, address: str) -> list[dict[str, Any]]:
    import ray

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    policy = _policy(address)
    rows: list[dict[str, Any]] = []
    per_shard = [int(x) for x in args.per_shard.split(",")]
    try:
        singles = {}
        for k in per_shard:
            row = run_local(policy, args.episodes, k)
            singles[k] = row["episodes_per_client_cpu_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
        row = run_ray_today(policy, args.episodes, args.actors)
        rows.append(row)
        print(json.dumps(row), flush=True)
        for shards in (int(x) for x in args.shards.split(",")):
            for k in per_shard:
                row = run_sharded(policy, args.episodes, shards, k)
                row["efficiency_per_core"] = round(row["episodes_per_client_cpu_s"] / singles[k], 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        policy.close()
        ray.shutdown()
    return rows


async def _demo_run(cluster: Any, policy: Any, args: argparse.Namespace) -> dict[str, Any]:
    layout = RayShards(shards=args.nodes, episodes_per_shard=args.per_shard, num_cpus=1,
                       resources={"env_worker": 1})
    runner = ShardedRunner(ENV_ID, policy, RolloutOptions(max_steps=MAX_STEPS), shards=layout)
    seen = bytearray(args.episodes)
    statuses: collections.Counter[str] = collections.Counter()
    memory: list[dict[str, Any]] = []
    killed: dict[str, Any] = {}
    process = psutil.Process()
    kill_at = int(args.episodes * args.kill_at)
    started = time.perf_counter()
    first_back = 0.0
    done = 0
    try:
        async for trajectory in runner.iterate(plan_episodes(None, args.episodes, seed=0)):
            if not done:
                first_back = time.perf_counter() - started  # the shards have started
            seen[trajectory.idx] += 1
            statuses[str(trajectory.status)] += 1
            done += 1
            if done % max(1, args.episodes // 10) == 0:
                memory.append({"back": done, "rss_mb": round(process.memory_info().rss / 2**20, 1),
                               "s": round(time.perf_counter() - started, 1)})
                print(json.dumps(memory[-1]), flush=True)
            if done == kill_at:
                victim = runner.shards[0].where.get("node_id")
                node = next(n for n in cluster.list_all_nodes() if n.node_id == victim)
                killed = {"node_id": victim[:12], "at_episode": done, "s": round(time.perf_counter() - started, 1)}
                cluster.remove_node(node, allow_graceful=False)
                print(json.dumps({"killed": killed}), flush=True)
    finally:
        await runner.aclose()
    wall = time.perf_counter() - started
    return {"episodes": args.episodes, "nodes": args.nodes, "per_shard": args.per_shard,
            "back_exactly_once": sum(1 for c in seen if c == 1), "missing": seen.count(0),
            "duplicated": sum(1 for c in seen if c > 1), "statuses": dict(statuses), "killed": killed,
            "stats": vars(runner.stats), "wall_s": round(wall, 1), "first_back_s": round(first_back, 1),
            "episodes_per_s_after_first": round((args.episodes - 1) / max(wall - first_back, 1e-9), 1),
            "memory": memory}


def demo(args: argparse.Namespace, address: str) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": {
        "health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_failure_threshold": 4}})
    policy = _policy(address)
    try:
        for _ in range(args.nodes):
            cluster.add_node(num_cpus=1, resources={"env_worker": 1})
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        report = asyncio.run(_demo_run(cluster, policy, args))
    finally:
        policy.close()
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(report), flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("sweep", help="episodes/s and driver memory per backend, shard count and in-flight size")
    one.add_argument("--episodes", type=int, default=400)
    one.add_argument("--shards", default="1,2,4", help="shard counts (comma-separated)")
    one.add_argument("--per-shard", default="8,32", help="episodes in flight per shard (comma-separated)")
    one.add_argument("--actors", type=int, default=8, help="actors of today's Ray backend")
    two = sub.add_parser("demo", help="simulated cluster, one node killed mid-run")
    two.add_argument("--episodes", type=int, default=10_000)
    two.add_argument("--nodes", type=int, default=4)
    two.add_argument("--per-shard", type=int, default=32)
    two.add_argument("--kill-at", type=float, default=0.5, help="fraction of episodes back when a node is killed")
    for mode in (one, two):
        mode.add_argument("--server", default=None, metavar="HOST:PORT",
                          help="a reference server already running in fake mode (default: start one here)")
    args = parser.parse_args()
    print(json.dumps({"cpus": os.cpu_count(), "python": sys.version.split()[0],
                      "load_avg": [round(x, 1) for x in os.getloadavg()]}), flush=True)
    proc, address = None, args.server
    if address is None:
        proc, address = start_reference_server(["--fake-tokens", "8", "--fake-latency-ms", str(LATENCY_MS)],
                                               timeout=180)
    try:
        if args.mode == "sweep":
            sweep(args, address)
            return 0
        report = demo(args, address)
        ok = report["back_exactly_once"] == args.episodes and report["stats"]["shards_lost"] >= 1
        return 0 if ok else 1
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
