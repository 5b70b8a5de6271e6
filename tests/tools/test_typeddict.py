"""Tools whose parameters are ``typing.TypedDict`` (pydantic before Python 3.12 takes only typing_extensions')."""

from __future__ import annotations

import typing
from typing import Annotated, Optional

import pytest
import typing_extensions

from agent_gym.tools import FunctionTool
from agent_gym.tools.annotations import pydantic_ready


class Point(typing.TypedDict):
    x: int
    y: typing_extensions.NotRequired[int]


class Options(typing.TypedDict, total=False):
    scale: float
    label: str


class Shape(typing_extensions.TypedDict):
    """A typing_extensions TypedDict holding typing ones."""

    points: list[Point]
    options: Optional[Options]  # noqa: UP045 - the Optional spelling is under test too


class Node(typing.TypedDict):
    value: int
    child: Optional[Node]  # noqa: UP045


def draw(origin: Point, shapes: list[Shape], anchor: Annotated[Point, "where"] | None = None) -> str:
    """Draw shapes.

    Args:
        origin: Where to start.
        shapes: What to draw.
        anchor: Optional anchor point.
    """
    return repr((origin, shapes, anchor))


def walk(node: Node) -> int:
    """Sum a chain of nodes.

    Args:
        node: The first node.
    """
    total = 0
    current: Node | None = node
    while current is not None:
        total += current["value"]
        current = current["child"]
    return total


def test_typing_typeddict_parameters_validate_and_coerce():
    tool = FunctionTool(draw, time_limit=None)
    params = tool.parameters["properties"]
    assert params["origin"]["required"] == ["x"] and set(params["origin"]["properties"]) == {"x", "y"}
    result = tool.run({"origin": {"x": "1"},
                       "shapes": [{"points": [{"x": 2.0, "y": "3"}], "options": {"scale": "0.5"}}],
                       "anchor": '{"x": 4}'})
    assert result.ok, result.error
    assert result.content == repr(({"x": 1}, [{"points": [{"x": 2, "y": 3}], "options": {"scale": 0.5}}],
                                   {"x": 4}))
    assert tool.run({"origin": {"x": 1}, "shapes": [{"points": [], "options": None}]}).ok


@pytest.mark.parametrize("arguments, fragment", [
    ({"origin": {"y": 1}, "shapes": []}, "argument 'origin'['x']: missing"),
    ({"origin": {"x": "one"}, "shapes": []}, "argument 'origin'['x']: expected integer"),
    ({"origin": {"x": 1}, "shapes": [{"points": [{"x": True}], "options": None}]}, "['points'][0]['x']"),
    ({"origin": {"x": 1}, "shapes": [{"points": []}]}, "['options']: missing"),
    ({"origin": {"x": 1}, "shapes": [{"points": [], "options": {"scale": "big"}}]}, "['scale']"),
])
def test_typing_typeddict_errors_name_the_path(arguments, fragment):
    result = FunctionTool(draw, time_limit=None).run(arguments)
    assert result.kind == "bad_arguments" and fragment in result.error


def test_self_referencing_typing_typeddict_is_refused_clearly():
    with pytest.raises(TypeError, match="walk"):
        FunctionTool(walk)


def test_annotations_without_typing_typeddicts_are_left_alone():
    for annotation in (int, list[int], Optional[dict[str, int]], Annotated[int, "x"]):  # noqa: UP045
        assert pydantic_ready(annotation) is annotation

    class Plain(typing_extensions.TypedDict):
        x: int

    assert pydantic_ready(Plain) is Plain
    assert pydantic_ready(list[Plain]) == list[Plain]
    twin = pydantic_ready(Point)
    assert pydantic_ready(Point) is twin and twin.__name__ == "Point"
    assert twin.__required_keys__ == frozenset({"x"}) and twin.__optional_keys__ == frozenset({"y"})
