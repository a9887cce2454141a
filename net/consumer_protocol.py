"""The "consumer" embedded protocol: what members put in JoinGroup and SyncGroup.

In Kafka these bytes are opaque to the coordinator; the leader member computes the assignment. Kafka
Lite's coordinator also reads assignments, so it can refuse an offset commit for a partition the member
does not own (a clear error instead of a silent overwrite of another member's progress).

Subscription: msgpack {"topics": [...], "owned": [[topic, [partition, ...]], ...], "user_data": bytes|None}
Assignment:   msgpack {"partitions": [[topic, [partition, ...]], ...], "user_data": bytes|None}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import msgpack

PROTOCOL_TYPE = "consumer"

TopicPartitions = frozenset[tuple[str, int]]


def _group(tps: Iterable[tuple[str, int]]) -> list[list]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return [[t, ps] for t, ps in by_topic.items()]


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

    def encode(self) -> bytes:
        return msgpack.packb(
            {"topics": list(self.topics), "owned": _group(self.owned), "user_data": self.user_data}, use_bin_type=True
        )

    @classmethod
    def decode(cls, data: bytes) -> "Subscription":
        d = _map(data)
        topics = d.get("topics") or []
        if not isinstance(topics, (list, tuple)) or not all(isinstance(t, str) for t in topics):
            raise ValueError("subscription topics must be a list of names")
        return cls(tuple(topics), _ungroup(d.get("owned") or []), d.get("user_data"))


@dataclass(frozen=True)
class Assignment:
    partitions: TopicPartitions
    user_data: bytes | None = None

    def encode(self) -> bytes:
        return msgpack.packb({"partitions": _group(self.partitions), "user_data": self.user_data}, use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes) -> "Assignment":
        if not data:
            return cls(frozenset())
        d = _map(data)
        return cls(_ungroup(d.get("partitions") or []), d.get("user_data"))


def _map(data: bytes) -> dict:
    try:
        d = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise ValueError(f"undecodable consumer protocol data: {e}") from None
    if not isinstance(d, dict):
        raise ValueError("consumer protocol data must be a map")
    return d
