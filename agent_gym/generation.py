"""Seeded, platform-independent randomness for generated tasks and tables.

Generated task sets must be identical on every platform and every release of
Python or NumPy, so they do not use :mod:`random`: :class:`DeterministicRandom`
draws its numbers from SHA-256 of ``"seed:counter"``. Give each generated family
its own seed string (e.g. ``"agent_gym.tool_use.arithmetic.0"``) so that adding a
family never changes the others.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["DeterministicRandom"]

T = TypeVar("T")


class DeterministicRandom:
    """A tiny random generator that gives the same numbers on every platform and version.

    Args:
        seed: Any string or int; the same seed always gives the same sequence.

    Example:
        >>> rng = DeterministicRandom("demo")
        >>> rng.randint(1, 6) == DeterministicRandom("demo").randint(1, 6)
        True
    """

    def __init__(self, seed: int | str) -> None:
        self._seed = str(seed)
        self._counter = 0

    def _next(self) -> int:
        self._counter += 1
        digest = hashlib.sha256(f"{self._seed}:{self._counter}".encode()).digest()
        return int.from_bytes(digest[:8], "big")

    def randint(self, low: int, high: int) -> int:
        """An int in ``[low, high]`` (both inclusive)."""
        if high < low:
            raise ValueError(f"randint: expected low <= high, got {low} > {high}")
        return low + self._next() % (high - low + 1)

    def choice(self, items: Sequence[T]) -> T:
        """One element of a non-empty sequence."""
        if not items:
            raise ValueError("choice: expected a non-empty sequence, got an empty one")
        return items[self.randint(0, len(items) - 1)]

    def decimal(self, low: float, high: float, places: int = 2) -> float:
        """A number in ``[low, high]`` with ``places`` decimals."""
        scale = 10**places
        return self.randint(round(low * scale), round(high * scale)) / scale

    def number(self, low: float, high: float, places: int) -> float | int:
        """Like :meth:`decimal`, but an ``int`` when ``places`` is 0."""
        value = self.decimal(low, high, places)
        return int(value) if places == 0 else value

    def date(self, start: dt.date, span_days: int) -> dt.date:
        """A date in ``[start, start + span_days]``."""
        return start + dt.timedelta(days=self.randint(0, span_days))

    def shuffle(self, items: Sequence[T]) -> list[T]:
        """A shuffled copy of ``items`` (Fisher-Yates)."""
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.randint(0, i)
            out[i], out[j] = out[j], out[i]
        return out

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        """``k`` distinct elements of ``items``, in random order."""
        if not 0 <= k <= len(items):
            raise ValueError(f"sample: expected 0 <= k <= {len(items)}, got {k}")
        return self.shuffle(items)[:k]

    def __getstate__(self) -> dict[str, Any]:
        return {"seed": self._seed, "counter": self._counter}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._seed, self._counter = state["seed"], state["counter"]
