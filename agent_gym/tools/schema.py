"""OpenAI function schemas derived from Python signatures and Google-style docstrings.

:func:`function_schema` builds the schema of a function or bound method (``self``
is not a parameter of a bound method) from its signature and docstring (summary,
``Args:``, ``Returns:``). Annotations: ``str``, ``int``, ``float``, ``bool``,
``list[...]``/``tuple[...]``/``set[...]``, ``dict[str, ...]``, ``Optional[...]``/``X | None``,
unions, ``Literal[...]``, ``Enum``, ``TypedDict`` (from ``typing`` or ``typing_extensions``), pydantic
models and dataclasses (as objects with their fields), and other types pydantic can
describe without references (``datetime.date`` and the like); defaults become ``default``.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from agent_gym.tools.annotations import class_hints, is_typeddict, resolve_type_hints, typeddict_required_keys

__all__ = [
    "PerCallableCache",
    "function_schema",
    "parse_google_docstring",
    "shared_function_schema",
]

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|Examples?|Notes?|"
                      r"Attributes|Warnings?|See Also|Todo)\s*:\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


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
    if isinstance(annotation, type):
        fields = _object_fields(annotation, where)
        if fields is not None:
            properties, required = fields
            return {"type": "object", "properties": properties, "required": required}
    found = _pydantic_schema(annotation)
    if found is not None:
        return found
    raise TypeError(
        f"{where}: expected an annotation of str, int, float, bool, list, dict, Optional, Literal, Enum, "
        f"TypedDict, a pydantic model or a dataclass, got {annotation!r}"
    )


_DEPTH = threading.local()


def _object_fields(cls: type, where: str) -> tuple[dict[str, Any], list[str]] | None:
    """Properties and required names of a TypedDict, pydantic model or dataclass; None for other classes."""
    depth = getattr(_DEPTH, "value", 0)
    if depth > 8:
        raise TypeError(f"{where}: expected a type nested at most 8 levels deep (recursive types are not "
                        f"supported), got {cls!r}")
    _DEPTH.value = depth + 1
    try:
        if is_typeddict(cls):
            hints = class_hints(cls)
            required_keys = typeddict_required_keys(cls)
            return ({k: _type_schema(t, f"{where}.{k}") for k, t in hints.items()},
                    [k for k in hints if k in required_keys])
        model_fields = getattr(cls, "model_fields", None)
        if isinstance(model_fields, dict) and hasattr(cls, "model_validate"):
            properties: dict[str, Any] = {}
            required: list[str] = []
            for fname, info in model_fields.items():
                prop = dict(_type_schema(info.annotation, f"{where}.{fname}"))
                if info.description:
                    prop["description"] = info.description
                properties[fname] = prop
                if info.is_required():
                    required.append(fname)
            return properties, required
        if dataclasses.is_dataclass(cls):
            hints = class_hints(cls)
            properties, required = {}, []
            for field in dataclasses.fields(cls):
                if not field.init:
                    continue
                properties[field.name] = _type_schema(hints.get(field.name, field.type), f"{where}.{field.name}")
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                    required.append(field.name)
            return properties, required
        return None
    finally:
        _DEPTH.value = depth


def _pydantic_schema(annotation: Any) -> dict[str, Any] | None:
    """The JSON schema pydantic gives a type (dates, UUIDs, ...), if it needs no references."""
    if isinstance(annotation, type) and annotation.__module__ not in ("datetime", "uuid", "decimal", "pathlib"):
        return None
    try:
        from pydantic import TypeAdapter

        schema = TypeAdapter(annotation).json_schema()
    except Exception:
        return None
    if "$ref" in json.dumps(schema) or "$defs" in schema:
        return None
    schema.pop("title", None)
    return schema


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




class PerCallableCache:
    """Results derived from a callable (with a tool name and description), kept for the most recent ones.

    A bound method is keyed by its function, so the cache keeps no instance alive; a
    callable that cannot be hashed is built every time. Results are shared: never mutate them.

    Args:
        build: ``build(func, name, description)`` derives the result.
        size: How many results are kept (least recently used go first).
    """

    def __init__(self, build: Callable[[Callable[..., Any], str, str | None], Any], size: int = 512) -> None:
        self._build = build
        self._size = size
        self._cache: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, func: Callable[..., Any], name: str, description: str | None) -> Any:
        """The result for ``func``, built on first use."""
        try:
            key = (func.__func__, "bound", name, description) if inspect.ismethod(func) else (func, name, description)
            hash(key)
        except (TypeError, AttributeError):  # an unhashable callable object
            return self._build(func, name, description)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        found = self._build(func, name, description)
        with self._lock:
            self._cache[key] = found
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return found


def shared_function_schema(
    func: Callable[..., Any], name: str, description: str | None
) -> tuple[dict[str, Any], frozenset[str], bool]:
    """Like :func:`function_schema`, but the result is shared between calls: never mutate it.

    Every env builds its tools again; deriving a schema (signature, type hints, docstring)
    costs far more than looking it up, so results are kept for the most recent callables.
    """
    return _schema_cache.get(func, name, description)


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
    hints = resolve_type_hints(func)
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


_schema_cache = PerCallableCache(function_schema)
