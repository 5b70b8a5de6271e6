"""Client CPU per turn of a delegating episode against a single-agent one, and export time per segment.

Both episodes have the same number of policy turns (7) and run on ToolUse-v0 with a scripted
token policy (no model: each turn's ids extend the session's previous prompt and sampled ids,
so the token assembly does its full work):

* single agent: six ``calculator`` calls, then the answer;
* delegating: the parent delegates twice, then answers; each subagent calls ``calculator``
  once, then answers (3 parent turns + 2 x 2 subagent turns), through ``DelegateWrapper``.

The figure is process CPU time (every thread: in the ``thread`` kind the subagents run on
threads of their own) per turn, median over rounds; the kinds (single, delegating with the
sub-episodes inline, delegating with them on threads) take turns in blocks of a few episodes in
one process, so each sees the same load. The export part times
``to_slime_samples`` and ``write_jsonl`` per segment over the delegating episodes.

Run::

    python benchmarks/subagents.py --episodes 40 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_gym.envs.tool_use.env import ToolUseEnv
from agent_gym.export import to_slime_samples, write_jsonl
from agent_gym.subagents import DelegateWrapper
from agent_gym.types import PolicyOutput
from agent_gym.wrappers.trajectory import TrajectoryWrapper

TASK = {"id": "t", "question": "What is 6 * 7?", "ground_truth": "42"}
CALC = '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>'
DELEGATE = '<tool_call>{"name": "delegate", "arguments": {"task": "compute 6 * 7"}}</tool_call>'
ANSWER = "<answer>42</answer>"


class ScriptedTokens:
    """A token policy without a model: per session, ids that extend the previous prompt and sampled ids."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = script
        self.state: dict[str, list[int]] = {}
        self.turns: dict[str, int] = {}

    def act(self, messages: Any, *, session_id: str, tools: Any = None) -> PolicyOutput:
        kind = "parent" if "/" not in session_id else "child"
        turn = self.turns.get(session_id, 0)
        self.turns[session_id] = turn + 1
        text = self.script[kind][min(turn, len(self.script[kind]) - 1)]
        prompt = self.state.get(session_id, list(range(100, 160))) + [7] * 12  # the observation's ids
        sampled = [1000 + (i % 500) for i in range(len(text) // 3)] + [2]
        self.state[session_id] = prompt + sampled
        return PolicyOutput(text=text, prompt_token_ids=prompt, token_ids=sampled, logprobs=[-0.5] * len(sampled),
                            sampling={"logprobs_mode": "raw_logprobs"})

    def close_session(self, session_id: str) -> None:
        self.state.pop(session_id, None)
        self.turns.pop(session_id, None)


def episode(env: Any, policy: ScriptedTokens, episode_id: str) -> Any:
    obs, info = env.reset(options={"task": TASK, "episode_id": episode_id})
    tools = info["policy_tools"]
    while True:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, session_id=episode_id, tools=tools))
        tools = info["policy_tools"]
        if terminated or truncated:
            policy.close_session(episode_id)
            return info["trajectory"]


class Kind:
    """One kind of episode, its env and policy made once and reused across blocks."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.count = 0
        if kind == "single":
            self.policy = ScriptedTokens({"parent": [CALC] * 6 + [ANSWER]})
            self.env: Any = TrajectoryWrapper(ToolUseEnv(tasks=[TASK], max_steps=10))
        else:
            self.policy = ScriptedTokens({"parent": [DELEGATE, DELEGATE, ANSWER], "child": [CALC, ANSWER]})
            deadline = kind.split("-")[1]  # delegating-inline / delegating-thread
            self.env = TrajectoryWrapper(DelegateWrapper(
                ToolUseEnv(tasks=[TASK], max_steps=10), self.policy, role="helper",
                tools=list(ToolUseEnv(tasks=[TASK]).tools.values()), deadline=deadline))

    def block(self, episodes: int, keep: list[Any] | None = None) -> float:
        """Process CPU seconds of ``episodes`` episodes (their trajectories appended to ``keep``)."""
        started = time.process_time()
        for _ in range(episodes):
            self.count += 1
            trajectory = episode(self.env, self.policy, f"{self.kind}-{self.count}")
            if keep is not None:
                keep.append(trajectory)
        return time.process_time() - started


TURNS = 7  # policy turns per episode, every kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=40, help="episodes per kind and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=5, help="episodes of one kind before the next kind's")
    args = parser.parse_args()
    kinds = {name: Kind(name) for name in ("single", "delegating-inline", "delegating-thread")}
    for kind in kinds.values():
        kind.block(3)  # warm-up (imports, schemas)
    per_turn: dict[str, list[float]] = {name: [] for name in kinds}
    exports: dict[str, list[float]] = {"slime": [], "jsonl": []}
    for _ in range(args.rounds):
        seconds = dict.fromkeys(kinds, 0.0)
        trajectories: list[Any] = []
        done = 0
        while done < args.episodes:  # the kinds take turns in small blocks: each sees the same load
            n = min(args.block, args.episodes - done)
            for name, kind in kinds.items():
                seconds[name] += kind.block(n, trajectories if name == "delegating-inline" else None)
            done += n
        for name in kinds:
            per_turn[name].append(seconds[name] / (args.episodes * TURNS))
        segments = sum(len(t.segments) for t in trajectories)
        assert segments == 3 * args.episodes, segments
        started = time.perf_counter()
        to_slime_samples(trajectories)
        exports["slime"].append((time.perf_counter() - started) / segments)
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            write_jsonl(trajectories, Path(tmp) / "t.jsonl")
            exports["jsonl"].append((time.perf_counter() - started) / segments)
    single = statistics.median(per_turn["single"])
    print(f"client CPU per turn (median of {args.rounds} rounds): single {single * 1e3:.3f} ms")
    for name in list(kinds)[1:]:
        ratios = [d / s for d, s in zip(per_turn[name], per_turn["single"], strict=True)]  # paired by round
        print(f"  {name}: {statistics.median(per_turn[name]) * 1e3:.3f} ms, "
              f"ratio {statistics.median(per_turn[name]) / single:.3f}x (median paired ratio "
              f"{statistics.median(ratios):.3f}x)")
    for name, values in exports.items():
        print(f"export per segment ({name}): {statistics.median(values) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
