# ruff: noqa: E501
"""The tool-call and reasoning parsers by vLLM's names: formats, ids, errors, round trips, template detection."""

from __future__ import annotations

import pytest

from agent_gym.errors import ConfigError
from agent_gym.parsers import (
    FAMILIES,
    HarmonyParser,
    HermesToolCallParser,
    ThinkReasoningParser,
    detect_parsers,
    get_family,
    make_parser,
    parser_names,
    split_harmony,
)

CALLS = [("calculator", {"expression": "6 * 7"}), ("lookup_item", {"item": "<b>\"x\"</b>", "n": [1, 2.5, None, True]})]
NAMES = ["hermes", "llama3_json", "mistral", "openai", "deepseek_v3", "qwen3_coder", "pythonic"]


@pytest.mark.parametrize("name", NAMES[1:])
def test_format_calls_round_trip(name):
    parser = make_parser(name)
    parsed = parser.parse(parser.format_calls(CALLS))
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == CALLS
    assert parsed.errors == [] and parsed.answer is None
    assert all(c.id for c in parsed.tool_calls)
    assert [c.id for c in parser.parse(parser.format_calls(CALLS)).tool_calls] == [c.id for c in parsed.tool_calls]


def test_names_aliases_and_unknown_names():
    tools, reasoning = parser_names()
    assert set(NAMES) <= set(tools) and {"llama4_json", "deepseek_v31"} <= set(tools)
    assert reasoning == ["deepseek_r1", "openai", "qwen3"]
    assert isinstance(make_parser("hermes"), HermesToolCallParser)
    assert isinstance(make_parser("hermes", "qwen3"), HermesToolCallParser)
    assert isinstance(make_parser("openai"), HarmonyParser)
    with pytest.raises(ConfigError, match="tool_parser"):
        make_parser("llama9")
    with pytest.raises(ConfigError, match="reasoning_parser"):
        make_parser("hermes", "o1")
    assert set(FAMILIES) == set(NAMES) and get_family(None).name == "hermes"


def test_llama3_json_calls_content_and_errors():
    p = make_parser("llama3_json")
    r = p.parse('<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": "{\\"y\\": 2}"}')
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    r = p.parse('Let me check. {"name": "a", "parameters": {"q": "z"}} then <answer>5</answer>')
    assert r.tool_calls[0].arguments == {"q": "z"} and r.answer == "5" and "Let me check." in r.content
    r = p.parse('{"name": "a", "parameters": {"x": ')
    assert r.tool_calls == [] and r.errors and "invalid JSON" in r.errors[0]
    r = p.parse('{"name": "", "parameters": {}}')
    assert r.tool_calls == [] and "non-empty string 'name'" in r.errors[0]
    assert p.parse('{"not": "a call"} <answer>x</answer>').tool_calls == []


def test_mistral_forms_and_ids():
    p = make_parser("mistral")
    r = p.parse('Sure.[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}, "id": "abcDEF123"}, {"name": "b", "arguments": {}}]')
    assert [c.id for c in r.tool_calls][0] == "abcDEF123" and len(r.tool_calls[1].id) == 9
    assert r.tool_calls[1].id.isalnum() and r.content == "Sure."
    r = p.parse('[TOOL_CALLS]a[ARGS]{"x": 2}[TOOL_CALLS]b{"y": 3}')
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("a", {"x": 2}), ("b", {"y": 3})]
    assert p.parse("[TOOL_CALLS]").errors and p.parse("[TOOL_CALLS][{]").errors


def test_deepseek_v3_and_v31_forms():
    p = make_parser("deepseek_v3", "deepseek_r1")
    v3 = ("<think>hmm</think>x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n"
          '{"a": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
    r = p.parse(v3)
    assert (r.thought, r.content, r.tool_calls[0].name, r.tool_calls[0].arguments) == ("hmm", "x", "f", {"a": 1})
    r = p.parse('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>g<｜tool▁sep｜>{"b": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
    assert (r.tool_calls[0].name, r.tool_calls[0].arguments) == ("g", {"b": 2})
    assert p.parse("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>g<｜tool▁sep｜>{oops<｜tool▁call▁end｜>").errors


def test_qwen3_coder_values():
    p = make_parser("qwen3_coder")
    r = p.parse("<tool_call>\n<function=f>\n<parameter=s>\nhello world\n</parameter>\n<parameter=n>\n3\n</parameter>\n"
                "<parameter=o>\n{\"k\": [1]}\n</parameter>\n</function>\n</tool_call>")
    assert r.tool_calls[0].arguments == {"s": "hello world", "n": 3, "o": {"k": [1]}}
    assert p.parse("<tool_call>\nno function\n</tool_call>").errors


def test_pythonic_literals_only():
    p = make_parser("pythonic")
    r = p.parse("<|python_start|>[f(a=1, b='x'), mod.g(c={'k': (1, 2)})]<|python_end|>")
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("f", {"a": 1, "b": "x"}), ("mod.g", {"c": {"k": [1, 2]}})]
    assert "literals" in p.parse("[f(a=__import__('os'))]").errors[0]
    assert "keyword" in p.parse("[f(1)]").errors[0]
    assert "not closed" in p.parse("[f(a='x'").errors[0]


def test_pythonic_json_route_agrees_with_the_syntax_tree():
    """The JSON route answers the common one-quote form, and only where Python's parser reads the same."""
    import ast
    import json
    import random

    from agent_gym.parsers.pythonic_fast import read_as_json, read_call_list

    rng = random.Random(5)
    atoms = [0, -7, 2.5, -0.25, True, False, None, "", "a b", "(x) = [y]", "é", "tab\there", "True", "k=v, f(x)"]

    def value(depth=0):
        pick = rng.random()
        if depth < 3 and pick < 0.2:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        if depth < 3 and pick < 0.35:
            return {rng.choice(["a", "b c", "None"]): value(depth + 1) for _ in range(rng.randint(0, 3))}
        return rng.choice(atoms)

    def literal(v, quote):
        if isinstance(v, str):
            return quote + v + quote
        if isinstance(v, list):
            return "[" + ", ".join(literal(x, quote) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{literal(k, quote)}: {literal(x, quote)}" for k, x in v.items()) + "}"
        return repr(v)

    for _ in range(300):
        quote = rng.choice(["'", '"'])
        calls = [(rng.choice(["f", "mod.g", "h_2"]), {f"k{i}": value() for i in range(rng.randint(0, 3))})
                 for _ in range(rng.randint(1, 3))]
        text = "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={literal(v, quote)}" for k, v in a.items()) + ")"
                               for n, a in calls) + "]"
        fast = read_as_json(text, 0)
        assert fast is not None, text
        tree = ast.parse(text, mode="eval").body
        expected = [{kw.arg: ast.literal_eval(kw.value) for kw in node.keywords} for node in tree.elts]
        expected = json.loads(json.dumps(expected))  # dict keys as JSON has them
        assert [args for _, args, _ in fast[0]] == expected and fast[1] == len(text)
        assert [raw for _, _, raw in fast[0]] == [ast.get_source_segment(text, node) for node in tree.elts]
    # what JSON would read but Python reads otherwise (or not at all) is never answered by the JSON route
    tricky = ["[f(a=1, a=2)]", "[f(a=g(b=1))]", "[f(a=[g(b=1)])]", "[f(a={b=1})]", "[f(1)]", "[f('a': 1, b={c=2})]",
              "[f(a=[{'b': 1)}]", '[f(a=g()), ["h", {}]]', "[f(a=NaN)]", "[f(a=Infinity)]", "[if(a=1)]",
              "[f(class=1)]", "[f(a=(1))]", "[f(a=True1)]", "[f(a=1,)]", "[f(a=1.5.2)]", "[True(a=1)]", "[f(a=b)]",
              "[f(True=1)]", "[f(a.b=1)]", "[f(a=1) g(b=2)]", "[f(a=1),]", "[f(a='x' 'y')]", '[f(a=1), "x"]',
              "[f(a=None.x)]", "[mod.None(a=1)]", "[f(a=1)] and [g(b=2)]", "[f(a=1)]]", "[[f(a=1)]]",
              "[f(a='x\ny')]", "[f(a=1)\n]", "[f(a=-1), g(b=+1)]", "[f(a=1 == 1)]", "[f(a={1: 2})]"]
    for text in tricky:
        answer = read_as_json(text, 0)
        if answer is not None:
            tree = ast.parse(text, mode="eval").body
            assert [{kw.arg: ast.literal_eval(kw.value) for kw in node.keywords} for node in tree.elts] == [
                args for _, args, _ in answer[0]], text
        try:
            ast.parse(text[: text.rfind("]") + 1], mode="eval")
        except SyntaxError:  # Python cannot read it: the JSON route must not have answered
            assert answer is None, text
    assert read_as_json("[f(a=1, a=2)]", 0) is None and read_as_json("[f(a=g(b=1))]", 0) is None
    assert read_as_json("[f(a={b=1})]", 0) is None and read_as_json("[f('a': 1, b={c=2})]", 0) is None
    assert read_as_json("[f(a=[{'b': 1)}]", 0) is None and read_as_json('[f(a=g()), ["h", {}]]', 0) is None
    assert read_call_list("[f(a=1, a=2)]", 0) is None


def test_harmony_messages_reasoning_and_calls():
    text = ("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary<|message|>Calling.<|end|>"
            '<|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{"a": 1}')
    messages, stray = split_harmony(text)
    assert [(m.channel, m.recipient) for m in messages] == [("analysis", None), ("commentary", None),
                                                             ("commentary", "functions.f")]
    assert not stray
    r = make_parser("openai").parse(text)
    assert (r.thought, r.content, r.tool_calls[0].name, r.tool_calls[0].arguments) == ("think", "Calling.", "f", {"a": 1})
    r = make_parser("openai").parse("<|channel|>final<|message|><answer>7</answer>")
    assert r.answer == "7" and r.thought == ""
    bad = make_parser("openai").parse("<|start|>assistant to=functions.f<|channel|>commentary<|message|>{nope<|call|>")
    assert bad.tool_calls == [] and "invalid JSON" in bad.errors[0]
    assert make_parser("hermes", "openai").parse(text.split("<|start|>assistant to=")[0]).thought == "think"


def test_think_reasoning_forms():
    split = ThinkReasoningParser("deepseek_r1").split
    assert split("plan</think>answer") == ("plan", "answer")
    assert split("<think>a</think>b<think>c") == ("a\n\nc", "b")
    assert split("no thinking") == ("", "no thinking")


def test_detect_parsers_from_templates():
    from agent_gym.models.chat_template import DEEPSEEK_CHAT_TEMPLATE, QWEN_CHAT_TEMPLATE

    assert detect_parsers(QWEN_CHAT_TEMPLATE) == ("hermes", "qwen3")
    assert detect_parsers(DEEPSEEK_CHAT_TEMPLATE)[0] is None
    assert detect_parsers("<|start|>{{ m }}<|channel|>x<|message|>") == ("openai", "openai")
    assert detect_parsers("[TOOL_CALLS] <tool_call>")[0] is None  # two formats: ambiguous
    assert detect_parsers("<tool_call>\n<function={{ n }}>\n<parameter=")[0] == "qwen3_coder"


def test_family_messages_pair_results_and_split_calls():
    harmony = get_family("openai")
    text = ('<|channel|>analysis<|message|>plan<|end|><|start|>assistant to=functions.a<|channel|>commentary json'
            '<|message|>{"x": 1}<|call|><|start|>assistant to=functions.b<|channel|>commentary json<|message|>{}<|call|>')
    out = harmony.template_messages([{"role": "user", "content": "q"}, {"role": "assistant", "content": text},
                                     {"role": "tool", "content": "Error: bad call"}, {"role": "tool", "content": "r1"},
                                     {"role": "tool", "content": "r2"}])
    roles = [(m["role"], m.get("name"), [c["function"]["name"] for c in m.get("tool_calls", [])]) for m in out]
    assert roles == [("user", None, []), ("assistant", None, ["a"]), ("tool", "a", []), ("assistant", None, ["b"]),
                     ("tool", "b", [])]
    assert out[1]["thinking"] == "plan" and out[1]["content"] == ""
    mistral = get_family("mistral")
    out = mistral.template_messages([{"role": "user", "content": "q"}, {"role": "assistant", "content": "[TOOL_CALLS]oops"},
                                     {"role": "tool", "content": "Error: x"}])
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    llama = get_family("llama3_json")
    out = llama.template_messages([{"role": "assistant", "content": '{"name": "a", "parameters": {}}'},
                                   {"role": "tool", "content": "r"}])
    assert out[1]["role"] == "ipython" and out[1]["tool_call_id"] == out[0]["tool_calls"][0]["id"]
    assert get_family("deepseek_v3").template_messages(out[:1] and [{"role": "assistant", "content": CALLS_DS}])[0][
        "tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


CALLS_DS = ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"a": 1}\n```<｜tool▁call▁end｜>'
            "<｜tool▁calls▁end｜>")


def test_pythonic_fast_reader_agrees_with_the_syntax_tree():
    import ast
    import random

    from agent_gym.parsers.pythonic_fast import read_call_list

    rng = random.Random(3)
    atoms = [0, -7, 2.5, -1e-3, True, False, None, "", "a b", "x'y", 'q"', "<tool_call>", "é", "tab\there", "1\n2"]

    def value(depth=0):
        pick = rng.random()
        if depth < 3 and pick < 0.15:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        if depth < 3 and pick < 0.25:
            return {str(rng.randint(0, 9)): value(depth + 1) for _ in range(rng.randint(0, 3))}
        return rng.choice(atoms)

    fast_answers = 0
    for _ in range(400):
        calls = [(rng.choice(["f", "mod.g", "h_2"]), {f"k{i}": value() for i in range(rng.randint(0, 3))})
                 for _ in range(rng.randint(1, 3))]
        text = make_parser("pythonic").format_calls(calls)
        fast = read_call_list(text, 0)
        tree = ast.parse(text, mode="eval").body
        expected = [{kw.arg: ast.literal_eval(kw.value) for kw in node.keywords} for node in tree.elts]
        if fast is not None:
            fast_answers += 1
            assert [args for _, args, _ in fast[0]] == expected and fast[1] == len(text)
        assert [c.arguments for c in make_parser("pythonic").parse(text).tool_calls] == expected
    assert fast_answers > 100
    assert read_call_list("[f(a=1, a=2)]", 0) is None and read_call_list("[f(a='x\\\\n')]", 0) is None
    assert read_call_list("[f(a=(1))]", 0) is None and read_call_list("[if(a=1)]", 0) is None
    assert read_call_list("[f(a=1)}", 0) is None and read_call_list("[f(a=[1})]", 0) is None
