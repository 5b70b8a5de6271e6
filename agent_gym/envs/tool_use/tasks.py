"""The built-in, seeded task family of ``agent_gym/ToolUse-v0``.

Four kinds of tasks, 120 of each (480 distinct questions), all needing tools:

* ``arithmetic``: expressions and two-step word problems (calculator);
* ``units``: conversions, and conversions followed by arithmetic;
* ``dates``: adding days, counting days, and the weekday of a shifted date;
* ``lookup``: facts about items of a generated inventory table that no model has
  memorised, combined with arithmetic (two lookups in one message for comparisons).

Each task has ``id``, ``question``, ``ground_truth`` (a string), ``answer_type``
(``number``, ``date``, ``weekday`` or ``string``), ``tolerance`` for numbers,
``family`` and ``solution``: the reference tool calls, one list per assistant
turn, computed by running the real tools so the oracle's results always match.
Generation uses :class:`~agent_gym.generation.DeterministicRandom`,
so the tasks are identical on every platform and release.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

from agent_gym.envs.tool_use.builtin_tools import (
    calculator,
    convert_units,
    date_add,
    date_diff,
    inventory,
    lookup_item,
    weekday,
)
from agent_gym.generation import DeterministicRandom
from agent_gym.grading import round_answer

__all__ = ["TASK_FAMILIES", "builtin_tasks", "generate_tasks", "shared_builtin_tasks"]

TASK_FAMILIES = ("arithmetic", "units", "dates", "lookup")
"""Names of the built-in task families, in generation order."""


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _num(rng: DeterministicRandom, low: float, high: float, places: int) -> float | int:
    value = rng.decimal(low, high, places)
    return int(value) if places == 0 else value


def _arithmetic(rng: DeterministicRandom) -> dict[str, Any]:
    if rng.randint(0, 1) == 0:
        a, b, c = _num(rng, 10, 999, 1), _num(rng, 2, 99, 0), _num(rng, 2, 60, 2)
        d, e = _num(rng, 100, 9999, 0), _num(rng, 2, 48, 0)
        expr = f"({a} + {b}) * {c} - {d} / {e}"
        value = calculator(expr)
        return {
            "question": f"Compute ({a} + {b}) × {c} − {d} ÷ {e}. Give the result rounded to 2 decimal places.",
            "ground_truth": round_answer(float(value)),
            "solution": [[_call("calculator", expression=expr)]],
        }
    per_shift, shifts = _num(rng, 120, 2400, 0), _num(rng, 2, 21, 0)
    rejected, trucks = _num(rng, 5, 99, 0), _num(rng, 3, 17, 0)
    first = f"{per_shift} * {shifts} - {rejected}"
    good = calculator(first)
    second = f"{good} / {trucks}"
    return {
        "question": (
            f"A plant makes {per_shift} parts per shift and runs {shifts} shifts. {rejected} parts fail inspection "
            f"and are scrapped. The remaining parts are split evenly across {trucks} trucks. How many parts does "
            "each truck carry? Round to 2 decimal places."
        ),
        "ground_truth": round_answer(float(calculator(second))),
        "solution": [[_call("calculator", expression=first)], [_call("calculator", expression=second)]],
    }


_CONVERSIONS = (
    ("mi", "km", "miles", "kilometers"), ("km", "mi", "kilometers", "miles"), ("lb", "kg", "pounds", "kilograms"),
    ("kg", "lb", "kilograms", "pounds"), ("ft", "m", "feet", "meters"), ("in", "cm", "inches", "centimeters"),
    ("gal", "l", "US gallons", "liters"), ("oz", "g", "ounces", "grams"), ("f", "c", "degrees Fahrenheit",
    "degrees Celsius"), ("c", "f", "degrees Celsius", "degrees Fahrenheit"), ("yd", "m", "yards", "meters"),
    ("cup", "ml", "US cups", "milliliters"),
)


def _units(rng: DeterministicRandom) -> dict[str, Any]:
    source, target, source_name, target_name = rng.choice(_CONVERSIONS)
    value = _num(rng, 1, 950, 1)
    if rng.randint(0, 1) == 0 or source in ("f", "c"):
        converted = convert_units(value, source, target)
        return {
            "question": f"Convert {value} {source_name} to {target_name}. Round to 2 decimal places.",
            "ground_truth": round_answer(float(converted)),
            "solution": [[_call("convert_units", value=value, from_unit=source, to_unit=target)]],
        }
    count = _num(rng, 3, 40, 0)
    converted = convert_units(value, source, target)
    expr = f"{converted} * {count}"
    return {
        "question": (
            f"One crate measures {value} {source_name}. What do {count} such crates measure together, in "
            f"{target_name}? Round to 2 decimal places."
        ),
        "ground_truth": round_answer(float(calculator(expr))),
        "solution": [
            [_call("convert_units", value=value, from_unit=source, to_unit=target)],
            [_call("calculator", expression=expr)],
        ],
    }


def _random_date(rng: DeterministicRandom) -> str:
    return (dt.date(1990, 1, 1) + dt.timedelta(days=rng.randint(0, 15000))).isoformat()


def _dates(rng: DeterministicRandom) -> dict[str, Any]:
    kind = rng.randint(0, 2)
    start, days = _random_date(rng), rng.randint(17, 2000)
    if kind == 0:
        return {
            "question": f"What date is {days} days after {start}? Answer in YYYY-MM-DD format.",
            "ground_truth": date_add(start, days),
            "answer_type": "date",
            "solution": [[_call("date_add", date=start, days=days)]],
        }
    if kind == 1:
        end = _random_date(rng)
        first, last = sorted((start, end))
        return {
            "question": f"How many days are there from {first} to {last}?",
            "ground_truth": str(date_diff(first, last)),
            "solution": [[_call("date_diff", start=first, end=last)]],
        }
    shifted = date_add(start, -days)
    return {
        "question": f"What day of the week was it {days} days before {start}?",
        "ground_truth": weekday(shifted),
        "answer_type": "weekday",
        "solution": [[_call("date_add", date=start, days=-days)], [_call("weekday", date=shifted)]],
    }


def _lookup(rng: DeterministicRandom) -> dict[str, Any]:
    names = sorted(inventory())
    kind = rng.randint(0, 2)
    item = rng.choice(names)
    if kind == 0:
        units = rng.randint(2, 250)
        price = lookup_item(item, "price")
        expr = f"{price} * {units}"
        return {
            "question": f"What is the total price in USD of {units} units of the inventory item \"{item}\"? "
                        "Round to 2 decimal places.",
            "ground_truth": round_answer(float(calculator(expr))),
            "solution": [[_call("lookup_item", item=item, field="price")], [_call("calculator", expression=expr)]],
        }
    if kind == 1:
        field: Literal["supplier", "warehouse"] = rng.choice(("supplier", "warehouse"))
        noun = "supplier provides" if field == "supplier" else "warehouse stores"
        return {
            "question": f"Which {noun} the inventory item \"{item}\"? Answer with its name only.",
            "ground_truth": lookup_item(item, field),
            "answer_type": "string",
            "solution": [[_call("lookup_item", item=item, field=field)]],
        }
    other = rng.choice([n for n in names if n != item])
    w1, w2 = lookup_item(item, "weight_kg"), lookup_item(other, "weight_kg")
    expr = f"{w1} - {w2}"
    return {
        "question": f"How many kilograms heavier is the inventory item \"{item}\" than \"{other}\"? Give a negative "
                    "number if it is lighter. Round to 2 decimal places.",
        "ground_truth": round_answer(float(calculator(expr))),
        "solution": [
            [_call("lookup_item", item=item, field="weight_kg"), _call("lookup_item", item=other, field="weight_kg")],
            [_call("calculator", expression=expr)],
        ],
    }


_GENERATORS: dict[str, Callable[[DeterministicRandom], dict[str, Any]]] = {
    "arithmetic": _arithmetic,
    "units": _units,
    "dates": _dates,
    "lookup": _lookup,
}


def generate_tasks(per_family: int = 120, seed: int | str = 0) -> list[dict[str, Any]]:
    """Generate distinct tool-use tasks, ``per_family`` of each family, deterministically.

    Args:
        per_family: Tasks per family (the built-in set uses 120).
        seed: Seed of the generator; the same seed always gives the same tasks.

    Returns:
        Task dicts with ``id``, ``question``, ``ground_truth``, ``answer_type``,
        ``tolerance``, ``family`` and ``solution``.

    Raises:
        ValueError: If ``per_family`` is not a positive int.
    """
    if isinstance(per_family, bool) or not isinstance(per_family, int) or per_family < 1:
        raise ValueError(f"per_family: expected an int >= 1, got {per_family!r}")
    tasks: list[dict[str, Any]] = []
    for family, make in _GENERATORS.items():
        rng = DeterministicRandom(f"agent_gym.tool_use.{family}.{seed}")
        seen: set[str] = set()
        attempts = 0
        while len(seen) < per_family:
            attempts += 1
            if attempts > per_family * 50:
                raise ValueError(f"per_family: could not generate {per_family} distinct {family} tasks")
            task = make(rng)
            if task["question"] in seen:
                continue
            seen.add(task["question"])
            task.setdefault("answer_type", "number")
            if task["answer_type"] == "number":
                task["tolerance"] = 0.01
            tasks.append({"id": f"{family}-{len(seen) - 1:04d}", "family": family, **task})
    return tasks


@lru_cache(maxsize=1)
def shared_builtin_tasks() -> tuple[dict[str, Any], ...]:
    """The 480 built-in tasks of ToolUse-v0 as one tuple shared by the process (do not modify them)."""
    return tuple(generate_tasks())


def builtin_tasks() -> list[dict[str, Any]]:
    """A fresh copy of the 480 built-in tasks of ToolUse-v0."""
    return copy.deepcopy(list(shared_builtin_tasks()))
