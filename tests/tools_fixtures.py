"""Module-level tool functions used by the tests (module level so envs holding them pickle)."""

from __future__ import annotations

import time
from typing import Literal, Optional


def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.

    Returns:
        The sum.
    """
    return a + b


def fail(reason: str) -> str:
    """Always raise.

    Args:
        reason: Text of the error.
    """
    raise RuntimeError(reason)


def sleepy(seconds: float) -> str:
    """Sleep, then answer.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return "awake"


def huge(n: int) -> str:
    """Return n characters.

    Args:
        n: How many characters.
    """
    return "x" * n


def typed(
    text: str,
    count: int,
    ratio: float,
    flag: bool,
    items: list[int],
    mapping: dict[str, float],
    mode: Literal["fast", "slow"] = "fast",
    maybe: Optional[str] = None,  # noqa: UP045
    other: int | None = None,
) -> dict:
    """Echo typed arguments.

    Args:
        text (str): Some text
            over two lines.
        count: A count.
        ratio: A ratio.
        flag: A flag.
        items: Integers.
        mapping: Named numbers.
        mode: Speed.
        maybe: Optional text.
        other: Optional int.

    Returns:
        The arguments.
    """
    return {"text": text, "count": count, "ratio": ratio, "flag": flag, "items": items, "mapping": mapping,
            "mode": mode, "maybe": maybe, "other": other}
