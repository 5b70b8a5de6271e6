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

import math
from typing import Any

from agent_gym.errors import ConfigError

__all__ = ["check_bool", "check_float", "check_gamma", "check_int", "check_timeout"]


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
) -> float:
    """Return ``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``).

    Args:
        name: Argument name used in the message.
        value: An int or float (not a bool).
        low: Smallest allowed value (None: unbounded).
        high: Largest allowed value (None: unbounded).
        low_open: Exclude ``low`` itself.

    Raises:
        TypeError: If ``value`` is not a number.
        ConfigError: If it is NaN, infinite or outside the range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r:.40}")
    number = float(value)
    too_low = low is not None and (number <= low if low_open else number < low)
    if not math.isfinite(number) or too_low or (high is not None and number > high):
        bounds = _range_text(low, high, low_open=low_open)
        raise ConfigError(f"{name}: expected a finite number {bounds}, got {value!r}")
    return number


def check_gamma(value: Any, name: str = "gamma") -> float:
    """Return a discount factor in [0, 1]."""
    return check_float(name, value, low=0.0, high=1.0)


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


def _range_text(low: float | None, high: float | None, *, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}]"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    if high is not None:
        return f"<= {high}"
    return ""
