import pytest

from ledger import format_cents, parse_amount, split_evenly


@pytest.mark.parametrize("text,cents", [("12", 1200), ("12.5", 1250), ("12.05", 1205), ("-3.07", -307),
                                        ("1,234.00", 123400), ("$8", 800), ("-$2.10", -210), (".5", 50),
                                        ("  7.25 ", 725)])
def test_parse_amount(text, cents):
    assert parse_amount(text) == cents


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "$", "1.234", "-"])
def test_parse_amount_invalid(text):
    with pytest.raises(ValueError):
        parse_amount(text)


@pytest.mark.parametrize("cents,text", [(0, "$0.00"), (5, "$0.05"), (1234567, "$12,345.67"), (-250, "-$2.50"),
                                        (100, "$1.00")])
def test_format_cents(cents, text):
    assert format_cents(cents) == text


def test_format_symbol():
    assert format_cents(199, symbol="EUR ") == "EUR 1.99"


def test_split_even():
    assert split_evenly(900, 3) == [300, 300, 300]


def test_split_remainder():
    assert split_evenly(1000, 3) == [334, 333, 333]


def test_split_sum():
    for total in range(0, 50):
        assert sum(split_evenly(total, 7)) == total


def test_split_bad_parts():
    with pytest.raises(ValueError):
        split_evenly(10, 0)
