"""Tools an agent can call: the ``Tool`` protocol, tools from Python callables, limits.

:class:`FunctionTool` turns a plain function into a tool. Its OpenAI
function-format schema is derived once, at construction, from the signature
(``str``, ``int``, ``float``, ``bool``, ``list[...]``, ``dict[...]``,
``Optional[...]``/``X | None``, ``Literal[...]``, ``Enum`` and defaults) and the
Google-style docstring (summary, ``Args:`` and ``Returns:``), so the schema can
go straight into a chat template's ``tools``::

    def convert(value: float, unit: Literal["km", "mi"] = "km") -> float:
        \"\"\"Convert a distance.

        Args:
            value: The distance in metres.
            unit: The target unit.
        \"\"\"

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
import inspect
import json
import math
import queue
import re
import threading
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

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

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|Examples?|Notes?|"
                      r"Attributes|Warnings?|See Also|Todo)\s*:\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


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


class _ArgumentError(ValueError):
    """Internal: an argument failed validation (never escapes ``run``)."""


# --------------------------------------------------------------------------- schema derivation


def _type_schema(annotation: Any, where: str) -> dict[str, Any]:
    """Translate a Python annotation into a JSON schema fragment."""
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
        return {}
    if annotation is None or annotation is type(None):
        return {"type": "null"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is str:
        return {"type": "string"}
    if annotation in (list, tuple, set, frozenset) or annotation in (Sequence, Iterable):
        return {"type": "array"}
    if annotation in (dict, Mapping):
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_schema([m.value for m in annotation], where)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return _enum_schema(list(args), where)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        schemas = [_type_schema(a, where) for a in members]
        if len(schemas) == 1:
            inner = schemas[0]
            if not nullable:
                return inner
            if isinstance(inner.get("type"), str) and "enum" not in inner:
                return {**inner, "type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        return {"anyOf": schemas + ([{"type": "null"}] if nullable else [])}
    if origin in (list, tuple, set, frozenset) or origin in (Sequence, Iterable, collections.abc.Sequence):
        item_args = [a for a in args if a is not Ellipsis]
        if origin is tuple and len(item_args) > 1 and Ellipsis not in args:
            return {"type": "array", "prefixItems": [_type_schema(a, where) for a in item_args],
                    "minItems": len(item_args), "maxItems": len(item_args)}
        items = _type_schema(item_args[0], where) if item_args else {}
        return {"type": "array", "items": items} if items else {"type": "array"}
    if origin in (dict, Mapping, collections.abc.Mapping):
        if len(args) == 2 and args[0] is not str:
            raise TypeError(f"{where}: expected dict keys of type str (JSON objects), got {args[0]!r}")
        values = _type_schema(args[1], where) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
    raise TypeError(
        f"{where}: expected an annotation of str, int, float, bool, list, dict, Optional, Literal or Enum, "
        f"got {annotation!r}"
    )


def _enum_schema(values: list[Any], where: str) -> dict[str, Any]:
    kinds = {type(v) for v in values}
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if not values or not kinds <= set(names):
        raise TypeError(f"{where}: expected Literal/Enum values of str, int, float or bool, got {values!r}")
    schema: dict[str, Any] = {"enum": list(values)}
    if len(kinds) == 1:
        schema = {"type": names[kinds.pop()], **schema}
    return schema


def _parse_docstring(doc: str) -> tuple[str, dict[str, str], str]:
    """Split a Google-style docstring into (description, {arg: text}, returns text)."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    description: list[str] = []
    args: dict[str, str] = {}
    returns: list[str] = []
    section: str | None = None
    current: str | None = None
    base_indent: int | None = None
    for line in lines:
        stripped = line.strip()
        header = _SECTION.match(stripped) if line == line.lstrip() else None
        if header:
            section = header.group(1).lower()
            current, base_indent = None, None
            continue
        if section is None:
            description.append(stripped)
        elif section in ("args", "arguments", "parameters", "params"):
            if not stripped:
                continue
            indent = len(line) - len(line.lstrip())
            if base_indent is None:
                base_indent = indent
            match = _ARG_LINE.match(stripped) if indent <= base_indent else None
            if match:
                current = match.group(1)
                args[current] = match.group(3).strip()
            elif current is not None:
                args[current] = f"{args[current]} {stripped}".strip()
        elif section in ("returns", "return") and stripped:
            returns.append(stripped)
    paragraphs = [" ".join(p.split("\n")).strip() for p in "\n".join(description).split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p), args, " ".join(returns)


def _function_schema(
    func: Callable[..., Any], name: str, description: str | None
) -> tuple[dict[str, Any], frozenset[str], bool]:
    """Derive the OpenAI function schema of ``func``; returns (schema, required, accepts_extra)."""
    where = f"FunctionTool({name})"
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: expected a callable with an inspectable signature, got {func!r}") from exc
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolved forward references: fall back to the raw annotations
        hints = {}
    doc_description, doc_args, doc_returns = _parse_docstring(inspect.getdoc(func) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    accepts_extra = False
    for pname, param in signature.parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_extra = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"{where}: expected keyword-callable parameters, got *{pname}")
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"{where}: expected keyword-callable parameters, got positional-only {pname!r}")
        prop = dict(_type_schema(hints.get(pname, param.annotation), f"{where} parameter {pname!r}"))
        if doc_args.get(pname):
            prop["description"] = doc_args[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            default = param.default.value if isinstance(param.default, enum.Enum) else param.default
            try:
                json.dumps(default)
                prop["default"] = default
            except (TypeError, ValueError):
                pass
        properties[pname] = prop
    text = description if description is not None else doc_description
    if description is None and doc_returns:
        text = f"{text}\n\nReturns: {doc_returns}" if text else f"Returns: {doc_returns}"
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if not accepts_extra:
        parameters["additionalProperties"] = False
    schema = {"type": "function", "function": {"name": name, "description": text or name, "parameters": parameters}}
    return schema, frozenset(required), accepts_extra


# --------------------------------------------------------------------------- validation


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _coerce(value: Any, schema: Mapping[str, Any], path: str) -> Any:
    """Validate ``value`` against a schema fragment, coercing obvious string/number mix-ups."""
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                return _coerce(value, option, path)
            except _ArgumentError:
                continue
        raise _ArgumentError(f"{path}: expected one of {[o.get('type', 'any') for o in schema['anyOf']]}, "
                             f"got {_describe(value)}")
    kind = schema.get("type")
    if isinstance(kind, list):
        if value is None and "null" in kind:
            return None
        others = [k for k in kind if k != "null"]
        return _coerce(value, {**schema, "type": others[0] if len(others) == 1 else None}, path) if others else None
    if kind == "string":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        elif not isinstance(value, str):
            raise _ArgumentError(f"{path}: expected string, got {_describe(value)}")
    elif kind == "integer":
        if isinstance(value, str):
            try:
                value = float(value.strip()) if not re.fullmatch(r"\s*[-+]?\d+\s*", value) else int(value)
            except ValueError:
                raise _ArgumentError(f"{path}: expected integer, got {_describe(value)}") from None
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _ArgumentError(f"{path}: expected integer, got {_describe(value)}")
    elif kind == "number":
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise _ArgumentError(f"{path}: expected number, got {_describe(value)}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _ArgumentError(f"{path}: expected a finite number, got {_describe(value)}")
    elif kind == "boolean":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise _ArgumentError(f"{path}: expected boolean, got {_describe(value)}")
    elif kind == "null":
        if value is not None:
            raise _ArgumentError(f"{path}: expected null, got {_describe(value)}")
    elif kind == "array":
        if isinstance(value, str):
            value = _json_container(value, list, path, "array")
        if not isinstance(value, (list, tuple)):
            raise _ArgumentError(f"{path}: expected array, got {_describe(value)}")
        if "prefixItems" in schema:
            if len(value) != len(schema["prefixItems"]):
                raise _ArgumentError(f"{path}: expected {len(schema['prefixItems'])} items, got {len(value)}")
            value = [_coerce(v, s, f"{path}[{i}]") for i, (v, s) in enumerate(zip(value, schema["prefixItems"]))]
        elif schema.get("items"):
            value = [_coerce(v, schema["items"], f"{path}[{i}]") for i, v in enumerate(value)]
        else:
            value = list(value)
    elif kind == "object":
        if isinstance(value, str):
            value = _json_container(value, dict, path, "object")
        if not isinstance(value, dict):
            raise _ArgumentError(f"{path}: expected object, got {_describe(value)}")
        if schema.get("additionalProperties"):
            value = {k: _coerce(v, schema["additionalProperties"], f"{path}[{k!r}]") for k, v in value.items()}
    if "enum" in schema and value not in schema["enum"]:
        if isinstance(value, str):
            folded = {e.casefold(): e for e in schema["enum"] if isinstance(e, str)}
            if value.strip().casefold() in folded:
                return folded[value.strip().casefold()]
        raise _ArgumentError(f"{path}: expected one of {schema['enum']}, got {_describe(value)}")
    return value


def _json_container(text: str, kind: type, path: str, name: str) -> Any:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise _ArgumentError(f"{path}: expected {name}, got {_describe(text)}") from None
    if not isinstance(value, kind):
        raise _ArgumentError(f"{path}: expected {name}, got {_describe(text)}")
    return value


def validate_arguments(arguments: Any, parameters: Mapping[str, Any], *, tool: str = "tool") -> dict[str, Any]:
    """Check and coerce decoded JSON arguments against a function's ``parameters`` schema.

    Args:
        arguments: The decoded arguments (a dict is expected).
        parameters: The JSON schema of the parameters (``{"type": "object", ...}``).
        tool: Tool name used in messages.

    Returns:
        The coerced arguments (numbers given as strings become numbers, etc.).

    Raises:
        ValueError: With an "expected ..., got ..." message naming the argument.
    """
    if not isinstance(arguments, Mapping):
        raise _ArgumentError(f"tool {tool!r}: expected arguments as a JSON object, got {_describe(arguments)}")
    properties: Mapping[str, Any] = parameters.get("properties", {})
    unknown = [k for k in arguments if k not in properties]
    if unknown and parameters.get("additionalProperties") is False:
        expected = ", ".join(properties) or "no arguments"
        raise _ArgumentError(f"tool {tool!r}: unknown argument {unknown[0]!r}; expected: {expected}")
    missing = [k for k in parameters.get("required", ()) if k not in arguments]
    if missing:
        raise _ArgumentError(f"tool {tool!r}: missing required argument {missing[0]!r}")
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        out[key] = _coerce(value, properties[key], f"tool {tool!r} argument {key!r}") if key in properties else value
    return out


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
    environments holding them can be pickled.

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
        self._schema, self._required, self._accepts_extra = _function_schema(func, name, description)
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
        except _ArgumentError as exc:
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
