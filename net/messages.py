"""Typed protocol messages as msgpack arrays: the native protocol's codec for typed requests and responses.

A message is a frozen dataclass declared as kio declares Kafka's (one class per API, kind and version, fields in
Kafka's schema order, each primitive field's wire type in `field(metadata={"kafka_type": ...})`). Kafka's APIs
use kio's generated classes themselves; Kafka Lite's own APIs declare theirs the same way. Both listeners then
hand a handler the same object: the Kafka codec reads it from Kafka's binary layout (kio), this one from a
msgpack array holding the fields in schema order (nested structs as arrays, arrays as lists).

Decoding checks every field against its schema type before any handler sees it: integer widths (int8, int16,
int32, int64, uint16, from net/wire_types.py), bool, float64 (finite), string, bytes, uuid (16 bytes), nullability,
and the array's arity. A value outside its type raises `MessageError` naming the field's path, which the
listener answers as INVALID_REQUEST.

Encoding is the inverse; timedeltas and timestamps travel as int milliseconds, error codes as ints, UUIDs as
16 bytes, as Kafka's binary layout carries them.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import typing
import uuid
from collections.abc import Callable
from functools import cache
from types import NoneType, UnionType
from typing import Any, TypeVar

from net.wire_types import INT16, INT32, INT64, IntType, WireRangeError

__all__ = ["MessageError", "decode", "encode", "fields_plan", "unwrap_optional"]

T = TypeVar("T")

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_INT8 = IntType("int8", -(2**7), 2**7 - 1)
_UINT16 = IntType("uint16", 0, 2**16 - 1)
_INTS = {"int8": _INT8, "int16": INT16, "int32": INT32, "int64": INT64, "uint16": _UINT16}


class MessageError(WireRangeError):
    """A message read off the wire does not match its schema: refused before any handler sees it."""


# One field's (encode, decode) pair: encode takes the attribute value, decode the msgpack value and the path.
Encoder = Callable[[Any], Any]
Decoder = Callable[[Any, str], Any]


def unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """(T, True) for a field annotated `T | None`, else (the annotation, False)."""
    if typing.get_origin(tp) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _nullable(decode: Decoder, nullable: bool) -> Decoder:
    def check(v: Any, path: str) -> Any:
        if v is None:
            if nullable:
                return None
            raise MessageError(f"{path} may not be null")
        return decode(v, path)

    return check


def _int_decoder(wire: IntType, py: type) -> Decoder:
    def dec(v: Any, path: str) -> Any:
        try:
            n = wire.check(v, path)
        except WireRangeError as e:
            raise MessageError(str(e)) from None
        if issubclass(py, enum.Enum):
            try:
                return py(n)
            except ValueError:
                raise MessageError(f"{path} {n} is not a known {py.__name__}") from None
        return n

    return dec


def _millis_decoder(wire: IntType, py: type) -> Decoder:
    """timedelta and timestamp fields: kio gives int32/int64 milliseconds these Python types."""
    ints = _int_decoder(wire, int)

    def dec(v: Any, path: str) -> Any:
        ms = ints(v, path)
        if issubclass(py, datetime.datetime):
            if ms < 0:
                raise MessageError(f"{path} {ms} is not a timestamp (milliseconds since the epoch)")
            return _EPOCH + datetime.timedelta(milliseconds=ms)
        return datetime.timedelta(milliseconds=ms)

    return dec


_MILLI = datetime.timedelta(milliseconds=1)


def _encode_millis(v: Any) -> Any:
    if isinstance(v, datetime.datetime):
        return (v - _EPOCH) // _MILLI
    if isinstance(v, datetime.timedelta):
        return v // _MILLI
    return v


def _encode_enum(v: Any) -> Any:
    return int(v.value) if isinstance(v, enum.Enum) else v


def _dec_bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise MessageError(f"{path} must be a boolean")
    return v


def _dec_float(v: Any, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise MessageError(f"{path} must be a finite float64")
    return float(v)


def _dec_str(v: Any, path: str) -> str:
    if not isinstance(v, str):
        raise MessageError(f"{path} must be a string")
    return v


def _dec_bytes(v: Any, path: str) -> bytes:
    if not isinstance(v, bytes):
        raise MessageError(f"{path} must be bytes")
    return v


def _dec_uuid(v: Any, path: str) -> uuid.UUID:
    if not isinstance(v, bytes) or len(v) != 16:
        raise MessageError(f"{path} must be a 16-byte uuid")
    return uuid.UUID(bytes=v)


def _enc_uuid(v: Any) -> Any:
    return v.bytes if isinstance(v, uuid.UUID) else v


def _identity(v: Any) -> Any:
    return v


# kio's kafka_type names for integers that Python holds as another type: (wire width, Python type).
_TYPED_INTS: dict[str, tuple[IntType, type]] = {
    "timedelta_i32": (INT32, datetime.timedelta),
    "timedelta_i64": (INT64, datetime.timedelta),
    "datetime_i64": (INT64, datetime.datetime),
}


def _primitive(kafka_type: str, py: type, where: str) -> tuple[Encoder, Decoder]:
    if kafka_type in _TYPED_INTS:
        wire, kind = _TYPED_INTS[kafka_type]
        return _encode_millis, _millis_decoder(wire, kind)
    if kafka_type == "error_code":
        return _encode_enum, _int_decoder(INT16, py)
    if kafka_type in _INTS:
        return _identity, _int_decoder(_INTS[kafka_type], int)
    simple: dict[str, tuple[Encoder, Decoder]] = {
        "bool": (_identity, _dec_bool),
        "float64": (_identity, _dec_float),
        "string": (_identity, _dec_str),
        "bytes": (_identity, _dec_bytes),
        "records": (_identity, _dec_bytes),
        "uuid": (_enc_uuid, _dec_uuid),
    }
    if kafka_type not in simple:
        raise TypeError(f"{where}: unknown kafka_type {kafka_type!r}")
    return simple[kafka_type]


def _skip_none(enc: Encoder) -> Encoder:
    return lambda v: None if v is None else enc(v)


def _array(item: tuple[Encoder, Decoder]) -> tuple[Encoder, Decoder]:
    enc_item, dec_item = item

    def enc(v: Any) -> Any:
        return [enc_item(x) for x in v]

    def dec(v: Any, path: str) -> Any:
        if not isinstance(v, list):
            raise MessageError(f"{path} must be an array")
        return tuple(dec_item(x, f"{path}[{i}]") for i, x in enumerate(v))

    return enc, dec


def _entity(cls: type) -> tuple[Encoder, Decoder]:
    return (lambda v: _encode_slowly(v)), (lambda v, path: _decode(cls, v, path))


@cache
def fields_plan(cls: type) -> tuple[tuple[str, Encoder, Decoder], ...]:
    """Per field of a message class, in schema order: (name, encode, decode)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a message class")
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        tp, nullable = unwrap_optional(hints[f.name])
        where = f"{cls.__name__}.{f.name}"
        if typing.get_origin(tp) is tuple:
            item, item_nullable = unwrap_optional(typing.get_args(tp)[0])
            if isinstance(item, type) and dataclasses.is_dataclass(item):
                enc_item, dec_item = _entity(item)
            else:
                enc_item, dec_item = _primitive(f.metadata["kafka_type"], item, where)
            codec = _array((_skip_none(enc_item), _nullable(dec_item, item_nullable)))
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            codec = _entity(tp)
        else:
            codec = _primitive(f.metadata["kafka_type"], tp, where)
        enc, dec = codec
        plan.append((f.name, enc, _nullable(dec, nullable)))
    return tuple(plan)


def encode(message: Any) -> list[Any]:
    """A message as a msgpack-ready array of its fields in schema order."""
    cls: type = type(message)  # (mypy holds type[Any] unhashable for the cache)
    return _fast_encoder(cls)(message)


def _encode_slowly(message: Any) -> list[Any]:
    """`encode` field by field through `fields_plan`: what the compiled encoder must give (tests compare them)."""
    out = []
    cls: type = type(message)
    for name, enc, _ in fields_plan(cls):
        v = getattr(message, name)
        out.append(None if v is None else enc(v))
    return out


def _decode(cls: type[T], value: Any, path: str) -> T:
    key: type = cls  # (mypy holds type[T] unhashable for the cache)
    plan = fields_plan(key)
    if not isinstance(value, list):
        raise MessageError(f"{path or cls.__name__} must be an array of {len(plan)} fields")
    if len(value) != len(plan):
        raise MessageError(f"{path or cls.__name__} has {len(value)} fields, {cls.__name__} has {len(plan)}")
    prefix = f"{path}." if path else ""
    return cls(**{name: dec(v, prefix + name) for (name, _, dec), v in zip(plan, value)})


def decode(cls: type[T], value: Any) -> T:
    """The `cls` message from its msgpack array, every field checked against its schema type."""
    key: type = cls
    try:
        return _fast_decoder(key)(value)  # type: ignore[no-any-return]  # compiled for cls: returns a cls
    except (_Refused, MessageError):
        return _decode(cls, value, "")  # the same checks again, slowly, to name the field that failed them


# --- the fast path ---------------------------------------------------------------------------------------------
# The decoders above build a path string for every value, so that an error names its field; on the produce and
# fetch paths that cost more than the rest of the decode. Each class also gets one compiled function that makes
# the same checks inline and, on any failure, gives up; `decode` then runs the slow path for the error message.


class _Refused(Exception):
    """The fast path met something it does not accept: the slow path decides, and names it."""


def _fast_check(kafka_type: str | None, var: str) -> str:
    """The condition under which `var` is refused, for the types checked inline ("" for none)."""
    if kafka_type in _INTS:
        wire = _INTS[kafka_type]
        return f"{var}.__class__ is not int or not {wire.lo} <= {var} <= {wire.hi}"
    py = {"bool": "bool", "string": "str", "bytes": "bytes", "records": "bytes"}.get(kafka_type or "")
    return f"{var}.__class__ is not {py}" if py else ""


@cache
def _fast_decoder(cls: type) -> Callable[[Any], Any]:
    hints = typing.get_type_hints(cls)
    env: dict[str, Any] = {"cls": cls, "Refused": _Refused}
    fields = dataclasses.fields(cls)
    lines = ["def fast(v):", f"    if v.__class__ is not list or len(v) != {len(fields)}:", "        raise Refused"]
    names = [f"x{i}" for i in range(len(fields))]
    if names:
        lines.append(f"    {', '.join(names)}, = v")
    for i, f in enumerate(fields):
        tp, nullable = unwrap_optional(hints[f.name])
        array = typing.get_origin(tp) is tuple
        item_nullable = False
        if array:
            tp, item_nullable = unwrap_optional(typing.get_args(tp)[0])
        body = _fast_field(f, tp, array, item_nullable, names[i], env, f"f{i}")
        if nullable:
            lines.append(f"    if {names[i]} is not None:")
            lines.extend("    " + line for line in body)
        elif body and body[0].startswith(f"    if {names[i]}.__class__ is not "):
            lines += body  # None fails the class check already
        else:
            lines += [f"    if {names[i]} is None:", "        raise Refused", *body]
    if cls.__dataclass_params__.frozen or "__post_init__" in vars(cls):  # type: ignore[attr-defined]
        lines.append(f"    return cls({', '.join(f'{f.name}={names[i]}' for i, f in enumerate(fields))})")
    else:  # net/schema's classes: their __init__ only assigns; slot by slot is half the cost of its keywords
        env["new"] = object.__new__
        lines.append("    o = new(cls)")
        lines += [f"    o.{f.name} = {names[i]}" for i, f in enumerate(fields)]
        lines.append("    return o")
    exec("\n".join(lines), env)  # noqa: S102  (source built from the class's own fields, nothing from the wire)
    return env["fast"]  # type: ignore[no-any-return]


def _fast_field(
    f: dataclasses.Field[Any], tp: Any, array: bool, item_nullable: bool, x: str, env: dict[str, Any], fn: str
) -> list[str]:
    """Body lines that check field value `x` and rebind it to the decoded value."""
    kafka_type: str | None = None
    convert: str | None = None  # a call that checks and converts one value `{}`, for nested and converted types
    if dataclasses.is_dataclass(tp):
        env[fn] = _fast_decoder(tp)  # type: ignore[arg-type]
        convert = fn + "({})"
    elif f.metadata["kafka_type"] in _TYPED_INTS and not array:
        # Durations and timestamps (every produce and fetch carries one): the int checked inline, then converted.
        wire, kind = _TYPED_INTS[f.metadata["kafka_type"]]
        env["TD"], env["EPOCH"] = datetime.timedelta, _EPOCH
        floor = 0 if kind is datetime.datetime else wire.lo  # a timestamp before the epoch is refused
        out = [f"    if {x}.__class__ is not int or not {floor} <= {x} <= {wire.hi}:", "        raise Refused"]
        made = f"TD(milliseconds={x})"
        return [*out, f"    {x} = {'EPOCH + ' + made if kind is datetime.datetime else made}"]
    else:
        kafka_type = f.metadata["kafka_type"]
        if kafka_type == "error_code" and tp is int:  # a plain int16 (not an enum): checked inline, no call
            kafka_type = "int16"
        if not _fast_check(kafka_type, "_"):  # uuid, enums, floats: their own decoder checks and converts
            env[fn] = _primitive(kafka_type, tp, f.name)[1]
            convert = fn + "({}, '')"
            kafka_type = None
    if not array:
        out = []
        if check := _fast_check(kafka_type, x):
            out += [f"    if {check}:", "        raise Refused"]
        if convert:
            out.append(f"    {x} = {convert.format(x)}")
        return out
    out = [f"    if {x}.__class__ is not list:", "        raise Refused"]
    refuse = _fast_check(kafka_type, "e")
    if item_nullable and refuse:
        refuse = f"e is not None and ({refuse})"
    elif not item_nullable and not refuse:  # a class check refuses None already
        refuse = "e is None"
    if refuse:
        out += [f"    for e in {x}:", f"        if {refuse}:", "            raise Refused"]
    if convert is None:
        out.append(f"    {x} = tuple({x})")
    elif item_nullable:
        out.append(f"    {x} = tuple([None if e is None else {convert.format('e')} for e in {x}])")
    else:
        out.append(f"    {x} = tuple([{convert.format('e')} for e in {x}])")
    return out


# The encoder's fast path: one compiled function per class, as the decoder's. The generic `_encode_slowly` calls a
# closure per field and per array item; a Metadata answer of 80 partitions cost the broker more to encode that way
# than to build.
_IDENTITY_TYPES = frozenset({*_INTS, "bool", "float64", "string", "bytes", "records"})


@cache
def _fast_encoder(cls: type) -> Callable[[Any], list[Any]]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a message class")
    hints = typing.get_type_hints(cls)
    env: dict[str, Any] = {}
    items = []
    for i, f in enumerate(dataclasses.fields(cls)):
        tp, _ = unwrap_optional(hints[f.name])
        array = typing.get_origin(tp) is tuple
        if array:
            tp, _ = unwrap_optional(typing.get_args(tp)[0])
        x, fn = f"m.{f.name}", f"f{i}"
        if dataclasses.is_dataclass(tp):
            env[fn] = _fast_encoder(tp)  # type: ignore[arg-type]
            one = fn + "({})"
        elif f.metadata["kafka_type"] in _IDENTITY_TYPES:
            one = ""  # msgpack takes the value as it is
        elif f.metadata["kafka_type"] == "error_code":  # an int as it is, an ErrorCode member by its value
            env[fn] = _encode_enum
            one = f"({{0}} if {{0}}.__class__ is int else {fn}({{0}}))"
        elif f.metadata["kafka_type"] in _TYPED_INTS and _TYPED_INTS[f.metadata["kafka_type"]][1] is datetime.timedelta:
            # A duration (every fetch and produce carries one, and their answers): its milliseconds inline.
            env[fn], env["TD"], env["MILLI"] = _encode_millis, datetime.timedelta, _MILLI
            one = f"({{0}} // MILLI if {{0}}.__class__ is TD else {fn}({{0}}))"
        else:
            env[fn] = _primitive(f.metadata["kafka_type"], tp, f.name)[0]
            one = fn + "({})"
        if not array:
            items.append(f"None if {x} is None else {one.format(x)}" if one else x)
        elif not one:
            items.append(f"None if {x} is None else list({x})")
        else:
            items.append(f"None if {x} is None else [None if e is None else {one.format('e')} for e in {x}]")
    source = "def fast(m):\n    return [" + ", ".join(items) + "]"
    exec(source, env)  # noqa: S102  (source built from the class's own fields, nothing from the wire)
    return env["fast"]  # type: ignore[no-any-return]
