"""Median env overhead of Conversation-v0 per step and per user turn, beside ToolUse-v0's step, in one run.

Every shipped conversation task is played by its oracle on the unwrapped env. Three figures
are medians over all timed calls:

* **tool step**: ``env.step`` of a message with the turn's reference calls (parsing, the
  stateful methods run with their time limit, tool messages appended);
* **turn end**: ``env.step`` of the reply that ends a user turn: replaying the turn's
  reference on the reference instances, comparing every public attribute, checking the
  expected outputs and appending the next user message (the turn's scoring);
* **turn scoring alone**: the replay and state comparison of one turn, timed inside the env;

and, for comparison, ToolUse-v0's ``env.step`` with one ``calculator`` call. Resets are outside
the timed regions.

Usage:
    python benchmarks/conversation_overhead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the env ids)
from agent_gym.envs.conversation import ConversationEnv

TOOL_USE_ACTION = '<tool_call>{"name": "calculator", "arguments": {"expression": "(12.5 + 3) * 4 / 7"}}</tool_call>'


def conversation(rounds: int) -> dict[str, list[float]]:
    env = ConversationEnv()
    times: dict[str, list[float]] = {"tool_step": [], "turn_end": [], "turn_scoring": [], "reset": []}
    original = env._finish_turn

    def timed_finish(info):  # the scoring of a turn (replay + comparison + expected outputs)
        start = time.perf_counter()
        original(info)
        times["turn_scoring"].append(time.perf_counter() - start)

    env._finish_turn = timed_finish  # type: ignore[method-assign]
    for _ in range(rounds):
        for index in range(len(env.tasks)):
            start = time.perf_counter()
            env.reset(options={"task_index": index})
            times["reset"].append(time.perf_counter() - start)
            done = False
            while not done:
                action = env.oracle_action()
                start = time.perf_counter()
                _, _, terminated, truncated, info = env.step(action)
                elapsed = time.perf_counter() - start
                times["turn_end" if info.get("turn_ended") else "tool_step"].append(elapsed)
                done = terminated or truncated
    return times


def tool_use(steps: int) -> list[float]:
    env = gym.make("agent_gym/ToolUse-v0", max_steps=1000).unwrapped
    out = []
    env.reset(seed=0)
    for i in range(steps):
        if i % 4 == 0:
            env.reset(seed=i)
        start = time.perf_counter()
        env.step(TOOL_USE_ACTION)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="passes over the 180 shipped tasks")
    args = parser.parse_args()
    gc.collect()
    conv = conversation(args.rounds)
    tu = tool_use(max(len(conv["tool_step"]), 2000))
    result = {name: {"median_us": round(statistics.median(values) * 1e6, 1), "n": len(values)}
              for name, values in conv.items()}
    result["tool_use_step"] = {"median_us": round(statistics.median(tu) * 1e6, 1), "n": len(tu)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
