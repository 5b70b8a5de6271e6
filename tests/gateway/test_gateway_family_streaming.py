"""Streaming through the gateway in each model family's own format: no part of a call leaks into the content.

The upstream is the reference server's HTTP app over a scripted model that writes the
family's format (harmony channels and ``to=functions.NAME`` calls, Mistral's
``[TOOL_CALLS]``), streaming one id per character. The gateway reads the family from the
chat template; its streamed deltas must carry the reasoning, the content without any call
text, and the calls parsed, as the unstreamed answer does. The splitter itself is checked on
every family, cut at every delta size.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from family_templates import family_tokenizer

from agent_gym.gateway import Gateway
from agent_gym.gateway.stream import StreamSplitter
from agent_gym.parsers import make_parser

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy"))
from family_server import start_script_server  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
USER = {"role": "user", "content": "What is 6 * 7?"}

TURNS = {
    "openai": (
        "<|channel|>analysis<|message|>I need the tool.<|end|><|start|>assistant<|channel|>commentary<|message|>"
        "Checking.<|end|><|start|>assistant to=functions.calculator<|channel|>commentary <|constrain|>json"
        '<|message|>{"expression": "6 * 7"}<|call|>',
        "I need the tool.", "Checking.", [("calculator", {"expression": "6 * 7"})],
    ),
    "mistral": (
        'Let me compute. [TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "6 * 7"}}]</s>',
        "", "Let me compute.", [("calculator", {"expression": "6 * 7"})],
    ),
}

# Every family's splitter, fed at every delta size: (parser names, turn, end markers, reasoning, content, calls)
SPLITS = [
    (("openai", None), TURNS["openai"][0], ["<|call|>", "<|return|>"], *TURNS["openai"][1:]),
    (("openai", None), "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>"
                       "<answer>42</answer><|return|>", ["<|call|>", "<|return|>"], "a", "<answer>42</answer>", []),
    (("openai", None), ' to=functions.f<|channel|>commentary json<|message|>{"x": 1}<|call|>', ["<|call|>"],
     "", "", [("f", {"x": 1})]),
    (("openai", None), "The answer is <answer>4</answer><|return|>", ["<|return|>"], "",
     "The answer is <answer>4</answer>", []),
    (("mistral", None), TURNS["mistral"][0], ["</s>"], *TURNS["mistral"][1:]),
    (("mistral", None), 'ok [TOOL_CALLS]f[ARGS]{"x": [1, 2]}</s>', ["</s>"], "", "ok", [("f", {"x": [1, 2]})]),
    (("llama3_json", None), '<|python_tag|>{"name": "f", "parameters": {"x": 1}}<|eom_id|>', ["<|eom_id|>"], "", "",
     [("f", {"x": 1})]),
    (("llama3_json", None), '{"name": "f", "parameters": {"x": "{y}"}}; {"name": "g", "parameters": {}}<|eot_id|>',
     ["<|eot_id|>"], "", "", [("f", {"x": "{y}"}), ("g", {})]),
    (("llama3_json", None), "A set {1, 2} is <answer>2</answer><|eot_id|>", ["<|eot_id|>"], "",
     "A set {1, 2} is <answer>2</answer>", []),
    (("pythonic", None), 'Calling [f(x="a[1]"), g()]<|eot_id|>', ["<|eot_id|>"], "", "Calling",
     [("f", {"x": "a[1]"}), ("g", {})]),
    (("deepseek_v3", "deepseek_r1"), "<think>plan</think>Now.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
     '<｜tool▁sep｜>f\n```json\n{"x": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> done<｜end▁of▁sentence｜>',
     ["<｜end▁of▁sentence｜>"], "plan", "Now. done", [("f", {"x": 1})]),
    (("qwen3_coder", "qwen3"), "<think>p</think>Run.\n<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n"
     "</function>\n</tool_call><|im_end|>", ["<|im_end|>"], "p", "Run.", [("f", {"x": 1})]),
]

# Where a call may begin in each format: no streamed content may hold these before the turn ends.
CALL_TEXT = ["<|channel|>", "<|message|>", "to=functions", "[TOOL_CALLS]", "[ARGS]", '"name"', "<|python_tag|>",
             "f(x=", "<｜tool", "<tool_call>", "<function=", "<|"]


@pytest.mark.parametrize("case", SPLITS, ids=[f"{c[0][0]}-{i}" for i, c in enumerate(SPLITS)])
def test_splitter_holds_back_every_family_call(case):
    (tool, reasoning_name), text, ends, reasoning, content, calls = case
    parser = make_parser(tool, reasoning_name)
    full = next((text[: -len(e)] for e in ends if text.endswith(e)), text)
    expected = parser.parse(full)
    assert expected.content == content and [(c.name, c.arguments) for c in expected.tool_calls] == calls
    for cut in (1, 2, 3, 5, 11, len(text)):
        splitter = StreamSplitter(parser, ends)
        pieces = []
        for i in range(0, len(text), cut):
            pieces += splitter.feed(text[i : i + cut])
            shown = "".join(p[1] for p in pieces if p[0] == "content")
            assert not any(marker in shown for marker in CALL_TEXT), (cut, shown)
        if reasoning or content:  # really streamed: something came out before the turn ended
            assert pieces, cut
        pieces += splitter.finish(full)
        assert "".join(p[1] for p in pieces if p[0] == "content") == content, cut
        assert "".join(p[1] for p in pieces if p[0] == "reasoning").strip() == reasoning, cut
        assert [p[1:] for p in pieces if p[0] == "call"] == calls, cut


@pytest.mark.parametrize("family", ["openai", "mistral"])
def test_gateway_streams_the_family_format(family):
    text, reasoning, content, calls = TURNS[family]
    tokenizer = family_tokenizer(family)
    server, engine = start_script_server(tokenizer, [text])
    try:
        with Gateway([server.address], tokenizer, sampling={"max_tokens": 256}) as gw:
            assert getattr(gw.store.parser, "name", None) == family  # read from the chat template
            s = gw.session()
            body = {"model": "m", "messages": [USER], "tools": TOOLS, "stream": True}
            deltas = []
            with httpx.stream("POST", f"{s.openai_base_url}/chat/completions", json=body, timeout=120,
                              headers={"Authorization": f"Bearer {s.api_key}"}) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        choices = json.loads(line[6:])["choices"]
                        deltas += [c["delta"] for c in choices]
            streamed = {
                "reasoning": "".join(d.get("reasoning_content") or "" for d in deltas),
                "content": "".join(d.get("content") or "" for d in deltas),
                "calls": [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                          for d in deltas for c in d.get("tool_calls") or []],
            }
            assert streamed == {"reasoning": reasoning, "content": content, "calls": calls}
            assert len([d for d in deltas if d.get("content") or d.get("reasoning_content")]) > 1  # really streamed
            trajectory = s.reward(1.0)
            (step,) = trajectory.steps
            assert [c["name"] for c in step.info["tool_calls"]] == [name for name, _ in calls]
            assert trajectory.segments[0].response_tokens.tolist() == engine.records[0][1]
    finally:
        server.stop()
