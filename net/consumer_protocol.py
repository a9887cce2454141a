"""The "consumer" embedded protocol: what members put in JoinGroup and SyncGroup.

Kafka's own format (ConsumerProtocolSubscription / ConsumerProtocolAssignment, an int16 version and then
the struct, read and written by kio's types generated from Kafka's schemas), so a group may mix Kafka
clients and ours: one kind of group in one coordinator. We write version 3; any version is read (a newer
one by its known prefix, as Kafka's own deserializer does). Kafka Lite 0.1 wrote msgpack maps; those are
still read, so groups stored before the upgrade keep their assignments.

In Kafka these bytes are opaque to the coordinator; the leader member computes the assignment. Kafka
Lite's coordinator also reads assignments, so it can refuse an offset commit for a partition the member
does not own (a clear error instead of a silent overwrite of another member's progress).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable

import msgpack

# kio (its serializer and these schemas) is imported on first use, not with this module: a broker imports this
# module at start and needs kio only when a group's member metadata is read or written (~10 ms of a restart).

PROTOCOL_TYPE = "consumer"
VERSION = 3
_VERSION = struct.Struct(">h")

TopicPartitions = frozenset[tuple[str, int]]


def _schema(kind: str, version: int) -> Any:
    """The kio struct of a consumer-protocol `kind` at `version` (a newer one: the newest we know)."""
    import importlib

    v = min(max(version, 0), VERSION)
    module = importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{v}.data")
    return getattr(module, f"ConsumerProtocol{kind.capitalize()}"), getattr(module, "TopicPartition", None)


def _write(version: int, entity: Any) -> bytes:
    from kio.serial import entity_writer

    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _read(kind: str, data: bytes) -> Any:
    if len(data) < 2:
        raise ValueError(f"consumer protocol {kind} of {len(data)} bytes: too short for a version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise ValueError(f"consumer protocol {kind} version {version}")
    from kio.serial import entity_reader

    cls, _ = _schema(kind, version)
    try:
        entity, _ = entity_reader(cls)(data, 2)
    except Exception as e:  # kio raises several types on truncated or malformed input
        raise ValueError(f"undecodable consumer protocol {kind}: {type(e).__name__}: {e}") from None
    return entity


def _is_legacy(data: bytes) -> bool:
    """Kafka Lite 0.1's msgpack maps start with a map header (0x80-0x8f, 0xde, 0xdf); Kafka's format with an
    int16 version (0x00 for every version there is)."""
    return bool(data) and (0x80 <= data[0] <= 0x8F or data[0] in (0xDE, 0xDF))


def _group(tps: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return list(by_topic.items())


def _ungroup(rows: object) -> TopicPartitions:
    out: set[tuple[str, int]] = set()
    if not isinstance(rows, (list, tuple)):
        raise ValueError("expected a list of [topic, [partitions]]")
    for row in rows:
        if not isinstance(row, (list, tuple)) or len(row) != 2 or not isinstance(row[0], str):
            raise ValueError("expected [topic, [partitions]]")
        for p in row[1]:
            if not isinstance(p, int):
                raise ValueError("partition numbers must be integers")
            out.add((row[0], p))
    return frozenset(out)


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    owned: TopicPartitions = field(default_factory=frozenset)
    user_data: bytes | None = None
    generation_id: int = -1
    rack_id: str | None = None

    def encode(self) -> bytes:
        from kio.static.primitive import i32

        subscription, tp = _schema("subscription", VERSION)
        return _write(
            VERSION,
            subscription(
                topics=tuple(self.topics),
                user_data=self.user_data,
                owned_partitions=tuple(tp(topic=t, partitions=tuple(ps)) for t, ps in _group(self.owned)),
                generation_id=i32(self.generation_id),
                rack_id=self.rack_id,
            ),
        )

    @classmethod
    def decode(cls, data: bytes) -> "Subscription":
        if _is_legacy(data):
            d = _map(data)
            topics = d.get("topics") or []
            if not isinstance(topics, (list, tuple)) or not all(isinstance(t, str) for t in topics):
                raise ValueError("subscription topics must be a list of names")
            return cls(tuple(topics), _ungroup(d.get("owned") or []), d.get("user_data"))
        e = _read("subscription", data)
        owned = getattr(e, "owned_partitions", ())
        return cls(
            tuple(e.topics),
            frozenset((t.topic, p) for t in owned for p in t.partitions),
            e.user_data,
            getattr(e, "generation_id", -1),
            getattr(e, "rack_id", None),
        )


@dataclass(frozen=True)
class Assignment:
    partitions: TopicPartitions
    user_data: bytes | None = None

    def encode(self) -> bytes:
        assignment, tp = _schema("assignment", VERSION)
        return _write(
            VERSION,
            assignment(
                assigned_partitions=tuple(tp(topic=t, partitions=tuple(ps)) for t, ps in _group(self.partitions)),
                user_data=self.user_data,
            ),
        )

    @classmethod
    def decode(cls, data: bytes) -> "Assignment":
        if not data:
            return cls(frozenset())
        if _is_legacy(data):
            d = _map(data)
            return cls(_ungroup(d.get("partitions") or []), d.get("user_data"))
        e = _read("assignment", data)
        return cls(frozenset((t.topic, p) for t in e.assigned_partitions for p in t.partitions), e.user_data)


def _map(data: bytes) -> dict[str, Any]:
    try:
        d = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise ValueError(f"undecodable consumer protocol data: {e}") from None
    if not isinstance(d, dict):
        raise ValueError("consumer protocol data must be a map")
    return d


def range_split(partitions: int, members: list[str]) -> Iterable[tuple[str, range]]:
    """Kafka's range assignment of one topic: consecutive ranges of its partitions to `members` in order, the
    first ones one more when they do not divide evenly (the client's RangeAssignor and the broker's `range`)."""
    per, extra = divmod(partitions, len(members)) if members else (0, 0)
    start = 0
    for i, m in enumerate(members):
        count = per + (1 if i < extra else 0)
        yield m, range(start, start + count)
        start += count
