"""JSON schemas for tools: derive them from Python signatures and docstrings, validate arguments.

:func:`function_schema` builds an OpenAI function-format schema from a callable's
signature (``str``, ``int``, ``float``, ``bool``, ``list[...]``, ``dict[...]``,
``Optional[...]``/``X | None``, ``Literal[...]``, ``Enum``, defaults) and its
Google-style docstring (summary, ``Args:``, ``Returns:``).
:func:`validate_arguments` checks decoded JSON arguments against such a schema,
coercing the obvious mix-ups models make (``"3"`` for ``3``, ``"true"`` for
``true``, a JSON string for an array) and failing with "expected ..., got ..." messages.
"""

from __future__ import annotations

import collections
import enum
import inspect
import json
import math
import re
import threading
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "ArgumentError",
    "function_schema",
    "parse_google_docstring",
    "shared_function_schema",
    "validate_arguments",
]

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|Examples?|Notes?|"
                      r"Attributes|Warnings?|See Also|Todo)\s*:\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


class ArgumentError(ValueError):
    """An argument failed validation (``FunctionTool.run`` turns it into an error result)."""


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


def parse_google_docstring(doc: str) -> tuple[str, dict[str, str], str]:
    """Split a Google-style docstring into its description, argument texts and returns text.

    Args:
        doc: The docstring (indentation is cleaned).

    Returns:
        ``(description, {argument name: description}, returns text)``.
    """
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


_HINTS_LOCK = threading.Lock()


def _type_hints(func: Callable[..., Any]) -> dict[str, Any]:
    """Resolve ``func``'s annotations; serialized, since resolving compiles code.

    CPython 3.11 can fail with ``SystemError`` when several threads compile at
    once (envs are built in worker threads by rollouts), so resolution is
    guarded by a lock.
    """
    with _HINTS_LOCK:
        try:
            return typing.get_type_hints(func)
        except (NameError, TypeError, AttributeError):  # unresolved forward references: use raw annotations
            return {}


_SCHEMA_CACHE_SIZE = 512
_schema_cache: collections.OrderedDict[Any, tuple[dict[str, Any], frozenset[str], bool]] = collections.OrderedDict()
_schema_cache_lock = threading.Lock()


def shared_function_schema(
    func: Callable[..., Any], name: str, description: str | None
) -> tuple[dict[str, Any], frozenset[str], bool]:
    """Like :func:`function_schema`, but the result is shared between calls: never mutate it.

    Every env builds its tools again; deriving a schema (signature, type hints, docstring)
    costs far more than looking it up, so results are kept for the most recent callables.
    """
    try:
        key = (func, name, description)
        hash(key)
    except TypeError:  # an unhashable callable object
        return function_schema(func, name, description)
    with _schema_cache_lock:
        found = _schema_cache.get(key)
        if found is not None:
            _schema_cache.move_to_end(key)
            return found
    found = function_schema(func, name, description)
    with _schema_cache_lock:
        _schema_cache[key] = found
        while len(_schema_cache) > _SCHEMA_CACHE_SIZE:
            _schema_cache.popitem(last=False)
    return found


def function_schema(
    func: Callable[..., Any], name: str, description: str | None
) -> tuple[dict[str, Any], frozenset[str], bool]:
    """Derive the OpenAI function schema of ``func``.

    Args:
        func: The callable; every parameter must be callable by keyword.
        name: The tool name.
        description: Overrides the docstring description when not None.

    Returns:
        ``(schema, required parameter names, whether **kwargs is accepted)``.

    Raises:
        TypeError: For ``*args``, positional-only parameters or unsupported annotations.
    """
    where = f"FunctionTool({name})"
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: expected a callable with an inspectable signature, got {func!r}") from exc
    hints = _type_hints(func)
    doc_description, doc_args, doc_returns = parse_google_docstring(inspect.getdoc(func) or "")
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
            except ArgumentError:
                continue
        raise ArgumentError(f"{path}: expected one of {[o.get('type', 'any') for o in schema['anyOf']]}, "
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
            raise ArgumentError(f"{path}: expected string, got {_describe(value)}")
    elif kind == "integer":
        if isinstance(value, str):
            try:
                value = float(value.strip()) if not re.fullmatch(r"\s*[-+]?\d+\s*", value) else int(value)
            except ValueError:
                raise ArgumentError(f"{path}: expected integer, got {_describe(value)}") from None
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentError(f"{path}: expected integer, got {_describe(value)}")
    elif kind == "number":
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ArgumentError(f"{path}: expected number, got {_describe(value)}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ArgumentError(f"{path}: expected a finite number, got {_describe(value)}")
    elif kind == "boolean":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise ArgumentError(f"{path}: expected boolean, got {_describe(value)}")
    elif kind == "null":
        if value is not None:
            raise ArgumentError(f"{path}: expected null, got {_describe(value)}")
    elif kind == "array":
        if isinstance(value, str):
            value = _json_container(value, list, path, "array")
        if not isinstance(value, (list, tuple)):
            raise ArgumentError(f"{path}: expected array, got {_describe(value)}")
        if "prefixItems" in schema:
            if len(value) != len(schema["prefixItems"]):
                raise ArgumentError(f"{path}: expected {len(schema['prefixItems'])} items, got {len(value)}")
            pairs = enumerate(zip(value, schema["prefixItems"], strict=True))
            value = [_coerce(v, s, f"{path}[{i}]") for i, (v, s) in pairs]
        elif schema.get("items"):
            value = [_coerce(v, schema["items"], f"{path}[{i}]") for i, v in enumerate(value)]
        else:
            value = list(value)
    elif kind == "object":
        if isinstance(value, str):
            value = _json_container(value, dict, path, "object")
        if not isinstance(value, dict):
            raise ArgumentError(f"{path}: expected object, got {_describe(value)}")
        if schema.get("additionalProperties"):
            value = {k: _coerce(v, schema["additionalProperties"], f"{path}[{k!r}]") for k, v in value.items()}
    if "enum" in schema and value not in schema["enum"]:
        if isinstance(value, str):
            folded = {e.casefold(): e for e in schema["enum"] if isinstance(e, str)}
            if value.strip().casefold() in folded:
                return folded[value.strip().casefold()]
        raise ArgumentError(f"{path}: expected one of {schema['enum']}, got {_describe(value)}")
    return value


def _json_container(text: str, kind: type, path: str, name: str) -> Any:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ArgumentError(f"{path}: expected {name}, got {_describe(text)}") from None
    if not isinstance(value, kind):
        raise ArgumentError(f"{path}: expected {name}, got {_describe(text)}")
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
        raise ArgumentError(f"tool {tool!r}: expected arguments as a JSON object, got {_describe(arguments)}")
    properties: Mapping[str, Any] = parameters.get("properties", {})
    unknown = [k for k in arguments if k not in properties]
    if unknown and parameters.get("additionalProperties") is False:
        expected = ", ".join(properties) or "no arguments"
        raise ArgumentError(f"tool {tool!r}: unknown argument {unknown[0]!r}; expected: {expected}")
    missing = [k for k in parameters.get("required", ()) if k not in arguments]
    if missing:
        raise ArgumentError(f"tool {tool!r}: missing required argument {missing[0]!r}")
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        out[key] = _coerce(value, properties[key], f"tool {tool!r} argument {key!r}") if key in properties else value
    return out
