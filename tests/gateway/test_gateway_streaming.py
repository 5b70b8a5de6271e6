"""Streaming through the gateway is real: deltas reach the client while the upstream still samples."""

from __future__ import annotations

import json
import threading

import anthropic
import httpx
import pytest

from agent_gym.gateway import Gateway
from agent_gym.gateway.stream import StreamSplitter
from agent_gym.parsers import HermesToolCallParser

USER = {"role": "user", "content": "What is 6 * 7?"}
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]


@pytest.fixture()
def gated(scripted_upstream, qwen_tokenizer):
    address, engine = scripted_upstream(qwen_tokenizer, max_model_len=1024)
    engine.release = threading.Event()
    with Gateway([address], qwen_tokenizer, sampling={"max_tokens": 64}) as gw:
        yield gw, engine
    engine.release.set()


def test_openai_deltas_arrive_before_the_upstream_finished(gated, exact):
    gw, engine = gated
    s = gw.session()
    body = {"model": "m", "messages": [USER], "tools": TOOLS, "stream": True}
    deltas = []
    with httpx.stream("POST", f"{s.openai_base_url}/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {s.api_key}"}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            deltas.append(delta)
            if delta.get("reasoning_content"):
                engine.release.set()  # only now may the upstream sample its last token
    assert engine.waits == [True]  # the reasoning delta was received while the upstream was not finished
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    calls = [c for d in deltas for c in d.get("tool_calls") or []]
    assert reasoning == "I should compute." and content == ""  # no tag text leaked into the content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("calculator", {"expression": "6 * 7"})]
    t = s.reward(1.0)
    assert t.steps[0].info["stream"] and t.steps[0].info["tool_calls"][0]["name"] == "calculator"
    exact(t, engine.records[-1:])


def test_anthropic_stream_and_plain_record_the_same_step(gated):
    gw, engine = gated
    engine.release.set()
    steps = []
    for stream in (True, False):
        s = gw.session()
        client = anthropic.Anthropic(base_url=s.base_url, api_key=s.api_key)
        kwargs = dict(model="m", max_tokens=64, messages=[USER],
                      tools=[{"name": "calculator", "input_schema": {"type": "object"}}])
        if stream:
            with client.messages.stream(**kwargs) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**kwargs)
        assert [b.type for b in message.content] == ["tool_use"] and message.stop_reason == "tool_use"
        assert message.content[0].input == {"expression": "6 * 7"}
        t = s.reward(0.0)
        steps.append(t)
    a, b = steps
    assert a.segments[0].response_tokens.tolist() == b.segments[0].response_tokens.tolist()
    assert a.segments[0].response_logprobs.tolist() == b.segments[0].response_logprobs.tolist()
    sa, sb = a.steps[0].to_dict(), b.steps[0].to_dict()
    for d in (sa, sb):
        d["info"].pop("llm_time")
        d["info"].pop("stream")
    assert sa == sb


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_splitter_holds_back_partial_tags(cut):
    text = ('<think>plan</think>\nLet me check.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
            ' done<|im_end|>')
    splitter = StreamSplitter(HermesToolCallParser(), ["<|im_end|>"])
    pieces = []
    for i in range(0, len(text), cut):
        pieces += splitter.feed(text[i:i + cut])
        shown = "".join(p[1] for p in pieces if p[0] == "content")
        assert "<" not in shown  # no part of a tag (or of the end marker) reaches the content
    pieces += splitter.finish(text[: -len("<|im_end|>")])
    assert "".join(p[1] for p in pieces if p[0] == "reasoning") == "plan"
    # the content the unstreamed answer shows: the text outside the blocks, stripped
    assert "".join(p[1] for p in pieces if p[0] == "content") == "Let me check.\n done"
    assert [p[1:] for p in pieces if p[0] == "call"] == [("f", {"x": 1})]
