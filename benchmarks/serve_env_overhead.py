"""An env step through ``agent-gym serve-env`` (OpenEnv's WebSocket protocol, loopback) against in process.

The same ToolUse-v0 episodes (each task's reference solution: its tool calls, then the answer)
run three ways, interleaved in rounds so that the machine's load hits each alike:

* ``in process``: ``gym.make("agent_gym/ToolUse-v0")``;
* ``OpenEnvEnv``: :class:`agent_gym.envs.openenv.OpenEnvEnv` against ``agent-gym serve-env``
  (a separate process), as ``collect`` would step it;
* ``OpenEnv client``: OpenEnv's own ``GenericEnvClient`` against the same server (what the
  protocol costs without agent_gym's client side).

Reported: the median wall time of one ``step`` and the time added to the in-process step.

Usage: ``python benchmarks/serve_env_overhead.py [--episodes 40] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_overhead import _port, _spawn  # noqa: E402

import agent_gym  # noqa: E402,F401 - registers the ids


def _turns(task: dict[str, Any]) -> list[str]:
    turns = ["".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls) for calls in task["solution"]]
    return [*turns, f"<answer>{task['ground_truth']}</answer>"]


def _gym_steps(env: Any, seeds: range) -> list[float]:
    times = []
    for seed in seeds:
        _, info = env.reset(seed=seed)
        for turn in _turns(info["task"]):
            t0 = time.perf_counter()
            env.step(turn)
            times.append(time.perf_counter() - t0)
    return times


def _client_steps(client: Any, seeds: range) -> list[float]:
    times = []
    for seed in seeds:
        result = client.reset(seed=seed)
        for turn in _turns(result.observation["info"]["task"]):
            t0 = time.perf_counter()
            client.step({"message": turn})
            times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=40, help="episodes per variant and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args()
    from openenv.core.generic_client import GenericEnvClient

    from agent_gym.envs.openenv import OpenEnvEnv

    port = _port()
    server = _spawn([sys.executable, "-m", "agent_gym", "serve-env", "agent_gym/ToolUse-v0", "--port", str(port)],
                    port)
    url = f"http://127.0.0.1:{port}"
    time.sleep(1.0)
    try:
        local = gym.make("agent_gym/ToolUse-v0")
        remote = OpenEnvEnv(url)
        client = GenericEnvClient(base_url=url).sync()
        client.connect()
        seeds = range(args.episodes)
        _gym_steps(local, range(4)), _gym_steps(remote, range(4)), _client_steps(client, range(4))  # warm-up
        results: dict[str, list[float]] = {"in process": [], "OpenEnvEnv (serve-env)": [], "OpenEnv client": []}
        for _ in range(args.rounds):
            results["in process"] += _gym_steps(local, seeds)
            results["OpenEnvEnv (serve-env)"] += _gym_steps(remote, seeds)
            results["OpenEnv client"] += _client_steps(client, seeds)
        base = statistics.median(results["in process"])
        print(f"ToolUse-v0 reference solutions, {args.episodes} episodes x {args.rounds} rounds "
              f"({len(results['in process'])} steps per variant)")
        print("| variant | median step | added to in process |")
        print("|---|---|---|")
        for name, times in results.items():
            median = statistics.median(times)
            added = "-" if name == "in process" else f"{(median - base) * 1e3:.2f} ms"
            print(f"| {name} | {median * 1e3:.2f} ms | {added} |")
        remote.close()
        client.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
