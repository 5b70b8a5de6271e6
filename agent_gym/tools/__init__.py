"""Tools an agent can call: schemas from signatures, argument validation, execution with limits.

* :mod:`agent_gym.tools.schema`: a function or bound method -> OpenAI function schema
  (signature + Google-style docstring).
* :mod:`agent_gym.tools.arguments`: validation and coercion of decoded JSON arguments
  (pydantic; a value that already satisfies the declared type is passed unchanged).
* :mod:`agent_gym.tools.annotations`: thread-safe type-hint resolution, and the rewrite of
  ``typing.TypedDict`` pydantic needs before Python 3.12.
* :mod:`agent_gym.tools.base`: the :class:`Tool` protocol, :class:`ToolResult` (with its
  :class:`ToolErrorKind` when the call failed), :class:`FunctionTool`, :func:`as_tool`,
  :func:`non_blocking`, :func:`tools_from_object`, and the results of calls the env does not
  run (:func:`unknown_tool_result`, :func:`skipped_call_result`).
* :mod:`agent_gym.tools.execution`: inline calls and time-limited calls on worker threads.
* :mod:`agent_gym.tools.describe`: :func:`describe_tools`, tools as plain text for prompts.
* :mod:`agent_gym.tools.mcp`: the tools of an MCP server (``MCPTools``), a server per episode from a
  warm pool (needs the ``mcp`` extra; imported on its own, not from here).

How a model writes tool calls (parsing them out of a message, writing them back) is
:mod:`agent_gym.parsers`: :class:`~agent_gym.parsers.ToolCallParser`,
:class:`~agent_gym.parsers.ParsedResponse`, :class:`~agent_gym.parsers.HermesToolCallParser`, ...

Import the names from ``agent_gym.tools`` itself.
"""

from __future__ import annotations

from agent_gym.tools.arguments import ArgumentValidator, validate_arguments
from agent_gym.tools.base import (
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_TIME_LIMIT,
    FunctionTool,
    Tool,
    ToolResult,
    as_tool,
    non_blocking,
    skipped_call_result,
    tools_from_object,
    unknown_tool_result,
)
from agent_gym.tools.describe import describe_tools
from agent_gym.tools.schema import function_schema, parse_google_docstring, shared_function_schema

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_TIME_LIMIT",
    "ArgumentValidator",
    "FunctionTool",
    "Tool",
    "ToolResult",
    "as_tool",
    "describe_tools",
    "function_schema",
    "non_blocking",
    "parse_google_docstring",
    "shared_function_schema",
    "skipped_call_result",
    "tools_from_object",
    "unknown_tool_result",
    "validate_arguments",
]
