from __future__ import annotations

import pickle
import time

import pytest
from tools_fixtures import add, fail, huge, sleepy, typed

from agent_gym.errors import ConfigError, ToolErrorKind
from agent_gym.tools import (
    FunctionTool,
    Tool,
    ToolResult,
    as_tool,
    describe_tools,
    skipped_call_result,
    unknown_tool_result,
    validate_arguments,
)


def test_schema_from_signature_and_docstring():
    schema = FunctionTool(typed).schema
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "typed"
    assert fn["description"].startswith("Echo typed arguments.") and "Returns: The arguments." in fn["description"]
    params = fn["parameters"]
    props = params["properties"]
    assert props["text"] == {"type": "string", "description": "Some text over two lines."}
    assert props["count"]["type"] == "integer" and props["ratio"]["type"] == "number"
    assert props["flag"]["type"] == "boolean"
    assert props["items"] == {"type": "array", "items": {"type": "integer"}, "description": "Integers."}
    assert props["mapping"]["additionalProperties"] == {"type": "number"}
    assert props["mode"]["enum"] == ["fast", "slow"] and props["mode"]["default"] == "fast"
    assert props["maybe"]["type"] == ["string", "null"]
    assert props["other"]["type"] == ["integer", "null"]
    assert params["required"] == ["text", "count", "ratio", "flag", "items", "mapping"]
    assert params["additionalProperties"] is False


def test_schema_is_a_fresh_copy():
    tool = FunctionTool(add)
    tool.schema["function"]["name"] = "changed"
    assert tool.schema["function"]["name"] == "add"


def test_unsupported_signatures_raise_type_error():
    def star(*args: int) -> int:
        return 0

    class Custom:
        pass

    def custom(x: Custom) -> int:
        return 0

    with pytest.raises(TypeError, match="expected keyword-callable"):
        FunctionTool(star)
    with pytest.raises(TypeError, match="expected an annotation"):
        FunctionTool(custom)
    with pytest.raises(TypeError):
        FunctionTool(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        FunctionTool(add, time_limit=0)
    with pytest.raises(ValueError):
        FunctionTool(add, max_output_chars=0)
    with pytest.raises(ValueError):
        FunctionTool(add, name="bad name")


def test_run_success_and_coercion():
    tool = FunctionTool(add)
    assert tool.run({"a": 1}) == ToolResult("3")
    assert tool.run({"a": "4", "b": 5.0}).content == "9"
    result = FunctionTool(typed).run({
        "text": 7, "count": "3", "ratio": "0.5", "flag": "true", "items": "[1, 2]",
        "mapping": {"a": "1.5"}, "mode": "SLOW",
    })
    assert result.ok, result.error
    assert '"mode": "slow"' in result.content and '"count": 3' in result.content and '"text": "7"' in result.content


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"a": "abc"}, "expected integer, got str 'abc'"),
        ({"a": 1.5}, "expected integer"),
        ({"a": True}, "expected integer"),
        ({}, "missing required argument 'a'"),
        ({"a": 1, "c": 2}, "unknown argument 'c'"),
        ([1, 2], "expected arguments as a JSON object"),
    ],
)
def test_bad_arguments_are_error_results(arguments, fragment):
    result = FunctionTool(add).run(arguments)
    assert not result.ok and fragment in result.error
    assert result.content.startswith("Error: ")


def test_enum_and_nested_validation_messages():
    base = {"text": "t", "count": 1, "ratio": 1, "flag": False, "items": [1], "mapping": {}}
    assert "expected one of ['fast', 'slow']" in FunctionTool(typed).run({**base, "mode": "medium"}).error
    assert "items'[1]" in FunctionTool(typed).run({**base, "items": [1, "x"]}).error
    assert "expected boolean" in FunctionTool(typed).run({**base, "flag": "yes"}).error


def test_raising_tool_is_an_error_result():
    result = FunctionTool(fail).run({"reason": "boom"})
    assert not result.ok and "RuntimeError: boom" in result.error
    inline = FunctionTool(fail, time_limit=None).run({"reason": "bang"})
    assert "bang" in inline.error


def test_time_limit_stops_waiting_for_a_hung_tool():
    tool = FunctionTool(sleepy, time_limit=0.2)
    start = time.perf_counter()
    result = tool.run({"seconds": 2.0})
    assert time.perf_counter() - start < 1.5
    assert not result.ok and "time limit" in result.error
    # the pool keeps working for the next call
    assert tool.run({"seconds": 0}).content == "awake"


def test_output_size_limit_truncate_and_error():
    truncating = FunctionTool(huge, max_output_chars=10)
    result = truncating.run({"n": 25})
    assert not result.ok and "over the limit of 10" in result.error
    assert result.content.startswith("x" * 10) and "[output truncated: 15 more characters]" in result.content
    strict = FunctionTool(huge, max_output_chars=10, on_overflow="error").run({"n": 25})
    assert "xxxx" not in strict.content and "over the limit" in strict.error
    assert truncating.run({"n": 10}).ok


def test_validate_arguments_raises_value_error():
    with pytest.raises(ValueError, match="expected integer"):
        validate_arguments({"a": "x"}, FunctionTool(add).schema["function"]["parameters"], tool="add")


def test_as_tool_and_protocol():
    tool = as_tool(add, time_limit=None)
    assert isinstance(tool, FunctionTool) and isinstance(tool, Tool) and tool.time_limit is None
    assert as_tool(tool) is tool
    with pytest.raises(TypeError):
        as_tool(3)  # type: ignore[arg-type]


def test_tool_pickles():
    tool = pickle.loads(pickle.dumps(FunctionTool(add, time_limit=1.0)))
    assert tool.run({"a": 1, "b": 1}).content == "2"


def test_describe_tools_mentions_each_tool_once():
    text = describe_tools([FunctionTool(add).schema, FunctionTool(typed).schema["function"], FunctionTool(huge)])
    assert text.count("## add") == 1 and text.count("## typed") == 1 and text.count("## huge") == 1
    assert "- a (integer, required): The first number." in text
    assert "- b (integer, optional, default 2)" in text
    assert 'one of "fast", "slow"' in text
    assert "<tool_call>" in text
    assert "<tool_call>" not in describe_tools([FunctionTool(add).schema], include_format=False)
    assert describe_tools([]) == ""


def test_schemas_are_derived_once_and_handed_out_as_copies():
    from agent_gym.tools import shared_function_schema

    assert shared_function_schema(add, "add", None) is shared_function_schema(add, "add", None)
    first, second = FunctionTool(add), FunctionTool(add)
    schema = first.schema
    schema["function"]["parameters"]["properties"].clear()  # a caller's copy
    assert second.schema["function"]["parameters"]["properties"]
    assert first.run({"a": 1, "b": 2}).ok


@pytest.mark.parametrize(("kwargs", "error", "fragment"), [
    ({"time_limit": 0}, ConfigError, "time_limit"),
    ({"time_limit": "1"}, TypeError, "time_limit"),
    ({"max_output_chars": 0}, ConfigError, "max_output_chars"),
    ({"max_output_chars": 1.5}, TypeError, "max_output_chars"),
    ({"on_overflow": "drop"}, ConfigError, "on_overflow: expected one of ['truncate', 'error']"),
    ({"name": "bad name"}, ConfigError, "name: expected a tool name"),
    ({"blocking": "yes"}, TypeError, "blocking"),
])
def test_function_tool_arguments_are_checked(kwargs, error, fragment):
    with pytest.raises(error, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        FunctionTool(add, **kwargs)


def test_every_failed_result_has_a_kind():
    assert FunctionTool(add).run({"a": "x"}).kind is ToolErrorKind.BAD_ARGUMENTS
    assert FunctionTool(fail).run({"reason": "r"}).kind is ToolErrorKind.TOOL_ERROR
    assert FunctionTool(sleepy, time_limit=0.05).run({"seconds": 1.0}).kind is ToolErrorKind.TIMEOUT
    assert FunctionTool(huge, max_output_chars=10).run({"n": 25}).kind is ToolErrorKind.OUTPUT_LIMIT
    assert FunctionTool(add).run({"a": 1}).kind is None
    # A tool of another kind that reports an error without a kind gets TOOL_ERROR; a string kind is converted.
    assert ToolResult("Error: x", "x").kind is ToolErrorKind.TOOL_ERROR
    assert ToolResult("Error: x", "x", "timeout").kind is ToolErrorKind.TIMEOUT  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="kind: expected one of"):
        ToolResult("Error: x", "x", "slow")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="kind: expected None"):
        ToolResult("fine", None, ToolErrorKind.TIMEOUT)


def test_results_of_calls_that_are_not_run():
    unknown = unknown_tool_result("teleport", ["add", "mul"])
    assert unknown.kind is ToolErrorKind.UNKNOWN_TOOL and unknown.content == f"Error: {unknown.error}"
    assert unknown.error == "unknown tool 'teleport'; available tools: add, mul"
    assert unknown_tool_result("x", []).error.endswith("available tools: none")
    skipped = skipped_call_result("add", 2, per="user turn")
    assert skipped.kind is ToolErrorKind.TOO_MANY_CALLS
    assert skipped.error == "tool call 'add' skipped: at most 2 calls are run per user turn"
