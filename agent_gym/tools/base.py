"""The ``Tool`` protocol, ``ToolResult``, and tools made from Python callables.

:class:`FunctionTool` turns a function or a bound method into a tool. Its OpenAI
function schema is derived once from the signature and the Google-style docstring
(:mod:`agent_gym.tools.schema`), and so is its argument validator
(:mod:`agent_gym.tools.arguments`)::

    def convert(value: float, unit: Literal["km", "mi"] = "km") -> float:
        \"\"\"Convert a distance given in metres.\"\"\"
        return value / (1000 if unit == "km" else 1609.344)

    tool = FunctionTool(convert, time_limit=2.0, max_output_chars=2000)
    tool.schema  # {"type": "function", "function": {"name": "convert", ...}}
    tool.run({"value": "1500"})  # ToolResult(content="1.5", error=None)

``run`` never raises: bad arguments, an exception in the tool, a call past its
``time_limit`` and output over ``max_output_chars`` all come back as a
:class:`ToolResult` whose ``error`` says what was wrong.

**Where a call runs.** A tool is *blocking* (it may wait on I/O or run long)
unless declared otherwise. A blocking tool with a ``time_limit`` runs on a pooled
worker thread and the caller stops waiting at the limit. A *non-blocking* tool
(``blocking=False``, or a function marked with :func:`non_blocking`), and every tool
with ``time_limit=None``, runs inline in the caller's thread: no hand-off, so a
call costs only validation and formatting. A non-blocking call that overran its
``time_limit`` gives the same time-limit error once it returns (its output is
dropped); declare non-blocking only functions that are bounded by construction.

:func:`tools_from_object` makes one tool per public method of an object, for
envs whose tools share state (a database, a sandbox, a simulated user).
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import orjson

from agent_gym.checks import (
    check_bool,
    check_callable,
    check_choice,
    check_enum,
    check_int,
    check_pattern,
    check_timeout,
)
from agent_gym.errors import ArgumentError, ConfigError, ToolErrorKind
from agent_gym.tools.annotations import resolve_type_hints
from agent_gym.tools.arguments import ArgumentValidator
from agent_gym.tools.execution import to_text
from agent_gym.tools.schema import PerCallableCache, function_schema
from agent_gym.utils.runtime import call_outcome

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_TIME_LIMIT",
    "FunctionTool",
    "Tool",
    "ToolResult",
    "as_tool",
    "non_blocking",
    "skipped_call_result",
    "tools_from_object",
    "unknown_tool_result",
]

DEFAULT_TIME_LIMIT: float = 10.0
"""Seconds a :class:`FunctionTool` may run before its call gives an error."""

DEFAULT_MAX_OUTPUT_CHARS: int = 8192
"""Characters of tool output kept before the output counts as too large."""

_BLOCKING_ATTR = "__agent_gym_blocking__"
_NAME = re.compile(r"[A-Za-z_][\w\-.]{0,63}")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(slots=True)
class ToolResult:
    """The outcome of one tool call.

    Attributes:
        content: What goes back to the model in the tool message (for an error,
            a message saying what was wrong).
        error: None on success, else a one-line description of the failure.
        kind: None on success, else the kind of failure, a :class:`ToolErrorKind`
            (a failed result built without one is a ``TOOL_ERROR``; a string is
            converted, so ``"timeout"`` works too).

    Raises:
        ConfigError: If ``kind`` is not a kind of :class:`ToolErrorKind`, or is given
            for a result without an error.
    """

    content: str
    error: str | None = None
    kind: ToolErrorKind | None = None

    def __post_init__(self) -> None:
        if self.error is None:
            if self.kind is not None:
                raise ConfigError(f"kind: expected None for a result without an error, got {self.kind!r}")
        elif self.kind is None:
            self.kind = ToolErrorKind.TOOL_ERROR
        elif type(self.kind) is not ToolErrorKind:
            self.kind = check_enum("kind", self.kind, ToolErrorKind)

    @property
    def ok(self) -> bool:
        """True if the call succeeded."""
        return self.error is None

    @classmethod
    def failure(cls, kind: ToolErrorKind, message: str) -> ToolResult:
        """A failed result whose observation is ``"Error: <message>"``."""
        return cls(f"Error: {message}", message, kind)


def unknown_tool_result(name: str, available: Iterable[str]) -> ToolResult:
    """The result of a call to a tool the episode does not offer (an ``UNKNOWN_TOOL`` error).

    Args:
        name: The name the model called.
        available: The names of the tools it may call, in the order to list them.
    """
    known = ", ".join(available) or "none"
    return ToolResult.failure(ToolErrorKind.UNKNOWN_TOOL, f"unknown tool {name!r}; available tools: {known}")


def skipped_call_result(name: str, limit: int, *, per: str = "message") -> ToolResult:
    """The result of a call past a call limit, not run (a ``TOO_MANY_CALLS`` error).

    Args:
        name: The name the model called.
        limit: Calls run per ``per``.
        per: What the limit counts calls in (``"message"``, ``"user turn"``, ...).
    """
    return ToolResult.failure(ToolErrorKind.TOO_MANY_CALLS,
                              f"tool call {name!r} skipped: at most {limit} calls are run per {per}")


@runtime_checkable
class Tool(Protocol):
    """Anything the env can call: a name, an OpenAI function schema and ``run``.

    ``run`` receives the decoded JSON arguments and must never raise; failures
    are reported through ``ToolResult.error``.
    """

    @property
    def name(self) -> str:
        """The name the model uses to call the tool."""
        ...

    @property
    def schema(self) -> dict[str, Any]:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        ...

    def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Call the tool with decoded JSON arguments."""
        ...


def non_blocking(func: F) -> F:
    """Mark a function (or method) as non-blocking: as a tool it runs inline, without a worker thread.

    Use it for pure functions bounded in time (arithmetic, lookups in memory); see
    the module docstring for what the time limit then means. Returns ``func`` itself.
    """
    try:
        setattr(func, _BLOCKING_ATTR, False)
    except (AttributeError, TypeError) as exc:
        raise TypeError(f"non_blocking: expected a function or method, got {type(func).__name__}") from exc
    return func


# --------------------------------------------------------------------------- derived once per callable

def _build_spec(func: Callable[..., Any], name: str, description: str | None) -> tuple[bytes, dict, ArgumentValidator]:
    schema, _, _ = function_schema(func, name, description)
    validator = ArgumentValidator(func, name, resolve_type_hints(func))
    return orjson.dumps(schema), schema, validator


_spec = PerCallableCache(_build_spec).get
"""Schema and validator of a callable, shared between tools made from it (never mutate them)."""


class FunctionTool:
    """A tool made from a Python function or bound method.

    Keep tool functions at module level (not lambdas or closures), or use methods
    of picklable objects, so that environments holding them can be pickled.

    Args:
        func: The function; every parameter must be callable by keyword.
        name: Tool name (default: the function's ``__name__``).
        description: Tool description (default: docstring summary and ``Returns:``).
        time_limit: Seconds the call may take; ``None`` runs the call inline with no limit.
        max_output_chars: Output characters allowed; longer output is an error.
        on_overflow: ``"truncate"`` keeps the first ``max_output_chars`` characters
            (with a marker) in the observation, ``"error"`` drops the output. Both set ``error``.
        blocking: Whether the call may block (see the module docstring); ``None``
            reads the :func:`non_blocking` mark of ``func`` and defaults to True.

    Raises:
        TypeError: If ``func`` is not callable, an argument has the wrong type, or a
            parameter/annotation is unsupported.
        ConfigError: If a limit, the name or ``on_overflow`` is invalid (a ``ValueError``).
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        time_limit: float | None = DEFAULT_TIME_LIMIT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        on_overflow: Literal["truncate", "error"] = "truncate",
        blocking: bool | None = None,
    ) -> None:
        check_callable("func", func)
        name = check_pattern("name", name if name is not None else getattr(func, "__name__", None), _NAME,
                             "a tool name of letters, digits, '_', '-' or '.'")
        time_limit = check_timeout("time_limit", time_limit)
        check_int("max_output_chars", max_output_chars, low=1)
        check_choice("on_overflow", on_overflow, ("truncate", "error"))
        if blocking is not None:
            check_bool("blocking", blocking)
        self.func = func
        self._name = name
        self._description = description
        self.time_limit = time_limit
        self.max_output_chars = max_output_chars
        self.on_overflow = on_overflow
        self.blocking = bool(getattr(func, _BLOCKING_ATTR, True)) if blocking is None else blocking
        self._load()

    def _load(self) -> None:
        self._schema_json, self._schema, self._validate = _spec(self.func, self._name, self._description)
        self._threaded = self.blocking and self.time_limit is not None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_schema_json", "_schema", "_validate", "_threaded"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._load()

    @property
    def name(self) -> str:
        """The name the model uses to call the tool."""
        return self._name

    @property
    def schema(self) -> dict[str, Any]:
        """A fresh copy of the OpenAI function schema."""
        return orjson.loads(self._schema_json)

    @property
    def parameters(self) -> dict[str, Any]:
        """A fresh copy of the JSON schema of the parameters."""
        return self.schema["function"]["parameters"]

    def __repr__(self) -> str:
        return (f"FunctionTool({self._name!r}, time_limit={self.time_limit}, "
                f"max_output_chars={self.max_output_chars}, blocking={self.blocking})")

    def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Validate the arguments, call the function within the limits, and format the output.

        Args:
            arguments: Decoded JSON arguments from the model.

        Returns:
            The output as text, or an error result. Never raises.
        """
        try:
            kwargs = self._validate(arguments)
        except ArgumentError as exc:
            return ToolResult.failure(ToolErrorKind.BAD_ARGUMENTS, f"invalid arguments: {exc}")
        except Exception as exc:  # defensive: odd values (e.g. huge ints) must not escape
            return ToolResult.failure(ToolErrorKind.BAD_ARGUMENTS, f"invalid arguments: {type(exc).__name__}: {exc}")
        if self._threaded:
            state, value = call_outcome(self.func, self.time_limit, **kwargs)  # type: ignore[arg-type]
            if state == "timeout":
                return self._timeout()
            if state == "error":
                return self._error(f"tool {self._name!r} raised {type(value).__name__}: {value}")
        else:
            limit = self.time_limit
            start = time.perf_counter() if limit is not None else 0.0
            try:
                value = self.func(**kwargs)
            except Exception as exc:
                return self._error(f"tool {self._name!r} raised {type(exc).__name__}: {exc}")
            if limit is not None and time.perf_counter() - start > limit:
                return self._timeout()
        try:
            text = to_text(value)
        except Exception as exc:
            return self._error(f"tool {self._name!r} returned an output that cannot be shown: {exc!r}")
        if len(text) > self.max_output_chars:
            error = (f"tool {self._name!r} output has {len(text)} characters, over the limit of "
                     f"{self.max_output_chars}")
            if self.on_overflow == "truncate":
                cut = len(text) - self.max_output_chars
                return ToolResult(f"{text[: self.max_output_chars]}\n[output truncated: {cut} more characters]",
                                  error, ToolErrorKind.OUTPUT_LIMIT)
            return ToolResult.failure(ToolErrorKind.OUTPUT_LIMIT, error)
        return ToolResult(text)

    def _timeout(self) -> ToolResult:
        return ToolResult.failure(ToolErrorKind.TIMEOUT,
                                  f"tool {self._name!r} did not finish within its {self.time_limit:g} s time limit")

    def _error(self, message: str) -> ToolResult:
        return ToolResult.failure(ToolErrorKind.TOOL_ERROR, message)

    def __call__(self, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation or limits)."""
        return self.func(**kwargs)


def _is_tool(obj: Any) -> bool:
    return isinstance(obj, FunctionTool) or (
        not isinstance(obj, type) and hasattr(obj, "run") and hasattr(obj, "schema") and hasattr(obj, "name")
    )


def as_tool(obj: Tool | Callable[..., Any], **kwargs: Any) -> Tool:
    """Return ``obj`` if it already is a :class:`Tool`, else wrap a callable in :class:`FunctionTool`.

    Args:
        obj: A Tool, a function or a bound method.
        **kwargs: Passed to :class:`FunctionTool` for callables (``time_limit``,
            ``max_output_chars``, ``blocking``, ...).

    Raises:
        TypeError: If ``obj`` is neither.
    """
    if _is_tool(obj):
        return obj  # type: ignore[return-value]
    if callable(obj):
        return FunctionTool(obj, **kwargs)
    raise TypeError(f"tools: expected a Tool or a callable, got {type(obj).__name__}")


def tools_from_object(obj: Any, *, exclude: Iterable[str] = (), **limits: Any) -> list[Tool]:
    """One tool per public method of ``obj``: the methods share the object's state.

    Public methods are those whose names do not start with ``_``, defined on the
    object's class or its bases (not ``object``), in definition order, the class's
    own first; properties and other attributes are skipped. Each schema comes from
    the method's signature (without ``self``) and docstring.

    Args:
        obj: An instance, e.g. a simulated database or a sandbox session.
        exclude: Method names to leave out.
        **limits: Passed to :class:`FunctionTool` (``time_limit``, ``max_output_chars``,
            ``on_overflow``, ``blocking``).

    Returns:
        The tools, one per method.

    Raises:
        TypeError: If ``obj`` is a class, or a method's signature is unsupported.
        ConfigError: If ``exclude`` names a method the object does not have (a ``ValueError``).
    """
    if isinstance(obj, type):
        raise TypeError(f"tools_from_object: expected an instance, got the class {obj.__name__}")
    excluded = {exclude} if isinstance(exclude, str) else set(exclude)
    names: list[str] = []
    for cls in type(obj).__mro__:
        if cls is object:
            continue
        for attr_name, attr in vars(cls).items():
            if attr_name.startswith("_") or attr_name in names:
                continue
            if inspect.isfunction(attr) or isinstance(attr, (staticmethod, classmethod)):
                names.append(attr_name)
    for excluded_name in sorted(excluded):
        check_choice("exclude", excluded_name, names)
    return [FunctionTool(getattr(obj, n), **limits) for n in names if n not in excluded]
