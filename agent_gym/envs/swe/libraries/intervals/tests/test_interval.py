import pytest

from intervals import Interval


def test_length():
    assert Interval(2, 7).length == 5


def test_empty():
    assert Interval(3, 3).empty
    assert not Interval(3, 4).empty


def test_reversed_raises():
    with pytest.raises(ValueError):
        Interval(5, 1)


def test_contains_start():
    assert Interval(1, 4).contains(1)


def test_contains_end_excluded():
    assert not Interval(1, 4).contains(4)


def test_contains_inside_and_before():
    assert Interval(1, 4).contains(2.5)
    assert not Interval(1, 4).contains(0)


def test_overlaps():
    assert Interval(0, 5).overlaps(Interval(4, 9))


def test_adjacent_do_not_overlap():
    assert not Interval(0, 5).overlaps(Interval(5, 9))


def test_empty_never_overlaps():
    assert not Interval(2, 2).overlaps(Interval(0, 5))


def test_touches_adjacent():
    assert Interval(0, 5).touches(Interval(5, 9))
    assert Interval(5, 9).touches(Interval(0, 5))


def test_touches_disjoint():
    assert not Interval(0, 4).touches(Interval(5, 9))


def test_intersection():
    assert Interval(0, 5).intersection(Interval(3, 8)) == Interval(3, 5)


def test_intersection_none():
    assert Interval(0, 3).intersection(Interval(3, 8)) is None


def test_hull():
    assert Interval(0, 2).hull(Interval(5, 8)) == Interval(0, 8)


def test_shift():
    assert Interval(1, 3).shift(10) == Interval(11, 13)


def test_split():
    assert Interval(0, 10).split(4) == (Interval(0, 4), Interval(4, 10))


def test_split_outside():
    with pytest.raises(ValueError):
        Interval(0, 10).split(10)


def test_ordering_and_hash():
    assert sorted([Interval(3, 4), Interval(1, 9), Interval(1, 2)]) == [Interval(1, 2), Interval(1, 9), Interval(3, 4)]
    assert len({Interval(1, 2), Interval(1, 2)}) == 1


def test_repr():
    assert repr(Interval(1, 2)) == "Interval(1, 2)"
