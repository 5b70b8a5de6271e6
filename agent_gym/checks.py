"""Argument checks shared by every public constructor and function.

One place decides how a bad argument is reported: a value of the wrong type raises
``TypeError`` and a value of the right type outside its range raises
:class:`~agent_gym.errors.ConfigError` (a ``ValueError``), both worded
``"<name>: expected ..., got ..."``.

Example:
    >>> from agent_gym.checks import check_int
    >>> check_int("max_steps", 10, low=1)
    10
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Collection, Sized
from typing import Any, Literal, TypeVar, overload

from agent_gym.errors import ConfigError

__all__ = [
    "check_bool",
    "check_callable",
    "check_choice",
    "check_enum",
    "check_float",
    "check_gamma",
    "check_int",
    "check_non_empty",
    "check_pattern",
    "check_timeout",
]

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")
S = TypeVar("S", bound=Sized)


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[low, high]``.

    Args:
        name: Argument name used in the message.
        value: The value to check.
        low: Smallest allowed value (None: unbounded).
        high: Largest allowed value (None: unbounded).

    Raises:
        TypeError: If ``value`` is not an int.
        ConfigError: If it lies outside the range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected int, got {type(value).__name__} {value!r:.40}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(f"{name}: expected an int {_range_text(low, high)}, got {value}")
    return value


def check_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a finite float in ``[low, high]`` (``(low, high)`` with ``low_open``, ``high_open``).

    Args:
        name: Argument name used in the message.
        value: An int or float (not a bool).
        low: Smallest allowed value (None: unbounded).
        high: Largest allowed value (None: unbounded).
        low_open: Exclude ``low`` itself.
        high_open: Exclude ``high`` itself.

    Raises:
        TypeError: If ``value`` is not a number.
        ConfigError: If it is NaN, infinite or outside the range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r:.40}")
    number = float(value)
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if not math.isfinite(number) or too_low or too_high:
        bounds = _range_text(low, high, low_open=low_open, high_open=high_open)
        raise ConfigError(f"{name}: expected a finite number {bounds}, got {value!r}")
    return number


def check_gamma(value: Any, name: str = "gamma") -> float:
    """Return a discount factor in [0, 1]."""
    return check_float(name, value, low=0.0, high=1.0)


@overload
def check_timeout(name: str, value: Any, *, allow_none: Literal[False]) -> float: ...


@overload
def check_timeout(name: str, value: Any, *, allow_none: bool = True) -> float | None: ...


def check_timeout(name: str, value: Any, *, allow_none: bool = True) -> float | None:
    """Return a timeout in seconds (> 0), or None (no limit) when ``allow_none``.

    Raises:
        TypeError: If ``value`` is not a number (or None when allowed).
        ConfigError: If it is not a finite positive number.
    """
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{name}: expected a number of seconds > 0, got None")
    return check_float(name, value, low=0.0, low_open=True)


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool.

    Raises:
        TypeError: Otherwise.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected bool, got {type(value).__name__}")
    return value


def check_choice(name: str, value: T, choices: Collection[T]) -> T:
    """Return ``value`` if it is one of ``choices``.

    Raises:
        ConfigError: Otherwise, listing the choices.
    """
    try:
        found = value in choices
    except TypeError:  # unhashable value against a set
        found = False
    if not found:
        raise ConfigError(f"{name}: expected one of {list(choices)}, got {value!r:.60}")
    return value


def check_enum(name: str, value: Any, enum_class: type[E]) -> E:
    """Return the member of ``enum_class`` that ``value`` is or names by value.

    Raises:
        ConfigError: If ``value`` is neither a member nor a member's value.
    """
    if isinstance(value, enum_class):
        return value
    try:
        return enum_class(value)
    except ValueError:
        raise ConfigError(f"{name}: expected one of {[m.value for m in enum_class]}, got {value!r:.60}") from None


def check_callable(name: str, value: T) -> T:
    """Return ``value`` if it is callable.

    Raises:
        TypeError: Otherwise.
    """
    if not callable(value):
        raise TypeError(f"{name}: expected a callable, got {type(value).__name__}")
    return value


def check_pattern(name: str, value: Any, pattern: re.Pattern[str], expected: str) -> str:
    """Return ``value`` if it is a str matching ``pattern`` as a whole.

    Args:
        name: Argument name used in the message.
        value: The value to check.
        pattern: The compiled pattern the whole string must match.
        expected: What a valid value is, for the message (e.g. ``"a tag name such as 'think'"``).

    Raises:
        TypeError: If ``value`` is not a str.
        ConfigError: If it does not match.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__} {value!r:.40}")
    if not pattern.fullmatch(value):
        raise ConfigError(f"{name}: expected {expected}, got {value!r:.60}")
    return value


def check_non_empty(name: str, value: S) -> S:
    """Return ``value`` if it holds at least one item.

    Raises:
        ConfigError: If it is empty.
    """
    if len(value) == 0:
        raise ConfigError(f"{name}: expected at least one item, got none")
    return value


def _range_text(low: float | None, high: float | None, *, low_open: bool = False, high_open: bool = False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high}"
    return ""
