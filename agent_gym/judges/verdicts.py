"""Strict reading of a judge's answer: one JSON verdict object, the right keys, in range, or a classified failure.

A judge is asked to end its answer with one JSON object (reasoning may come before it):

* pointwise: ``{"score": S}`` with ``S`` a number in the scale (0 to 10 by default);
* pairwise: ``{"winner": "A" | "B" | "tie"}``;
* group ranking: ``{"scores": [S1, ..., Sn]}``, exactly one score per answer, each in the scale.

Anything else raises :class:`~agent_gym.errors.JudgeError` with its kind: no JSON object at all
(``unparseable``), several objects that carry the verdict key (``ambiguous``), wrong or missing keys,
text or booleans where a number belongs (``schema``), a number outside the scale or not finite
(``out_of_range``), a list of the wrong length (``wrong_count``). Nothing is guessed: a reply that is
not exactly one verdict gives no score (no "last number in the text", no clipping into range).
"""

from __future__ import annotations

import json
import math
from typing import Any

from agent_gym.errors import JudgeError

__all__ = ["DEFAULT_SCALE", "json_objects", "parse_preference", "parse_score", "parse_scores"]

DEFAULT_SCALE: tuple[float, float] = (0.0, 10.0)
"""The scale a judge scores on unless told otherwise; scores are divided into [0, 1]."""

_MAX_REPLY_CHARS = 200_000  # longer replies are read only this far (a runaway judge cannot stall the parser)


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object written in ``text`` (in prose, code fences or alone), in order.

    Args:
        text: A judge's reply.
    """
    decoder = json.JSONDecoder()
    text = str(text)[:_MAX_REPLY_CHARS]
    found: list[dict[str, Any]] = []
    index = text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except (json.JSONDecodeError, RecursionError, ValueError):
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        index = text.find("{", end)
    return found


def _verdict(text: str, key: str) -> dict[str, Any]:
    """The one object of ``text`` that has ``key``; a JudgeError when there is none or several."""
    objects = json_objects(text)
    if not objects:
        raise JudgeError("unparseable", f"expected a JSON object with {key!r}, got {str(text)[:120]!r}")
    carrying = [o for o in objects if key in o]
    if not carrying:
        raise JudgeError("schema", f"expected a JSON object with {key!r}, got keys {sorted(objects[-1])[:8]}")
    if len(carrying) > 1:
        raise JudgeError("ambiguous", f"expected one verdict object, got {len(carrying)} with {key!r}")
    verdict = carrying[0]
    extra = sorted(set(verdict) - {key, "reason", "reasoning", "explanation"})
    if extra:
        raise JudgeError("schema", f"expected only {key!r} (and a reason), got extra keys {extra[:8]}")
    return verdict


def _number(value: Any, scale: tuple[float, float], what: str) -> float:
    """``value`` divided into [0, 1] from ``scale``; a JudgeError for a non-number or a value outside the scale."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JudgeError("schema", f"{what}: expected a number, got {type(value).__name__} {value!r:.40}")
    low, high = scale
    if not math.isfinite(value) or not low <= value <= high:
        raise JudgeError("out_of_range", f"{what}: expected a number in [{low:g}, {high:g}], got {value!r}")
    return (float(value) - low) / (high - low)


def _check_scale(scale: tuple[float, float]) -> tuple[float, float]:
    low, high = (float(scale[0]), float(scale[1]))
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"scale: expected (low, high) with low < high, got {scale!r}")
    return low, high


def parse_score(text: str, scale: tuple[float, float] = DEFAULT_SCALE) -> float:
    """The score of a pointwise verdict ``{"score": S}``, divided into [0, 1].

    Args:
        text: The judge's reply.
        scale: The (low, high) the judge was asked to score on.

    Raises:
        JudgeError: The reply is not exactly one valid verdict (see the module doc).
    """
    scale = _check_scale(scale)
    return _number(_verdict(text, "score")["score"], scale, "score")


def parse_preference(text: str) -> str:
    """The winner of a pairwise verdict ``{"winner": "A" | "B" | "tie"}``: ``"A"``, ``"B"`` or ``"tie"``.

    Raises:
        JudgeError: The reply is not exactly one valid verdict.
    """
    winner = _verdict(text, "winner")["winner"]
    if not isinstance(winner, str) or winner.strip().upper() not in ("A", "B", "TIE"):
        raise JudgeError("schema", f"winner: expected 'A', 'B' or 'tie', got {winner!r:.40}")
    value = winner.strip().upper()
    return "tie" if value == "TIE" else value


def parse_scores(text: str, count: int, scale: tuple[float, float] = DEFAULT_SCALE) -> list[float]:
    """The scores of a group verdict ``{"scores": [...]}``: exactly ``count`` numbers, each divided into [0, 1].

    Args:
        text: The judge's reply.
        count: How many answers were ranked.
        scale: The (low, high) the judge was asked to score on.

    Raises:
        JudgeError: The reply is not one verdict, or has not exactly one in-range score per answer.
    """
    scale = _check_scale(scale)
    scores = _verdict(text, "scores")["scores"]
    if not isinstance(scores, list):
        raise JudgeError("schema", f"scores: expected a list, got {type(scores).__name__}")
    if len(scores) != count:
        raise JudgeError("wrong_count", f"scores: expected {count} (one per answer), got {len(scores)}")
    return [_number(value, scale, f"scores[{i}]") for i, value in enumerate(scores)]
