"""ProducerStateManager: per-partition idempotence, as Kafka's.

For each producer id it remembers the last few batches' sequence ranges and
offsets, so a retried batch is answered with its first offsets instead of
being appended twice.

The state must survive restarts and truncations, however far back a producer's
last batch lies, without replaying the whole log. As Kafka does, it is written
to `<20-digit offset>.snapshot` files in the partition directory (the state of
every producer up to, not including, that offset): at each segment roll and at
clean shutdown. Opening a partition loads the newest snapshot between the log
start and the log end and replays only the batch headers after it
(docs/FORMAT.md section "Producer-state snapshots"). Only a data dir without
any usable snapshot is replayed from the log start, once: the next roll or
shutdown writes one.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgpack
from crc32c import crc32c

from broker.log.checkpoint import atomic_write
from net.batch import BatchHeader
from net.errors import InvalidProducerEpochError, OutOfOrderSequenceError

log = logging.getLogger(__name__)

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN. It must cover every batch an idempotent client may have
# unacknowledged on one partition: our producer caps that at max.in.flight.requests.per.connection (<= 5).
NUM_BATCHES_TO_RETAIN = 5

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">HI")  # version, crc32c of the msgpack body
_MAX_SEQUENCE = 0x7FFFFFFF

__all__ = ["NUM_BATCHES_TO_RETAIN", "OutOfOrderSequenceError", "ProducerStateManager", "snapshot_offsets"]


class _Entry:
    """One producer id: its epoch, the retained batches (first seq, last seq, base offset), last timestamp."""

    __slots__ = ("epoch", "batches", "last_timestamp")

    def __init__(self, epoch: int, last_timestamp: int = -1) -> None:
        self.epoch = epoch
        self.batches: deque[tuple[int, int, int]] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = last_timestamp


def _retained_offset(entry: _Entry | None, h: BatchHeader) -> int | None:
    """Where a retained batch with `h`'s epoch and sequence range was appended (Kafka's findDuplicateBatch)."""
    if entry is None or entry.epoch != h.producer_epoch:
        return None
    last_seq = h.base_sequence + h.record_count - 1
    for first, last, offset in entry.batches:
        if first == h.base_sequence and last == last_seq:
            return offset
    return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    """Sequences wrap from 2**31 - 1 to 0."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _MAX_SEQUENCE)


def _check_sequence(h: BatchHeader, epoch: int, last_seq: int) -> None:
    """Kafka's checkProducerEpoch + checkSequence for a client's batch against its producer's last one."""
    pid = h.producer_id
    if h.producer_epoch < epoch:
        raise InvalidProducerEpochError(f"producer {pid}: epoch {h.producer_epoch} is older than the last seen {epoch}")
    if h.producer_epoch > epoch:
        if h.base_sequence != 0:
            raise OutOfOrderSequenceError(
                f"producer {pid}: new epoch {h.producer_epoch} must start at sequence 0, not {h.base_sequence}"
            )
    elif last_seq >= 0 and not _in_sequence(last_seq, h.base_sequence):
        raise OutOfOrderSequenceError(
            f"producer {pid}: sequence {h.base_sequence} does not follow the last appended {last_seq}"
        )


def snapshot_path(dir: Path, offset: int) -> Path:
    return Path(dir) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(dir: Path) -> list[int]:
    """Offsets of the snapshot files in `dir`, ascending."""
    out = []
    try:
        names = os.listdir(dir)
    except FileNotFoundError:
        return []
    for name in names:
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


class ProducerStateManager:
    def __init__(self, dir: Path | None = None) -> None:
        self.dir = Path(dir) if dir is not None else None  # None: no snapshots (in-memory use)
        self._producers: dict[int, _Entry] = {}
        self.replayed_batches = 0  # headers replayed since the last load: recovery cost, for tests/metrics

    # --- de-duplication and sequence rules ---------------------------------------------

    def duplicate_of(self, h: BatchHeader) -> int | None:
        """The base offset this batch was already appended at, or None if it is new (and in sequence)."""
        return self.check_append([h])[0]

    def check_append(self, headers: Sequence[BatchHeader]) -> list[int | None]:
        """For the batches of one append to this partition, in order: each one's base offset if it is a
        retry of a retained batch, else None (new). Raises as Kafka's ProducerAppendInfo does, before anything
        is appended: OutOfOrderSequenceError for a sequence that is not the last one + 1 within the epoch or
        a new epoch that does not start at 0, InvalidProducerEpochError for an older epoch. A producer id
        with no state here (never seen, expired, truncated away) may start at any sequence, as in Kafka
        since KIP-360 (so no UNKNOWN_PRODUCER_ID). Batches earlier in the same append count as appended."""
        out: list[int | None] = []
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) of new batches so far
        for h in headers:
            if h.producer_id < 0:
                out.append(None)
                continue
            entry = self._producers.get(h.producer_id)
            dup = _retained_offset(entry, h)
            if dup is not None:
                out.append(dup)
                continue
            last = pending.get(h.producer_id)
            if last is None and entry is not None:
                last = (entry.epoch, entry.batches[-1][1] if entry.batches else -1)
            if last is not None:
                _check_sequence(h, *last)
            pending[h.producer_id] = (h.producer_epoch, h.base_sequence + h.record_count - 1)
            out.append(None)
        return out

    def update(self, h: BatchHeader, base_offset: int) -> None:
        if h.producer_id < 0:
            return
        entry = self._producers.get(h.producer_id)
        if entry is None or entry.epoch != h.producer_epoch:
            entry = self._producers[h.producer_id] = _Entry(h.producer_epoch)
        entry.batches.append((h.base_sequence, h.base_sequence + h.record_count - 1, base_offset))
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        """Apply batch headers read back from the log (their base offsets are stamped)."""
        for h in headers:
            self.replayed_batches += 1
            if h.producer_id >= 0:
                self.update(h, h.base_offset)

    def __len__(self) -> int:
        return len(self._producers)

    def producer_ids(self) -> set[int]:
        return set(self._producers)

    def active_producers(self) -> list[tuple[int, int, int, int]]:
        """(producer id, epoch, last sequence, last timestamp) of each producer known here (DescribeProducers)."""
        ps = self._producers
        return [(pid, e.epoch, e.batches[-1][1] if e.batches else -1, e.last_timestamp) for pid, e in ps.items()]

    # --- expiry (producer.id.expiration.ms) ---------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose newest batch timestamp is older than `expiration_ms`. Returns how many.
        A forgotten producer's retry is appended again, as in Kafka: expiry is the documented bound."""
        old = [pid for pid, e in self._producers.items() if now_ms - e.last_timestamp > expiration_ms]
        for pid in old:
            del self._producers[pid]
        return len(old)

    # --- snapshots -----------------------------------------------------------------------

    def _encode(self, offset: int) -> bytes:
        body = msgpack.packb(
            {
                "offset": offset,
                "producers": [
                    [pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches]] for pid, e in self._producers.items()
                ],
            }
        )
        return _HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + body

    def take_snapshot(self, offset: int) -> None:
        """Write the state, which covers every batch below `offset`, to `<offset>.snapshot` (atomically)."""
        if self.dir is None:
            return
        atomic_write(snapshot_path(self.dir, offset), self._encode(offset))

    @classmethod
    def _decode(cls, data: bytes, dir: Path | None) -> tuple[ProducerStateManager, int]:
        if len(data) < _HEADER.size:
            raise ValueError("shorter than its header")
        version, crc = _HEADER.unpack_from(data)
        body = data[_HEADER.size :]
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"unknown version {version}")
        if crc32c(body) != crc:
            raise ValueError("CRC mismatch")
        doc = msgpack.unpackb(body)
        mgr = cls(dir)
        for pid, epoch, ts, batches in doc["producers"]:
            e = mgr._producers[int(pid)] = _Entry(int(epoch), int(ts))
            e.batches.extend((int(a), int(b), int(c)) for a, b, c in batches)
        return mgr, int(doc["offset"])

    @classmethod
    def load(cls, dir: Path, log_start: int, log_end: int) -> tuple[ProducerStateManager, int]:
        """The newest readable snapshot at an offset in [log_start, log_end] and the offset to replay from;
        with none, an empty state and `log_start`. Snapshots above the log end (data since truncated) and
        unreadable ones are deleted, with a warning for the latter."""
        for off in reversed(snapshot_offsets(dir)):
            path = snapshot_path(dir, off)
            if off > log_end:
                path.unlink(missing_ok=True)
                continue
            if off < log_start:
                break
            try:
                mgr, at = cls._decode(path.read_bytes(), dir)
                if at != off:
                    raise ValueError(f"holds offset {at}")
                return mgr, off
            except (OSError, ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
                log.warning("%s: ignoring unreadable producer-state snapshot (%s)", path, e)
                path.unlink(missing_ok=True)
        return cls(dir), log_start

    def delete_snapshots(self, below: int | None = None, above: int | None = None) -> None:
        """Delete snapshots at offsets < `below` (under the log start) and/or > `above` (past the log end)."""
        if self.dir is None:
            return
        for off in snapshot_offsets(self.dir):
            if (below is not None and off < below) or (above is not None and off > above):
                snapshot_path(self.dir, off).unlink(missing_ok=True)
