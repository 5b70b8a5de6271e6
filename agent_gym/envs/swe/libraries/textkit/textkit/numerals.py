"""Roman numerals."""

_TABLE = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]
_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(number):
    """The roman numeral of an integer from 1 to 3999."""
    if not isinstance(number, int) or isinstance(number, bool):
        raise TypeError("number must be an int")
    if number < 1 or number > 3999:
        raise ValueError("number must be between 1 and 3999")
    parts = []
    for value, letters in _TABLE:
        count, number = divmod(number, value)
        parts.append(letters * count)
    return "".join(parts)


def from_roman(text):
    """The integer of a roman numeral (upper or lower case); rejects non-canonical forms."""
    if not text:
        raise ValueError("empty numeral")
    text = text.upper()
    total = 0
    for i, ch in enumerate(text):
        if ch not in _VALUES:
            raise ValueError(f"invalid numeral character {ch!r}")
        value = _VALUES[ch]
        if i + 1 < len(text) and _VALUES.get(text[i + 1], 0) > value:
            total -= value
        else:
            total += value
    if to_roman(total) != text:
        raise ValueError(f"non-canonical numeral {text!r}")
    return total
