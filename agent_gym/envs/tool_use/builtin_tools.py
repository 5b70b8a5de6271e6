"""The tools of ``agent_gym/ToolUse-v0``: calculator, unit conversion, dates and an inventory table.

Every tool is a module-level function (so environments holding them pickle),
pure and bounded in time: the calculator is a small recursive-descent evaluator
of arithmetic (never ``eval``) with limits on expression length, nesting depth
and result size, so each is declared :func:`~agent_gym.tools.non_blocking` (runs inline,
without a worker thread). Invalid input raises ``ValueError`` with a message meant for
the model; the env turns it into an error observation.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal, Optional

from agent_gym.generation import DeterministicRandom
from agent_gym.tools import non_blocking

__all__ = [
    "BUILTIN_TOOLS",
    "INVENTORY_FIELDS",
    "UNITS",
    "calculator",
    "convert_units",
    "date_add",
    "date_diff",
    "format_number",
    "inventory",
    "lookup_item",
    "weekday",
]

_MAX_EXPRESSION_CHARS = 1000
_MAX_MAGNITUDE = 1e300
_MAX_INT_DIGITS = 300


def format_number(value: float | int) -> str:
    """Format a tool's numeric result: ints exactly, floats with up to 12 significant digits."""
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".12g")


# --------------------------------------------------------------------------- calculator

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "exp": math.exp,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
_TOKEN = re.compile(
    r"(\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|(\*\*|//|[-+*/%(),^])|([A-Za-z_]\w*)|(\S)"
)
_MAX_DEPTH = 64
_INT_LIMIT = 10**_MAX_INT_DIGITS
_SYNTAX_HINT = "use numbers, + - * / // % **, parentheses, " + ", ".join([*_FUNCTIONS, *_CONSTANTS])
_END = ("end", None)
_MUL_OPS = frozenset(("*", "/", "//", "%"))


def _check_size(value: float | int) -> float | int:
    if type(value) is float:
        if not -_MAX_MAGNITUDE <= value <= _MAX_MAGNITUDE:  # also rejects NaN
            raise ValueError("the result is too large or not a finite number")
    elif not -_INT_LIMIT < value < _INT_LIMIT:
        raise ValueError("the result is too large")
    return value


def _power(base: float | int, exponent: float | int) -> float | int:
    if abs(exponent) > 1000:
        raise ValueError("exponent too large (at most 1000)")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > _MAX_INT_DIGITS:
        raise ValueError("the result is too large")
    if base == 0 and exponent < 0:
        raise ValueError("division by zero")
    result = base**exponent
    if isinstance(result, complex):
        raise ValueError("the result is not a real number")
    return _check_size(result)


def _tokenize(text: str) -> list[tuple[str, Any]]:
    """Split an expression into ("num", value), ("op", symbol) and ("name", identifier) tokens."""
    tokens: list[tuple[str, Any]] = []
    for number, op, name, other in _TOKEN.findall(text):
        if number:
            is_float = "." in number or "e" in number or "E" in number
            tokens.append(("num", float(number) if is_float else int(number)))
        elif op:
            if op == "^":
                raise ValueError("unsupported operator '^' (use ** for powers)")
            tokens.append(("op", op))
        elif name:
            tokens.append(("name", name))
        else:
            raise ValueError(f"unexpected character {other!r}; {_SYNTAX_HINT}")
    return tokens


class _Parser:
    """Recursive-descent evaluator of the calculator grammar (Python precedence, ``**`` right-associative)."""

    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.tokens = [*tokens, _END]
        self.pos = 0
        self.depth = 0

    def _nest(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise ValueError("expression nested too deeply")

    def _expect(self, symbol: str) -> None:
        token = self.tokens[self.pos]
        if token != ("op", symbol):
            got = "the end" if token is _END else repr(str(token[1]))
            raise ValueError(f"expected {symbol!r}, got {got}")
        self.pos += 1

    def parse(self) -> float | int:
        value = self.expression()
        token = self.tokens[self.pos]
        if token is not _END:
            raise ValueError(f"unexpected {str(token[1])!r}; {_SYNTAX_HINT}")
        return value

    def expression(self) -> float | int:
        self._nest()
        value = self.term()
        tokens = self.tokens
        while True:
            kind, symbol = tokens[self.pos]
            if kind != "op" or (symbol != "+" and symbol != "-"):
                self.depth -= 1
                return value
            self.pos += 1
            right = self.term()
            value = _check_size(value + right if symbol == "+" else value - right)

    def term(self) -> float | int:
        value = self.unary()
        tokens = self.tokens
        while True:
            kind, symbol = tokens[self.pos]
            if kind != "op" or symbol not in _MUL_OPS:
                return value
            self.pos += 1
            right = self.unary()
            if symbol == "*":
                value = _check_size(value * right)
                continue
            if right == 0:
                raise ValueError("division by zero")
            value = value / right if symbol == "/" else value // right if symbol == "//" else value % right
            value = _check_size(value)

    def unary(self) -> float | int:
        kind, symbol = self.tokens[self.pos]
        if kind == "op" and (symbol == "-" or symbol == "+"):
            self.pos += 1
            self._nest()
            value = self.unary()
            self.depth -= 1
            return -value if symbol == "-" else value
        return self.power()

    def power(self) -> float | int:
        base = self.atom()
        if self.tokens[self.pos] == ("op", "**"):
            self.pos += 1
            self._nest()
            exponent = self.unary()
            self.depth -= 1
            return _power(base, exponent)
        return base

    def atom(self) -> float | int:
        kind, value = self.tokens[self.pos]
        if kind == "end":
            raise ValueError("the expression ends too early")
        self.pos += 1
        if kind == "num":
            return _check_size(value)
        if kind == "op" and value == "(":
            inner = self.expression()
            self._expect(")")
            return inner
        if kind == "name":
            if value in _FUNCTIONS and self.tokens[self.pos] == ("op", "("):
                self.pos += 1
                args: list[float | int] = []
                if self.tokens[self.pos] != ("op", ")"):
                    args.append(self.expression())
                    while self.tokens[self.pos] == ("op", ","):
                        self.pos += 1
                        args.append(self.expression())
                self._expect(")")
                try:
                    return _check_size(_FUNCTIONS[value](*args))
                except (TypeError, ValueError, OverflowError) as exc:
                    raise ValueError(f"{value}(): {exc}") from None
            if value in _CONSTANTS:
                return _CONSTANTS[value]
            raise ValueError(f"unknown name {value!r}; {_SYNTAX_HINT}")
        raise ValueError(f"unexpected {str(value)!r}; {_SYNTAX_HINT}")


@non_blocking
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return its value.

    Supports numbers, + - * / // % ** and parentheses, the functions sqrt, abs,
    round, min, max, floor, ceil, log and exp, and the constants pi and e.

    Args:
        expression: The expression, e.g. "(12.5 + 3) * 4 / 7".

    Returns:
        The value, with up to 12 significant digits.
    """
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression too long ({len(expression)} characters, at most {_MAX_EXPRESSION_CHARS})")
    text = expression.replace("×", "*").replace("÷", "/").replace("−", "-")
    tokens = _tokenize(text)
    if not tokens:
        raise ValueError("empty expression")
    try:
        return format_number(_Parser(tokens).parse())
    except OverflowError:
        raise ValueError("the result is too large") from None


# --------------------------------------------------------------------------- units

UNITS: dict[str, tuple[str, float]] = {
    "mm": ("length", 0.001), "cm": ("length", 0.01), "m": ("length", 1.0), "km": ("length", 1000.0),
    "in": ("length", 0.0254), "ft": ("length", 0.3048), "yd": ("length", 0.9144), "mi": ("length", 1609.344),
    "mg": ("mass", 1e-6), "g": ("mass", 0.001), "kg": ("mass", 1.0), "t": ("mass", 1000.0),
    "oz": ("mass", 0.028349523125), "lb": ("mass", 0.45359237),
    "ml": ("volume", 0.001), "l": ("volume", 1.0), "gal": ("volume", 3.785411784), "qt": ("volume", 0.946352946),
    "cup": ("volume", 0.2365882365),
    "s": ("time", 1.0), "min": ("time", 60.0), "h": ("time", 3600.0), "day": ("time", 86400.0),
    "week": ("time", 604800.0),
    "c": ("temperature", 1.0), "f": ("temperature", 1.0), "k": ("temperature", 1.0),
}
"""Unit symbol -> (dimension, size in the dimension's base unit); temperatures are special-cased."""

_ALIASES = {
    "millimeter": "mm", "millimetre": "mm", "centimeter": "cm", "centimetre": "cm", "meter": "m", "metre": "m",
    "kilometer": "km", "kilometre": "km", "inch": "in", "inches": "in", "foot": "ft", "feet": "ft", "yard": "yd",
    "mile": "mi", "milligram": "mg", "gram": "g", "kilogram": "kg", "tonne": "t", "ounce": "oz", "pound": "lb",
    "lbs": "lb", "milliliter": "ml", "millilitre": "ml", "liter": "l", "litre": "l", "gallon": "gal",
    "quart": "qt", "cups": "cup", "second": "s", "sec": "s", "minute": "min", "hour": "h", "hr": "h", "days": "day",
    "d": "day", "weeks": "week", "celsius": "c", "°c": "c", "fahrenheit": "f", "°f": "f", "kelvin": "k",
}


def _unit(name: str) -> str:
    key = name.strip().lower().replace("degrees ", "")
    if key in UNITS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    if key.endswith("s") and key[:-1] in _ALIASES:
        return _ALIASES[key[:-1]]
    raise ValueError(f"unknown unit {name!r}; known units: {', '.join(UNITS)}")


def _to_kelvin(value: float, unit: str) -> float:
    return {"c": value + 273.15, "f": (value - 32) * 5 / 9 + 273.15, "k": value}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"c": value - 273.15, "f": (value - 273.15) * 9 / 5 + 32, "k": value}[unit]


@non_blocking
def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a quantity between units of length, mass, volume, time or temperature.

    Units: mm, cm, m, km, in, ft, yd, mi; mg, g, kg, t, oz, lb; ml, l, gal, qt, cup;
    s, min, h, day, week; c, f, k (temperatures). Common full names also work.

    Args:
        value: The quantity to convert.
        from_unit: The unit of ``value``, e.g. "mi".
        to_unit: The unit to convert to, e.g. "km".

    Returns:
        The converted quantity, with up to 12 significant digits.
    """
    source, target = _unit(from_unit), _unit(to_unit)
    (dim_a, size_a), (dim_b, size_b) = UNITS[source], UNITS[target]
    if dim_a != dim_b:
        raise ValueError(f"cannot convert {dim_a} ({from_unit}) to {dim_b} ({to_unit})")
    if dim_a == "temperature":
        result = _from_kelvin(_to_kelvin(value, source), target)
    else:
        result = value * size_a / size_b
    return format_number(round(result, 10))


# --------------------------------------------------------------------------- dates


def _date(text: str, name: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{name}: expected a date as YYYY-MM-DD, got {text!r}") from None


@non_blocking
def date_add(date: str, days: int) -> str:
    """Add a number of days (negative to subtract) to a date.

    Args:
        date: The start date, YYYY-MM-DD.
        days: Days to add.

    Returns:
        The resulting date, YYYY-MM-DD.
    """
    if abs(days) > 3_000_000:
        raise ValueError("days: expected at most 3,000,000 days")
    try:
        return (_date(date, "date") + dt.timedelta(days=days)).isoformat()
    except OverflowError:
        raise ValueError("the resulting date is out of range (years 1 to 9999)") from None


@non_blocking
def date_diff(start: str, end: str) -> int:
    """Count the days from one date to another.

    Args:
        start: The first date, YYYY-MM-DD.
        end: The second date, YYYY-MM-DD.

    Returns:
        end minus start in days (negative when end is earlier).
    """
    return (_date(end, "end") - _date(start, "start")).days


@non_blocking
def weekday(date: str) -> str:
    """Name the day of the week of a date.

    Args:
        date: The date, YYYY-MM-DD.

    Returns:
        Monday, Tuesday, ..., or Sunday.
    """
    return _date(date, "date").strftime("%A")


# --------------------------------------------------------------------------- inventory table

INVENTORY_FIELDS = ("price", "weight_kg", "stock", "supplier", "warehouse")
"""Columns of the inventory table besides the item name."""

_MAKERS = ("Quillon", "Vandri", "Zephrik", "Orlo", "Tesmar", "Brindle", "Kavessa", "Mornay", "Pelluxa", "Dravik",
           "Ysolde", "Caradine")
_PARTS = ("valve", "gasket", "coupler", "spindle", "relay", "bracket", "filter", "bearing", "lens", "actuator")
_SUPPLIERS = ("Hollowmere Supply", "Ostrand & Vey", "Pinecrest Components", "Galdor Industrial", "Nuvelle Parts Co",
              "Redwater Fabrication", "Tamsin Works")
_WAREHOUSES = ("North Dock 3", "East Yard 7", "Harbor Bay 2", "Ridge Depot 5", "South Annex 1")


@lru_cache(maxsize=1)
def _inventory_json() -> str:
    rng = DeterministicRandom("agent_gym.tool_use.inventory.v0")
    rows: dict[str, dict[str, Any]] = {}
    while len(rows) < 80:
        name = f"{rng.choice(_MAKERS)} {rng.choice(_PARTS)} {rng.choice('ABCDEFGHKMNPRSTVWXZ')}-{rng.randint(100, 999)}"
        if name in rows:
            continue
        rows[name] = {
            "price": rng.decimal(2.5, 480.0),
            "weight_kg": rng.decimal(0.05, 38.0),
            "stock": rng.randint(0, 4800),
            "supplier": rng.choice(_SUPPLIERS),
            "warehouse": rng.choice(_WAREHOUSES),
        }
    return json.dumps(rows)


def inventory() -> dict[str, dict[str, Any]]:
    """A fresh copy of the generated inventory table: item name -> row."""
    return json.loads(_inventory_json())


@lru_cache(maxsize=1)
def _inventory_index() -> dict[str, tuple[str, dict[str, Any]]]:
    return {" ".join(name.casefold().split()): (name, row) for name, row in inventory().items()}


@non_blocking
def lookup_item(
    item: str,
    field: Optional[Literal["price", "weight_kg", "stock", "supplier", "warehouse"]] = None,  # noqa: UP045
) -> str:
    """Look up an item of the warehouse inventory table.

    Args:
        item: The exact item name, e.g. "Quillon valve K-417" (case-insensitive).
        field: One column to return (price in USD, weight_kg, stock, supplier or
            warehouse); omit it to get the whole row.

    Returns:
        The value of the column, or the whole row as JSON.
    """
    found = _inventory_index().get(" ".join(item.casefold().split()))
    if found is None:
        raise ValueError(f"no item named {item!r} in the inventory")
    name, row = found
    if field is None:
        return json.dumps({"item": name, **row})
    value = row[field]
    return format_number(value) if isinstance(value, (int, float)) else str(value)


BUILTIN_TOOLS = (calculator, convert_units, date_add, date_diff, weekday, lookup_item)
"""The functions ToolUse-v0 exposes as tools by default."""
