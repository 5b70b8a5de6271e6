"""Tools an agent can call: the ``Tool`` protocol, tools from Python callables, limits.

:class:`FunctionTool` turns a plain function into a tool. Its OpenAI
function-format schema is derived once, at construction, from the signature
(``str``, ``int``, ``float``, ``bool``, ``list[...]``, ``dict[...]``,
``Optional[...]``/``X | None``, ``Literal[...]``, ``Enum`` and defaults) and the
Google-style docstring (summary, ``Args:`` and ``Returns:``), so the schema can
go straight into a chat template's ``tools``::

    def convert(value: float, unit: Literal["km", "mi"] = "km") -> float:
        \"\"\"Convert a distance given in metres.\"\"\"
        return value / (1000 if unit == "km" else 1609.344)

    tool = FunctionTool(convert, time_limit=2.0, max_output_chars=2000)
    tool.schema  # {"type": "function", "function": {"name": "convert", ...}}
    tool.run({"value": "1500"})  # ToolResult(content="1.5", error=None)

``run`` never raises: bad arguments, an exception in the tool, a tool that runs
past its ``time_limit`` (it runs in a worker thread; the caller stops waiting)
and output over ``max_output_chars`` all come back as a :class:`ToolResult`
whose ``error`` says what was wrong. :func:`describe_tools` renders schemas as
plain text for system prompts of templates without tool support.
"""

from __future__ import annotations

import collections
import enum
import json
import queue
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from agent_gym.tool_schema import ArgumentError, shared_function_schema, validate_arguments

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_TIME_LIMIT",
    "FunctionTool",
    "Tool",
    "ToolResult",
    "as_tool",
    "describe_tools",
    "validate_arguments",
]

DEFAULT_TIME_LIMIT: float = 10.0
"""Seconds a :class:`FunctionTool` may run before its call gives an error."""

DEFAULT_MAX_OUTPUT_CHARS: int = 8192
"""Characters of tool output kept before the output counts as too large."""



@dataclass
class ToolResult:
    """The outcome of one tool call.

    Attributes:
        content: What goes back to the model in the tool message (for an error,
            a message saying what was wrong).
        error: None on success, else a one-line description of the failure.
    """

    content: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True if the call succeeded."""
        return self.error is None


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


# --------------------------------------------------------------------------- execution


class _Worker(threading.Thread):
    """A daemon thread that runs tool calls handed to it; returns itself to the pool when idle."""

    def __init__(self, pool: _WorkerPool) -> None:
        super().__init__(name="agent-gym-tool", daemon=True)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._pool = pool

    def run(self) -> None:
        while True:
            func, kwargs, outbox = self.inbox.get()
            try:
                result = (True, func(**kwargs))
            except BaseException as exc:  # noqa: BLE001 - report everything to the caller
                result = (False, exc)
            if not self._pool.release(self):
                outbox.put(result)
                return
            outbox.put(result)


class _WorkerPool:
    """Reusable worker threads so a time-limited call costs a queue hand-off, not a thread start."""

    def __init__(self, max_idle: int = 32) -> None:
        self._idle: collections.deque[_Worker] = collections.deque()
        self._max_idle = max_idle

    def release(self, worker: _Worker) -> bool:
        if len(self._idle) >= self._max_idle:
            return False
        self._idle.append(worker)
        return True

    def call(self, func: Callable[..., Any], kwargs: dict[str, Any], timeout: float) -> tuple[str, Any]:
        """Run ``func(**kwargs)``; returns ("ok", value), ("error", exc) or ("timeout", None)."""
        try:
            worker = self._idle.pop()
        except IndexError:
            worker = _Worker(self)
            worker.start()
        outbox: queue.SimpleQueue = queue.SimpleQueue()
        worker.inbox.put((func, kwargs, outbox))
        try:
            ok, value = outbox.get(timeout=timeout)
        except queue.Empty:
            return "timeout", None  # the worker finishes (or not) on its own and rejoins the pool
        return ("ok", value) if ok else ("error", value)


_POOL = _WorkerPool()


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, ".12g")
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class FunctionTool:
    """A tool made from a plain Python callable.

    Keep tool functions at module level (not lambdas or closures) so that
    environments holding them can be pickled. Time-limited calls run on a pool
    of reusable daemon worker threads (a hand-off costs a few microseconds).
    Python cannot kill a thread: a call past its limit gives an error result at
    once, while its worker stays busy until the function returns.

    Args:
        func: The function; every parameter must be callable by keyword.
        name: Tool name (default: the function's ``__name__``).
        description: Tool description (default: docstring summary and ``Returns:``).
        time_limit: Seconds the call may take; the call runs in a worker thread and
            gives an error when it is exceeded. ``None`` runs the call inline with no limit.
        max_output_chars: Output characters allowed; longer output is an error.
        on_overflow: ``"truncate"`` keeps the first ``max_output_chars`` characters
            (with a marker) in the observation, ``"error"`` drops the output. Both set ``error``.

    Raises:
        TypeError: If ``func`` is not callable or a parameter/annotation is unsupported.
        ValueError: If a limit or ``on_overflow`` is invalid.
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
    ) -> None:
        if not callable(func):
            raise TypeError(f"func: expected a callable, got {type(func).__name__}")
        name = name if name is not None else getattr(func, "__name__", None)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][\w\-.]{0,63}", name):
            raise ValueError(f"name: expected a tool name of letters, digits, '_', '-' or '.', got {name!r}")
        if time_limit is not None and (
            isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0
        ):
            raise ValueError(f"time_limit: expected a positive number of seconds or None, got {time_limit!r}")
        if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int) or max_output_chars < 1:
            raise ValueError(f"max_output_chars: expected an int >= 1, got {max_output_chars!r}")
        if on_overflow not in ("truncate", "error"):
            raise ValueError(f"on_overflow: expected 'truncate' or 'error', got {on_overflow!r}")
        self.func = func
        self._name = name
        self.time_limit = None if time_limit is None else float(time_limit)
        self.max_output_chars = max_output_chars
        self.on_overflow = on_overflow
        self._schema, self._required, self._accepts_extra = shared_function_schema(func, name, description)
        self._parameters = self._schema["function"]["parameters"]

    @property
    def name(self) -> str:
        """The name the model uses to call the tool."""
        return self._name

    @property
    def schema(self) -> dict[str, Any]:
        """A fresh copy of the OpenAI function schema."""
        return json.loads(json.dumps(self._schema))

    def __repr__(self) -> str:
        return f"FunctionTool({self._name!r}, time_limit={self.time_limit}, max_output_chars={self.max_output_chars})"

    def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Validate the arguments, call the function within the limits, and format the output.

        Args:
            arguments: Decoded JSON arguments from the model.

        Returns:
            The output as text, or an error result. Never raises.
        """
        try:
            kwargs = validate_arguments(arguments, self._parameters, tool=self._name)
        except ArgumentError as exc:
            return self._error(f"invalid arguments: {exc}")
        except Exception as exc:  # defensive: odd values (e.g. huge ints) must not escape
            return self._error(f"invalid arguments: {type(exc).__name__}: {exc}")
        if self.time_limit is None:
            try:
                value = self.func(**kwargs)
            except Exception as exc:
                return self._error(f"tool {self._name!r} raised {type(exc).__name__}: {exc}")
        else:
            state, value = _POOL.call(self.func, kwargs, self.time_limit)
            if state == "timeout":
                return self._error(f"tool {self._name!r} did not finish within its {self.time_limit:g} s time limit")
            if state == "error":
                return self._error(f"tool {self._name!r} raised {type(value).__name__}: {value}")
        try:
            text = _to_text(value)
        except Exception as exc:
            return self._error(f"tool {self._name!r} returned an output that cannot be shown: {exc!r}")
        if len(text) > self.max_output_chars:
            error = (f"tool {self._name!r} output has {len(text)} characters, over the limit of "
                     f"{self.max_output_chars}")
            if self.on_overflow == "truncate":
                cut = len(text) - self.max_output_chars
                return ToolResult(f"{text[: self.max_output_chars]}\n[output truncated: {cut} more characters]", error)
            return self._error(error)
        return ToolResult(text)

    def _error(self, message: str) -> ToolResult:
        return ToolResult(f"Error: {message}", message)

    def __call__(self, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation or limits)."""
        return self.func(**kwargs)


def as_tool(obj: Tool | Callable[..., Any], **kwargs: Any) -> Tool:
    """Return ``obj`` if it already is a :class:`Tool`, else wrap a callable in :class:`FunctionTool`.

    Args:
        obj: A Tool or a plain callable.
        **kwargs: Passed to :class:`FunctionTool` for callables.

    Raises:
        TypeError: If ``obj`` is neither.
    """
    if isinstance(obj, FunctionTool) or (
        not isinstance(obj, type) and hasattr(obj, "run") and hasattr(obj, "schema") and hasattr(obj, "name")
    ):
        return obj  # type: ignore[return-value]
    if callable(obj):
        return FunctionTool(obj, **kwargs)
    raise TypeError(f"tools: expected a Tool or a callable, got {type(obj).__name__}")


def _function_part(schema: Any) -> Mapping[str, Any]:
    if isinstance(schema, Mapping):
        return schema["function"] if isinstance(schema.get("function"), Mapping) else schema
    if hasattr(schema, "schema"):
        return _function_part(schema.schema)
    raise TypeError(f"describe_tools: expected OpenAI function schemas or tools, got {type(schema).__name__}")


def _type_text(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_type_text(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), Mapping) and schema["items"]:
        return f"array of {_type_text(schema['items'])}"
    return str(kind)


def describe_tools(schemas: Iterable[Any], *, include_format: bool = True) -> str:
    """Describe tools in plain text, for system prompts of templates without tool support.

    Args:
        schemas: OpenAI function schemas (``{"type": "function", "function": {...}}``
            or the inner ``{"name", ...}`` dict) or Tool objects.
        include_format: Also explain how to write a ``<tool_call>`` block.

    Returns:
        The description; each tool appears exactly once. Empty string when there are no tools.
    """
    functions = [_function_part(s) for s in schemas]
    if not functions:
        return ""
    lines = ["# Tools", "", "You can call the following tools."]
    for fn in functions:
        params = fn.get("parameters", {}) or {}
        props: Mapping[str, Any] = params.get("properties", {}) or {}
        required = set(params.get("required", ()) or ())
        lines += ["", f"## {fn.get('name', '?')}"]
        if fn.get("description"):
            lines.append(str(fn["description"]).strip())
        if props:
            lines.append("Parameters:")
            for pname, pschema in props.items():
                flag = "required" if pname in required else "optional"
                if "default" in pschema:
                    flag += f", default {json.dumps(pschema['default'])}"
                text = f"- {pname} ({_type_text(pschema)}, {flag})"
                if pschema.get("description"):
                    text += f": {pschema['description']}"
                lines.append(text)
        else:
            lines.append("Parameters: none.")
    if include_format:
        lines += [
            "",
            "To call a tool, write one block per call:",
            '<tool_call>{"name": "<tool name>", "arguments": {"<parameter>": <value>}}</tool_call>',
            'Each result comes back in a message with role "tool".',
        ]
    return "\n".join(lines)
