"""Records of the internal topic `__transaction_state` (Kafka's TransactionLog, in msgpack).

Key ["t", transactional_id] -> the id's TransactionMetadata (producer id and epoch, timeout, state, partitions,
start and update times); a None value is a tombstone (an expired id). The latest record per key wins, which is
what makes the topic compactable.
"""

from __future__ import annotations

from typing import Any, Iterator

import msgpack

from broker.transaction.state import TransactionMetadata, TxnState
from net import batch as batch_fmt


def java_hash(s: str) -> int:
    """Java's String.hashCode, so a transactional id maps to the partition Kafka would pick."""
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions."""
    return (java_hash(transactional_id) & 0x7FFFFFFF) % num_partitions


def encode(meta: TransactionMetadata | None, transactional_id: str) -> tuple[bytes, bytes | None]:
    key = msgpack.packb(["t", transactional_id])
    if meta is None:
        return key, None
    value = msgpack.packb(
        {
            "pid": meta.producer_id,
            "last_pid": meta.last_producer_id,
            "epoch": meta.producer_epoch,
            "last_epoch": meta.last_producer_epoch,
            "timeout_ms": meta.timeout_ms,
            "state": meta.state.value,
            "partitions": sorted([t, p] for t, p in meta.partitions),
            "start": meta.start_ms,
            "update": meta.update_ms,
        }
    )
    return key, value


def decode(key: bytes, value: bytes | None) -> tuple[str, TransactionMetadata | None] | None:
    """(transactional id, metadata or None for a tombstone); None for a key this version does not know."""
    try:
        k = msgpack.unpackb(key)
    except (ValueError, msgpack.UnpackException):
        return None
    if not isinstance(k, list) or len(k) != 2 or k[0] != "t" or not isinstance(k[1], str):
        return None
    if value is None:
        return k[1], None
    v: dict[str, Any] = msgpack.unpackb(value)
    meta = TransactionMetadata(
        transactional_id=k[1],
        producer_id=int(v["pid"]),
        producer_epoch=int(v["epoch"]),
        timeout_ms=int(v["timeout_ms"]),
        state=TxnState(v["state"]),
        partitions={(str(t), int(p)) for t, p in v["partitions"]},
        start_ms=int(v["start"]),
        update_ms=int(v["update"]),
        last_producer_id=int(v.get("last_pid", -1)),
        last_producer_epoch=int(v.get("last_epoch", -1)),
    )
    return k[1], meta


def build_batch(records: list[tuple[bytes, bytes | None]], now_ms: int) -> bytes:
    return batch_fmt.build([(i, 0, k, v, None) for i, (k, v) in enumerate(records)], now_ms, now_ms)


def read_records(data: bytes) -> Iterator[tuple[bytes, bytes | None]]:
    for pos, h in batch_fmt.iter_batches(data):
        if h.is_control:
            continue
        for _d_off, _d_ts, key, value, _headers in batch_fmt.records_of(data, pos, h):
            if key is not None:
                yield key, value
