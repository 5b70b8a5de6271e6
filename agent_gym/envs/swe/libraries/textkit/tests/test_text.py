import pytest

from textkit import edit_distance, slugify, truncate, word_wrap


def test_slugify_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_slugify_accents():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_slugify_separator():
    assert slugify("a b  c", separator="_") == "a_b_c"


def test_slugify_max_length():
    assert slugify("one two three", max_length=7) == "one-two"


def test_slugify_max_length_strips_separator():
    assert slugify("one two three", max_length=8) == "one-two"


def test_slugify_empty():
    assert slugify("!!!") == ""


def test_slugify_digits():
    assert slugify("Version 2.0 released") == "version-2-0-released"


def test_truncate_short():
    assert truncate("short", 10) == "short"


def test_truncate_exact():
    assert truncate("exact", 5) == "exact"


def test_truncate_cut():
    assert truncate("a long sentence", 8) == "a lon..."


def test_truncate_tiny_width():
    assert truncate("abcdef", 2) == ".."


def test_truncate_custom_ellipsis():
    assert truncate("abcdef", 4, ellipsis="~") == "abc~"


def test_truncate_negative():
    with pytest.raises(ValueError):
        truncate("abc", -1)


def test_wrap_basic():
    assert word_wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_exact_fit():
    assert word_wrap("ab cd", 5) == ["ab cd"]


def test_wrap_long_word():
    assert word_wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]


def test_wrap_empty():
    assert word_wrap("   ", 4) == []


def test_wrap_bad_width():
    with pytest.raises(ValueError):
        word_wrap("abc", 0)


@pytest.mark.parametrize("a,b,d", [("kitten", "sitting", 3), ("", "abc", 3), ("abc", "", 3),
                                   ("flaw", "lawn", 2), ("same", "same", 0), ("ab", "ba", 2)])
def test_edit_distance(a, b, d):
    assert edit_distance(a, b) == d


def test_edit_distance_symmetric():
    assert edit_distance("gumbo", "gambol") == edit_distance("gambol", "gumbo") == 2
