"""Sets of disjoint intervals, kept sorted and merged."""

from intervals.interval import Interval


def merge(intervals):
    """Sorted, merged list: touching or overlapping intervals become one; empty ones vanish."""
    items = sorted(i for i in intervals if not i.empty)
    merged = []
    for item in items:
        if merged and item.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, item.end))
        else:
            merged.append(item)
    return merged


class IntervalSet:
    """A union of intervals."""

    def __init__(self, intervals=()):
        self.intervals = merge(intervals)

    def add(self, interval):
        """Add an interval (merging as needed)."""
        self.intervals = merge([*self.intervals, interval])

    def remove(self, interval):
        """Remove every number of ``interval`` from the set."""
        kept = []
        for item in self.intervals:
            if not item.overlaps(interval):
                kept.append(item)
                continue
            if item.start < interval.start:
                kept.append(Interval(item.start, interval.start))
            if interval.end < item.end:
                kept.append(Interval(interval.end, item.end))
        self.intervals = kept

    def contains(self, x):
        """True when some interval holds ``x``."""
        return any(item.contains(x) for item in self.intervals)

    @property
    def total_length(self):
        """Sum of the lengths."""
        return sum(item.length for item in self.intervals)

    def union(self, other):
        """A new set with the numbers of both."""
        return IntervalSet([*self.intervals, *other.intervals])

    def intersection(self, other):
        """A new set with the numbers in both."""
        parts = []
        i = j = 0
        a, b = self.intervals, other.intervals
        while i < len(a) and j < len(b):
            common = a[i].intersection(b[j])
            if common is not None:
                parts.append(common)
            if a[i].end < b[j].end:
                i += 1
            else:
                j += 1
        return IntervalSet(parts)

    def gaps(self):
        """The intervals between consecutive members."""
        return [Interval(x.end, y.start) for x, y in zip(self.intervals, self.intervals[1:])]

    def __len__(self):
        return len(self.intervals)

    def __iter__(self):
        return iter(self.intervals)

    def __eq__(self, other):
        return isinstance(other, IntervalSet) and self.intervals == other.intervals

    def __repr__(self):
        return f"IntervalSet({self.intervals!r})"
