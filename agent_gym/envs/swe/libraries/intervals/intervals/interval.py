"""A half-open interval [start, end)."""


class Interval:
    """The numbers x with ``start <= x < end``; empty when ``start == end``."""

    def __init__(self, start, end):
        if end < start:
            raise ValueError(f"end {end} is before start {start}")
        self.start = start
        self.end = end

    @property
    def length(self):
        """``end - start``."""
        return self.end - self.start

    @property
    def empty(self):
        """True when the interval holds no number."""
        return self.start == self.end

    def contains(self, x):
        """True when ``start <= x < end``."""
        return self.start <= x < self.end

    def overlaps(self, other):
        """True when the two intervals share at least one number."""
        if self.empty or other.empty:
            return False
        return self.start < other.end and other.start < self.end

    def touches(self, other):
        """True when the intervals overlap or one ends where the other starts."""
        return self.overlaps(other) or self.end == other.start or other.end == self.start

    def intersection(self, other):
        """The common part, or None when they do not overlap."""
        if not self.overlaps(other):
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))

    def hull(self, other):
        """The smallest interval holding both."""
        return Interval(min(self.start, other.start), max(self.end, other.end))

    def shift(self, delta):
        """The interval moved by ``delta``."""
        return Interval(self.start + delta, self.end + delta)

    def split(self, at):
        """Two intervals cut at ``at`` (which must lie inside)."""
        if not self.start < at < self.end:
            raise ValueError(f"{at} is not strictly inside {self}")
        return Interval(self.start, at), Interval(at, self.end)

    def __eq__(self, other):
        return isinstance(other, Interval) and (self.start, self.end) == (other.start, other.end)

    def __lt__(self, other):
        return (self.start, self.end) < (other.start, other.end)

    def __hash__(self):
        return hash((self.start, self.end))

    def __repr__(self):
        return f"Interval({self.start}, {self.end})"
