"""``VLLMChatPolicy(api="openai")``: only OpenAI Chat Completions fields, structured tool calls and results.

Requests are checked by a strict endpoint (``tests/openai_strict_server.py``) that validates each body
against the ``openai`` package's own request types and answers with a real model's text.
"""

from __future__ import annotations

import json
import pickle
import socket

import pytest
from openai_strict_server import StrictOpenAIServer, request_problems

from agent_gym.errors import ConfigError, ServerError
from agent_gym.parsers import make_parser
from agent_gym.policy import ClientOptions, SamplingParams, VLLMChatPolicy
from agent_gym.policy.openai_chat import AnswerRecord, openai_chat_path, openai_messages, openai_request

SEARCH = {"type": "function", "function": {"name": "search", "description": "find", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}


def _call(name: str, arguments: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def _conversation() -> list[dict]:
    """An env's conversation: a turn with two calls and a malformed one (its error result first), a nudge."""
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find the capital of France."},
        {"role": "assistant", "content": "<think>look it up</think>Searching. " + _call("search", {"q": "France"})
         + "\n<tool_call>{not json</tool_call>\n" + _call("search", {"q": "capital"})},
        {"role": "tool", "content": "Error: malformed tool call"},
        {"role": "tool", "content": "France: capital Paris"},
        {"role": "tool", "content": "capital: a city"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "Call a tool or answer."},
    ]


def test_a_conversation_goes_out_with_structured_calls_and_results():
    messages = openai_messages(_conversation(), make_parser("hermes"))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user", "assistant",
                                             "user"]
    turn = messages[2]
    assert turn["content"] == "Searching."  # the reasoning and the call blocks are not sent back
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in turn["tool_calls"]] == [
        ("call_0", "search", {"q": "France"}), ("call_1", "search", {"q": "capital"})]
    assert messages[3] == {"role": "tool", "tool_call_id": "call_0", "content": "France: capital Paris"}
    assert messages[4] == {"role": "tool", "tool_call_id": "call_1", "content": "capital: a city"}
    assert messages[5] == {"role": "user", "content": "Error: malformed tool call"}  # no call to answer
    body = openai_request(SamplingParams(top_k=-1, temperature=1.0, seed=3), model="m", messages=messages,
                          max_tokens=16, seed=7, tools=[SEARCH], tool_choice="auto")
    assert request_problems(body) == []


def test_recorded_answers_replay_with_the_api_ids_and_unanswered_calls_are_left_out():
    record = AnswerRecord()
    text = _call("search", {"q": "a"}) + "\n" + _call("search", {"q": "b"})
    record.remember(text, [
        {"id": "call_xyz", "type": "function", "function": {"name": "search", "arguments": '{"q":"a"}'}},
        {"id": "call_abc", "type": "function", "function": {"name": "search", "arguments": '{"q":"b"}'}}])
    conversation = [{"role": "user", "content": "go"}, {"role": "assistant", "content": text},
                    {"role": "tool", "content": "result a"}, {"role": "user", "content": "and?"}]
    messages = openai_messages(conversation, make_parser("hermes"), record)
    assert messages[1]["tool_calls"] == [
        {"id": "call_xyz", "type": "function", "function": {"name": "search", "arguments": '{"q":"a"}'}}]
    assert messages[2] == {"role": "tool", "tool_call_id": "call_xyz", "content": "result a"}
    assert request_problems({"model": "m", "messages": messages}) == []


def test_a_result_without_any_call_is_shown_as_the_users():
    messages = openai_messages([{"role": "user", "content": "go"}, {"role": "tool", "content": "stray"}],
                               make_parser("hermes"))
    assert messages == [{"role": "user", "content": "go"}, {"role": "user", "content": "stray"}]


@pytest.mark.parametrize("sampling, word", [({"top_k": 50}, "top_k=50"), ({"min_p": 0.1}, "min_p=0.1"),
                                             ({"repetition_penalty": 1.2}, "repetition_penalty"),
                                             ({"stop_token_ids": [3]}, "stop_token_ids")])
def test_sampling_the_api_cannot_express_is_refused(sampling, word):
    with pytest.raises(ConfigError, match=word):
        VLLMChatPolicy(["127.0.0.1:9"], sampling={"top_k": -1, **sampling}, model="m", api="openai")


def test_the_chat_path_follows_the_sdk_base_url():
    assert openai_chat_path("https://api.example.com/v1") == "/v1/chat/completions"
    assert openai_chat_path("127.0.0.1:8000") == "/v1/chat/completions"
    assert openai_chat_path("https://example.com/v1beta/openai/") == "/chat/completions"
    policy = VLLMChatPolicy(["https://example.com/v1beta/openai/"], sampling={"top_k": -1}, model="m", api="openai")
    copy = pickle.loads(pickle.dumps(policy))
    assert copy._chat_path == policy._chat_path == "/chat/completions" and copy.api == "openai"
    with pytest.raises(ConfigError, match="model="):
        VLLMChatPolicy(["127.0.0.1:9"], sampling={"top_k": -1}, api="openai")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_vllm_dialect_is_refused_by_a_strict_endpoint():
    """The check can fail: vLLM's fields are refused (before any model runs)."""
    with StrictOpenAIServer(f"127.0.0.1:{_closed_port()}") as endpoint:
        policy = VLLMChatPolicy([endpoint.base_url], sampling={"top_k": -1, "max_tokens": 4}, model="m",
                                client_options=ClientOptions(max_retries=0))
        with pytest.raises(ServerError, match="return_token_ids: unknown field"):
            policy.act([{"role": "user", "content": "hi"}], session_id="s")
        policy.close()
    assert endpoint.seen.requests == 1 and len(endpoint.seen.refused) == 1


def test_an_earlier_tool_turn_is_accepted_and_answered_by_a_real_model(reference_server, tiny_model_dir):
    with StrictOpenAIServer(str(reference_server), api_key="k") as endpoint:
        policy = VLLMChatPolicy([endpoint.base_url], sampling={"top_k": -1, "max_tokens": 6, "temperature": 1.0,
                                                               "seed": 1}, model=str(tiny_model_dir), api="openai",
                                client_options=ClientOptions(api_key="k", max_retries=0))
        out = policy.act(_conversation(), session_id="ep")
        policy.close()
    assert endpoint.seen.refused == [] and endpoint.seen.requests == 1
    assert endpoint.seen.structured_turns == 1 and endpoint.seen.tool_results == 2
    assert out.finish_reason in ("stop", "length") and out.error is None
    assert out.token_ids is None and out.text  # a hosted API returns no ids; no tokenizer to count them
