"""MCP tool descriptions and results turned into function schemas and ``ToolResult`` observations."""

from __future__ import annotations

import base64

import pytest

from agent_gym.errors import ToolErrorKind
from agent_gym.tools.mcp.connection import ServerSpec
from agent_gym.tools.mcp.results import function_schema_of, result_of


def test_function_schema_of_an_mcp_tool():
    schema = function_schema_of({"name": "put_note", "description": "Save  a\n note.",
                                 "inputSchema": {"type": "object", "title": "put_noteArguments",
                                                 "properties": {"key": {"type": "string"}}, "required": ["key"]}})
    assert schema == {"type": "function", "function": {
        "name": "put_note", "description": "Save a note.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}
    bare = function_schema_of({"name": "ping", "inputSchema": {}})
    assert bare["function"]["parameters"] == {"type": "object", "properties": {}}


def test_text_structured_image_and_resource_blocks():
    assert result_of("t", {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, 100).content \
        == "a\nb"
    structured = result_of("t", {"content": [], "structuredContent": {"n": 1}}, 100)
    assert structured.ok and structured.content == '{"n": 1}'
    with_text = result_of("t", {"content": [{"type": "text", "text": "n=1"}], "structuredContent": {"n": 1}}, 100)
    assert with_text.content == "n=1"  # the text block already says it
    image = {"type": "image", "data": base64.b64encode(b"x" * 10).decode(), "mimeType": "image/png"}
    assert result_of("t", {"content": [image]}, 100).content == "[image image/png, 10 bytes]"
    resource = {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}}
    blob = {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAA", "mimeType": "application/zip"}}
    assert result_of("t", {"content": [resource, blob]}, 100).content == \
        "inside\n[resource file:///b (application/zip)]"


def test_is_error_and_output_limit_are_error_observations():
    failed = result_of("get_note", {"content": [{"type": "text", "text": "no note"}], "isError": True}, 100)
    assert failed.kind == ToolErrorKind.TOOL_ERROR and failed.content == "Error: tool 'get_note' failed: no note"
    long = result_of("t", {"content": [{"type": "text", "text": "x" * 50}]}, 20)
    assert long.kind == ToolErrorKind.OUTPUT_LIMIT
    assert long.content.startswith("x" * 20 + "\n[output truncated: 30 more characters]")


def test_server_spec_checks():
    assert ServerSpec.make(["srv", "--x"], env={"B": "2", "A": "1"}).env == (("A", "1"), ("B", "2"))
    assert ServerSpec(url="http://h/mcp").transport == "http"
    for bad in ({}, {"command": ("a",), "url": "http://h"}, {"url": "ftp://h"}, {"command": "srv"}):
        with pytest.raises((ValueError, TypeError)):
            ServerSpec(**bad)
