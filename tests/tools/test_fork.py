"""Time-limited tool calls work in a process forked after the parent ran such calls.

A forked child inherits the parent's memory but none of its threads: the tool
worker pool must not hand the child's calls to workers that only exist in the
parent (they would never answer, and every call would end in a timeout).
"""

from __future__ import annotations

import multiprocessing
import sys
from typing import Any

import gymnasium as gym
import pytest
from tools_fixtures import add, sleepy

from agent_gym.env.core import AgentEnv
from agent_gym.parsers import format_tool_call
from agent_gym.tools import FunctionTool

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods() or sys.platform == "darwin",
    reason="needs the fork start method",
)

ENV_ID = "agent_gym_tests/ForkedAdd-v0"
TASKS = [{"id": f"add-{i}", "question": f"What is {i} + 2?", "ground_truth": str(i + 2)} for i in range(4)]


def make_add_env(**kwargs: Any) -> AgentEnv:
    """An env whose only tool, ``add``, is blocking and time-limited (runs on a worker thread)."""
    return AgentEnv(tasks=TASKS, tools=[add], **kwargs)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make_add_env, max_episode_steps=10)


def use_the_pool_in_this_process() -> None:
    tool = FunctionTool(add, time_limit=5.0)
    assert tool._threaded  # noqa: SLF001 - the point is that this call goes through the worker pool
    results = [tool.run({"a": i, "b": 1}) for i in range(3)]
    assert [r.content for r in results] == ["1", "2", "3"]


def child_calls(queue: Any) -> None:
    fast = FunctionTool(add, time_limit=5.0)
    slow = FunctionTool(sleepy, time_limit=0.2)
    results = [fast.run({"a": 40, "b": 2}), fast.run({"a": 1, "b": 1}), slow.run({"seconds": 3.0})]
    queue.put([(r.content, r.error) for r in results])


def test_forked_child_runs_time_limited_tools():
    use_the_pool_in_this_process()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=child_calls, args=(queue,))
    process.start()
    try:
        results = queue.get(timeout=60)
    finally:
        process.join(timeout=60)
    assert process.exitcode == 0
    assert results[0] == ("42", None) and results[1] == ("2", None)
    # The time limit is still enforced in the child.
    content, error = results[2]
    assert error is not None and "time limit" in error
    # The parent's pool still works after the fork.
    use_the_pool_in_this_process()


def test_async_make_vec_with_fork_after_blocking_tools():
    use_the_pool_in_this_process()
    envs = gym.make_vec(
        ENV_ID, num_envs=2, vectorization_mode="async", vector_kwargs={"context": "fork", "shared_memory": False},
        tool_time_limit=10.0,
    )
    try:
        envs.reset(seed=[0, 1], options={"task_index": 0})
        actions = (format_tool_call("add", {"a": 1, "b": 2}), format_tool_call("add", {"a": 20, "b": 22}))
        obs, _, _, _, info = envs.step(actions)
        assert [o[-1]["content"] for o in obs] == ["3", "42"]
        assert [calls[0]["ok"] for calls in info["tool_calls"]] == [True, True]
    finally:
        envs.close()
