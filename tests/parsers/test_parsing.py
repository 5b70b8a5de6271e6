from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gym.errors import ConfigError
from agent_gym.parsers import HermesToolCallParser, ParsedResponse, ToolCallParser, format_tool_call, parse_response


def test_think_tool_calls_and_answer():
    text = (
        "<think>first add</think>Let me call.\n"
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>{"name": "mul", "arguments": "{\\"a\\": 3}"}</tool_call>'
    )
    r = parse_response(text)
    assert r.thought == "first add"
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("add", {"a": 1, "b": 2}), ("mul", {"a": 3})]
    assert r.tool_calls[0].raw == '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    assert r.answer is None and r.errors == []
    assert r.action_text is not None and "add" in r.action_text
    assert "<think>" not in r.content


def test_answer_only():
    r = parse_response("<answer> 42 </answer>")
    assert r.answer == "42" and not r.tool_calls and not r.errors and r.has_action


def test_plain_text_has_no_action():
    r = parse_response("I am not sure.")
    assert not r.has_action and r.answer is None and r.thought == ""


def test_malformed_json_is_an_error_not_an_exception():
    r = parse_response("<tool_call>{not json}</tool_call>")
    assert not r.tool_calls and len(r.errors) == 1 and "invalid JSON" in r.errors[0]


def test_missing_name_and_bad_arguments():
    assert "name" in parse_response('<tool_call>{"arguments": {}}</tool_call>').errors[0]
    assert "arguments" in parse_response('<tool_call>{"name": "x", "arguments": [1]}</tool_call>').errors[0]
    assert "not valid JSON" in parse_response('<tool_call>{"name": "x", "arguments": "{oops"}</tool_call>').errors[0]
    assert "expected a JSON object" in parse_response("<tool_call>[1, 2]</tool_call>").errors[0]
    assert "empty" in parse_response("<tool_call>  </tool_call>").errors[0]


def test_leniencies():
    # missing arguments, "parameters" synonym, code fence, list of calls, OpenAI nesting
    r = parse_response('<tool_call>```json\n[{"name": "a"}, {"name": "b", "parameters": {"x": 1}}]\n```</tool_call>')
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("a", {}), ("b", {"x": 1})]
    r = parse_response('<tool_call>{"type": "function", "function": {"name": "f", "arguments": {}}}</tool_call>')
    assert r.tool_calls[0].name == "f"


def test_unclosed_tool_call_accepted_when_json_is_valid():
    r = parse_response('<tool_call>{"name": "x", "arguments": {"a": 1}}')
    assert r.tool_calls[0].arguments == {"a": 1} and not r.errors
    r = parse_response('<tool_call>{"name": "x", "argu')
    assert not r.tool_calls and "not closed" in r.errors[0]


def test_stray_closing_tag_is_an_error():
    assert "without an opening" in parse_response("oops</tool_call>").errors[0]


def test_thought_variants():
    assert parse_response("reasoning here</think><answer>1</answer>").thought == "reasoning here"
    r = parse_response("<think>a</think>x<think>b</think>")
    assert r.thought == "a\n\nb"
    r = parse_response("<answer>1</answer><think>still thinking")
    assert r.thought == "still thinking" and r.answer == "1"
    # tool calls inside a thought are not executed
    r = parse_response('<think><tool_call>{"name": "x"}</tool_call></think>done')
    assert not r.tool_calls


def test_unclosed_answer_takes_the_rest():
    assert parse_response("<answer>12 km").answer == "12 km"


def test_non_string_input():
    r = HermesToolCallParser().parse(None)  # type: ignore[arg-type]
    assert r.errors and r.text == ""


def test_custom_tags_and_pickle():
    parser = HermesToolCallParser(think_tag="reasoning", tool_call_tag="call", answer_tag="final")
    r = parser.parse('<reasoning>r</reasoning><call>{"name": "f"}</call>')
    assert r.thought == "r" and r.tool_calls[0].name == "f"
    assert pickle.loads(pickle.dumps(parser)).parse("<final>x</final>").answer == "x"
    assert isinstance(parser, ToolCallParser)


def test_bad_tag_names_raise():
    import pytest

    with pytest.raises(ConfigError, match="think_tag: expected a tag name"):
        HermesToolCallParser(think_tag="<think>")
    with pytest.raises(TypeError, match="answer_tag"):
        HermesToolCallParser(answer_tag=None)  # type: ignore[arg-type]


_WORDS = st.one_of(st.text(max_size=8), st.sampled_from(["</tool_call>", "<tool_call>", "<answer>", "</think>"]))
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _WORDS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_WORDS, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[A-Za-z_][\w\-.]{0,20}", fullmatch=True), st.dictionaries(_WORDS, _JSON, max_size=4))
def test_format_tool_call_is_read_back_by_the_parser(name, arguments):
    text = format_tool_call(name, arguments)
    parsed = parse_response(text)
    assert not parsed.errors
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [(name, arguments)]


def test_deeply_nested_json_does_not_raise():
    r = parse_response("<tool_call>" + "[" * 100000 + "</tool_call>")
    assert r.errors and not r.tool_calls


_TAGS = st.sampled_from(["<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>", "{", "}",
                         '"name"', '"arguments"', ":", ",", '"calculator"', "[", "]", "```", "\\", '"'])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=20), _TAGS), max_size=30).map("".join))
def test_parser_never_raises_on_arbitrary_text(text):
    r = parse_response(text)
    assert isinstance(r, ParsedResponse)
    assert all(isinstance(c.arguments, dict) and isinstance(c.name, str) for c in r.tool_calls)
    assert all(isinstance(e, str) for e in r.errors)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parser_never_raises_on_random_unicode(text):
    assert isinstance(parse_response(text), ParsedResponse)
