"""Answer grading shared by the base environment and the envs: normalisation, matching, numbers, QA metrics.

Two families of helpers:

* **Typed answers** (what ToolUse-v0 scores): :func:`answer_matches` compares an
  answer with a ground truth as a ``number`` (the last number in the text, within a
  tolerance), a ``date`` (ISO or "March 5, 2024" style), a ``weekday`` or a
  ``string`` (:func:`normalize_text` equality). :func:`round_answer` formats a numeric
  ground truth, :func:`numbers_close` compares two numbers.

**The numeric rule.** Numbers are compared as the decimals they are written as, never as
binary floats: the answer's last number is read exactly from its text
(:func:`last_decimal`), the ground truth and the tolerance from theirs (a Python ``float``
by its shortest ``repr``, so ``0.01`` is exactly one hundredth; :func:`as_decimal`). The
answer is correct when ``|answer - expected| <= max(tolerance, 1e-6 * |expected|)``,
decided exactly in decimal arithmetic: a difference equal to the tolerance is inside
(``263.46`` against ``263.47`` at tolerance ``0.01`` is correct, as is ``159.59`` against
``159.60``; ``263.459`` is not), whatever float rounding would have said.
* **QA answers** (SQuAD-style, for retrieval and reading envs): :func:`qa_normalize`
  (lowercase, no punctuation, no articles a/an/the, single spaces),
  :func:`exact_match` and :func:`token_f1`, both taking the best score over a list
  of gold aliases.

Every function here takes model text and never raises on it.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import math
import re
import string
import unicodedata
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

__all__ = [
    "ANSWER_TYPES",
    "answer_matches",
    "as_decimal",
    "exact_match",
    "infer_answer_type",
    "last_decimal",
    "last_number",
    "normalize_text",
    "numbers_close",
    "parse_date",
    "qa_normalize",
    "round_answer",
    "token_f1",
]

ANSWER_TYPES = ("number", "date", "weekday", "string")
"""The answer types :func:`answer_matches` knows."""

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_FULL_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_FORMATS = ("%Y-%m-%d", "%B %d, %Y", "%B %d %Y", "%d %B %Y", "%b %d, %Y", "%b %d %Y", "%d %b %Y")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_RES = tuple((w, re.compile(rf"\b{w}\b")) for w in _WEEKDAYS)
_PUNCT = re.compile(r"[^\w\s]")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_QA_PUNCT = str.maketrans("", "", string.punctuation)
_BOUND_DIGITS = 120  # exact for every bound that needs fewer digits; else rounded outward (more generous)


# --------------------------------------------------------------------------- typed answers


def normalize_text(text: str) -> str:
    """Normalise an answer for string comparison: NFKC, casefold, no punctuation, single spaces."""
    text = unicodedata.normalize("NFKC", str(text)).casefold()
    return " ".join(_PUNCT.sub(" ", text).split())


def round_answer(value: float) -> str:
    """Format a numeric ground truth: rounded to 2 decimals, no trailing zeros (``-0`` becomes ``0``)."""
    text = f"{round(value + 0.0, 2):.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def as_decimal(value: Any) -> Decimal | None:
    """A number as the decimal it is written as, or None when it is no finite number.

    Text is read exactly (``"263.46"`` is 26346/100; surrounding spaces and ``_`` digit
    separators allowed), a ``float`` by its shortest ``repr`` (``0.01`` is 1/100, not the
    binary value nearest to it), an ``int`` or ``Decimal`` as it is.

    Args:
        value: A ``str``, ``int``, ``float`` or ``Decimal``.
    """
    if isinstance(value, Decimal):
        number = value
    elif isinstance(value, int):  # bool too, as float() reads it
        number = Decimal(int(value))
    elif isinstance(value, float):
        number = Decimal(repr(value))
    else:
        try:
            number = Decimal(str(value).strip())
        except (decimal.InvalidOperation, ValueError):
            try:  # text float() reads and Decimal does not (e.g. other scripts' digits)
                number = Decimal(repr(float(str(value))))
            except (ValueError, OverflowError):
                return None
    return number if number.is_finite() else None


def numbers_close(
    got: Decimal | float | str, expected: Decimal | float | str, tolerance: Decimal | float | str = 1e-6,
    relative: Decimal | float | str = 1e-6,
) -> bool:
    """True if ``|got - expected| <= max(tolerance, relative * |expected|)``, decided exactly in decimal.

    Each value is read with :func:`as_decimal` (text exactly as written, a float by its
    shortest ``repr``), so the result never depends on float rounding: a difference equal
    to the tolerance is inside (``numbers_close("263.46", "263.47", 0.01)`` is True). An
    infinite ``tolerance`` accepts every finite pair.

    Args:
        got: The number to check.
        expected: The reference number.
        tolerance: Absolute tolerance.
        relative: Relative tolerance (a fraction of ``|expected|``).

    Returns:
        False when ``got`` or ``expected`` is no finite number or a tolerance is NaN.
    """
    g, e = as_decimal(got), as_decimal(expected)
    if g is None or e is None:
        return False
    if isinstance(tolerance, float) and math.isinf(tolerance) and tolerance > 0:
        return True
    t, r = as_decimal(tolerance), as_decimal(relative)
    if t is None or r is None:
        return False
    with decimal.localcontext() as ctx:
        ctx.prec = _BOUND_DIGITS
        ctx.rounding = decimal.ROUND_CEILING
        bound = max(t, r * abs(e))
        high = e + bound
        ctx.rounding = decimal.ROUND_FLOOR
        low = e - bound
    return low <= g <= high  # comparisons are exact, whatever the context's precision


def last_decimal(text: str) -> Decimal | None:
    """The last number written in ``text`` (thousands separators allowed), exactly as written, or None."""
    matches = _NUMBER.findall(_THOUSANDS.sub("", str(text)))
    return as_decimal(matches[-1]) if matches else None


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands separators allowed), or None if there is none."""
    matches = _NUMBER.findall(_THOUSANDS.sub("", str(text)))
    if not matches:
        return None
    try:
        value = float(matches[-1])
    except (ValueError, OverflowError):  # pragma: no cover - the pattern only matches numbers
        return None
    return value if math.isfinite(value) else None


def parse_date(text: str) -> dt.date | None:
    """A date written as ISO ``YYYY-MM-DD`` (anywhere in the text) or "March 5, 2024" style, else None."""
    text = str(text).strip().rstrip(".")
    match = _ISO_DATE.search(text)
    candidates = [match.group(0)] if match else []
    candidates.append(text)
    for candidate in candidates:
        for fmt in _DATE_FORMATS:
            try:
                return dt.datetime.strptime(candidate, fmt).date()
            except ValueError:
                continue
    return None


def infer_answer_type(ground_truth: Any) -> str:
    """``number`` for numbers and numeric strings, ``date`` for ISO dates, else ``string``."""
    if isinstance(ground_truth, bool):
        return "string"
    if isinstance(ground_truth, (int, float)):
        return "number"
    text = str(ground_truth).strip()
    if _FULL_NUMBER.fullmatch(text):
        return "number"
    if _ISO_DATE.fullmatch(text):
        return "date"
    return "string"


def answer_matches(answer: str, ground_truth: Any, answer_type: str | None = None, tolerance: float = 1e-6) -> bool:
    """Decide whether an answer is correct.

    Args:
        answer: The text inside ``<answer>``.
        ground_truth: The expected answer.
        answer_type: ``number`` (the last number in the answer, thousands separators
            allowed, within ``tolerance`` absolute or 1e-6 relative, compared exactly as
            decimals written: see :func:`numbers_close`), ``date`` (ISO or
            "March 5, 2024" style), ``weekday`` (the only weekday named), ``string``
            (normalised equality); inferred from ``ground_truth`` when None.
        tolerance: Absolute tolerance for numbers (a float by its shortest ``repr``:
            ``0.01`` is exactly one hundredth).

    Returns:
        True if the answer is correct. Never raises on model text.

    Raises:
        ValueError: If ``answer_type`` is ``number`` and ``ground_truth`` is not a number
            (a task error, not a model error).
    """
    kind = answer_type or infer_answer_type(ground_truth)
    if kind == "number":
        expected = as_decimal(ground_truth)
        if expected is None:
            float(ground_truth)  # not a number at all: ValueError (a non-finite one matches nothing)
            return False
        got = last_decimal(answer)
        return got is not None and numbers_close(got, expected, tolerance)
    if kind == "date":
        got_date = parse_date(answer)
        return got_date is not None and got_date == parse_date(str(ground_truth))
    if kind == "weekday":
        folded = str(answer).casefold()
        named = {w for w, pattern in _WEEKDAY_RES if pattern.search(folded)}
        return named == {str(ground_truth).strip().casefold()}
    return normalize_text(answer) == normalize_text(str(ground_truth))


# --------------------------------------------------------------------------- QA answers


def qa_normalize(text: str) -> str:
    """SQuAD-style normalisation: lowercase, no punctuation, no articles (a, an, the), single spaces."""
    text = str(text).lower().translate(_QA_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golds(golds: str | Iterable[str]) -> list[str]:
    if isinstance(golds, str):
        return [golds]
    return [str(g) for g in golds]


def exact_match(pred: str, golds: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold alias, else 0.0.

    Args:
        pred: The predicted answer.
        golds: One gold answer or several aliases.

    Returns:
        1.0 or 0.0 (0.0 when there are no golds).
    """
    got = qa_normalize(pred)
    return 1.0 if any(got == qa_normalize(g) for g in _golds(golds)) else 0.0


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(pred: str, golds: str | Iterable[str]) -> float:
    """Token-level F1 between the normalised prediction and the best-matching gold alias.

    Args:
        pred: The predicted answer.
        golds: One gold answer or several aliases.

    Returns:
        The F1 in [0, 1], maximised over the aliases (0.0 when there are no golds).
        Two answers that both normalise to nothing score 1.0.
    """
    pred_tokens = qa_normalize(pred).split()
    return max((_f1(pred_tokens, qa_normalize(g).split()) for g in _golds(golds)), default=0.0)
