"""A fast reader of the common pythonic call list, beside the syntax-tree path of the ``pythonic`` parser.

``[get_weather(city="Paris", days=3), add(a=1, b=[2.5, None])]``: calls with keyword arguments
whose values are strings without backslashes or newlines, decimal numbers,
``True``/``False``/``None``, lists, tuples and dicts of those. Two readers, fastest first:

* :func:`read_as_json` (a list on one line that ends at the message's last ``]``, whose strings
  all use one quote, without escapes, tuples, number keys or exponents): the code between the
  strings is rewritten to JSON with plain string replacements (each bare word quoted with a
  marker, ``(`` ``)`` ``=`` turned into JSON punctuation) and the JSON decoder reads the whole
  list at once; the decoded structure and the counts of calls, keywords and words are then
  checked, so anything JSON would read but Python would not (a nested call, a ``key=`` inside
  a value, a repeated keyword, a bare name as a value, a ``)`` closing something else) sends
  the text on to the next reader.
* The token reader: the same tokens, read one by one (any position of the list, tuples and
  number keys included).

Anything else (escapes, other literal forms, expressions, repeated keywords, keywords used as
names, malformed text) returns None and the parser falls back to Python's own parser, which
decides and explains. Where these readers answer, they give what the syntax-tree path gives
(``tests/tools/test_named_parsers.py`` compares them).
"""

from __future__ import annotations

import json
import keyword
import re
from typing import Any

__all__ = ["read_as_json", "read_call_list"]

_TOKEN = re.compile(
    r"""\s*(?:('[^'\\\n]*'|"[^"\\\n]*")"""  # 1: a simple string
    r"""|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?![\w.])"""  # 2: a decimal number
    r"""|([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"""  # 3: a (dotted) name
    r"""|([\[\](){},=:]))"""  # 4: punctuation
)
_CONSTANTS = {"True": True, "False": False, "None": None}

# The JSON route (see read_as_json).
_J_WORD = re.compile(r"([A-Za-z_][\w.]*)")
_J_CONSTANTS = (('"\\u0000True"', "true"), ('"\\u0000False"', "false"), ('"\\u0000None"', "null"))
_J_CALL_TEXT = re.compile(r"""[A-Za-z_][\w.]*\s*\((?:[^'"()]+|'[^'\\\n]*'|"[^"\\\n]*")*\)""")
_J_REFUSED = ("\\", "\n", "\r", "\x00", "\x01")  # escapes and line ends: the token reader's, or Python's
_MARK = "\x00"
_END = "\x01"


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a Python literal")


_JSON = json.JSONDecoder(strict=False, parse_constant=_no_constant)  # tabs may stand in strings


def read_as_json(text: str, start: int) -> tuple[list[tuple[str, dict[str, Any], str]], int] | None:
    r"""The JSON route (see the module docstring); None when it does not apply.

    It applies to a list that ends at the text's last ``]``, on one line, without backslashes,
    whose strings all use the same quote. Split at that quote, the even pieces are the code and
    the odd ones the strings' contents. The code is rewritten with string replacements: each
    bare word becomes ``"\u0000WORD"`` (``True``/``False``/``None`` then become
    ``true``/``false``/``null``), ``(`` becomes ``,{``, ``)`` becomes ``},"\u0001"`` and ``=``
    becomes ``:``; joined again with ``"``, ``[f(a=1), g()]`` reads as the JSON list
    ``["\u0000f", {"\u0000a": 1}, "\u0001", "\u0000g", {}, "\u0001"]``. It is a list of calls
    when it is made of such triples only, every key at a call's level is a marked word and the
    counts of ``(``, ``=`` and words match what was decoded (a nested call, a ``key=`` inside a
    value, a repeated keyword or a bare name as a value leave a count unmatched).
    """
    end = text.rfind("]") + 1
    segment = text[start:end]
    if end <= start or any(c in segment for c in _J_REFUSED):
        return None
    if "'" in segment:
        if '"' in segment:
            return None
        chunks = segment.split("'")
    else:
        chunks = segment.split('"')
    if len(chunks) % 2 == 0:
        return None  # a quote left open
    code = _MARK.join(chunks[0::2])
    opens, equals = code.count("("), code.count("=")
    if opens != code.count(")"):
        return None
    pieces = _J_WORD.split(code)  # code, word, code, word, ..., code
    words = len(pieces) // 2
    pieces[1::2] = [f'"\\u0000{word}"' for word in pieces[1::2]]
    code = "".join(pieces)
    constants = 0
    for word, value in _J_CONSTANTS:
        if word in code:
            constants += code.count(word)
            code = code.replace(word, value)
    if words != opens + equals + constants:
        return None  # a bare name where a value stands (or the word of a number such as 1e5)
    chunks[0::2] = code.replace("(", ",{").replace(")", '},"\\u0001"').replace("=", ":").split(_MARK)
    try:
        decoded = _JSON.decode('"'.join(chunks))
    except (ValueError, RecursionError):
        return None
    if type(decoded) is not list or len(decoded) != 3 * opens:
        return None
    calls: list[tuple[str, dict[str, Any]]] = []
    keys = 0
    for i in range(0, len(decoded), 3):
        name, arguments, closing = decoded[i], decoded[i + 1], decoded[i + 2]
        if not (type(name) is str and name[:1] == _MARK and type(arguments) is dict and closing == _END):
            return None  # not a call of this list
        name = name[1:]
        if any(keyword.iskeyword(part) for part in name.split(".")):
            return None
        args: dict[str, Any] = {}
        for key, value in arguments.items():
            if key[:1] != _MARK or "." in key or keyword.iskeyword(key[1:]):
                return None  # a dict key at the call's level, a dotted name or a keyword as the key
            args[key[1:]] = value
        keys += len(args)
        calls.append((name, args))
    if keys != equals:
        return None  # a key= inside a value, or a repeated keyword
    raws = _J_CALL_TEXT.findall(segment)
    if len(raws) != len(calls):
        return None
    return [(n, args, raw) for (n, args), raw in zip(calls, raws, strict=True)], end


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
    fast = read_as_json(text, start)
    if fast is not None:
        return fast
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
