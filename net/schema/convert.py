"""Between kio's per-version classes and the generated per-API classes of net/schema/.

The Kafka listener reads a request with kio's class for the client's version and hands the handler the API's
class (`from_kio`): every field that version carries, the others at their defaults. The handler's answer goes
back through `to_kio` into kio's class for that version, which writes it. Fields match by name, as Kafka's
generated code matches them by name across versions; values need no conversion (both sides hold the same
Python types), nested structs and arrays of them are converted field by field.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable
from functools import cache, partial
from typing import Any, TypeVar

from net.messages import unwrap_optional

__all__ = ["from_kio", "to_kio"]

T = TypeVar("T")

# Per target field: (name, the target's nested class if the field holds a struct or an array of structs, array?,
# a conversion of the value: kio's classes hold error codes as its ErrorCode enum, the generated ones as ints)
_Plan = tuple[tuple[str, type | None, bool, Any], ...]


def _struct_of(tp: Any) -> tuple[type | None, bool]:
    """(the dataclass a field holds, whether as an array), or (None, _) for a primitive."""
    tp, _ = unwrap_optional(tp)
    array = typing.get_origin(tp) is tuple
    if array:
        tp, _ = unwrap_optional(typing.get_args(tp)[0])
    return (tp if dataclasses.is_dataclass(tp) else None), array  # type: ignore[return-value]


@cache
def _plan(src: type, dst: type) -> _Plan:
    have = {f.name for f in dataclasses.fields(src)}
    hints = typing.get_type_hints(dst)
    plan = []
    for f in dataclasses.fields(dst):
        if f.name in have:
            nested, array = _struct_of(hints[f.name])
            is_code = f.metadata.get("kafka_type") == "error_code" and hints[f.name] is not int
            code_type = hints[f.name] if is_code else None
            plan.append((f.name, nested, array, code_type))
    return tuple(plan)


def _convert(value: Any, dst: type[T]) -> T:
    kwargs = {}
    src: type = type(value)
    target: type = dst  # (mypy holds type[T] unhashable for the cache)
    for name, nested, array, code_type in _plan(src, target):
        v = getattr(value, name)
        if code_type is not None:
            v = code_type(v)
        elif v is not None and nested is not None:
            v = tuple(_convert(x, nested) if x is not None else None for x in v) if array else _convert(v, nested)
        kwargs[name] = v
    return dst(**kwargs)


def from_kio(message: Any, cls: type[T]) -> T:
    """A kio message of any served version as the API's class (fields the version lacks take their defaults)."""
    return _convert(message, cls)


def to_kio(message: Any, kio_cls: type[T]) -> T:
    """The API's message as kio's class of one version (fields that version lacks are left out)."""
    return _convert(message, kio_cls)


# The fields that say which item a row answers (Kafka's `mapKey` fields): copied from the request's item into the
# error row. Other same-named fields mean something else in the answer (ListOffsets' `timestamp` is the target
# asked for in the request, the record's timestamp in the answer) and keep the answer's default.
_IDENTITY = frozenset(
    {
        "name", "topic", "topic_name", "topic_id", "partition_index", "partition", "partition_id", "group_id",
        "transactional_id", "resource_name", "resource_type", "key", "key_type", "member_id", "group_instance_id",
        "entity_type", "entity_name", "user", "index",
    }
)  # fmt: skip
# Answer arrays whose rows answer request arrays of other names (Kafka's getErrorResponse answers each item asked):
# the answer's field -> the request's fields, in order.
_ANSWERS = {
    "results": ("creations", "deletions", "upsertions"),
    "filter_results": ("filters",),
    "responses": ("topic_data",),  # Produce's topics
    "partition_responses": ("partition_data",),  # and their partitions
}
# The same, for one api's answer only (another api's answer of that field name answers something else): (the
# answer's class, its field) -> the request's fields. A request item that is a bare name (DeleteTopics'
# topic_names) is answered by a row of that name.
_ANSWERS_OF = {
    ("DeleteTopicsResponse", "responses"): ("topics", "topic_names"),
    ("CreatePartitionsResponse", "results"): ("topics",),
    ("DescribeConfigsResponse", "results"): ("resources",),
    ("AlterConfigsResponse", "responses"): ("resources",),
    ("IncrementalAlterConfigsResponse", "responses"): ("resources",),
    ("FetchResponse", "responses"): ("topics",),  # Fetch's topics (v4-12 name them)
    ("WritableTxnMarkerTopicResult", "partitions"): ("partition_indexes",),  # bare indexes in WriteTxnMarkers
}
# Identity fields of one api's answer rows only (elsewhere the same name is no identity: InitProducerId's answer
# gives -1, not the producer id asked for): (the answer row's class, its field).
_IDENTITY_OF = frozenset({("WritableTxnMarkerResult", "producer_id")})
# Answer arrays that describe the item rather than answer the request's array of that name (CreateTopics' configs
# of a created topic): left empty in an error row.
_DESCRIBING = frozenset({"configs"})
# Identity fields the answer's row names differently: the answer's field -> the request's.
_SAME_AS = {"user": "name", "partition_index": "partition"}  # Fetch's partitions
# Offsets an error row holds where Kafka's getErrorResponse says "none" (INVALID_OFFSET) rather than the field's
# zero: (the request row's class, the answer's field) -> the value.
_NONE_GIVEN = {("PartitionProduceData", "base_offset"): -1, ("FetchPartition", "high_watermark"): -1}


@cache
def _mirror_plan(src: type, dst: type) -> tuple[tuple[str, str, Any, tuple[str, ...]], ...]:
    """Per field of the response struct `dst`: ("error", name, enum or None, ()) for its error code and message,
    ("copy", name, None, (its request field,)) for an identity field the request struct `src` has too, ("set", name,
    value, ()) for an offset Kafka answers "none" in an error row (`_NONE_GIVEN`), ("each",
    name, nested, (request fields,)) for an array of structs answering the request's array(s) of structs (by the same
    name, or as `_ANSWERS` says)."""
    have = {f.name for f in dataclasses.fields(src)}
    hints = typing.get_type_hints(dst)
    plan: list[tuple[str, str, Any, tuple[str, ...]]] = []
    for f in dataclasses.fields(dst):
        nested, array = _struct_of(hints[f.name])
        own = _SAME_AS.get(f.name, f.name) if f.name not in have else f.name
        if f.name == "error_code":  # kio's classes hold its ErrorCode enum, the generated ones an int
            plan.append(("error", f.name, hints[f.name] if hints[f.name] is not int else None, ()))
        elif f.name == "error_message":
            plan.append(("error", f.name, None, ()))
        elif own in have and nested is None and (f.name in _IDENTITY or (dst.__name__, f.name) in _IDENTITY_OF):
            plan.append(("copy", f.name, None, (own,)))
        elif (src.__name__, f.name) in _NONE_GIVEN:
            plan.append(("set", f.name, _NONE_GIVEN[src.__name__, f.name], ()))
        elif nested is not None and array and f.name not in _DESCRIBING:
            answers = _ANSWERS_OF.get((dst.__name__, f.name)) or _ANSWERS.get(f.name, ())
            asked = (f.name,) if f.name in have else tuple(n for n in answers if n in have)
            if asked:
                plan.append(("each", f.name, nested, asked))
    return tuple(plan)


def _mirror(request: Any, dst: type[T], code: int, message: str | None) -> T:
    kwargs: dict[str, Any] = {}
    src: type = type(request)
    target: type = dst
    for kind, name, nested, asked in _mirror_plan(src, target):
        if kind == "error":
            kwargs[name] = (nested(code) if nested else code) if name == "error_code" else message
        elif kind == "copy":
            kwargs[name] = getattr(request, asked[0])
        elif kind == "set":
            kwargs[name] = nested
        else:
            items = [x for field in asked for x in getattr(request, field) or ()]
            # A bare name or partition index: a row of that name or index.
            rows = (_Named(x) if isinstance(x, str) else _Index(x) if isinstance(x, int) else x for x in items)
            kwargs[name] = tuple(_mirror(x, nested, code, message) for x in rows if dataclasses.is_dataclass(x))
    for name, zero in _zeros(target):  # kio's classes have fields without defaults: Kafka's zero values
        kwargs.setdefault(name, zero())
    return dst(**kwargs)


@dataclasses.dataclass(frozen=True)
class _Named:
    """A request item that is a bare name (DeleteTopics' topic_names), as a struct with that name."""

    name: str


@dataclasses.dataclass(frozen=True)
class _Index:
    """A request item that is a bare partition index (WriteTxnMarkers' partition_indexes), as a struct with it."""

    partition_index: int


@cache
def _zeros(cls: type) -> tuple[tuple[str, Callable[[], Any]], ...]:
    """(name, a maker of its zero value) for the fields of `cls` without a default."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, Callable[[], Any]]] = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        tp = hints[f.name]
        nested, array = _struct_of(tp)
        if unwrap_optional(tp)[1]:
            out.append((f.name, _none))
        elif array:
            out.append((f.name, tuple))
        elif nested is not None:
            out.append((f.name, partial(_zero_struct, nested)))
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            out.append((f.name, partial(tp, 0)))
        else:
            # kio on first use: a broker imports this module at start, and kio only for its Kafka listener.
            from kio.serial._implicit_defaults import get_implicit_default

            out.append((f.name, partial(get_implicit_default, tp)))
    return tuple(out)


def _none() -> None:
    return None


def _zero_struct(cls: Any) -> Any:
    return cls(**{name: zero() for name, zero in _zeros(cls)})


def error_response(request: Any, response_cls: type[T], code: int, message: str | None = None) -> T:
    """The answer to a request that failed as a whole (Kafka's `getErrorResponse`): the request's items (topics,
    partitions, groups...) mirrored into the response by field name, with `code` in every error code and
    `message` in every error message the response has."""
    return _mirror(request, response_cls, int(code), message)
