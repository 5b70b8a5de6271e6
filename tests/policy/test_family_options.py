"""Parser names through the public entry points: gym.make, policies (and their pickles), collect's choice, the CLI."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest
from family_templates import family_tokenizer

from agent_gym.errors import ConfigError
from agent_gym.parsers import (
    HarmonyParser,
    HermesToolCallParser,
    Llama3JsonParser,
    env_parser_for,
    get_family,
    parser_line,
)
from agent_gym.policy import ChatTokenBuilder, SamplingParams, VLLMChatPolicy, VLLMPolicy


def test_gym_make_takes_parser_names():
    env = gym.make("agent_gym/ToolUse-v0", tool_parser="llama3_json", reasoning_parser="deepseek_r1")
    assert isinstance(env.unwrapped.parser, Llama3JsonParser)
    assert env.unwrapped.parser.reasoning_parser.name == "deepseek_r1"
    assert isinstance(gym.make("agent_gym/ToolUse-v0", parser="openai").unwrapped.parser, HarmonyParser)
    assert isinstance(gym.make("agent_gym/ToolUse-v0").unwrapped.parser, HermesToolCallParser)
    with pytest.raises(ConfigError):
        gym.make("agent_gym/ToolUse-v0", tool_parser="nope")
    with pytest.raises(ConfigError, match="both"):
        gym.make("agent_gym/ToolUse-v0", parser=HermesToolCallParser(), tool_parser="mistral")


def test_policy_names_given_detected_and_pickled():
    tokenizer = family_tokenizer("openai")
    policy = VLLMPolicy(["127.0.0.1:9"], tokenizer, SamplingParams(max_tokens=8), max_model_len=4096)
    assert (policy.builder.tool_parser, policy.builder.reasoning_parser, policy.builder.parsers_detected) == (
        "openai", "openai", True)
    assert parser_line(policy) == "openai + reasoning openai (from the chat template)"
    assert isinstance(env_parser_for(policy, None), HarmonyParser)
    assert env_parser_for(policy, {"parser": "hermes"}) is None  # the env kwargs name one: left alone
    named = VLLMPolicy(["127.0.0.1:9"], tokenizer, tool_parser="hermes", max_model_len=4096)
    assert named.builder.tool_parser == "hermes" and not named.builder.parsers_detected
    assert env_parser_for(named, None) is None  # hermes is the envs' default
    copy = pickle.loads(pickle.dumps(named))
    assert copy.builder.tool_parser == "hermes"
    assert parser_line(named, "mistral") == "mistral (given)"
    with pytest.raises(ConfigError):
        ChatTokenBuilder(tokenizer, tool_parser="gpt5")


def test_harmony_stop_ids_reach_the_request():
    tokenizer = family_tokenizer("openai")
    builder = ChatTokenBuilder(tokenizer)
    call, ret = tokenizer.convert_tokens_to_ids("<|call|>"), tokenizer.convert_tokens_to_ids("<|return|>")
    assert {call, ret} <= builder.family_stop_ids and {call, ret} <= builder.stop_ids


def test_chat_policy_sends_family_messages_and_reads_structured_answers():
    policy = VLLMChatPolicy(["127.0.0.1:9"], None, tool_parser="mistral")
    family, _ = policy._chat_family()
    assert family is get_family("mistral")
    call = {"name": "calculator", "arguments": '{"expression": "1+1"}'}
    answer = {"choices": [{"message": {"content": "", "tool_calls": [{"id": "abcdefghi", "type": "function",
                                                                      "function": call}]},
                           "finish_reason": "tool_calls"}]}
    out = policy._chat_output("s", answer, None, None, "srv", 0.0)
    parsed = get_family("mistral").template_messages([{"role": "assistant", "content": out.text}])
    assert parsed[0]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "1+1"}}


def test_cli_rollout_options_parse():
    from agent_gym.cli import build_parser

    args = build_parser().parse_args(["rollout", "agent_gym/ToolUse-v0", "--tool-call-parser", "qwen3_coder",
                                      "--reasoning-parser", "qwen3"])
    assert (args.tool_call_parser, args.reasoning_parser) == ("qwen3_coder", "qwen3")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rollout", "agent_gym/ToolUse-v0", "--tool-call-parser", "nope"])
