"""A sharded collection on a simulated multi-node Ray cluster, one node killed mid-run.

Run as a script (``python tests/rollout/ray_cluster_run.py --episodes 240``) by
``tests/rollout/test_ray_cluster.py``: a ``ray.cluster_utils.Cluster`` cannot share a process with
another Ray instance. A head node without CPUs and ``--nodes`` worker nodes of one CPU and one
``env_worker`` each; one shard per worker node (the shards need ``env_worker``); once half of the
episodes are back, the node of the first shard is removed (its raylet and the shard's worker
killed). Prints one JSON line and exits 0 when every episode came back exactly once and ran to its end, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray  # noqa: E402
import rollout_fakes  # noqa: E402
from ray import cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from rollout_fakes import ScriptedPolicy, make_add_env, make_tasks  # noqa: E402

from agent_gym.rollout.options import RolloutOptions  # noqa: E402
from agent_gym.rollout.planning import plan_episodes  # noqa: E402
from agent_gym.rollout.shard_config import RayShards  # noqa: E402
from agent_gym.rollout.sharded_runner import ShardedRunner  # noqa: E402

FAST_NODE_DEATH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                   "health_check_failure_threshold": 4}
"""The head notices a dead node within about two seconds (the default is tens of seconds)."""


async def _collect(cluster: Cluster, episodes: int, per_shard: int, nodes: int) -> dict[str, Any]:
    layout = RayShards(shards=nodes, num_cpus=1, resources={"env_worker": 1}, episodes_per_shard=per_shard)
    runner = ShardedRunner(make_add_env, ScriptedPolicy(delay=0.05), RolloutOptions(), shards=layout)
    seen: list[int] = []
    killed: dict[str, Any] = {}

    def on_episode(trajectory: Any) -> None:
        seen.append(trajectory.idx)
        if len(seen) == episodes // 2:
            victim = runner.shards[0].where.get("node_id")
            node = next(n for n in cluster.list_all_nodes() if n.node_id == victim)
            killed.update(node_id=victim, at=len(seen))
            cluster.remove_node(node, allow_graceful=False)  # kill it (its shard's episodes are in flight)
            # the shard's worker notices its raylet's death only after a while and the head after
            # its health checks: on a fast machine the shard could finish its episodes first, so
            # its process dies with the node here, as it would on a real machine that went away
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(runner.shards[0].where.get("pid"), signal.SIGKILL)

    started = time.perf_counter()
    try:
        out = await runner.run(plan_episodes(make_tasks(episodes), None, 1, 0), on_episode=on_episode)
    finally:
        await runner.aclose()
    counts = collections.Counter(t.idx for t in out)
    return {"episodes": episodes, "returned": len(out), "unique": len(counts),
            "seen_by_callback": len(seen), "seen_unique": len(set(seen)),
            "statuses": dict(collections.Counter(str(t.status) for t in out)),
            "killed": killed, "stats": vars(runner.stats), "wall_s": round(time.perf_counter() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=240)
    parser.add_argument("--nodes", type=int, default=2, help="worker nodes, one shard each (default 2)")
    parser.add_argument("--per-shard", type=int, default=16, help="episodes in flight per shard")
    args = parser.parse_args()
    cloudpickle.register_pickle_by_value(rollout_fakes)  # the test helpers are not importable in Ray workers
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": FAST_NODE_DEATH})
    try:
        for _ in range(args.nodes):
            cluster.add_node(num_cpus=1, resources={"env_worker": 1})
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        report = asyncio.run(_collect(cluster, args.episodes, args.per_shard, args.nodes))
    finally:
        ray.shutdown()
        cluster.shutdown()
    ok = (report["returned"] == report["unique"] == report["seen_unique"] == report["seen_by_callback"]
          == args.episodes and report["statuses"] == {"ENV_DONE": args.episodes}
          and report["stats"]["shards_lost"] >= 1 and bool(report["killed"]))
    print(json.dumps({"ok": ok, **report}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
