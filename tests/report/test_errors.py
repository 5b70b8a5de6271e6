"""Error kinds read from the step info a real env records."""

import json
import time

import pytest

from agent_gym.env.core import AgentEnv
from agent_gym.errors import ERROR_KINDS
from agent_gym.report import classify_call_error, step_errors
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
    tools = [FunctionTool(add, time_limit=None), FunctionTool(nap, time_limit=0.05), FunctionTool(boom),
             FunctionTool(shout, max_output_chars=50)]
    env = AgentEnv(tasks=[{"id": "t", "question": "What is 1 + 2?", "ground_truth": "3"}], tools=tools,
                   max_steps=20, max_tool_calls_per_step=3)
    env.reset(seed=0)
    return env


def kinds_of(env, text):
    *_, info = env.step(text)
    errors = step_errors(info)
    assert [kind for kind, _ in errors] == info.get("error_kinds", [])
    assert ("error" in info) == bool(errors)
    return errors


def shout(text: str) -> str:
    """Repeat the text many times.

    Args:
        text: What to repeat.
    """
    return text * 100


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
    (call("shout", text="la"), [("output_limit", "shout")]),
    ("just chatting", [("no_action", None)]),
    (call("add", a=1, b=2) * 4, [("too_many_calls", "add")]),
    ("<tool_call>{oops}</tool_call>" + call("teleport") + call("add", a=1, b=2) + call("boom"),
     [("malformed_call", None), ("unknown_tool", "teleport"), ("tool_error", "boom")]),
])
def test_step_errors_from_recorded_info(env, text, expected):
    assert kinds_of(env, text) == expected


def _reworded(value):
    """The same info with every message replaced by words no classifier knows."""
    if isinstance(value, dict):
        return {k: ("zzz" if k in ("error", "output") and isinstance(v, str) else
                    ["zzz"] * len(v) if k == "parse_errors" else _reworded(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_reworded(v) for v in value]
    return value


def test_recorded_kinds_are_read_without_the_wording(env):
    text = ("<tool_call>{oops}</tool_call>" + call("teleport") + call("add", a="x", b=2) + call("nap", seconds=1.0)
            + call("boom"))
    *_, info = env.step(text)
    expected = [("malformed_call", None), ("unknown_tool", "teleport"), ("bad_arguments", "add"),
                ("timeout", "nap"), ("too_many_calls", "boom")]
    assert step_errors(info) == expected
    assert step_errors(_reworded(info)) == expected
    *_, info = env.step("just chatting")
    assert step_errors(_reworded(info)) == [("no_action", None)]


def test_kinds_are_one_enum_shared_by_tools_core_and_report():
    import agent_gym.errors
    from agent_gym.errors import ToolErrorKind

    assert set(ERROR_KINDS) == {"malformed_call", "unknown_tool", "bad_arguments", "tool_error", "timeout",
                                "output_limit", "too_many_calls", "no_action"}
    assert ERROR_KINDS is agent_gym.errors.ERROR_KINDS
    assert ERROR_KINDS == tuple(k.value for k in ToolErrorKind)


def test_a_recorded_kind_wins_over_the_message():
    info = {"tool_calls": [{"name": "x", "ok": False, "error": "unknown tool 'x'", "kind": "timeout"}],
            "error": "unknown tool 'x'"}
    assert step_errors(info) == [("timeout", "x")]
    assert classify_call_error("unknown tool 'x'") == "unknown_tool"
    assert classify_call_error("something odd") == "tool_error"


def test_files_written_before_kinds_were_recorded():
    # No error_kinds, no call kinds, no parse_errors: the tool layer's wording of the time is read.
    info = {"tool_calls": [{"name": "t", "ok": False, "error": "unknown tool 't'; available tools: add"},
                           {"name": "add", "ok": False, "error": "invalid arguments: tool 'add' argument 'a'"}],
            "error": "tool call 1: invalid JSON; unknown tool 't'; available tools: add; "
                     "invalid arguments: tool 'add' argument 'a'"}
    assert step_errors(info) == [("malformed_call", None), ("unknown_tool", "t"), ("bad_arguments", "add")]
    assert step_errors({"tool_calls": [], "error": "the message has no <tool_call> and no <answer>"}) == [
        ("no_action", None)]
    # Call kinds and a parse error count, as the gateway records them.
    info = {"tool_calls": [{"name": "x", "ok": False, "error": "zzz", "kind": "bad_arguments"}],
            "parse_errors": ["zzz", "zzz"], "error": "zzz"}
    assert step_errors(info) == [("malformed_call", None)] * 2 + [("bad_arguments", "x")]


def test_an_episode_error_is_not_an_observation():
    # A step closed by a policy failure or an episode timeout has no tool_calls record.
    assert step_errors({"error": "episode exceeded episode_timeout=1s"}) == []
