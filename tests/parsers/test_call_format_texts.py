"""The envs tell the model the tool-call format they parse: system prompts, tool descriptions and the nudge.

An env built with ``tool_parser=NAME`` must describe NAME's format (not hermes' ``<tool_call>``),
and the example it shows must be in the same format as what the parser reads back.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401 - registers the envs
from agent_gym.env.tools import NO_ACTION_ERROR, NUDGE
from agent_gym.parsers import make_parser
from agent_gym.parsers.instructions import adapt_prompt, call_example, call_format, no_action_error, nudge_text

FAMILIES = ["hermes", "llama3_json", "mistral", "openai", "deepseek_v3", "qwen3_coder", "pythonic"]

# A marker each family's example and its parser's own output share (what a model must write).
MARKERS = {
    "hermes": "<tool_call>",
    "llama3_json": '"parameters"',
    "mistral": "[TOOL_CALLS]",
    "openai": "to=functions.",
    "deepseek_v3": "<｜tool▁call▁begin｜>",
    "qwen3_coder": "<function=",
    "pythonic": "[",
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_parser_describes_its_own_format(family):
    parser = make_parser(family)
    example, words = call_example(parser), call_format(parser)
    assert example and example in (words if family != "hermes" else nudge_text(parser))
    written = parser.format_calls([("lookup", {"key": 1})]) if hasattr(parser, "format_calls") else "<tool_call>"
    assert MARKERS[family] in example and MARKERS[family] in written
    if family not in ("hermes", "qwen3_coder"):  # qwen3_coder's blocks are <tool_call> blocks too
        assert "<tool_call>" not in example + words + nudge_text(parser) + no_action_error(parser)


def test_hermes_texts_are_unchanged():
    parser = make_parser("hermes")
    assert nudge_text(parser) == NUDGE and no_action_error(parser) == NO_ACTION_ERROR
    from agent_gym.envs.tool_use.env import ToolUseEnv

    assert adapt_prompt(ToolUseEnv.default_system_prompt, parser) == ToolUseEnv.default_system_prompt


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("env_id", ["agent_gym/ToolUse-v0", "agent_gym/RAG-v0", "agent_gym/Conversation-v0"])
def test_env_prompts_name_the_chosen_format(env_id, family):
    env = gym.make(env_id, tool_parser=family)
    try:
        obs, _ = env.reset(seed=0)
        prompt = obs[0]["content"]
        parser = env.unwrapped.parser
        assert call_format(parser) in prompt
        if family not in ("hermes", "qwen3_coder"):
            assert "<tool_call>" not in prompt
    finally:
        env.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_described_tools_and_nudge_use_the_format(family):
    env = gym.make("agent_gym/ToolUse-v0", tool_parser=family, tools_in_prompt=True)
    obs, _ = env.reset(seed=0)
    prompt = obs[0]["content"]
    parser = env.unwrapped.parser
    assert "To call a tool, write" in prompt
    assert MARKERS[family] in prompt.split("To call a tool, write", 1)[1]
    obs, _, _, _, info = env.step("I am not sure yet.")  # no call, no answer: the nudge
    assert obs[-1]["role"] == "user" and obs[-1]["content"] == nudge_text(parser)
    assert call_example(parser) in obs[-1]["content"] and info["error"] == no_action_error(parser)
    assert info["error_kinds"] == ["no_action"]
    if family not in ("hermes", "qwen3_coder"):
        assert "<tool_call>" not in prompt + obs[-1]["content"] + info["error"]
    # what the env shows is what it reads: the oracle's calls (the parser's own format) run
    env.reset(seed=0)
    _, _, _, _, info = env.step(env.unwrapped.oracle_action())
    assert info["tool_calls"] and all(c["ok"] for c in info["tool_calls"])
    env.close()


def test_harmony_reasoning_is_named_as_its_channel():
    env = gym.make("agent_gym/ToolUse-v0", tool_parser="openai", reasoning_parser="openai")
    obs, _ = env.reset(seed=0)
    assert "<think>" not in obs[0]["content"] and "analysis channel" in obs[0]["content"]


def test_a_subagent_prompt_given_as_text_is_adapted_too():
    from agent_gym.envs.tool_use.env import ToolUseEnv

    env = gym.make("agent_gym/ToolUse-v0", tool_parser="pythonic", system_prompt=ToolUseEnv.default_system_prompt)
    obs, _ = env.reset(seed=0)
    assert "[NAME(key=value, ...), ...]" in obs[0]["content"] and "<tool_call>" not in obs[0]["content"]
