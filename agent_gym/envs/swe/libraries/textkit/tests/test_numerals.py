import pytest

from textkit import from_roman, to_roman


@pytest.mark.parametrize("number,numeral", [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"),
                                            (90, "XC"), (400, "CD"), (1994, "MCMXCIV"), (3999, "MMMCMXCIX")])
def test_to_roman(number, numeral):
    assert to_roman(number) == numeral


def test_to_roman_range():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)


def test_to_roman_type():
    with pytest.raises(TypeError):
        to_roman(True)
    with pytest.raises(TypeError):
        to_roman(2.0)


@pytest.mark.parametrize("numeral,number", [("III", 3), ("xlii", 42), ("MMXXIV", 2024), ("CDXLIV", 444)])
def test_from_roman(numeral, number):
    assert from_roman(numeral) == number


def test_from_roman_invalid_character():
    with pytest.raises(ValueError, match="invalid"):
        from_roman("XIZ")


def test_from_roman_non_canonical():
    with pytest.raises(ValueError, match="non-canonical"):
        from_roman("IIII")


def test_from_roman_empty():
    with pytest.raises(ValueError):
        from_roman("")


def test_round_trip():
    for n in range(1, 400):
        assert from_roman(to_roman(n)) == n
