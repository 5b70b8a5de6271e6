"""Batches of real ToolUse-v0 episodes played by scripted policies (oracle, error-prone, wrong)."""

from __future__ import annotations

import json

import gymnasium as gym

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.types import PolicyOutput
from agent_gym.wrappers import TrajectoryWrapper


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


ERROR_SCRIPT = [
    # turn 0: one malformed block, one unknown tool
    "<tool_call>{not json}</tool_call>" + call("teleport", where="home"),
    # turn 1: bad arguments, then a tool that raises
    call("calculator", expr="1+1") + call("calculator", expression="1/0"),
    # turn 2: neither a call nor an answer
    "let me think about it",
    "<answer>0</answer>",
]


def play(env, script, *, turn_tokens):
    """Play ``script`` (a list of texts, or "oracle") with PolicyOutputs whose ids extend each turn."""
    obs, info = env.reset(seed=0, options={"task": env.task_for_test})
    prompt = list(range(100, 120))
    turn = 0
    while True:
        text = env.unwrapped.oracle_action() if script == "oracle" else script[min(turn, len(script) - 1)]
        sampled = [5] * (turn_tokens + turn)
        out = PolicyOutput(text=text, prompt_token_ids=list(prompt), token_ids=sampled,
                           logprobs=[-0.5] * len(sampled), llm_time=0.01 * (turn + 1))
        obs, reward, terminated, truncated, info = env.step(out)
        if terminated or truncated:
            return info["trajectory"]
        prompt = prompt + sampled + [7, 7, 7]
        turn += 1


def make_batch(num_tasks=6, samples_per_task=2, *, start=0, kinds=("oracle", "errors", "wrong"), env_id=None):
    """``num_tasks * samples_per_task`` episodes; sample ``s`` of task ``i`` plays ``kinds[(i + s) % len]``."""
    from agent_gym.envs.tool_use.tasks import builtin_tasks

    tasks = builtin_tasks()
    env = TrajectoryWrapper(gym.make("agent_gym/ToolUse-v0", max_steps=6))
    out = []
    for i in range(num_tasks):
        task = tasks[(start + i) * 37 % len(tasks)]
        for s in range(samples_per_task):
            kind = kinds[(i + s) % len(kinds)]
            env.task_for_test = task
            trajectory = play(env, "oracle" if kind == "oracle" else
                              (ERROR_SCRIPT if kind == "errors" else ["<answer>-1</answer>"]), turn_tokens=3 + s)
            trajectory.idx = len(out)
            trajectory.group_id = f"0-{i}-{task['id']}"
            if env_id is not None:  # as files written before trajectories recorded their env id
                trajectory.env_id = ""
                trajectory.task = {**trajectory.task, "env_id": env_id}
            out.append(trajectory)
    return out
