"""RecordAccumulator: per-partition queues of open and closed batches.

`append` is the producer's whole per-message cost: one list append under an
uncontended lock. Batches are encoded once, when the sender drains them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Container
from typing import Any, Callable

from net import batch as batch_fmt

DeliveryCallback = Callable[[Exception | None, "RecordMetadata | None"], None]
# A record's headers: (key, value) pairs, a value may be null (as in Kafka).
Headers = list[tuple[str, bytes | None]]
RECORD_OVERHEAD = 12  # msgpack array header, deltas, nil headers: a size estimate for batch.size


class RecordMetadata:
    __slots__ = ("topic", "partition", "offset", "timestamp")

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int) -> None:
        self.topic, self.partition, self.offset, self.timestamp = topic, partition, offset, timestamp

    def __repr__(self) -> str:
        return f"RecordMetadata({self.topic}-{self.partition}@{self.offset})"


class ProducerBatch:
    __slots__ = (
        "topic",
        "partition",
        "records",
        "size",
        "first_ts",
        "max_ts",
        "created",
        "callbacks",
        "closed",
        "attempts",
        "backoff_from",
        "retry_at",
        "encoded",
        "producer_epoch",
        "unknown_cause",
        "parts",
        "base_sequence",
        "alone",
    )

    def __init__(self, topic: str, partition: int, ts: int, now: float) -> None:
        self.topic = topic
        self.partition = partition
        self.records: list[tuple[Any, ...]] = []
        self.size = batch_fmt.HEADER_SIZE
        self.first_ts = ts
        self.max_ts = ts
        self.created = now
        self.callbacks: list[tuple[int, DeliveryCallback]] | None = None
        self.closed = False
        self.attempts = 0
        # `attempts` when the backoff last restarted: the exponential backoff is for retrying the same
        # leader; the first retries to a newly elected one start again from retry.backoff.ms.
        self.backoff_from = 0
        self.retry_at = 0.0
        self.encoded: bytes | None = None
        self.producer_epoch = -1  # the idempotent producer epoch `encoded` carries (client/sequences.py)
        # The first error after which this batch may have been appended (client/outcome.py); None while
        # every attempt is known not to have been.
        self.unknown_cause: Exception | None = None
        # A batch merged from several (merged()): theirs, in order; its records and callbacks are theirs.
        self.parts: list[ProducerBatch] | None = None
        self.base_sequence = -1  # its first record's sequence once stamped (idempotent)
        # Never merged with others (the Sender's _one_batch): it was part of a merged batch too large for the topic.
        self.alone = False

    @classmethod
    def merged(cls, batches: list[ProducerBatch]) -> ProducerBatch:
        """One batch of `batches` (one partition's, new, in order), sent as one record batch: a produce request
        carries one batch per partition (Kafka's drain), so its answer's base_offset is every record's offset
        base. `records` lists theirs without copying a tuple (their offset and timestamp deltas stay relative
        to their own batch: build() and complete() read them through `parts`)."""
        first = batches[0]
        m = cls(first.topic, first.partition, first.first_ts, min(b.created for b in batches))
        m.parts = batches
        m.records = list(itertools.chain.from_iterable(b.records for b in batches))
        m.size = sum(b.size for b in batches) - (len(batches) - 1) * batch_fmt.HEADER_SIZE
        m.max_ts = max(b.max_ts for b in batches)
        m.closed = True
        return m

    def build(self, codec: int, producer_id: int = -1, epoch: int = -1, sequence: int = -1, txn: bool = False) -> bytes:
        """The batch's wire form (idempotent when `producer_id` is set), its parts' records one after another."""
        parts = self.parts or [self]
        return batch_fmt.build(
            parts[0].records,
            self.first_ts,
            self.max_ts,
            codec,
            producer_id,
            epoch,
            sequence,
            transactional=txn,
            more=[(p.first_ts, p.records) for p in parts[1:]],
        )

    def encode(self, codec: int) -> bytes:
        if self.encoded is None:
            self.encoded = self.build(codec)
        return self.encoded

    @property
    def timestamps(self) -> list[int]:
        return [p.first_ts + r[1] for p in self.parts or [self] for r in p.records]

    def complete(self, base_offset: int, error: Exception | None) -> None:
        if self.parts is not None:
            for p in self.parts:
                p.complete(base_offset, error)
                if base_offset >= 0:
                    base_offset += len(p.records)
            return
        if not self.callbacks:
            return
        first = self.first_ts
        for i, cb in self.callbacks:
            r = self.records[i]
            offset = base_offset + i if base_offset >= 0 else -1  # -1: not known (acks=0)
            md = None if error else RecordMetadata(self.topic, self.partition, offset, first + r[1])
            try:
                cb(error, md)
            except Exception:  # a user callback must not take the sender down
                import logging

                logging.getLogger("kafkalite.producer").exception("delivery callback raised")


class RecordAccumulator:
    def __init__(self, batch_size: int, buffer_memory: int) -> None:
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.lock = threading.Lock()
        self.space = threading.Condition(self.lock)
        self.queues: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.open: dict[tuple[str, int], ProducerBatch] = {}
        self.buffered = 0
        self.on_batch_full: Callable[[], None] = lambda: None
        # A new open batch must wake the sender so its linger.ms timer starts now, not at the next batch.
        self.on_new_batch: Callable[[], None] = lambda: None

    def append(
        self,
        topic: str,
        partition: int,
        ts: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        callback: DeliveryCallback | None,
    ) -> bool:
        """Add one record. Returns True when this append closed a batch (time to pick a new sticky partition)."""
        size = RECORD_OVERHEAD + len(value) if value is not None else RECORD_OVERHEAD
        if key is not None:
            size += len(key)
        tp = (topic, partition)
        with self.lock:
            b = self.open.get(tp)
            if b is None:
                b = self._new_batch(tp, ts)
            recs = b.records
            if callback is not None:
                if b.callbacks is None:
                    b.callbacks = []
                b.callbacks.append((len(recs), callback))
            if ts > b.max_ts:
                b.max_ts = ts
            recs.append((len(recs), ts - b.first_ts, key, value, headers))
            b.size += size
            self.buffered += size
            if b.size < self.batch_size:
                return False
            b.closed = True
            del self.open[tp]
        self.on_batch_full()
        return True

    def _new_batch(self, tp: tuple[str, int], ts: int) -> ProducerBatch:
        b = ProducerBatch(tp[0], tp[1], ts, time.monotonic())
        self.open[tp] = b
        q = self.queues.get(tp)
        if q is None:
            q = self.queues[tp] = deque()
        q.append(b)
        self.on_new_batch()
        return b

    def drain(self, tp: tuple[str, int], now: float, linger: float, force: bool, limit: int = 5) -> list[ProducerBatch]:
        """Take up to `limit` sendable batches of one partition, oldest first. The limit bounds the batches of
        a partition unacknowledged at once, which the broker's de-duplication window must cover."""
        with self.lock:
            q = self.queues.get(tp)
            if not q:
                return []
            head = q[0]
            if head.retry_at > now:
                return []
            if not (head.closed or force or now - head.created >= linger):
                return []
            out = [q.popleft() for _ in range(min(limit, len(q)))]
            b = self.open.get(tp)
            if b is not None and b is out[-1]:  # the open batch goes too: close it
                del self.open[tp]
                b.closed = True
            return out

    def take_all(self, tp: tuple[str, int]) -> list[ProducerBatch]:
        """Every queued batch of `tp`, taken out to be failed (an abort, a failed AddPartitionsToTxn). The
        open one goes too: left in `open`, the next record would join a batch no queue holds, never to be
        sent, and a flush would not wait for it (a committed transaction silently missing records)."""
        with self.lock:
            q = self.queues.get(tp)
            out = list(q or ())
            if q:
                q.clear()
            b = self.open.pop(tp, None)
            if b is not None:
                b.closed = True
            return out

    def requeue_front(self, tp: tuple[str, int], batches: list[ProducerBatch]) -> None:
        with self.lock:
            q = self.queues.setdefault(tp, deque())
            q.extendleft(reversed(batches))

    def release(self, batches: list[ProducerBatch]) -> None:
        with self.lock:
            self.buffered -= sum(b.size - batch_fmt.HEADER_SIZE for b in batches)
            self.space.notify_all()

    def wait_for_space(self, timeout: float) -> bool:
        with self.lock:
            return self.space.wait_for(lambda: self.buffered < self.buffer_memory, timeout)

    def pending_partitions(self) -> list[tuple[str, int]]:
        with self.lock:
            return [tp for tp, q in self.queues.items() if q]

    def next_linger_deadline(self, linger: float, skip: Container[tuple[str, int]] = ()) -> float | None:
        """When the oldest open batch is due, ignoring partitions in `skip` (in flight: they are sent when
        their response wakes the sender, and counting them made it spin on a deadline already past)."""
        with self.lock:
            return min((b.created + linger for tp, b in self.open.items() if tp not in skip), default=None)

    def has_pending(self) -> bool:
        with self.lock:
            return any(self.queues.values())
