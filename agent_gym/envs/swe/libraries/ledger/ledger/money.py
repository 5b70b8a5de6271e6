"""Amounts of money as integer cents."""


def parse_amount(text):
    """Cents of a text amount such as ``"12.5"``, ``"-3.07"``, ``"1,234.00"`` or ``"$8"``."""
    s = text.strip().replace(",", "")
    negative = s.startswith("-")
    if negative:
        s = s[1:]
    if s.startswith("$"):
        s = s[1:]
    if not s:
        raise ValueError(f"not an amount: {text!r}")
    whole, _, fraction = s.partition(".")
    if not whole:
        whole = "0"
    if not whole.isdigit() or (fraction and not fraction.isdigit()):
        raise ValueError(f"not an amount: {text!r}")
    if len(fraction) > 2:
        raise ValueError(f"more than two decimals: {text!r}")
    cents = int(whole) * 100 + int(fraction.ljust(2, "0") or "0")
    return -cents if negative else cents


def format_cents(cents, symbol="$"):
    """``1234567`` -> ``"$12,345.67"``; negative amounts get a leading minus."""
    sign = "-" if cents < 0 else ""
    whole, part = divmod(abs(cents), 100)
    return f"{sign}{symbol}{whole:,}.{part:02d}"


def split_evenly(cents, parts):
    """Split ``cents`` into ``parts`` shares that differ by at most one cent; larger shares first."""
    if parts < 1:
        raise ValueError("parts must be >= 1")
    base, extra = divmod(cents, parts)
    return [base + 1 if i < extra else base for i in range(parts)]
