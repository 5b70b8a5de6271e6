"""Stateful tool classes: resolving them, loading instances, their methods as tools, comparing states.

A stateful tool class is any Python class whose public methods are the tools. An
instance is created without arguments and loaded with a deep copy of the task's
config by ``_load_scenario(config)`` (the convention of function-calling
leaderboards' classes) or ``load_state(config)``; a class with neither is built as
``cls(**config)``. The *state* of an instance is its public attributes (``vars``
without names starting with ``_``); two instances are in the same state when those
are equal. :func:`state_diff` says, line by line, where they differ.

Each method becomes a tool through :class:`CheckedMethod`, which gives the method a
deep copy of its arguments (a method that mutates its input cannot change the call
recorded in ``info`` or a task's reference) and turns a return value that is not
JSON-serialisable into an error.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from agent_gym.envs.conversation.scoring import states_equal

__all__ = [
    "CheckedMethod",
    "load_instance",
    "method_names",
    "public_state",
    "resolve_class",
    "state_diff",
]


def resolve_class(name: str, classes: Mapping[str, type]) -> type:
    """The class a task names: a key of ``classes``, or a dotted import path (``"pkg.mod.Class"``/``"pkg.mod:Class"``).

    Raises:
        ValueError: If the name is neither (the message lists the known names).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"expected a class name, got {name!r}")
    found = classes.get(name)
    if found is not None:
        return found
    module_name, sep, attr = name.rpartition(":") if ":" in name else name.rpartition(".")
    if sep and module_name:
        try:
            module = importlib.import_module(module_name)
            found = getattr(module, attr)
        except (ImportError, AttributeError, ValueError):
            found = None
        if isinstance(found, type):
            return found
    raise ValueError(f"unknown class {name!r}; expected one of {sorted(classes)} or an importable "
                     f"'module.Class' path")


def method_names(cls: type) -> list[str]:
    """Public method names of a class: not starting with ``_``, defined below ``object``, own class first."""
    names: list[str] = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        for attr_name, attr in vars(klass).items():
            if attr_name.startswith("_") or attr_name in names:
                continue
            if inspect.isfunction(attr) or isinstance(attr, (staticmethod, classmethod)):
                names.append(attr_name)
    return names


def load_instance(cls: type, config: Mapping[str, Any] | None) -> Any:
    """A fresh instance of ``cls`` loaded from a deep copy of ``config``.

    Uses ``_load_scenario(config)``, else ``load_state(config)``, else ``cls(**config)``.

    Raises:
        Whatever the class raises for a bad config (callers name the task and field).
    """
    config = copy.deepcopy(dict(config or {}))
    loader = getattr(cls, "_load_scenario", None) or getattr(cls, "load_state", None)
    if loader is None:
        return cls(**config)
    obj = cls()
    getattr(obj, loader.__name__)(config)
    return obj


def public_state(obj: Any) -> dict[str, Any]:
    """The public attributes of an instance (a new dict; the values are the live objects)."""
    try:
        items = vars(obj).items()
    except TypeError:  # __slots__ classes
        names = [n for klass in type(obj).__mro__ for n in getattr(klass, "__slots__", ())]
        return {n: getattr(obj, n) for n in names if not n.startswith("_") and hasattr(obj, n)}
    return {k: v for k, v in items if not k.startswith("_")}


def state_diff(expected: Mapping[str, Any], actual: Mapping[str, Any], name: str = "state", *,
               limit: int = 12, strict: bool = False) -> list[str]:
    """Readable differences between two states (attribute -> value), at most ``limit`` lines.

    Each line reads ``"<name>.<attribute>[key]...: expected <value>, got <value>"``
    (``missing`` for an absent attribute or key). ``strict``: values of different types
    differ (``100`` and ``100.0``; see :mod:`agent_gym.envs.conversation.scoring`).
    """
    out: list[str] = []
    _diff_keys(expected, actual, sorted(set(expected) | set(actual)), lambda attr: f"{name}.{attr}", out, limit,
               strict)
    if len(out) > limit:
        out[limit:] = ["... and more differences"]
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr, sort_keys=True) if not isinstance(value, str) \
        else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _diff_keys(
    expected: Mapping[Any, Any],
    actual: Mapping[Any, Any],
    keys: list[Any],
    where_of: Callable[[Any], str],
    out: list[str],
    limit: int,
    strict: bool = False,
) -> None:
    """Differences of two mappings over ``keys`` (a key missing on one side, or a differing value)."""
    for key in keys:
        where = where_of(key)
        if key not in actual:
            out.append(f"{where}: expected {_short(expected[key])}, got missing")
        elif key not in expected:
            out.append(f"{where}: expected missing, got {_short(actual[key])}")
        else:
            _diff(expected[key], actual[key], where, out, limit, strict)
        if len(out) > limit:
            return


def _diff(expected: Any, actual: Any, path: str, out: list[str], limit: int, strict: bool = False) -> None:
    if len(out) > limit or states_equal(expected, actual, strict):
        return
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        keys = sorted(set(expected) | set(actual), key=str)
        _diff_keys(expected, actual, keys, lambda key: f"{path}[{key!r}]", out, limit, strict)
        return
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for i, (a, b) in enumerate(zip(expected, actual, strict=True)):
            _diff(a, b, f"{path}[{i}]", out, limit, strict)
        return
    if strict and expected == actual:  # equal values of different types
        out.append(f"{path}: expected {_short(expected)} ({type(expected).__name__}), got {_short(actual)} "
                   f"({type(actual).__name__})")
        return
    out.append(f"{path}: expected {_short(expected)}, got {_short(actual)}")


class CheckedMethod:
    """A bound method as a tool function: arguments deep-copied, the result checked to be JSON.

    Carries the method's name, docstring, signature and annotations, so that tool schemas
    are derived from the method itself. Two wrappers of the same function compare equal
    (tool layers cache schemas per function, not per instance).

    Args:
        method: A bound method of a stateful tool instance.
    """

    def __init__(self, method: Callable[..., Any]) -> None:
        self.method = method
        func = getattr(method, "__func__", method)
        self.__name__ = func.__name__
        self.__qualname__ = getattr(func, "__qualname__", func.__name__)
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__
        self.__annotations__ = {k: v for k, v in getattr(func, "__annotations__", {}).items()}
        self.__wrapped__ = func
        self.__signature__ = inspect.signature(method)

    def __call__(self, **kwargs: Any) -> Any:
        """Call the method with a deep copy of ``kwargs``; a non-JSON result raises ``TypeError``."""
        value = self.method(**copy.deepcopy(kwargs))
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{self.__name__} returned a value that is not JSON-serialisable "
                            f"({type(value).__name__}: {exc})") from None
        return value

    def _key(self) -> Any:
        return getattr(self.method, "__func__", self.method)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CheckedMethod) and self._key() is other._key()

    def __hash__(self) -> int:
        return hash(("agent_gym.CheckedMethod", self._key()))

    def __repr__(self) -> str:
        return f"CheckedMethod({self.__qualname__})"

    def __getstate__(self) -> dict[str, Any]:
        return {"method": self.method}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["method"])  # type: ignore[misc]
