"""Tool-call formats that are not JSON objects: Qwen3-Coder's XML-style blocks and Python call lists.

* ``qwen3_coder``::

      <tool_call>
      <function=NAME>
      <parameter=KEY>
      VALUE
      </parameter>
      </function>
      </tool_call>

  A value that is valid JSON (numbers, booleans, objects, lists, quoted strings) is decoded;
  any other value is the string as written (one newline after the opening tag and before the
  closing tag belongs to the format, not to the value).
* ``pythonic`` (Llama 3.2/4, ToolACE): a Python list of calls with keyword arguments,
  ``[get_weather(city="Paris"), add(a=1, b=2)]``, optionally between ``<|python_start|>``
  and ``<|python_end|>``. Argument values must be Python literals.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agent_gym.parsers.base import FormatParser
from agent_gym.tools.parsing import ToolCall, decode_call, error_snippet

__all__ = ["PythonicParser", "Qwen3CoderParser"]

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
_CALL_LIST_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_MAX_LIST_CHARS = 200_000


def _value(text: str) -> Any:
    if text.startswith("\n"):
        text = text[1:]
    if text.endswith("\n"):
        text = text[:-1]
    stripped = text.strip()
    if stripped and (stripped[0] in '[{"-' or stripped[0].isdigit() or stripped in ("true", "false", "null")):
        try:
            return json.loads(stripped)
        except (ValueError, RecursionError):
            return text
    return text


class Qwen3CoderParser(FormatParser):
    """vLLM's ``qwen3_coder``: ``<function=NAME>`` blocks with ``<parameter=KEY>`` values in ``<tool_call>``."""

    name: ClassVar[str] = "qwen3_coder"

    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls, the errors and the text without the calls."""
        if "<tool_call>" not in text and "<function=" not in text:
            return [], [], text
        calls: list[ToolCall] = []
        errors: list[str] = []
        blocks = [(m.start(), m.end(), m.group(1)) for m in _BLOCK.finditer(text)]
        if not blocks:  # bare <function=...> blocks without the <tool_call> wrapper
            blocks = [(m.start(), m.end(), m.group(0)) for m in _FUNCTION.finditer(text)]
        kept: list[str] = []
        pos = 0
        for start, end, body in blocks:
            kept.append(text[pos:start])
            pos = end
            functions = list(_FUNCTION.finditer(body))
            if not functions:
                errors.append(f"tool call {len(calls) + len(errors) + 1}: expected <function=NAME> in "
                              f"{error_snippet(body)}")
                continue
            for function in functions:
                index = len(calls) + len(errors) + 1
                args: dict[str, Any] = {}
                for parameter in _PARAMETER.finditer(function.group(2)):
                    key = parameter.group(1).strip()
                    if key:
                        args[key] = _value(parameter.group(2))
                call, error = decode_call({"name": function.group(1), "arguments": args}, function.group(0), index)
                if call is None:
                    errors.append(error or f"tool call {index}: malformed")
                else:
                    calls.append(call)
        kept.append(text[pos:])
        return calls, errors, "".join(kept)

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """One ``<tool_call>`` block per call; string values as written, others as JSON."""
        parts = []
        for name, args in calls:
            params = "".join(
                f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}\n"
                "</parameter>\n"
                for key, value in args.items()
            )
            parts.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
        return "\n".join(parts)


def _list_end(text: str, start: int) -> int:
    """Index after the ``]`` closing the list opened at ``start`` (quotes respected), or -1."""
    depth = 0
    quote = ""
    i = start
    limit = min(len(text), start + _MAX_LIST_CHARS)
    while i < limit:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif ch in "\"'":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            i += len(quote)
            continue
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1 if ch == "]" else -1
        i += 1
    return -1


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


class PythonicParser(FormatParser):
    """vLLM's ``pythonic``: a Python list of calls with literal keyword arguments."""

    name: ClassVar[str] = "pythonic"

    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls, the errors and the text without the calls."""
        match = _CALL_LIST_START.search(text)
        if match is None:
            return [], [], text
        start = match.start()
        end = _list_end(text, start)
        if end == -1:
            return [], [f"tool call 1: the call list is not closed: {error_snippet(text[start:])}"], text[:start]
        source = text[start:end]
        rest = text[:start] + text[end:]
        for tag in ("<|python_start|>", "<|python_end|>"):
            rest = rest.replace(tag, "")
        try:
            tree = ast.parse(source, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            return [], [f"tool call 1: not a Python list of calls ({exc.__class__.__name__}) in "
                        f"{error_snippet(source)}"], rest
        if not isinstance(tree.body, ast.List):
            return [], [f"tool call 1: expected a list of calls, got {error_snippet(source)}"], rest
        calls: list[ToolCall] = []
        errors: list[str] = []
        for node in tree.body.elts:
            index = len(calls) + len(errors) + 1
            name = _dotted(node.func) if isinstance(node, ast.Call) else None
            if not isinstance(node, ast.Call) or name is None:
                errors.append(f"tool call {index}: expected NAME(key=value, ...)")
                continue
            raw = ast.get_source_segment(source, node) or name
            if node.args:
                errors.append(f"tool call {index} ({name}): expected keyword arguments only")
                continue
            try:
                args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                errors.append(f"tool call {index} ({name}): argument values must be Python literals in "
                              f"{error_snippet(raw)}")
                continue
            if len(args) != len(node.keywords):
                errors.append(f"tool call {index} ({name}): **kwargs are not accepted")
                continue
            call, error = decode_call({"name": name, "arguments": _jsonable(args)}, raw, index)
            if call is None:
                errors.append(error or f"tool call {index}: malformed")
            else:
                calls.append(call)
        return calls, errors, rest

    def format_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """``[name(key=value, ...), ...]`` with Python literals."""
        return "[" + ", ".join(
            f"{name}(" + ", ".join(f"{key}={_literal(value)}" for key, value in args.items()) + ")"
            for name, args in calls
        ) + "]"


def _literal(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return repr(value)
    return repr(value) if not isinstance(value, (dict, list)) else repr(_jsonable(value))


def _jsonable(value: Any) -> Any:
    """Python literal values as JSON-like values (tuples and sets become lists, other keys strings)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, complex):
        return str(value)
    return value
