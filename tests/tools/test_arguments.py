# ruff: noqa: UP007, UP045  (typing.Union / Optional spellings are under test on purpose)
"""Argument validation: values that satisfy the declared type pass unchanged; lenient scalar coercion."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Literal, Optional, Union

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typing_extensions import TypedDict

from agent_gym.errors import ArgumentError
from agent_gym.tools import ArgumentValidator, FunctionTool, non_blocking, tools_from_object


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: int
    label: Optional[str]


@dataclasses.dataclass
class Box:
    width: float
    tags: list[str]


class Order(BaseModel):
    item: str
    quantity: int
    extra: dict[str, Union[str, int, None]] = {}


def update(updates: dict[str, Union[str, int, None]]) -> str:
    """Apply updates.

    Args:
        updates: Field name -> new value.
    """
    return repr(updates)


def test_value_satisfying_the_type_reaches_the_function_unchanged():
    assert FunctionTool(update).run({"updates": {"priority": 2}}).content == "{'priority': 2}"
    assert FunctionTool(update).run({"updates": {"priority": "2", "x": None}}).content == "{'priority': '2', 'x': None}"


def test_lenient_scalars_and_clear_errors():
    def f(n: int, r: float, b: bool, s: str, c: Color = Color.RED) -> str:
        return repr((n, r, b, s, c))

    v = ArgumentValidator(f, "f")
    assert v({"n": "3", "r": "0.5", "b": "TRUE", "s": 7, "c": "BLUE"}) == {
        "n": 3, "r": 0.5, "b": True, "s": "7", "c": Color.BLUE}
    assert v({"n": 3.0, "r": 1, "b": False, "s": "x"})["n"] == 3
    for bad, fragment in [({"n": True}, "expected integer"), ({"n": "1.5"}, "expected integer"),
                          ({"r": "nan"}, "finite number"), ({"b": "yes"}, "expected boolean"),
                          ({"s": [1]}, "expected string"), ({"c": "green"}, "expected one of ['red', 'blue']")]:
        args = {"n": 1, "r": 1.0, "b": True, "s": "s", **bad}
        with pytest.raises(ArgumentError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
            v(args)


def test_nested_containers_coerce_and_name_the_path():
    def g(points: list[Point], box: Box, order: Order) -> str:
        return "ok"

    v = ArgumentValidator(g, "g")
    out = v({"points": '[{"x": "1", "label": null}]', "box": {"width": "2.5", "tags": ["a"]},
             "order": {"item": "pen", "quantity": "4", "extra": {"p": 2}}})
    assert out["points"] == [{"x": 1, "label": None}]
    assert out["box"] == Box(2.5, ["a"]) and out["order"] == Order(item="pen", quantity=4, extra={"p": 2})
    with pytest.raises(ArgumentError, match=r"argument 'points'\[0\]\['x'\]: expected integer, got str 'a'"):
        v({"points": [{"x": "a", "label": None}], "box": {"width": 1, "tags": []},
           "order": {"item": "pen", "quantity": 1}})
    result = FunctionTool(g).run({"points": [], "box": {"width": 1}, "order": {"item": "p", "quantity": 1}})
    assert not result.ok and "'box'['tags']: missing required field" in result.error


# --------------------------------------------------------------------------- property tests

_LEAVES: list[tuple[Any, st.SearchStrategy]] = [
    (int, st.integers(-10**6, 10**6)),
    (float, st.floats(allow_nan=False, allow_infinity=False, width=32)),
    (str, st.text(max_size=8)),
    (bool, st.booleans()),
    (Literal["a", "b", 3], st.sampled_from(["a", "b", 3])),
    (Color, st.sampled_from(list(Color))),
]


def _annotations(depth: int) -> st.SearchStrategy:
    leaf = st.sampled_from(_LEAVES)
    if depth == 0:
        return leaf

    def grow(inner: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(
            inner.map(lambda p: (list[p[0]], st.lists(p[1], max_size=3))),
            inner.map(lambda p: (dict[str, p[0]], st.dictionaries(st.text(max_size=4), p[1], max_size=3))),
            inner.map(lambda p: (Optional[p[0]], st.one_of(st.none(), p[1]))),
            st.tuples(inner, inner).map(lambda ps: (Union[ps[0][0], ps[1][0]], st.one_of(ps[0][1], ps[1][1]))),
        )

    return st.recursive(leaf, grow, max_leaves=4)


_FIXED = [
    (Point, st.fixed_dictionaries({"x": st.integers(), "label": st.one_of(st.none(), st.text(max_size=5))})),
    (Box, st.builds(Box, width=st.floats(allow_nan=False, allow_infinity=False),
                    tags=st.lists(st.text(max_size=3), max_size=3))),
    (Order, st.builds(Order, item=st.text(max_size=5), quantity=st.integers(),
                      extra=st.dictionaries(st.text(max_size=3), st.one_of(st.none(), st.integers(), st.text())))),
    (dict[str, Union[str, int, None]], st.dictionaries(st.text(max_size=3),
                                                      st.one_of(st.none(), st.integers(), st.text(max_size=4)))),
]


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_annotations(2), st.sampled_from(_FIXED)).flatmap(
    lambda p: st.tuples(st.just(p[0]), p[1])))
def test_valid_values_reach_the_function_equal_and_of_the_same_type(case):
    annotation, value = case

    def tool(value):  # annotated below
        return value

    tool.__annotations__ = {"value": annotation}
    out = ArgumentValidator(tool, "tool", {"value": annotation})({"value": value})["value"]
    assert _same(out, value), (annotation, value, out)


# --------------------------------------------------------------------------- execution and objects


class Counter:
    """A stateful object whose methods become tools."""

    def __init__(self) -> None:
        self.count = 0

    @non_blocking
    def increment(self, by: int = 1) -> int:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        self.count += by
        return self.count

    def reset(self) -> str:
        """Set the counter to zero."""
        self.count = 0
        return "done"

    def _private(self) -> None:
        raise AssertionError("not a tool")

    @property
    def value(self) -> int:
        return self.count


def test_tools_from_object_share_the_instance_state():
    counter = Counter()
    tools = {t.name: t for t in tools_from_object(counter, time_limit=5.0)}
    assert set(tools) == {"increment", "reset"}
    schema = tools["increment"].schema["function"]
    assert schema["parameters"]["properties"] == {"by": {"type": "integer", "description": "How much to add.",
                                                         "default": 1}}
    assert tools["increment"].blocking is False and tools["reset"].blocking is True
    assert tools["increment"].run({"by": "2"}).content == "2"
    assert tools["reset"].run({}).content == "done" and counter.count == 0
    other = Counter()
    tools_from_object(other)[0].run({})
    assert other.count == 1 and counter.count == 0
    assert [t.name for t in tools_from_object(counter, exclude=["reset"])] == ["increment"]
    with pytest.raises(ValueError, match="exclude"):
        tools_from_object(counter, exclude=["missing"])
    with pytest.raises(TypeError):
        tools_from_object(Counter)


def test_non_blocking_tools_run_inline_and_blocking_ones_on_a_worker():
    import threading

    def where() -> str:
        return threading.current_thread().name

    caller = threading.current_thread().name
    assert FunctionTool(where, blocking=False).run({}).content == caller
    assert FunctionTool(where, time_limit=None).run({}).content == caller
    assert FunctionTool(where, time_limit=5.0).run({}).content != caller


def test_non_blocking_call_past_its_limit_is_reported_after_it_returns():
    import time

    def slow() -> str:
        time.sleep(0.05)
        return "late"

    result = FunctionTool(slow, blocking=False, time_limit=0.01).run({})
    assert not result.ok and "time limit" in result.error and "late" not in result.content
