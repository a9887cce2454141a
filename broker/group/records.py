"""Records of the internal topic `__consumer_offsets` (Kafka's GroupMetadataManager formats, in msgpack).

Key ["o", group, topic, partition] -> {"offset", "metadata", "commit_ts"}: a committed offset.
Key ["g", group]                   -> the group's generation, protocol, leader and members.
Key [type, group(, member)]        -> a consumer group's (KIP-848) or share group's (KIP-932) state, one of
                                      Kafka's coordinator record types by its key version: 3 ConsumerGroupMetadata,
                                      5 ..MemberMetadata, 6 ..TargetAssignmentMetadata, 7 ..TargetAssignmentMember,
                                      8 ..CurrentMemberAssignment; 10 ShareGroupMemberMetadata, 11 ShareGroupMetadata,
                                      14 ShareGroupCurrentMemberAssignment, 15 ShareGroupStatePartitionMetadata;
                                      values carry Kafka's field names.
A None value is a tombstone: the offset or the group was deleted (or expired). The latest record per
key wins, which is what makes the topic compactable.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Iterator

import msgpack

from net import batch as batch_fmt


def partition_for(group_id: str, num_partitions: int) -> int:
    """The offsets partition (and so the coordinator) of a group. crc32 is stable across processes and
    platforms, unlike Python's salted hash()."""
    return zlib.crc32(group_id.encode()) % num_partitions


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A consumer group (KIP-848) or share group (KIP-932) record: Kafka's record type (its key version) and the
    member it is about. Both group types are kept by the same coordinator records, loaded by the same replay."""

    record_type: int
    group: str
    member: str | None = None


# Kafka's coordinator record types of a consumer group (the key versions of its CoordinatorRecord schemas).
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
# ... and of a share group (Kafka 4.1). Its target assignment records (12, 13) are not written: the simple share
# assignor's target of a member is what the member is assigned at once (nothing is revoked first, a partition is
# shared), so ShareGroupCurrentMemberAssignment holds it.
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15
SHARE_GROUP_TYPES = frozenset({10, 11, 14, 15})
_GROUP_RECORD_TYPES = frozenset({3, 5, 6, 7, 8}) | SHARE_GROUP_TYPES

Key = OffsetKey | GroupKey | ConsumerGroupKey


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetKey):
        return msgpack.packb(["o", key.group, key.topic, key.partition])
    if isinstance(key, ConsumerGroupKey):
        if key.member is None:
            return msgpack.packb([key.record_type, key.group])
        return msgpack.packb([key.record_type, key.group, key.member])
    return msgpack.packb(["g", key.group])


def decode_key(data: bytes) -> Key | None:
    """None for a key this version does not know (skipped on load, as Kafka skips unknown versions)."""
    try:
        k = msgpack.unpackb(data, raw=False)
    except Exception:
        return None
    if isinstance(k, list) and len(k) == 4 and k[0] == "o":
        return OffsetKey(k[1], k[2], k[3])
    if isinstance(k, list) and len(k) == 2 and k[0] == "g":
        return GroupKey(k[1])
    if isinstance(k, list) and len(k) in (2, 3) and k[0] in _GROUP_RECORD_TYPES and isinstance(k[1], str):
        return ConsumerGroupKey(k[0], k[1], k[2] if len(k) == 3 else None)
    return None


def encode_value(value: dict[str, Any] | None) -> bytes | None:
    return None if value is None else msgpack.packb(value, use_bin_type=True)


def decode_value(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    v = msgpack.unpackb(data, raw=False)
    return v if isinstance(v, dict) else None


def build_batch(records: list[tuple[Key, dict[str, Any] | None]], now_ms: int) -> bytes:
    """One batch for an atomic write: a commit's offsets, or a group's metadata, land together."""
    recs = [[i, 0, encode_key(k), encode_value(v), None] for i, (k, v) in enumerate(records)]
    return batch_fmt.build(recs, now_ms, now_ms)


def build_txn_batch(
    records: list[tuple[Key, dict[str, Any] | None]], now_ms: int, producer_id: int, producer_epoch: int
) -> bytes:
    """A TxnOffsetCommit's offsets: a transactional batch of the producer (no sequence, as Kafka writes it),
    visible once that producer's commit marker follows it on the partition."""
    recs = [[i, 0, encode_key(k), encode_value(v), None] for i, (k, v) in enumerate(records)]
    return batch_fmt.build(
        recs, now_ms, now_ms, producer_id=producer_id, producer_epoch=producer_epoch, transactional=True
    )


def read_log(data: bytes) -> Iterator[tuple[batch_fmt.BatchHeader, list[tuple[Key, dict[str, Any] | None]], Any]]:
    """(header, known records, transaction marker or None) of every batch in raw log bytes."""
    for pos, h in batch_fmt.iter_batches(data):
        if h.is_control:
            yield h, [], batch_fmt.control_record(data, pos, h)
            continue
        recs = []
        for _delta, _ts, key, value, _headers in batch_fmt.records_of(data, pos, h):
            k = decode_key(key) if isinstance(key, bytes) else None
            if k is not None:
                recs.append((k, decode_value(value)))
        yield h, recs, None


def read_records(data: bytes) -> Iterator[tuple[int, Key, dict[str, Any] | None]]:
    """(offset, key, value) of every known record in raw log bytes."""
    for pos, h in batch_fmt.iter_batches(data):
        for delta, _ts, key, value, _headers in batch_fmt.records_of(data, pos, h):
            k = decode_key(key) if isinstance(key, bytes) else None
            if k is not None:
                yield h.base_offset + delta, k, decode_value(value)
