"""What the env checker feeds an environment and how it reads what comes back.

* :func:`random_actions`: adversarial assistant messages built from the env's tool
  schemas (malformed and unknown calls, wrong argument types, huge, empty and control
  characters, truncated or failed ``PolicyOutput``).
* :func:`docstring_sections`: the ``## Name`` sections of a class docstring.
* :func:`constructor_arguments`: the named arguments of an env class's constructor.
* :func:`first_difference`: where two observations, infos or steps first differ.
* :func:`short`: a value's ``repr`` cut to a readable length for messages.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agent_gym.env.spaces import SAMPLE_CHARSET
from agent_gym.types import EpisodeStatus, FinishReason, PolicyOutput

__all__ = [
    "RandomAction",
    "constructor_arguments",
    "docstring_sections",
    "first_difference",
    "random_actions",
    "short",
]

RandomAction = tuple[str, "str | PolicyOutput", "EpisodeStatus | None"]
"""``(label, action, status)``: what the action is, the action, and the status the episode
must end with right after it (None when the episode may go on)."""

_HEADER = re.compile(r"^\s*#{1,6}\s+(\S.*?)\s*#*\s*$")
_MAX_TOOLS = 8


def short(value: Any, limit: int = 80, *, raw: bool = False) -> str:
    """``repr(value)`` cut to ``limit`` characters with an ellipsis.

    Args:
        value: Anything.
        limit: Longest result.
        raw: Use a string value itself instead of its ``repr`` (for messages).
    """
    text = value if raw and isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def docstring_sections(doc: str) -> dict[str, str]:
    """The sections of a docstring written with Markdown headers (``## Action Space``).

    Args:
        doc: A docstring.

    Returns:
        Header title -> the text below it up to the next header (stripped).
    """
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in inspect.cleandoc(doc).splitlines():
        match = _HEADER.match(line)
        if match:
            current = sections.setdefault(match.group(1), [])
        elif current is not None:
            current.append(line)
    return {title: "\n".join(lines).strip() for title, lines in sections.items()}


def constructor_arguments(cls: type[Any]) -> list[str]:
    """Names of the arguments of ``cls.__init__`` (without ``self``, ``*args`` and ``**kwargs``)."""
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return []
    skipped = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    names = [p.name for p in signature.parameters.values() if p.kind not in skipped]
    return names[1:] if names and names[0] == "self" else names


def first_difference(a: Any, b: Any, path: str = "value") -> str | None:
    """Where ``a`` and ``b`` first differ, as ``path: a != b``; None when they are equal.

    Mappings are compared key by key, sequences item by item, arrays with
    ``numpy.array_equal``; NaN equals NaN.
    """
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=repr):
            if key not in a or key not in b:
                return f"{path}[{key!r}]: present in only one of them"
            diff = first_difference(a[key], b[key], f"{path}[{key!r}]")
            if diff:
                return diff
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b):
            return f"{path}: {type(a).__name__} != {type(b).__name__}"
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            diff = first_difference(x, y, f"{path}[{i}]")
            if diff:
                return diff
        return None if len(a) == len(b) else f"{path}: {len(a)} items != {len(b)} items"
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return None if np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) else \
            f"{path}: {short(a)} != {short(b)}"
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    try:
        equal = bool(a == b)
    except Exception:  # an object whose == cannot be read as a bool
        equal = a is b
    return None if equal else f"{path}: {short(a)} != {short(b)}"


def _text(rng: np.random.Generator, low: int, high: int) -> str:
    length = int(rng.integers(low, high + 1))
    return "".join(rng.choice(list(SAMPLE_CHARSET), size=length).tolist())


def _call(name: Any, arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


_WRONG_TYPE: dict[str, Any] = {
    "string": {"nested": [1, 2]},
    "integer": "not a number",
    "number": "not a number",
    "boolean": "maybe",
    "array": 7,
    "object": "not an object",
}


def _schema_function(schema: Any) -> tuple[str, dict[str, Any]] | None:
    """``(name, properties)`` of an OpenAI function schema, or None for another shape."""
    if not isinstance(schema, Mapping):
        return None
    function = schema.get("function", schema)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return None
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    return function["name"], dict(properties) if isinstance(properties, Mapping) else {}


def _random_value(rng: np.random.Generator, prop: Any) -> Any:
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    if kind == "integer":
        return int(rng.choice([-(10**12), -1, 0, 10**30]))
    if kind == "number":
        return float(rng.choice([-1e308, -0.5, 1e-300, 3.5e38]))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "array":
        return [_text(rng, 0, 8) for _ in range(int(rng.integers(0, 4)))]
    if kind == "object":
        return {_text(rng, 1, 6): _text(rng, 0, 8)}
    return _text(rng, 0, 40)


def random_actions(rng: np.random.Generator, schemas: Sequence[Any]) -> list[RandomAction]:
    """Adversarial assistant messages for an env whose tools have ``schemas``.

    Args:
        rng: The generator of the random parts.
        schemas: The episode's tool schemas (OpenAI function format); up to eight tools
            are called with missing, mistyped, random and extra arguments.

    Returns:
        ``(label, action, status)`` triples (see :data:`RandomAction`).
    """
    words = _text(rng, 1, 30)
    actions: list[RandomAction] = [
        ("empty message", "", None),
        ("random text", _text(rng, 1, 200), None),
        ("control characters", "\x00\x01\x1b[31m\r\n\t\x7f" + words, None),
        ("unclosed tool_call tag", "<tool_call>" + words, None),
        ("tool call that is not JSON", "<tool_call>{not json: " + words + "</tool_call>", None),
        ("tool call that is a JSON list", "<tool_call>[1, 2, 3]</tool_call>", None),
        ("tool call without a name", '<tool_call>{"arguments": {}}</tool_call>', None),
        ("tool call with a non-string name", _call(42, "x"), None),
        ("unknown tool", _call("no_such_tool_" + str(int(rng.integers(1 << 30))), {}), None),
        ("unclosed think tag", "<think>" + words, None),
        ("empty think and tags out of order", "<think></think></tool_call><tool_call>", None),
        ("a 200,000-character message", "x" * 200_000, None),
        ("forty unknown calls in one message", "\n".join(_call("no_such_tool", {}) for _ in range(40)), None),
    ]
    functions = [f for f in (_schema_function(s) for s in schemas) if f is not None]
    if len(functions) > _MAX_TOOLS:
        picked = rng.choice(len(functions), size=_MAX_TOOLS, replace=False)
        functions = [functions[int(i)] for i in sorted(picked)]
    for name, properties in functions:
        actions.append((f"{name} without arguments", _call(name, {}), None))
        actions.append((f"{name} with arguments as a list", _call(name, list(properties)), None))
        actions.append((f"{name} with wrong argument types",
                        _call(name, {k: _WRONG_TYPE.get(str(p.get("type") if isinstance(p, Mapping) else ""), None)
                                     for k, p in properties.items()}), None))
        actions.append((f"{name} with random arguments and an extra one",
                        _call(name, {**{k: _random_value(rng, p) for k, p in properties.items()},
                                     "unexpected_" + _text(rng, 1, 5): 1}), None))
    actions += [
        ("PolicyOutput cut at max_tokens",
         PolicyOutput(text="<tool_call>" + words, finish_reason=FinishReason.LENGTH), EpisodeStatus.TRUNCATION),
        ("PolicyOutput for a prompt that did not fit",
         PolicyOutput(text="", finish_reason=FinishReason.PROMPT_TRUNCATION), EpisodeStatus.PROMPT_TRUNCATION),
        ("failed PolicyOutput",
         PolicyOutput(text="", finish_reason=FinishReason.ERROR, error="the server is down"),
         EpisodeStatus.POLICY_ERROR),
    ]
    return actions
