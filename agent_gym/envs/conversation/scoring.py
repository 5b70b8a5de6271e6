"""How Conversation-v0 checks a turn's expected outputs and compares world states.

Expected outputs (``expected_outputs`` of a task) are looked for only in the replies to the
user: the assistant messages without tool calls (their ``<think>`` part removed). A message
that calls tools is addressed to the tools, so a number written in a tool call's arguments
or in the text beside it does not count as telling the user. This is the rule of the
customer-service benchmark the format borrows from (its ``respond`` actions).

:func:`output_found` compares after these normalisations, on both sides: Unicode NFKC,
case folded, thousands separators removed (``8,276.23`` is ``8276.23``; a comma is a
thousands separator when three digits follow it and no fourth) and runs of white space
collapsed. The expected output must then occur in the reply as written: other punctuation
counts (``8276-23`` is not ``8276.23``).

State comparison (:func:`states_equal`): by default values compare with ``==``, so ``100``
and ``100.0`` (and ``True`` and ``1``) are equal. The default is lenient because tool
arguments arrive as JSON, where the model may write a number either way without changing
what it means. ``strict=True`` also compares the types of scalars, as the benchmark does
(it hashes a canonical text of the state, where ``100`` and ``100.0`` differ).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["normalize_output", "output_found", "states_equal", "strict_equal"]

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPACES = re.compile(r"\s+")


def normalize_output(text: str) -> str:
    """``text`` as :func:`output_found` compares it (NFKC, case folded, no thousands separators, single spaces)."""
    text = unicodedata.normalize("NFKC", str(text)).casefold()
    return _SPACES.sub(" ", _THOUSANDS.sub("", text)).strip()


def output_found(expected: str, replies: Iterable[str]) -> bool:
    """True when ``expected`` occurs in one of ``replies`` (the replies to the user), after normalisation."""
    needle = normalize_output(expected)
    return any(needle in normalize_output(reply) for reply in replies)


def strict_equal(a: Any, b: Any) -> bool:
    """``a == b`` where also the types of numbers, booleans and strings agree, recursively."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (bool, int, float, str)) or isinstance(b, (bool, int, float, str)):
        return type(a) is type(b) and a == b
    return bool(a == b)


def states_equal(expected: Any, actual: Any, strict: bool = False) -> bool:
    """Whether two states are equal: ``==``, or :func:`strict_equal` with ``strict``."""
    return strict_equal(expected, actual) if strict else bool(expected == actual)
