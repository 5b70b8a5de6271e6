"""Type hints of tool functions: thread-safe resolution, and the one rewrite pydantic needs.

:func:`resolve_type_hints` and :func:`class_hints` resolve annotations under one
lock (CPython 3.11 can fail with ``SystemError`` when several threads compile at
once, and envs are built in worker threads by rollouts).

:func:`pydantic_ready` rewrites an annotation for pydantic: before Python 3.12
pydantic refuses ``typing.TypedDict`` (it wants ``typing_extensions.TypedDict``),
so every ``typing.TypedDict`` in the annotation (at any depth of ``list[...]``,
``X | None``, ``dict[str, ...]``, ``Annotated[...]`` or another TypedDict's fields)
is replaced by an equivalent ``typing_extensions.TypedDict``: same name, fields,
required and optional keys. Values validated against it are plain dicts, as before.
"""

from __future__ import annotations

import sys
import threading
import types
import typing
import weakref
from collections.abc import Callable
from typing import Any

import typing_extensions

__all__ = ["class_hints", "is_typeddict", "pydantic_ready", "resolve_type_hints", "typeddict_required_keys"]

_HINTS_LOCK = threading.RLock()
_NEEDS_REWRITE = sys.version_info < (3, 12)
_CLONES: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()
_CLONES_LOCK = threading.RLock()


def resolve_type_hints(func: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations of ``func``, or ``{}`` when a forward reference cannot be resolved."""
    with _HINTS_LOCK:
        try:
            return typing.get_type_hints(func)
        except (NameError, TypeError, AttributeError):
            return {}


def class_hints(cls: type, *, include_extras: bool = False) -> dict[str, Any]:
    """Resolved annotations of a class (its raw ``__annotations__`` when they cannot be resolved)."""
    with _HINTS_LOCK:
        try:
            return typing.get_type_hints(cls, include_extras=include_extras)
        except (NameError, TypeError, AttributeError):
            return dict(getattr(cls, "__annotations__", {}))


def is_typeddict(cls: Any) -> bool:
    """True for a TypedDict class made with ``typing`` or ``typing_extensions``."""
    return typing.is_typeddict(cls) or typing_extensions.is_typeddict(cls)


def _is_typing_typeddict(cls: Any) -> bool:
    return isinstance(cls, type) and type(cls).__module__ == "typing" and typing.is_typeddict(cls)


def pydantic_ready(annotation: Any) -> Any:
    """``annotation`` with every ``typing.TypedDict`` replaced by a ``typing_extensions`` twin.

    Returns ``annotation`` itself when nothing needs replacing (always from Python 3.12 on).

    Raises:
        TypeError: For a generic or self-referencing ``typing.TypedDict`` (use
            ``typing_extensions.TypedDict`` for those).
    """
    if not _NEEDS_REWRITE:
        return annotation
    with _CLONES_LOCK:
        return _rewrite(annotation, ())


def _rewrite(annotation: Any, active: tuple[type, ...]) -> Any:
    if isinstance(annotation, type):
        return _rewrite_class(annotation, active) if is_typeddict(annotation) else annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is None or not args or origin is typing.Literal:
        return annotation
    if origin is typing.Annotated:
        inner = _rewrite(args[0], active)
        if inner is args[0]:
            return annotation
        rebuilt = (inner, *annotation.__metadata__)
        return typing.Annotated[rebuilt]
    new_args = tuple(_rewrite(a, active) for a in args)
    if all(new is old for new, old in zip(new_args, args, strict=True)):
        return annotation
    if origin is typing.Union or origin is types.UnionType:
        return typing.Union[new_args]  # noqa: UP007 - rebuilt from its members
    if _is_required_marker(origin):
        return origin[new_args[0]]
    return origin[new_args if len(new_args) > 1 else new_args[0]]


_REQUIRED = frozenset([typing_extensions.Required, *([typing.Required] if hasattr(typing, "Required") else [])])
_NOT_REQUIRED = frozenset(
    [typing_extensions.NotRequired, *([typing.NotRequired] if hasattr(typing, "NotRequired") else [])]
)


def _is_required_marker(origin: Any) -> bool:
    return origin in _REQUIRED or origin in _NOT_REQUIRED


def typeddict_required_keys(cls: type) -> frozenset[str]:
    """The keys a TypedDict requires.

    An explicit ``Required[...]`` / ``NotRequired[...]`` on a field wins over the
    class's ``__required_keys__`` (``typing.TypedDict`` before Python 3.13 does not
    see the ``typing_extensions`` spellings of those markers).
    """
    hints = class_hints(cls, include_extras=True)
    required = set(getattr(cls, "__required_keys__", hints))
    for name, hint in hints.items():
        origin = typing.get_origin(hint)
        if origin in _REQUIRED:
            required.add(name)
        elif origin in _NOT_REQUIRED:
            required.discard(name)
    return frozenset(required)


def _rewrite_class(cls: type, active: tuple[type, ...]) -> type:
    """The TypedDict ``cls`` itself, or its ``typing_extensions`` twin when it (or a field) needs one."""
    known = _CLONES.get(cls)
    if known is not None:
        return known
    if cls in active:
        raise TypeError(f"expected a TypedDict that does not contain itself, got {cls!r} "
                        "(declare it with typing_extensions.TypedDict)")
    if getattr(cls, "__parameters__", ()):
        raise TypeError(f"expected a non-generic typing.TypedDict, got {cls!r} "
                        "(declare it with typing_extensions.TypedDict)")
    hints = class_hints(cls, include_extras=True)
    fields = {name: _rewrite(hint, (*active, cls)) for name, hint in hints.items()}
    if not _is_typing_typeddict(cls) and all(fields[n] is hints[n] for n in hints):
        return cls
    required = typeddict_required_keys(cls)
    marked = {}
    for name, hint in fields.items():
        bare = typing.get_args(hint)[0] if _is_required_marker(typing.get_origin(hint)) else hint
        marker = typing_extensions.Required if name in required else typing_extensions.NotRequired
        marked[name] = marker[bare]
    # A TypedDict made at run time from another class's fields: mypy only reads literal definitions.
    twin = typing_extensions.TypedDict(cls.__name__, marked)  # type: ignore[misc]
    twin.__module__ = cls.__module__
    twin.__qualname__ = cls.__qualname__
    twin.__doc__ = cls.__doc__
    _CLONES[cls] = twin
    return twin
