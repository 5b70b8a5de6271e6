"""MCP tool descriptions and results in agent_gym's terms: OpenAI function schemas and ``ToolResult``.

:func:`function_schema_of` turns a tool of ``tools/list`` into the
``{"type": "function", "function": {...}}`` schema every model family's template renders.
:func:`result_of` turns a ``CallToolResult`` into the :class:`~agent_gym.tools.ToolResult` the env
records: text blocks as they are; structured content as JSON when no text block carries it;
an image or audio block as a placeholder naming its type and size (the model reads text);
an embedded resource's text, or its URI; ``isError`` as a ``TOOL_ERROR`` observation; output over
the limit is cut (an ``OUTPUT_LIMIT`` error, as for any other tool).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from agent_gym.errors import ToolErrorKind
from agent_gym.tools import ToolResult

__all__ = ["content_text", "function_schema_of", "result_of"]


def function_schema_of(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI function schema of an MCP tool's wire dict (``name``, ``description``, ``inputSchema``)."""
    parameters = dict(tool.get("inputSchema") or {})
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    parameters.pop("title", None)  # e.g. "put_noteArguments": nothing the model needs
    description = " ".join(str(tool.get("description") or tool.get("title") or "").split())
    return {"type": "function", "function": {"name": str(tool["name"]), "description": description,
                                             "parameters": parameters}}


def _binary_size(data: Any) -> int:
    try:
        return len(base64.b64decode(str(data), validate=False))
    except (binascii.Error, ValueError):
        return len(str(data))


def content_text(block: Mapping[str, Any]) -> str:
    """One content block of a result as text."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        return f"[{kind} {block.get('mimeType', 'unknown type')}, {_binary_size(block.get('data', ''))} bytes]"
    if kind == "resource":
        resource = block.get("resource") or {}
        if "text" in resource:
            return str(resource["text"])
        return f"[resource {resource.get('uri', '')} ({resource.get('mimeType', 'binary')})]"
    if kind == "resource_link":
        return f"[resource link {block.get('uri', '')}: {block.get('name', '')}]"
    return json.dumps(block, ensure_ascii=False, default=str)


def result_of(name: str, result: Mapping[str, Any], max_output_chars: int) -> ToolResult:
    """The :class:`~agent_gym.tools.ToolResult` of an MCP tool's ``CallToolResult`` wire dict (see the module docs)."""
    blocks = [b for b in result.get("content") or [] if isinstance(b, Mapping)]
    parts = [content_text(b) for b in blocks]
    structured = result.get("structuredContent")
    has_text = any(b.get("type") == "text" for b in blocks)
    if structured is not None and not has_text:
        parts.insert(0, json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if result.get("isError"):
        message = f"tool {name!r} failed: {text or 'no details'}"
        return ToolResult.failure(ToolErrorKind.TOOL_ERROR, message[: max_output_chars])
    if len(text) > max_output_chars:
        cut = len(text) - max_output_chars
        return ToolResult(f"{text[:max_output_chars]}\n[output truncated: {cut} more characters]",
                          f"tool {name!r} output has {len(text)} characters, over the limit of {max_output_chars}",
                          ToolErrorKind.OUTPUT_LIMIT)
    return ToolResult(text)
