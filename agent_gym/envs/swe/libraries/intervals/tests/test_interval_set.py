from intervals import Interval, IntervalSet
from intervals.interval_set import merge


def test_merge_overlapping():
    assert merge([Interval(0, 3), Interval(2, 5)]) == [Interval(0, 5)]


def test_merge_touching():
    assert merge([Interval(0, 3), Interval(3, 5)]) == [Interval(0, 5)]


def test_merge_disjoint_sorted():
    assert merge([Interval(6, 8), Interval(0, 2)]) == [Interval(0, 2), Interval(6, 8)]


def test_merge_contained():
    assert merge([Interval(0, 10), Interval(2, 3)]) == [Interval(0, 10)]


def test_merge_drops_empty():
    assert merge([Interval(4, 4), Interval(0, 1)]) == [Interval(0, 1)]


def test_add():
    s = IntervalSet([Interval(0, 2)])
    s.add(Interval(5, 7))
    s.add(Interval(2, 5))
    assert s.intervals == [Interval(0, 7)]


def test_remove_middle():
    s = IntervalSet([Interval(0, 10)])
    s.remove(Interval(3, 5))
    assert s.intervals == [Interval(0, 3), Interval(5, 10)]


def test_remove_edge():
    s = IntervalSet([Interval(0, 10)])
    s.remove(Interval(0, 4))
    assert s.intervals == [Interval(4, 10)]


def test_remove_unrelated():
    s = IntervalSet([Interval(0, 2)])
    s.remove(Interval(5, 6))
    assert s.intervals == [Interval(0, 2)]


def test_contains():
    s = IntervalSet([Interval(0, 2), Interval(5, 6)])
    assert s.contains(1) and s.contains(5)
    assert not s.contains(3) and not s.contains(6)


def test_total_length():
    assert IntervalSet([Interval(0, 2), Interval(1, 4), Interval(10, 11)]).total_length == 5


def test_union():
    a = IntervalSet([Interval(0, 2)])
    b = IntervalSet([Interval(1, 5), Interval(8, 9)])
    assert a.union(b).intervals == [Interval(0, 5), Interval(8, 9)]


def test_intersection():
    a = IntervalSet([Interval(0, 5), Interval(10, 15)])
    b = IntervalSet([Interval(3, 12)])
    assert a.intersection(b).intervals == [Interval(3, 5), Interval(10, 12)]


def test_intersection_many():
    a = IntervalSet([Interval(0, 1), Interval(2, 3), Interval(4, 5)])
    b = IntervalSet([Interval(0, 10)])
    assert a.intersection(b) == a


def test_intersection_empty():
    a = IntervalSet([Interval(0, 1)])
    b = IntervalSet([Interval(1, 2)])
    assert len(a.intersection(b)) == 0


def test_gaps():
    s = IntervalSet([Interval(0, 1), Interval(3, 4), Interval(6, 9)])
    assert s.gaps() == [Interval(1, 3), Interval(4, 6)]


def test_iter_and_len():
    s = IntervalSet([Interval(5, 6), Interval(0, 1)])
    assert len(s) == 2
    assert list(s) == [Interval(0, 1), Interval(5, 6)]


def test_equality():
    assert IntervalSet([Interval(0, 1), Interval(1, 2)]) == IntervalSet([Interval(0, 2)])
    assert IntervalSet() != IntervalSet([Interval(0, 2)])
