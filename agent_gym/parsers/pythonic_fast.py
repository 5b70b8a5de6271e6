"""A fast reader of the common pythonic call list, beside the syntax-tree path of the ``pythonic`` parser.

``[get_weather(city="Paris", days=3), add(a=1, b=[2.5, None])]`` is read token by token with one
regular expression: calls with keyword arguments whose values are strings without
backslashes or newlines, decimal numbers, ``True``/``False``/``None``, lists, tuples and dicts
of those. Anything else (escapes, other literal forms, expressions, repeated keywords,
keywords used as names, malformed text) returns None and the parser falls back to Python's own
parser, which decides and explains. Where this reader answers, it gives what the
syntax-tree path gives (``tests/tools/test_named_parsers.py`` compares them).
"""

from __future__ import annotations

import keyword
import re
from typing import Any

__all__ = ["read_call_list"]

_TOKEN = re.compile(
    r"""\s*(?:('[^'\\\n]*'|"[^"\\\n]*")"""  # 1: a simple string
    r"""|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?![\w.])"""  # 2: a decimal number
    r"""|([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"""  # 3: a (dotted) name
    r"""|([\[\](){},=:]))"""  # 4: punctuation
)
_CONSTANTS = {"True": True, "False": False, "None": None}


class _Unusual(Exception):
    """The text is not in the simple form: let the syntax-tree path decide."""


def _tokens(text: str, start: int) -> tuple[list[tuple[int, str, int]], int]:
    """``(kind, text, start)`` of each token of the bracketed list opening at ``start``, and its end."""
    out: list[tuple[int, str, int]] = []
    pos = start
    depth = 0
    for match in _TOKEN.finditer(text, start):
        if match.start() != pos:  # something no token matches
            raise _Unusual
        kind = match.lastindex or 0
        value = match[kind]
        out.append((kind, value, match.start(kind)))
        pos = match.end()
        if kind == 4:
            if value in "[({":
                depth += 1
            elif value in "])}":
                depth -= 1
                if depth == 0:
                    return out, pos
    raise _Unusual


def _literal(tokens: list[tuple[int, str, int]], i: int, depth: int = 0) -> tuple[Any, int]:
    """The literal starting at token ``i`` and the index after it."""
    if depth > 50:
        raise _Unusual
    kind, value, _ = tokens[i]
    if kind == 1:
        return value[1:-1], i + 1
    if kind == 2:
        return (float(value) if "." in value or "e" in value or "E" in value else int(value)), i + 1
    if kind == 3:
        if value not in _CONSTANTS:
            raise _Unusual
        return _CONSTANTS[value], i + 1
    if value == "[" or value == "(":
        close = "]" if value == "[" else ")"
        items = []
        i += 1
        while tokens[i][1] != close or tokens[i][0] != 4:
            item, i = _literal(tokens, i, depth + 1)
            items.append(item)
            if tokens[i][0] == 4 and tokens[i][1] == ",":
                i += 1
            elif tokens[i][1] != close or tokens[i][0] != 4:
                raise _Unusual
        if close == ")" and len(items) == 1:  # "(x)" is x, not a tuple: leave it to the syntax tree
            raise _Unusual
        return items, i + 1
    if value == "{" and kind == 4:
        out: dict[str, Any] = {}
        i += 1
        while tokens[i][1] != "}" or tokens[i][0] != 4:
            if tokens[i][0] not in (1, 2):
                raise _Unusual
            key, i = _literal(tokens, i, depth + 1)
            if tokens[i][1] != ":" or tokens[i][0] != 4:
                raise _Unusual
            out[str(key)], i = _literal(tokens, i + 1, depth + 1)
            if tokens[i][0] == 4 and tokens[i][1] == ",":
                i += 1
            elif tokens[i][1] != "}" or tokens[i][0] != 4:
                raise _Unusual
        return out, i + 1
    raise _Unusual


def read_call_list(text: str, start: int) -> tuple[list[tuple[str, dict[str, Any], str]], int] | None:
    """The calls of the simple call list opening at ``start`` and the index after it, or None.

    Returns:
        ``([(name, arguments, raw text), ...], end)``; None when the text is not in the simple
        form (see the module docstring).
    """
    try:
        tokens, end = _tokens(text, start)
        if tokens[0][1] != "[" or tokens[-1][1] != "]":
            return None
        calls: list[tuple[str, dict[str, Any], str]] = []
        i = 1
        last = len(tokens) - 1  # the closing "]"
        while i < last:
            kind, name, call_start = tokens[i]
            if kind != 3 or any(keyword.iskeyword(part) for part in name.split(".")) or tokens[i + 1][1] != "(":
                raise _Unusual
            i += 2
            args: dict[str, Any] = {}
            while tokens[i][1] != ")" or tokens[i][0] != 4:
                kind, key, _ = tokens[i]
                if kind != 3 or "." in key or keyword.iskeyword(key) or key in args or tokens[i + 1][1] != "=":
                    raise _Unusual
                args[key], i = _literal(tokens, i + 2)
                if tokens[i][0] == 4 and tokens[i][1] == ",":
                    i += 1
                elif tokens[i][1] != ")" or tokens[i][0] != 4:
                    raise _Unusual
            call_end = tokens[i][2] + 1
            calls.append((name, args, text[call_start:call_end]))
            i += 1
            if tokens[i][0] == 4 and tokens[i][1] == ",":
                i += 1
            elif i != last:
                raise _Unusual
        return calls, end
    except (_Unusual, IndexError, RecursionError, ValueError):
        return None
