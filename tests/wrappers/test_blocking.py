"""Which envs' ``reset``/``step`` may block (:mod:`agent_gym.wrappers.blocking`), and where the runner runs them."""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.envs.tool_use.builtin_tools import BUILTIN_TOOLS
from agent_gym.envs.tool_use.env import ToolUseEnv
from agent_gym.memory import MemoryConfig
from agent_gym.rollout import collect
from agent_gym.tools import FunctionTool, non_blocking
from agent_gym.wrappers import TrajectoryWrapper
from agent_gym.wrappers.blocking import env_calls_can_block

TOOL_USE = "agent_gym/ToolUse-v0"


def double(x: int) -> int:
    """Double a number.

    Args:
        x: The number.

    Returns:
        Twice ``x``.
    """
    return 2 * x


@non_blocking
def triple(x: int) -> int:
    """Triple a number.

    Args:
        x: The number.

    Returns:
        Three times ``x``.
    """
    return 3 * x


class _Passthrough(gym.Wrapper):
    """A wrapper the check cannot vouch for (it could do anything in ``step``)."""


class _MyToolUse(ToolUseEnv):
    """A subclass that could override any hook: it inherits no promise."""


class _Unsure(ToolUseEnv):
    own_calls_block = False

    def calls_can_block(self) -> bool:
        raise RuntimeError("cannot tell")


def test_tool_use_with_its_own_tools_cannot_block():
    assert env_calls_can_block(gym.make(TOOL_USE)) is False
    assert env_calls_can_block(ToolUseEnv()) is False
    assert env_calls_can_block(gym.make(TOOL_USE, tools=[triple, *BUILTIN_TOOLS])) is False


@pytest.mark.parametrize("tools", [
    [double],  # a plain function may block unless marked
    [FunctionTool(double, time_limit=None)],  # inline, yet unbounded: it may still block
    [FunctionTool(double, blocking=True)],
])
def test_a_tool_that_may_block_makes_the_env_blocking(tools: list[Any]):
    assert env_calls_can_block(gym.make(TOOL_USE, tools=tools)) is True


def test_a_tool_with_an_episode_scope_makes_the_env_blocking():
    tool = FunctionTool(triple)
    tool.episode_scope = object()  # type: ignore[attr-defined] - opening an episode starts a server or a connection
    assert ToolUseEnv(tools=[tool]).calls_can_block() is True


def test_the_promise_is_not_inherited_and_unknown_wrappers_or_envs_may_block():
    assert env_calls_can_block(_MyToolUse()) is True
    assert env_calls_can_block(_Passthrough(gym.make(TOOL_USE))) is True
    assert env_calls_can_block(_Unsure()) is True  # an env that cannot answer is taken to block
    assert env_calls_can_block(gym.make("CartPole-v1")) is True  # no calls_can_block at all
    for env_id in ("agent_gym/Terminal-v0", "agent_gym/RAG-v0", "agent_gym/Conversation-v0"):
        assert env_calls_can_block(gym.make(env_id)) is True, env_id


def test_a_memory_makes_the_trajectory_wrapper_blocking():
    assert TrajectoryWrapper(gym.make(TOOL_USE)).calls_can_block() is False
    assert TrajectoryWrapper(gym.make(TOOL_USE), memory=MemoryConfig()).calls_can_block() is True
    assert TrajectoryWrapper(_Passthrough(gym.make(TOOL_USE))).calls_can_block() is True


class _ThreadOfEachStep(gym.Wrapper):
    """Records the thread of each ``step`` (a wrapper the check cannot vouch for)."""

    threads: list[int] = []

    def step(self, action: Any) -> Any:
        self.threads.append(threading.get_ident())
        return super().step(action)


def test_the_runner_runs_calls_that_cannot_block_on_its_loop_and_the_others_on_workers():
    # The policy runs on the event loop's thread; a tool that cannot block runs where the step runs.
    loop_threads: list[int] = []
    tool_threads: list[int] = []

    @non_blocking
    def recorded_double(x: int) -> int:
        """Double a number, noting the thread that runs the call.

        Args:
            x: The number.

        Returns:
            Twice ``x``.
        """
        tool_threads.append(threading.get_ident())
        return 2 * x

    class Policy:
        async def aact(self, messages, *, session_id, tools=None):
            loop_threads.append(threading.get_ident())
            if messages[-1]["role"] == "tool":
                return "<answer>4</answer>"
            return '<tool_call>{"name": "recorded_double", "arguments": {"x": 2}}</tool_call>'

        def close_session(self, session_id: str) -> None:
            pass

    def inline_env() -> gym.Env:
        return gym.make(TOOL_USE, tools=[recorded_double], max_steps=3)

    results = collect(inline_env, Policy(), num_episodes=6, n_parallel=3, progress=False)
    assert len(results) == 6 and all(len(t.steps) == 2 for t in results)
    assert len(tool_threads) == 6 and set(tool_threads) <= set(loop_threads)

    _ThreadOfEachStep.threads = []
    tool_threads.clear()
    loop_threads.clear()
    results = collect(lambda: _ThreadOfEachStep(inline_env()), Policy(), num_episodes=6, n_parallel=3,
                      progress=False)
    assert len(results) == 6 and len(_ThreadOfEachStep.threads) == 12
    assert not set(_ThreadOfEachStep.threads) & set(loop_threads)
    assert not set(tool_threads) & set(loop_threads)
