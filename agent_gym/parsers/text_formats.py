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

from agent_gym.parsers.base import FormatParser, decode_call, error_snippet
from agent_gym.parsers.protocol import ToolCall
from agent_gym.parsers.pythonic_fast import read_call_list

__all__ = ["PythonicParser", "Qwen3CoderParser"]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")
_CALL_LIST_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_MAX_LIST_CHARS = 200_000
_SPECIAL = re.compile(r"[\"'()\[\]{}]")
_IN_QUOTE = {q: re.compile(r"\\|" + re.escape(q)) for q in ("'", '"', "'" * 3, '"' * 3)}


def _value(text: str) -> Any:
    if text.startswith("\n"):
        text = text[1:]
    if text.endswith("\n"):
        text = text[:-1]
    stripped = text.strip()
    if stripped and (stripped[0] in '[{"' or _NUMBER.match(stripped) or stripped in ("true", "false", "null")):
        try:
            return json.loads(stripped)
        except (ValueError, RecursionError):
            return text
    return text


def _spans(text: str, opening: str, closing: str) -> list[tuple[int, int, str]]:
    """``(start, end, inside)`` of each ``opening ... closing`` block (an unclosed last one runs to the end)."""
    out: list[tuple[int, int, str]] = []
    pos = 0
    while True:
        start = text.find(opening, pos)
        if start == -1:
            return out
        inner = start + len(opening)
        end = text.find(closing, inner)
        if end == -1:
            out.append((start, len(text), text[inner:]))
            return out
        out.append((start, end + len(closing), text[inner:end]))
        pos = end + len(closing)


def _parameters(body: str) -> list[tuple[str, str]]:
    """``(key, raw value)`` of each ``<parameter=KEY>`` in a function body.

    A value runs to its ``</parameter>``, the next ``<parameter=`` or the end.
    """
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        opening = body.find("<parameter=", pos)
        if opening == -1:
            return out
        close = body.find(">", opening)
        if close == -1 or "\n" in body[opening:close]:
            pos = opening + 1
            continue
        end = body.find("</parameter>", close)
        following = body.find("<parameter=", close)
        if end == -1 or (following != -1 and following < end):
            end = len(body) if following == -1 else following
            pos = end
        else:
            pos = end + len("</parameter>")
        out.append((body[opening + len("<parameter=") : close].strip(), body[close + 1 : end]))


class Qwen3CoderParser(FormatParser):
    """vLLM's ``qwen3_coder``: ``<function=NAME>`` blocks with ``<parameter=KEY>`` values in ``<tool_call>``."""

    name: ClassVar[str] = "qwen3_coder"
    call_example: ClassVar[str] = (
        "<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>"
    )
    call_format: ClassVar[str] = (
        f"<tool_call> blocks holding <function=NAME> and one <parameter=KEY> per argument, {call_example}"
    )

    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls, the errors and the text without the calls."""
        if "<tool_call>" not in text and "<function=" not in text:
            return [], [], text
        calls: list[ToolCall] = []
        errors: list[str] = []
        blocks = _spans(text, "<tool_call>", "</tool_call>")
        if not blocks:  # bare <function=...> blocks without the <tool_call> wrapper
            blocks = [(start, end, text[start:end]) for start, end, _ in _spans(text, "<function=", "</function>")]
        kept: list[str] = []
        pos = 0
        for start, end, body in blocks:
            kept.append(text[pos:start])
            pos = end
            functions = _spans(body, "<function=", "</function>")
            if not functions:
                errors.append(f"tool call {len(calls) + len(errors) + 1}: expected <function=NAME> in "
                              f"{error_snippet(body)}")
                continue
            for f_start, f_end, inner in functions:
                index = len(calls) + len(errors) + 1
                name, sep, params = inner.partition(">")
                if not sep or "\n" in name:
                    errors.append(f"tool call {index}: expected <function=NAME> in {error_snippet(inner)}")
                    continue
                args: dict[str, Any] = {}
                for key, value in _parameters(params):
                    if key:
                        args[key] = _value(value)
                call, error = decode_call({"name": name, "arguments": args}, body[f_start:f_end], index)
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
        match = (_IN_QUOTE[quote] if quote else _SPECIAL).search(text, i, limit)
        if match is None:
            return -1
        i = match.start()
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            i += len(quote)
            quote = ""
            continue
        if ch in "\"'":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            i += len(quote)
            continue
        if ch in "([{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i + 1 if ch == "]" else -1
        i += 1
    return -1


def _without_tags(text: str) -> str:
    for tag in ("<|python_start|>", "<|python_end|>"):
        text = text.replace(tag, "")
    return text


def _parse_list(text: str, start: int) -> tuple[ast.Expression | str | None, int]:
    """The parsed call list starting at ``start`` and its end; (None, -1) when it is not closed.

    The common case, a list that ends at the message's last ``]``, is parsed at once; otherwise
    the closing bracket is found by scanning (quotes respected). A list that does not parse gives
    the exception's name instead of the tree.
    """
    last = text.rfind("]")
    if last > start:
        try:
            return ast.parse(text[start : last + 1], mode="eval"), last + 1
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    end = _list_end(text, start)
    if end == -1:
        return None, -1
    try:
        return ast.parse(text[start:end], mode="eval"), end
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return exc.__class__.__name__, end


def _literal_value(node: ast.expr) -> Any:
    """A literal's value as JSON-like data (tuples and sets become lists, dict keys strings).

    Raises:
        ValueError: For anything but literals.
    """
    kind = type(node)
    if kind is ast.Constant:
        value = node.value  # type: ignore[attr-defined]
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, complex):
            return str(value)
        if value is Ellipsis:
            raise ValueError("... is not a value")
        return value
    if kind is ast.List or kind is ast.Tuple or kind is ast.Set:
        return [_literal_value(e) for e in node.elts]  # type: ignore[attr-defined]
    if kind is ast.Dict:
        out = {}
        for key, item in zip(node.keys, node.values, strict=True):  # type: ignore[attr-defined]
            if key is None:
                raise ValueError("** in a dict")
            out[str(_literal_value(key))] = _literal_value(item)
        return out
    if kind is ast.UnaryOp and isinstance(node.op, (ast.USub, ast.UAdd)):  # type: ignore[attr-defined]
        operand = _literal_value(node.operand)  # type: ignore[attr-defined]
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            raise ValueError("a sign before a non-number")
        return -operand if isinstance(node.op, ast.USub) else operand  # type: ignore[attr-defined]
    raise ValueError(f"not a literal: {kind.__name__}")


def _segment(source: str, encoded: bytes, node: ast.expr) -> str | None:
    """The source text of ``node`` (UTF-8 byte offsets on the first line; else ``ast``'s lookup)."""
    if node.lineno == 1 and node.end_lineno == 1 and node.end_col_offset is not None:
        return encoded[node.col_offset : node.end_col_offset].decode("utf-8", "surrogatepass")
    return ast.get_source_segment(source, node)


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
    call_example: ClassVar[str] = "[NAME(key=value, ...), ...]"
    call_format: ClassVar[str] = f"a Python list of calls with keyword arguments, {call_example}"

    def extract_calls(self, text: str) -> tuple[list[ToolCall], list[str], str]:
        """Return the calls, the errors and the text without the calls."""
        match = _CALL_LIST_START.search(text)
        if match is None:
            return [], [], text
        start = match.start()
        fast = read_call_list(text, start)
        if fast is not None:  # the common, simple form
            found, end = fast
            calls: list[ToolCall] = []
            errors: list[str] = []
            for index, (call_name, call_args, call_raw) in enumerate(found, 1):
                call, error = decode_call({"name": call_name, "arguments": call_args}, call_raw, index)
                if call is None:
                    errors.append(error or f"tool call {index}: malformed")
                else:
                    calls.append(call)
            return calls, errors, _without_tags(text[:start] + text[end:])
        tree, end = _parse_list(text, start)
        if end == -1 or tree is None:
            return [], [f"tool call 1: the call list is not closed: {error_snippet(text[start:])}"], text[:start]
        source = text[start:end]
        rest = _without_tags(text[:start] + text[end:])
        if isinstance(tree, str):
            return [], [f"tool call 1: not a Python list of calls ({tree}) in {error_snippet(source)}"], rest
        if not isinstance(tree.body, ast.List):
            return [], [f"tool call 1: expected a list of calls, got {error_snippet(source)}"], rest
        calls = []
        errors = []
        encoded = source.encode("utf-8", "surrogatepass")
        for node in tree.body.elts:
            index = len(calls) + len(errors) + 1
            name = _dotted(node.func) if isinstance(node, ast.Call) else None
            if not isinstance(node, ast.Call) or name is None:
                errors.append(f"tool call {index}: expected NAME(key=value, ...)")
                continue
            raw = _segment(source, encoded, node) or name
            if node.args:
                errors.append(f"tool call {index} ({name}): expected keyword arguments only")
                continue
            try:
                args = {kw.arg: _literal_value(kw.value) for kw in node.keywords if kw.arg is not None}
            except (ValueError, TypeError, RecursionError, MemoryError):
                errors.append(f"tool call {index} ({name}): argument values must be Python literals in "
                              f"{error_snippet(raw)}")
                continue
            if len(args) != len(node.keywords):
                errors.append(f"tool call {index} ({name}): **kwargs are not accepted")
                continue
            call, error = decode_call({"name": name, "arguments": args}, raw, index)
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
