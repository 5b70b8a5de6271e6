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


class _Reader:
    def __init__(self, text: str, pos: int) -> None:
        self.text = text
        self.pos = pos
        self.kind = 0
        self.value = ""
        self.start = pos
        self.advance()

    def advance(self) -> None:
        match = _TOKEN.match(self.text, self.pos)
        if match is None:
            raise _Unusual
        self.kind = match.lastindex or 0
        self.value = match.group(self.kind)
        self.start = match.start(self.kind)
        self.pos = match.end()

    def expect(self, punct: str) -> None:
        if self.kind != 4 or self.value != punct:
            raise _Unusual
        self.advance()

    def literal(self, depth: int = 0) -> Any:
        if depth > 50:
            raise _Unusual
        kind, value = self.kind, self.value
        if kind == 1:
            self.advance()
            return value[1:-1]
        if kind == 2:
            self.advance()
            return float(value) if any(c in value for c in ".eE") else int(value)
        if kind == 3:
            if value not in _CONSTANTS:
                raise _Unusual
            self.advance()
            return _CONSTANTS[value]
        if kind == 4 and value in "[(":
            close = "]" if value == "[" else ")"
            self.advance()
            items = []
            while not (self.kind == 4 and self.value == close):
                items.append(self.literal(depth + 1))
                if self.kind == 4 and self.value == ",":
                    self.advance()
                elif not (self.kind == 4 and self.value == close):
                    raise _Unusual
            if close == ")" and len(items) == 1:  # "(x)" is x, not a tuple: leave it to the syntax tree
                raise _Unusual
            self.advance()
            return items
        if kind == 4 and value == "{":
            self.advance()
            out: dict[str, Any] = {}
            while not (self.kind == 4 and self.value == "}"):
                if self.kind not in (1, 2):
                    raise _Unusual
                key = self.literal(depth + 1)
                self.expect(":")
                out[str(key)] = self.literal(depth + 1)
                if self.kind == 4 and self.value == ",":
                    self.advance()
                elif not (self.kind == 4 and self.value == "}"):
                    raise _Unusual
            self.advance()
            return out
        raise _Unusual


def read_call_list(text: str, start: int) -> tuple[list[tuple[str, dict[str, Any], str]], int] | None:
    """The calls of the simple call list opening at ``start`` and the index after it, or None.

    Returns:
        ``([(name, arguments, raw text), ...], end)``; None when the text is not in the simple
        form (see the module docstring).
    """
    try:
        reader = _Reader(text, start)
        reader.expect("[")
        calls: list[tuple[str, dict[str, Any], str]] = []
        while not (reader.kind == 4 and reader.value == "]"):
            if reader.kind != 3 or any(keyword.iskeyword(part) for part in reader.value.split(".")):
                raise _Unusual
            name, call_start = reader.value, reader.start
            reader.advance()
            reader.expect("(")
            args: dict[str, Any] = {}
            while not (reader.kind == 4 and reader.value == ")"):
                key = reader.value
                if reader.kind != 3 or "." in key or keyword.iskeyword(key) or key in args:
                    raise _Unusual
                reader.advance()
                reader.expect("=")
                args[key] = reader.literal()
                if reader.kind == 4 and reader.value == ",":
                    reader.advance()
                elif not (reader.kind == 4 and reader.value == ")"):
                    raise _Unusual
            call_end = reader.pos
            reader.advance()
            calls.append((name, args, text[call_start:call_end]))
            if reader.kind == 4 and reader.value == ",":
                reader.advance()
            elif not (reader.kind == 4 and reader.value == "]"):
                raise _Unusual
        return calls, reader.pos
    except (_Unusual, RecursionError, ValueError):
        return None
