# ruff: noqa: E501
"""Fuzzing: every named parser (and each family's message shaping) takes random and adversarial text without an exception.

``parse`` catches anything as a last resort and reports it as "could not parse the message";
these tests also require that this never happens, so a crash inside a parser cannot hide.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gym.parsers import FAMILIES, ParsedResponse, get_family, make_parser

NAMES = ["hermes", "llama3_json", "mistral", "openai", "deepseek_v3", "qwen3_coder", "pythonic"]
REASONING = [None, "qwen3", "deepseek_r1", "openai"]

# Pieces of every format, so random strings hit the parsers' branches.
PIECES = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>", "<|python_tag|>", "[TOOL_CALLS]",
    "[ARGS]", "<|start|>", "<|end|>", "<|call|>", "<|return|>", "<|channel|>", "<|message|>", "<|constrain|>",
    "assistant", " to=functions.", "analysis", "final", "commentary", " json", "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "function", "```json\n",
    "```", "<function=", "</function>", "<parameter=", "</parameter>", ">", "\n", "[", "]", "(", ")", "{", "}", '"',
    "'", ":", ",", ";", "=", "\\", "name", "arguments", "parameters", '{"name": "f", "arguments": {"a": 1}}',
    "f(a=1)", "null", "1e999", "[[[[[[[[", "{{{{{{", '"""', "\x00", "\ud800", "é",
]

text = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=30).map("".join),
)


def _check(parsed: ParsedResponse) -> None:
    assert isinstance(parsed, ParsedResponse)
    assert not any(e.startswith("could not parse the message") for e in parsed.errors), parsed.errors
    for call in parsed.tool_calls:
        assert isinstance(call.name, str) and call.name and isinstance(call.arguments, dict)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text, st.sampled_from(NAMES), st.sampled_from(REASONING))
def test_parsers_never_raise(sample, name, reasoning):
    parser = make_parser(name, reasoning)
    _check(parser.parse(sample))
    family = get_family(name)
    family.template_messages([{"role": "user", "content": "q"}, {"role": "assistant", "content": sample},
                              {"role": "tool", "content": sample}, {"role": "tool", "content": "x"}], parser)


def test_mutated_valid_messages_never_raise():
    """Valid calls of every format, cut, spliced and with characters flipped: 0 exceptions."""
    rng = random.Random(0)
    calls = [("calc", {"expression": "6 * 7", "nested": {"k": [1, "<tool_call>", None]}}), ("f", {})]
    bases = {name: make_parser(name).format_calls(calls) for name in NAMES if name != "hermes"}
    bases["hermes"] = '<think>x</think><tool_call>{"name": "calc", "arguments": {"e": 1}}</tool_call><answer>1</answer>'
    count = 0
    for name, base in bases.items():
        parser = make_parser(name, "openai" if name == "openai" else None)
        for _ in range(300):
            chars = list(base)
            for _ in range(rng.randint(1, 6)):
                op = rng.random()
                pos = rng.randrange(len(chars) + 1)
                if op < 0.3 and chars:
                    del chars[min(pos, len(chars) - 1)]
                elif op < 0.6:
                    chars.insert(pos, rng.choice(PIECES))
                elif op < 0.8:
                    chars = chars[:pos]
                else:
                    other = rng.choice(list(bases.values()))
                    chars = chars[:pos] + list(other[rng.randrange(len(other)) :])
            _check(parser.parse("".join(chars)))
            count += 1
    assert count == 300 * len(bases)


def test_adversarial_inputs():
    deep = "[" * 5000 + "f(a=1)" + "]" * 5000
    huge = '{"name": "f", "parameters": {"a": "' + "x" * 200_000 + '"}}'
    for name in NAMES:
        parser = make_parser(name)
        for sample in (deep, huge, "{" * 10000, "<|start|>" * 2000, "<tool_call>" * 2000, "[TOOL_CALLS]" * 500,
                       "<function=" * 1000, "\ud800\udfff" * 100, ""):
            _check(parser.parse(sample))
        assert parser.parse(None).errors  # type: ignore[arg-type]
    assert set(FAMILIES) == set(NAMES)
