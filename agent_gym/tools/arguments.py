"""Validate and coerce a tool call's decoded JSON arguments against the tool's signature.

:class:`ArgumentValidator` is built once per tool from the function's type hints.
Each parameter gets a pydantic validator (a ``TypeAdapter`` core schema with a few
nodes replaced), and the rules are:

* **A value that already satisfies the declared type reaches the function unchanged**
  (an equal value of the same type): unions first look for a member the value
  satisfies without conversion (pydantic's strict smart-mode union), so
  ``dict[str, str | int | None]`` keeps ``{"priority": 2}`` as ``2``.
* Otherwise the obvious mix-ups models make are coerced, each deliberately:
  ``"3"`` or ``3.0`` for an ``int``, ``"0.5"`` for a ``float``, ``"true"``/``"false"``
  for a ``bool``, a number for a ``str``, a case variant of a ``Literal``/``Enum`` string
  value, and a JSON string holding an array or object for a container (list, dict,
  TypedDict, pydantic model, dataclass). Union members are tried in order for this.
* Nothing else is accepted: ``True`` is not an ``int``, ``"yes"`` is not a ``bool``,
  ``1.5`` is not an ``int`` and non-finite numbers are rejected.

Failures raise :class:`~agent_gym.errors.ArgumentError` with an "expected ..., got ..."
message naming the argument and the path inside it (``argument 'items'[1]``); the
tool layer turns it into an error observation.

:func:`validate_arguments` checks arguments against a JSON schema instead, for tools
known only by their schema.
"""

from __future__ import annotations

import enum
import inspect
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import TypeAdapter
from pydantic_core import PydanticCustomError, SchemaValidator, ValidationError
from pydantic_core import core_schema as cs

from agent_gym.errors import ArgumentError
from agent_gym.tools.annotations import pydantic_ready, resolve_type_hints

__all__ = ["ArgumentValidator", "describe_value", "validate_arguments"]

_INT_TEXT = re.compile(r"\s*[-+]?\d+\s*")
_CONTAINERS = frozenset(("list", "tuple", "set", "frozenset", "dict", "typed-dict", "model", "dataclass"))
_TYPE_NAMES = {
    "int": "integer", "float": "number", "str": "string", "bool": "boolean", "none": "null", "list": "array",
    "tuple": "array", "set": "array", "frozenset": "array", "dict": "object", "typed-dict": "object",
    "model": "object", "dataclass": "object",
}
_SKIP_KEYS = frozenset(("serialization", "metadata", "cls", "ref", "config"))


def describe_value(value: Any) -> str:
    """Short description of a value for error messages: its JSON type name and a snippet."""
    try:
        text = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = object.__repr__(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _fail(expected: str, value: Any) -> PydanticCustomError:
    return PydanticCustomError("agent_gym", "{text}", {"text": f"expected {expected}, got {describe_value(value)}"})


# --------------------------------------------------------------------------- lenient scalars


def lenient_int(value: Any) -> int:
    """An ``int`` as given, or from an integral float / numeric string; never from a bool."""
    if type(value) is int:
        return value
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            return int(text)
        try:
            value = float(text)
        except ValueError:
            raise _fail("integer", value) from None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise _fail("integer", value)


def lenient_float(value: Any) -> float:
    """A finite ``float`` as given, from an int or from a numeric string; never from a bool."""
    if type(value) is float:
        if math.isfinite(value):
            return value
        raise _fail("a finite number", value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise _fail("number", value) from None
        if math.isfinite(number):
            return number
        raise _fail("a finite number", value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            raise _fail("a finite number", value) from None
        if math.isfinite(number):
            return number
    raise _fail("a finite number", value)


def lenient_bool(value: Any) -> bool:
    """A ``bool`` as given, or from the strings ``"true"``/``"false"`` (any case)."""
    if value is True or value is False:
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "true":
            return True
        if text == "false":
            return False
    raise _fail("boolean", value)


def lenient_str(value: Any) -> str:
    """A ``str`` as given, or a number written as text."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise _fail("string", value)


def _literal(expected: list[Any]) -> Callable[[Any], Any]:
    folded = {e.casefold(): e for e in expected if isinstance(e, str)}
    allowed = [(e, type(e)) for e in expected]

    def check(value: Any) -> Any:
        for option, kind in allowed:
            if value == option and type(value) is kind:
                return option
        if isinstance(value, str):
            found = folded.get(value.strip().casefold())
            if found is not None:
                return found
        raise _fail(f"one of {expected}", value)

    return check


def _enum(cls: type[enum.Enum]) -> Callable[[Any], Any]:
    values = [m.value for m in cls]
    folded = {m.value.casefold(): m for m in cls if isinstance(m.value, str)}
    by_text = {str(m.value): m for m in cls if isinstance(m.value, int) and not isinstance(m.value, bool)}

    def check(value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, bool):
            try:
                return cls(value)
            except (ValueError, TypeError):
                pass
        if isinstance(value, str):
            text = value.strip()
            found = folded.get(text.casefold()) or by_text.get(text)
            if found is not None:
                return found
        raise _fail(f"one of {values}", value)

    return check


def _json_text(kind: str) -> Callable[[Any], Any]:
    want = dict if kind in ("dict", "typed-dict", "model", "dataclass") else list

    def decode(value: Any) -> Any:
        if isinstance(value, str):
            try:
                decoded = json.loads(value)
            except (ValueError, RecursionError):
                return value
            if isinstance(decoded, want):
                return decoded
        return value

    return decode


def _name_of(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if kind == "nullable":
        return f"{_name_of(schema['schema'])} or null"
    if kind == "union":
        return " or ".join(_name_of(c[0] if isinstance(c, tuple) else c) for c in schema["choices"])
    if kind == "literal":
        return f"one of {schema['expected']}"
    if kind == "enum":
        return f"one of {[m.value for m in schema['members']]}"
    return _TYPE_NAMES.get(str(kind), str(kind))


# --------------------------------------------------------------------------- core schema rewriting


class _Rewriter:
    """Rewrites a pydantic core schema into its lenient form (see the module docstring)."""

    def __init__(self, definitions: list[Any]) -> None:
        self.definitions = definitions  # shared as they are: types referenced by name keep pydantic's rules

    def _validator(self, schema: Any, *, strict: bool = False) -> SchemaValidator:
        if self.definitions:
            schema = cs.definitions_schema(schema, self.definitions)
        return SchemaValidator(schema, cs.CoreConfig(strict=strict))

    def rewrite(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.rewrite(n) for n in node]
        if isinstance(node, tuple):
            return tuple(self.rewrite(n) for n in node)
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        ref = node.get("ref")
        if kind == "int":
            return _plain(lenient_int, ref)
        if kind == "float":
            return _plain(lenient_float, ref)
        if kind == "bool":
            return _plain(lenient_bool, ref)
        if kind == "str":
            return _plain(lenient_str, ref)
        if kind == "literal":
            return _plain(_literal(list(node["expected"])), ref)
        if kind == "enum":
            return _plain(_enum(node["cls"]), ref)
        if kind == "union":
            return _plain(self._union(node), ref)
        if kind == "model" and not node.get("root_model"):
            return _plain(self._object(node, "model"), ref)
        if kind == "dataclass":
            return _plain(self._object(node, "dataclass"), ref)
        if kind == "nullable":
            inner = self._validator(self.rewrite(node["schema"]))
            return _plain(_nullable(inner), ref)
        out = {k: (v if k in _SKIP_KEYS else self.rewrite(v)) for k, v in node.items()}
        if kind in _CONTAINERS:
            out.pop("ref", None)
            wrapped = cs.no_info_before_validator_function(_json_text(kind), out)
            if ref is not None:
                wrapped["ref"] = ref
            return wrapped
        return out

    def _object(self, node: dict[str, Any], kind: str) -> Callable[[Any], Any]:
        # pydantic-core reuses a model's own prebuilt validator for a "model" node, so the fields are
        # validated here and the instance is built from the coerced values.
        cls = node["cls"]
        fields = self._validator(self.rewrite(node["schema"]))
        decode = _json_text("dict")

        def check(value: Any) -> Any:
            if isinstance(value, cls):
                return value
            value = decode(value)
            if not isinstance(value, dict):
                raise _fail("object", value)
            parsed = _nested(fields, value)
            if kind == "model":
                data, extra = parsed[0], parsed[1]
                return cls.model_validate({**data, **(extra or {})})
            data = parsed[0] if isinstance(parsed, tuple) else parsed
            return cls(**data)

        return check

    def _union(self, node: dict[str, Any]) -> Callable[[Any], Any]:
        exact = self._validator(node, strict=True)  # strict smart mode: a member the value already satisfies
        members = [self._validator(self.rewrite(c[0] if isinstance(c, tuple) else c)) for c in node["choices"]]
        expected = _name_of(node)

        def check(value: Any) -> Any:
            try:
                return exact.validate_python(value)
            except ValidationError:
                pass
            for member in members:
                try:
                    return member.validate_python(value)
                except ValidationError:
                    continue
            raise _fail(expected, value)

        return check


def _first_error(exc: ValidationError) -> tuple[tuple[Any, ...], str]:
    """The location and text of the first error of a validation."""
    error = exc.errors(include_url=False)[0]
    ctx = error.get("ctx") or {}
    loc = tuple(error["loc"]) + tuple(ctx.get("loc", ()))
    kind = error["type"]
    if kind == "agent_gym":
        text = str(ctx.get("text", error["msg"]))
    elif kind == "missing":
        text = "missing required field"
    elif kind == "extra_forbidden":
        text = f"unexpected field, got {describe_value(error['input'])}"
    else:
        msg = error["msg"]
        text = f"expected {msg[:1].lower()}{msg[1:]}, got {describe_value(error['input'])}"
    return loc, text


def _nested(validator: SchemaValidator, value: Any) -> Any:
    """Validate inside a validator function, passing the inner location and message on."""
    try:
        return validator.validate_python(value)
    except ValidationError as exc:
        loc, text = _first_error(exc)
        raise PydanticCustomError("agent_gym", "{text}", {"text": text, "loc": loc}) from None


def _plain(func: Callable[[Any], Any], ref: str | None) -> cs.PlainValidatorFunctionSchema:
    schema = cs.no_info_plain_validator_function(func)
    if ref is not None:
        schema["ref"] = ref
    return schema


def _nullable(inner: SchemaValidator) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None:
            return None
        return _nested(inner, value)

    return check


_SCALARS: dict[Any, Callable[[Any], Any]] = {int: lenient_int, float: lenient_float, bool: lenient_bool,
                                             str: lenient_str}


def _accept(value: Any) -> Any:
    return value


def parameter_validator(annotation: Any, where: str) -> Callable[[Any], Any]:
    """Build the validator of one parameter: a callable that returns the value to pass or raises.

    Plain ``int``, ``float``, ``bool`` and ``str`` (and missing/``Any`` annotations)
    get a Python function; everything else a rewritten pydantic validator.

    Raises:
        TypeError: If pydantic cannot validate the annotation.
    """
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
        return _accept
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    try:
        core = TypeAdapter(pydantic_ready(annotation)).core_schema
    except Exception as exc:
        raise TypeError(f"{where}: expected an annotation pydantic can validate, got {annotation!r}: {exc}") from exc
    definitions: list[Any] = []
    if core.get("type") == "definitions":
        definitions, core = list(core["definitions"]), core["schema"]
    rewriter = _Rewriter(definitions)
    validator = rewriter._validator(rewriter.rewrite(core))
    return validator.validate_python


def _location(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f"[{part!r}]" for part in loc)


def _message(exc: ValidationError) -> str:
    loc, text = _first_error(exc)
    where = _location(loc)
    return f"{where}: {text}"


class ArgumentValidator:
    """Checks a tool call's arguments against a function's signature (built once per tool).

    Args:
        func: The function (or bound method); parameters must be callable by keyword.
        tool: The tool name, used in messages.
        hints: The resolved type hints of ``func`` (resolved here when None).

    Raises:
        TypeError: For ``*args``, positional-only parameters or annotations pydantic cannot validate.
    """

    def __init__(self, func: Callable[..., Any], tool: str, hints: Mapping[str, Any] | None = None) -> None:
        signature = inspect.signature(func)
        if hints is None:
            hints = resolve_type_hints(func)
        self.tool = tool
        self.validators: dict[str, Callable[[Any], Any]] = {}
        self.required: frozenset[str] = frozenset()
        self.accepts_extra = False
        required = []
        for pname, param in signature.parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                self.accepts_extra = True
                continue
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
                continue  # rejected by the schema derivation, which runs first
            annotation = hints.get(pname, param.annotation)
            self.validators[pname] = parameter_validator(annotation, f"FunctionTool({tool}) parameter {pname!r}")
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        self.required = frozenset(required)
        self._order = tuple(self.validators)
        self._where = {name: f"tool {tool!r} argument {name!r}" for name in self.validators}

    def __call__(self, arguments: Any) -> dict[str, Any]:
        """Return the arguments to call the function with.

        Raises:
            ArgumentError: With an "expected ..., got ..." message.
        """
        if type(arguments) is not dict:
            if not isinstance(arguments, Mapping):
                raise ArgumentError(f"tool {self.tool!r}: expected arguments as a JSON object, "
                                    f"got {describe_value(arguments)}")
            arguments = dict(arguments)
        validators = self.validators
        if not self.accepts_extra and not arguments.keys() <= validators.keys():
            unknown = next(k for k in arguments if k not in validators)
            expected = ", ".join(self._order) or "no arguments"
            raise ArgumentError(f"tool {self.tool!r}: unknown argument {unknown!r}; expected: {expected}")
        if not self.required <= arguments.keys():
            missing = next(k for k in self._order if k in self.required and k not in arguments)
            raise ArgumentError(f"tool {self.tool!r}: missing required argument {missing!r}")
        out: dict[str, Any] = {}
        for key, value in arguments.items():
            check = validators.get(key)
            if check is None:
                out[key] = value
                continue
            try:
                out[key] = check(value)
            except PydanticCustomError as exc:
                raise ArgumentError(f"{self._where[key]}: {exc.message()}") from None
            except ValidationError as exc:
                raise ArgumentError(f"{self._where[key]}{_message(exc)}") from None
        return out


# --------------------------------------------------------------------------- JSON-schema validation


def _exact(value: Any, schema: Mapping[str, Any]) -> bool:
    """True if ``value`` satisfies a schema fragment without any conversion."""
    if "enum" in schema:
        return any(value == e and type(value) is type(e) for e in schema["enum"])
    if "anyOf" in schema:
        return any(_exact(value, s) for s in schema["anyOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return any(_exact(value, {**schema, "type": k}) for k in kind)
    if kind is None:
        return True
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return type(value) is int
    if kind == "number":
        return type(value) in (int, float) and math.isfinite(value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "array":
        items = schema.get("items") or {}
        return isinstance(value, list) and all(_exact(v, items) for v in value)
    if kind == "object":
        extra = schema.get("additionalProperties")
        return isinstance(value, dict) and (not isinstance(extra, Mapping)
                                            or all(_exact(v, extra) for v in value.values()))
    return False


_JSON_SCALARS = {"string": lenient_str, "integer": lenient_int, "number": lenient_float, "boolean": lenient_bool}


def _coerce(value: Any, schema: Mapping[str, Any], path: str) -> Any:
    """Validate ``value`` against a schema fragment, coercing obvious mix-ups."""
    options = schema.get("anyOf")
    kinds = schema.get("type")
    if options is None and isinstance(kinds, list):
        options = [{**schema, "type": k} for k in kinds]
    if options is not None:
        for option in options:
            if _exact(value, option):
                return value
        for option in options:
            try:
                return _coerce(value, option, path)
            except ArgumentError:
                continue
        raise ArgumentError(f"{path}: expected one of {[o.get('type', 'any') for o in options]}, "
                            f"got {describe_value(value)}")
    if "enum" in schema:
        try:
            return _literal(list(schema["enum"]))(value)
        except PydanticCustomError as exc:
            raise ArgumentError(f"{path}: {exc.message()}") from None
    if kinds in _JSON_SCALARS:
        try:
            return _JSON_SCALARS[kinds](value)
        except PydanticCustomError as exc:
            raise ArgumentError(f"{path}: {exc.message()}") from None
    if kinds == "null":
        if value is not None:
            raise ArgumentError(f"{path}: expected null, got {describe_value(value)}")
    elif kinds == "array":
        value = _json_text("list")(value)
        if not isinstance(value, (list, tuple)):
            raise ArgumentError(f"{path}: expected array, got {describe_value(value)}")
        items = schema.get("items")
        value = [_coerce(v, items, f"{path}[{i}]") for i, v in enumerate(value)] if items else list(value)
    elif kinds == "object":
        value = _json_text("dict")(value)
        if not isinstance(value, dict):
            raise ArgumentError(f"{path}: expected object, got {describe_value(value)}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            value = {k: _coerce(v, extra, f"{path}[{k!r}]") for k, v in value.items()}
    return value


def validate_arguments(arguments: Any, parameters: Mapping[str, Any], *, tool: str = "tool") -> dict[str, Any]:
    """Check and coerce decoded JSON arguments against a function's ``parameters`` JSON schema.

    For tools known only by a schema; :class:`FunctionTool` validates against the
    signature instead. Same rules: a value that satisfies the schema as given is kept.

    Args:
        arguments: The decoded arguments (a dict is expected).
        parameters: The JSON schema of the parameters (``{"type": "object", ...}``).
        tool: Tool name used in messages.

    Returns:
        The coerced arguments.

    Raises:
        ArgumentError: With an "expected ..., got ..." message naming the argument.
    """
    if not isinstance(arguments, Mapping):
        raise ArgumentError(f"tool {tool!r}: expected arguments as a JSON object, got {describe_value(arguments)}")
    properties: Mapping[str, Any] = parameters.get("properties", {})
    unknown = [k for k in arguments if k not in properties]
    if unknown and parameters.get("additionalProperties") is False:
        expected = ", ".join(properties) or "no arguments"
        raise ArgumentError(f"tool {tool!r}: unknown argument {unknown[0]!r}; expected: {expected}")
    missing = [k for k in parameters.get("required", ()) if k not in arguments]
    if missing:
        raise ArgumentError(f"tool {tool!r}: missing required argument {missing[0]!r}")
    return {key: _coerce(value, properties[key], f"tool {tool!r} argument {key!r}") if key in properties else value
            for key, value in arguments.items()}

