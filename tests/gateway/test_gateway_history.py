"""Unit checks of the request readers: Responses items regrouped into turns, text-rendered tool calls."""

from __future__ import annotations

import pytest

from agent_gym.errors import RequestError
from agent_gym.gateway.history import text_tool_calls, unordered_signature
from agent_gym.gateway.responses import responses_request


def test_responses_items_regroup_into_one_assistant_turn_per_turn():
    body = {"instructions": "sys", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "a", "arguments": '{"x": 1}'},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
        {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "2"}]},
        {"role": "assistant", "content": "done"},
        {"type": "reasoning", "id": "rs_2", "summary": []},
    ], "tools": [{"type": "function", "name": "a", "parameters": {"type": "object"}, "strict": True}]}
    messages, tools, conversation = responses_request(body)
    assert messages[0] == {"role": "system", "content": "sys"} and messages[1:] == conversation
    assert conversation == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "calling", "calls": [("a", '{"x": 1}'), ("b", "{}")]},
        {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"},
        {"role": "assistant", "content": "done", "calls": []},
    ]
    assert tools == [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}]
    history = [{"role": "user", "content": "q"}]
    messages, _, conversation = responses_request({"input": "next"}, history)
    assert messages == conversation == [*history, {"role": "user", "content": "next"}]


@pytest.mark.parametrize("body, message", [
    ({"input": []}, "non-empty list"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
    ({"input": [{"type": "function_call"}]}, "with a name"),
    ({"input": [{"role": "tool", "content": "x"}]}, "role"),
    ({"input": "x", "tools": {"a": 1}}, "list of function tools"),
    ({"input": "x", "tools": [{"type": "file_search"}]}, "function tools only"),
    ([1], "JSON object"),
])
def test_malformed_responses_bodies_are_400s(body, message):
    with pytest.raises(RequestError, match=message) as info:
        responses_request(body)
    assert info.value.status == 400


def test_text_rendered_calls_read_back_in_any_order():
    repr_block = ("Thinking done.\nCalling tools:\n[{'id': 'c1', 'type': 'function', 'function': {'name': 'a', "
                  "'arguments': {'x': 1}}}, {'id': 'c2', 'type': 'function', 'function': {'name': 'b', "
                  "'arguments': '{\"y\": [1, 2]}'}}]")
    content, calls = text_tool_calls(repr_block)
    assert content == "Thinking done." and calls == [("a", {"x": 1}), ("b", '{"y": [1, 2]}')]
    json_block = 'Calling tools:\n[{"function": {"name": "b", "arguments": {"y": [1, 2]}}}, ' \
                 '{"function": {"name": "a", "arguments": "{\\"x\\": 1}"}}]'
    other_content, other_calls = text_tool_calls(json_block)
    assert other_content == ""
    assert unordered_signature("t", calls) == unordered_signature("t", other_calls)
    for text in ("no calls here", "Calling tools:\nnot a list", "Calling tools:\n[1, 2]",
                 "Calling tools:\n[{'function': {'arguments': {}}}]", "Calling tools:\n[]"):
        assert text_tool_calls(text) is None
