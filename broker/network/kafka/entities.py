"""Between kio's generated message classes and plain data.

Adapters speak one version-independent form: a response is a dict of field name -> value (nested
structs as dicts, arrays as lists), holding the union of the fields of every version; `build` makes
the entity of one version from it, taking the fields that version has and defaulting the rest, and
converting plain ints to the types kio writes (timedeltas, error codes, UUIDs). `plain` goes the other
way for requests."""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from functools import cache
from typing import Any, Callable, cast

from kio.schema.errors import ErrorCode as KioErrorCode

from net.messages import unwrap_optional

_ZERO_UUID = uuid.UUID(int=0)

# One converter per (entity class, field): value -> what kio's writer takes.
Converter = Callable[[Any], Any]


def _converter(tp: Any) -> tuple[Converter, Any]:
    """(convert, zero value) for a field's declared type."""
    tp, optional = unwrap_optional(tp)
    if typing.get_origin(tp) is tuple:
        (item,) = typing.get_args(tp)[:1]
        if dataclasses.is_dataclass(item):
            return (lambda v, c=item: tuple(build(c, x) for x in v)), ()
        conv, _ = _converter(item)
        return (lambda v, c=conv: tuple(c(x) for x in v)), ()
    if dataclasses.is_dataclass(tp):
        entity = cast(type, tp)  # a field's declared type: the dataclass itself, never an instance
        return (lambda v, c=entity: build(c, v)), (None if optional else build(entity, {}))
    if isinstance(tp, type) and issubclass(tp, datetime.timedelta):
        return (lambda v: v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)), (
            datetime.timedelta(0)
        )
    if tp is KioErrorCode:
        return (lambda v: v if isinstance(v, KioErrorCode) else KioErrorCode(int(v))), KioErrorCode.none
    if tp is uuid.UUID:
        return (lambda v: v if isinstance(v, uuid.UUID) or v is None else uuid.UUID(str(v))), (
            None if optional else _ZERO_UUID
        )
    if isinstance(tp, type) and issubclass(tp, bool):
        return bool, False
    if isinstance(tp, type) and issubclass(tp, int):
        return int, 0
    if isinstance(tp, type) and issubclass(tp, str):
        return (lambda v: v), (None if optional else "")
    if isinstance(tp, type) and issubclass(tp, bytes):
        return (lambda v: v), (None if optional else b"")
    return (lambda v: v), None


@cache
def _plan(cls: type) -> list[tuple[str, Converter, bool, Any]]:
    """Per field of `cls`: (name, convert, has a default, zero)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        conv, zero = _converter(hints[f.name])
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        out.append((f.name, conv, has_default, zero))
    return out


def build(cls: type, data: dict[str, Any]) -> Any:
    """The `cls` entity from a dict of plain values (missing fields: the schema's default, else zero)."""
    kwargs = {}
    for name, conv, has_default, zero in _plan(cls):
        v = data.get(name, dataclasses.MISSING)
        if v is dataclasses.MISSING or v is None and zero is not None and not has_default:
            if has_default:
                continue
            kwargs[name] = zero
        elif v is None:
            kwargs[name] = None
        else:
            kwargs[name] = conv(v)
    return cls(**kwargs)


def plain(value: Any) -> Any:
    """A request entity as plain data: dicts, lists, ints (timedeltas as ms, error codes as ints)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, KioErrorCode):
        return int(value.value)
    return value


@cache
def _required(cls: type) -> frozenset[str]:
    """The fields of `cls` the schema does not declare nullable in this version."""
    hints = typing.get_type_hints(cls)
    return frozenset(f.name for f in dataclasses.fields(cls) if not unwrap_optional(hints[f.name])[1])


def null_field(value: Any, path: str = "") -> str | None:
    """The path of the first field of a decoded request that is null where its version's schema says it may
    not be (kio reads a -1 length as None whatever the schema says), or None. Kafka refuses such a request
    ("non-nullable field was serialized as null"); checked here, no adapter ever meets one."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        required = _required(type(value))
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if v is None:
                if f.name in required:
                    return path + f.name
            elif (found := null_field(v, f"{path}{f.name}.")) is not None:
                return found
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            if (found := null_field(v, f"{path[:-1]}[{i}].")) is not None:
                return found
    return None
