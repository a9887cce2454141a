"""Records of the internal topic `__share_group_state` (Kafka's ShareSnapshot, in msgpack as the other internal
topics here, broker/group/records.py).

Key ["s", group, topic id (hex), partition] -> {"snapshot_epoch", "state_epoch", "leader_epoch", "start_offset",
"batches": [[first offset, last offset, delivery state, delivery count], ...], "write_ts"}: a share-partition's
whole durable state (Kafka's ShareSnapshotValue). Every write is a snapshot (Kafka also writes ShareUpdate
deltas between snapshots; one snapshot per write keeps recovery a matter of the latest record per key, and the
topic compactable). A None value is a tombstone (the group's state deleted).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import msgpack

from broker.share.partition import StateBatch
from net import batch as batch_fmt

SHARE_STATE_TOPIC = "__share_group_state"

StateKey = tuple[str, str, int]  # group id, topic id (hex), partition: Kafka's SharePartitionKey


def partition_for(key: StateKey, num_partitions: int) -> int:
    """The __share_group_state partition (and so the share coordinator) of a share-partition, from Kafka's key
    string "group:topicId:partition"; crc32 is stable across processes, unlike hash()."""
    group, topic_id, partition = key
    return zlib.crc32(f"{group}:{topic_id}:{partition}".encode()) % num_partitions


@dataclass(slots=True)
class ShareSnapshot:
    state_epoch: int
    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)
    leader_epoch: int = -1
    snapshot_epoch: int = 0
    write_ts: int = 0

    def to_value(self) -> dict[str, Any]:
        return {
            "snapshot_epoch": self.snapshot_epoch,
            "state_epoch": self.state_epoch,
            "leader_epoch": self.leader_epoch,
            "start_offset": self.start_offset,
            "batches": [[b.first_offset, b.last_offset, b.delivery_state, b.delivery_count] for b in self.batches],
            "write_ts": self.write_ts,
        }

    @classmethod
    def from_value(cls, v: dict[str, Any]) -> "ShareSnapshot":
        return cls(
            int(v["state_epoch"]),
            int(v["start_offset"]),
            [StateBatch(int(b[0]), int(b[1]), int(b[2]), int(b[3])) for b in v.get("batches") or []],
            int(v.get("leader_epoch", -1)),
            int(v.get("snapshot_epoch", 0)),
            int(v.get("write_ts", 0)),
        )


def encode_key(key: StateKey) -> bytes:
    return msgpack.packb(["s", *key])


def decode_key(data: bytes) -> StateKey | None:
    """None for a key this version does not know (skipped on load)."""
    try:
        k = msgpack.unpackb(data, raw=False)
    except Exception:
        return None
    if isinstance(k, list) and len(k) == 4 and k[0] == "s":
        return (str(k[1]), str(k[2]), int(k[3]))
    return None


def build_batch(key: StateKey, snapshot: ShareSnapshot | None, now_ms: int) -> bytes:
    value = None if snapshot is None else msgpack.packb(snapshot.to_value(), use_bin_type=True)
    return batch_fmt.build([[0, 0, encode_key(key), value, None]], now_ms, now_ms)


def read_records(data: bytes) -> Iterator[tuple[StateKey, ShareSnapshot | None]]:
    """(key, snapshot or None for a tombstone) of every known record in raw log bytes, in log order."""
    for pos, h in batch_fmt.iter_batches(data):
        if h.is_control:
            continue
        for _delta, _ts, key, value, _headers in batch_fmt.records_of(data, pos, h):
            k = decode_key(key) if isinstance(key, bytes) else None
            if k is None:
                continue
            if value is None:
                yield k, None
                continue
            v = msgpack.unpackb(value, raw=False)
            if isinstance(v, dict):
                yield k, ShareSnapshot.from_value(v)
