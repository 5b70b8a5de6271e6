"""Plain-text descriptions of tools, for system prompts of chat templates without tool support."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["describe_tools"]


def _function_part(schema: Any) -> Mapping[str, Any]:
    if isinstance(schema, Mapping):
        return schema["function"] if isinstance(schema.get("function"), Mapping) else schema
    if hasattr(schema, "schema"):
        return _function_part(schema.schema)
    raise TypeError(f"describe_tools: expected OpenAI function schemas or tools, got {type(schema).__name__}")


def _type_text(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_type_text(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), Mapping) and schema["items"]:
        return f"array of {_type_text(schema['items'])}"
    return str(kind)


def describe_tools(schemas: Iterable[Any], *, include_format: bool = True, call_format: str | None = None) -> str:
    """Describe tools in plain text, for system prompts of templates without tool support.

    Args:
        schemas: OpenAI function schemas (``{"type": "function", "function": {...}}``
            or the inner ``{"name", ...}`` dict) or Tool objects.
        include_format: Also explain how to write a ``<tool_call>`` block.
        call_format: With ``include_format``, one call in the model's own format to show
            instead of the ``<tool_call>`` block (e.g. :func:`agent_gym.parsers.instructions.call_example`).

    Returns:
        The description; each tool appears exactly once. Empty string when there are no tools.
    """
    functions = [_function_part(s) for s in schemas]
    if not functions:
        return ""
    lines = ["# Tools", "", "You can call the following tools."]
    for fn in functions:
        params = fn.get("parameters", {}) or {}
        props: Mapping[str, Any] = params.get("properties", {}) or {}
        required = set(params.get("required", ()) or ())
        lines += ["", f"## {fn.get('name', '?')}"]
        if fn.get("description"):
            lines.append(str(fn["description"]).strip())
        if props:
            lines.append("Parameters:")
            for pname, pschema in props.items():
                flag = "required" if pname in required else "optional"
                if "default" in pschema:
                    flag += f", default {json.dumps(pschema['default'])}"
                text = f"- {pname} ({_type_text(pschema)}, {flag})"
                if pschema.get("description"):
                    text += f": {pschema['description']}"
                lines.append(text)
        else:
            lines.append("Parameters: none.")
    if include_format:
        lines += [
            "",
            "To call a tool, write one block per call:" if call_format is None else "To call a tool, write:",
            call_format or '<tool_call>{"name": "<tool name>", "arguments": {"<parameter>": <value>}}</tool_call>',
            'Each result comes back in a message with role "tool".',
        ]
    return "\n".join(lines)
