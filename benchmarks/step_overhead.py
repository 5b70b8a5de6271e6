"""Median microseconds per ``env.step`` of ToolUse-v0 for a step with one in-process tool call.

Each timed step sends an assistant message with one ``calculator`` call (parsed,
validated, run, result appended as a tool message). The episode is reset every
``--episode-length`` steps, outside the timed region. Measured on the unwrapped
env (no Gymnasium checker wrappers), through
``agent_gym.wrappers.TrajectoryWrapper`` when it is importable, with
``tool_time_limit=None``, and with the calculator declared blocking (as any
plain user function is by default): then each call is handed to a pooled
worker thread so that its time limit can be enforced.

The built-in tools are non-blocking: they run inline in the calling thread (the
time limit is checked after the call), so the first and third variants take the
same path.

Usage:
    python benchmarks/step_overhead.py [--steps 20000] [--episode-length 4]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from typing import Any

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the env ids)

ACTION = '<tool_call>{"name": "calculator", "arguments": {"expression": "(12.5 + 3) * 4 / 7"}}</tool_call>'


def measure(env: Any, steps: int, episode_length: int, seed: int = 0) -> dict[str, float]:
    """Time ``steps`` tool-call steps; returns median/p90/mean in microseconds."""
    timings: list[int] = []
    clock = time.perf_counter_ns
    episode = 0
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        while len(timings) < steps:
            env.reset(seed=seed + episode)
            episode += 1
            for _ in range(episode_length):
                start = clock()
                _, _, terminated, truncated, info = env.step(ACTION)
                timings.append(clock() - start)
                if info["tool_calls"] and not info["tool_calls"][0]["ok"]:
                    raise RuntimeError(f"benchmark tool call failed: {info['tool_calls'][0]['error']}")
                if terminated or truncated:
                    break
            if episode % 2000 == 0:
                gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    us = [t / 1000 for t in timings[:steps]]
    us.sort()
    return {
        "median_us": statistics.median(us),
        "p90_us": us[int(0.9 * len(us))],
        "mean_us": statistics.fmean(us),
        "steps": float(len(us)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="timed steps per configuration (>= 10000)")
    parser.add_argument("--episode-length", type=int, default=4, help="steps per episode before a reset")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    episode_length = min(args.episode_length, 9)
    results: dict[str, dict[str, float]] = {}

    env = gym.make("agent_gym/ToolUse-v0").unwrapped
    measure(env, 500, episode_length)  # warm-up: worker thread, caches
    results["env"] = measure(env, args.steps, episode_length)

    try:
        from agent_gym.wrappers import TrajectoryWrapper
    except ImportError:
        TrajectoryWrapper = None  # noqa: N806
    if TrajectoryWrapper is not None:
        wrapped = TrajectoryWrapper(gym.make("agent_gym/ToolUse-v0").unwrapped)
        measure(wrapped, 500, episode_length)
        results["env+TrajectoryWrapper"] = measure(wrapped, args.steps, episode_length)

    inline = gym.make("agent_gym/ToolUse-v0", tool_time_limit=None).unwrapped
    measure(inline, 500, episode_length)
    results["env, tool_time_limit=None"] = measure(inline, args.steps, episode_length)

    from agent_gym.envs.tool_use.builtin_tools import BUILTIN_TOOLS
    from agent_gym.tools import FunctionTool

    blocking = [FunctionTool(f, blocking=True, time_limit=10.0) for f in BUILTIN_TOOLS]
    threaded = gym.make("agent_gym/ToolUse-v0", tools=blocking).unwrapped
    measure(threaded, 500, episode_length)
    results["env, blocking tool (thread)"] = measure(threaded, args.steps, episode_length)

    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"python {sys.version.split()[0]}, gymnasium {gym.__version__}, {args.steps} steps each, "
              f"reset every {episode_length} steps")
        for name, r in results.items():
            print(f"{name:28s} median {r['median_us']:7.1f} us   p90 {r['p90_us']:7.1f} us   "
                  f"mean {r['mean_us']:7.1f} us")
        if "env+TrajectoryWrapper" not in results:
            print("TrajectoryWrapper not importable: wrapper figure skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
