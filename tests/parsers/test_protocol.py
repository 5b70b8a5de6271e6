"""Every tool-call format keeps the written contract, and nothing outside parsers/ reads a parser by getattr."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agent_gym
from agent_gym.parsers import (
    TOOL_PARSERS,
    HermesToolCallParser,
    ParsedResponse,
    ParseOnlyParser,
    ResponseParser,
    ToolCallParser,
    as_parser,
    make_parser,
    parser_names,
)

PACKAGE = Path(agent_gym.__file__).parent


@pytest.mark.parametrize("name", parser_names()[0])
def test_every_registered_name_gives_a_parser_object(name):
    parser = make_parser(name)
    assert isinstance(parser, ToolCallParser)
    assert parser.name in TOOL_PARSERS and parser.call_format and parser.call_example
    written = parser.format_calls([("lookup", {"key": 1})])
    parsed = parser.parse(written)
    assert isinstance(parsed, ParsedResponse)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("lookup", {"key": 1})]


def test_hermes_is_registered_like_the_others():
    assert all(callable(factory) for factory in TOOL_PARSERS.values())
    assert isinstance(make_parser("hermes"), HermesToolCallParser)
    assert make_parser("hermes", "openai").reasoning_parser.name == "openai"
    assert make_parser("hermes", "qwen3").reasoning_parser is None  # hermes reads <think> itself


def test_as_parser_completes_what_a_user_hands_an_env():
    class OnlyParse:
        def parse(self, text):
            return ParsedResponse(text=text, answer=text)

    only = OnlyParse()
    assert isinstance(only, ResponseParser) and not isinstance(only, ToolCallParser)
    completed = as_parser(only)
    assert isinstance(completed, ParseOnlyParser) and isinstance(completed, ToolCallParser)
    assert completed.parse("x").answer == "x"
    assert completed.format_calls([("f", {})]) == HermesToolCallParser().format_calls([("f", {})])
    hermes = HermesToolCallParser()
    assert as_parser(hermes) is hermes
    assert isinstance(as_parser(None), HermesToolCallParser) and as_parser("mistral").name == "mistral"
    with pytest.raises(TypeError, match="ToolCallParser"):
        as_parser(object())  # type: ignore[arg-type]


def _names_a_parser(node: ast.expr) -> bool:
    """Whether an expression reads as a parser object (``parser``, ``self.parser``, ``tool_parser``, ...)."""
    if isinstance(node, ast.Name):
        return "parser" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "parser" in node.attr.lower()
    return False


def test_no_getattr_on_a_parser_outside_parsers():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if PACKAGE / "parsers" in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args and _names_a_parser(node.args[0])):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not offenders, f"read the parser contract (agent_gym.parsers.ToolCallParser) instead: {offenders}"
