"""Error kinds read from the step info a real env records."""

import json
import time

import pytest

from agent_gym.core import AgentEnv
from agent_gym.report import ERROR_KINDS, classify_call_error, step_errors
from agent_gym.tools import FunctionTool


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First addend.
        b: Second addend.
    """
    return a + b


def nap(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return "awake"


def boom() -> str:
    """Always fails."""
    raise RuntimeError("kaput")


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture
def env():
    tools = [FunctionTool(add, time_limit=None), FunctionTool(nap, time_limit=0.05), FunctionTool(boom)]
    env = AgentEnv(tasks=[{"id": "t", "question": "What is 1 + 2?", "ground_truth": "3"}], tools=tools,
                   max_steps=20, max_tool_calls_per_step=3)
    env.reset(seed=0)
    return env


def kinds_of(env, text):
    *_, info = env.step(text)
    return step_errors(info)


@pytest.mark.parametrize("text, expected", [
    (call("add", a=1, b=2), []),
    ("<tool_call>{oops}</tool_call>", [("malformed_call", None)]),
    ("<tool_call>{oops}</tool_call><tool_call></tool_call>", [("malformed_call", None)] * 2),
    ('<tool_call>{"name": "add", "arguments": 5}</tool_call>', [("malformed_call", None)]),
    ("done?</tool_call>", [("malformed_call", None)]),
    (call("teleport"), [("unknown_tool", "teleport")]),
    (call("add", a="x", b=2), [("bad_arguments", "add")]),
    (call("add", a=1), [("bad_arguments", "add")]),
    (call("boom"), [("tool_error", "boom")]),
    (call("nap", seconds=1.0), [("timeout", "nap")]),
    ("just chatting", [("no_action", None)]),
    (call("add", a=1, b=2) * 4, [("too_many_calls", "add")]),
    ("<tool_call>{oops}</tool_call>" + call("teleport") + call("add", a=1, b=2) + call("boom"),
     [("malformed_call", None), ("unknown_tool", "teleport"), ("tool_error", "boom")]),
])
def test_step_errors_from_recorded_info(env, text, expected):
    assert kinds_of(env, text) == expected


def test_every_kind_is_listed():
    assert set(ERROR_KINDS) == {"malformed_call", "unknown_tool", "bad_arguments", "tool_error", "timeout",
                                "output_limit", "too_many_calls", "no_action"}
    from agent_gym.tools import ERROR_KINDS as RECORDED_KINDS

    assert set(RECORDED_KINDS) <= set(ERROR_KINDS)


def test_a_recorded_kind_wins_over_the_message():
    info = {"tool_calls": [{"name": "x", "ok": False, "error": "something odd", "kind": "timeout"}],
            "error": "something odd"}
    assert step_errors(info) == [("timeout", "x")]
    assert classify_call_error("something odd") == "tool_error"


def test_an_episode_error_is_not_an_observation():
    # A step closed by a policy failure or an episode timeout has no tool_calls record.
    assert step_errors({"error": "episode exceeded episode_timeout=1s"}) == []
