"""Between kio's per-version classes and the generated per-API classes of net/schema/.

The Kafka listener reads a request with kio's class for the client's version and hands the handler the API's
class (`from_kio`): every field that version carries, the others at their defaults. The handler's answer goes
back through `to_kio` into kio's class for that version, which writes it. Fields match by name, as Kafka's
generated code matches them by name across versions; values need no conversion (both sides hold the same
Python types), nested structs and arrays of them are converted field by field.
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cache
from types import NoneType, UnionType
from typing import Any, TypeVar

__all__ = ["from_kio", "to_kio"]

T = TypeVar("T")

# Per target field: (name, the target's nested class if the field holds a struct or an array of structs, array?)
_Plan = tuple[tuple[str, type | None, bool], ...]


def _struct_of(tp: Any) -> tuple[type | None, bool]:
    """(the dataclass a field holds, whether as an array), or (None, _) for a primitive."""
    if typing.get_origin(tp) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        tp = args[0] if len(args) == 1 else tp
    array = typing.get_origin(tp) is tuple
    if array:
        tp = typing.get_args(tp)[0]
        if typing.get_origin(tp) in (typing.Union, UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not NoneType)
    return (tp if dataclasses.is_dataclass(tp) else None), array  # type: ignore[return-value]


@cache
def _plan(src: type, dst: type) -> _Plan:
    have = {f.name for f in dataclasses.fields(src)}
    hints = typing.get_type_hints(dst)
    plan = []
    for f in dataclasses.fields(dst):
        if f.name in have:
            nested, array = _struct_of(hints[f.name])
            plan.append((f.name, nested, array))
    return tuple(plan)


def _convert(value: Any, dst: type[T]) -> T:
    kwargs = {}
    for name, nested, array in _plan(type(value), dst):
        v = getattr(value, name)
        if v is not None and nested is not None:
            v = tuple(_convert(x, nested) if x is not None else None for x in v) if array else _convert(v, nested)
        kwargs[name] = v
    return dst(**kwargs)


def from_kio(message: Any, cls: type[T]) -> T:
    """A kio message of any served version as the API's class (fields the version lacks take their defaults)."""
    return _convert(message, cls)


def to_kio(message: Any, kio_cls: type[T]) -> T:
    """The API's message as kio's class of one version (fields that version lacks are left out)."""
    return _convert(message, kio_cls)
