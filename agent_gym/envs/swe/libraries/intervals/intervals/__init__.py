"""intervals: closed-open numeric intervals and sets of them."""

from intervals.interval import Interval
from intervals.interval_set import IntervalSet

__all__ = ["Interval", "IntervalSet"]
