"""ProducerStateManager: per-partition idempotence, as Kafka's.

For each producer id it remembers the last few batches' sequence ranges and
offsets, so a retried batch is answered with its first offsets instead of
being appended twice.

For transactions (KIP-98) it also knows each producer's ongoing transaction on the partition (the offset of
its first transactional batch): the first unstable offset, below which a read_committed consumer may read
(the last stable offset, LSO), is the lowest of them. A commit or abort marker ends a transaction; `update`
answers an abort as Kafka's AbortedTxn (producer id, first offset, marker offset, LSO after it), which the
Partition writes to the `.txnindex` of the segment holding the marker (broker/log/txn_index.py). The aborted
transactions are not in the snapshots (version 3); a version-2 snapshot's list is read once, to fill the
`.txnindex` files of a data dir written before they existed (`legacy_aborted`).

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
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import msgpack
from crc32c import crc32c

from broker.log.checkpoint import atomic_write
from broker.log.txn_index import AbortedTxn
from net.batch import BatchHeader, ControlRecord
from net.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError

log = logging.getLogger(__name__)

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN. It must cover every batch an idempotent client may have
# unacknowledged on one partition: our producer caps that at max.in.flight.requests.per.connection (<= 5).
NUM_BATCHES_TO_RETAIN = 5
# Producers whose refused batches are remembered per partition (note_refused); the oldest are forgotten first.
MAX_REFUSED_PRODUCERS = 4096

SNAPSHOT_SUFFIX = ".snapshot"
# 3: ongoing transactions (aborted ones are in the .txnindex files). 2 (ongoing and aborted transactions)
# and 1 (no transactions) are still read.
SNAPSHOT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)
_HEADER = struct.Struct(">HI")  # version, crc32c of the msgpack body
_MAX_SEQUENCE = 0x7FFFFFFF

__all__ = ["AbortedTxn", "NUM_BATCHES_TO_RETAIN", "OutOfOrderSequenceError", "ProducerStateManager", "snapshot_offsets"]


class _Entry:
    """One producer id: its epoch, the retained batches (first seq, last seq, base offset), last timestamp,
    and the first offset of its ongoing transaction here (-1: none)."""

    __slots__ = ("epoch", "batches", "last_timestamp", "txn_first")

    def __init__(self, epoch: int, last_timestamp: int = -1, txn_first: int = -1) -> None:
        self.epoch = epoch
        self.batches: deque[tuple[int, int, int]] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = last_timestamp
        self.txn_first = txn_first


class _Verification:
    """A transaction's first batch here being verified with its coordinator (KIP-890, Kafka's
    VerificationStateEntry): the batch may be appended only with this `guard`, which a marker for the producer
    (the transaction ended meanwhile) or the transaction's first append retires."""

    __slots__ = ("epoch", "guard", "started_ms")

    def __init__(self, epoch: int, started_ms: int) -> None:
        self.epoch = epoch
        self.guard = object()
        self.started_ms = started_ms


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
        # Read from a version-2 snapshot only: its aborted transactions, for the Partition to put in the
        # .txnindex files (their LSO unknown: -1). Emptied once taken.
        self.legacy_aborted: list[AbortedTxn] = []
        # producer id -> first offset of its open transaction here: the LSO is asked at every fetch, so it is
        # kept apart from the (many) idempotent producers' entries.
        self._open: dict[int, int] = {}
        # producer id -> its transaction's first batch here being verified (KIP-890); in memory only, as Kafka's:
        # a verification lost to a restart is refused at the append and retried by the client.
        self._verifying: dict[int, _Verification] = {}
        # producer id -> (epoch, lowest sequence) of batches refused here before anything was written
        # (note_refused); in memory only, as _verifying.
        self._refused: dict[int, tuple[int, int]] = {}
        self.replayed_batches = 0  # headers replayed since the last load: recovery cost, for tests/metrics

    # --- de-duplication and sequence rules ---------------------------------------------

    def duplicate_of(self, h: BatchHeader) -> int | None:
        """The base offset this batch was already appended at, or None if it is new (and in sequence)."""
        return self.check_append([h])[0]

    def check_append(
        self, headers: Sequence[BatchHeader], guards: Mapping[int, object] | None = None
    ) -> list[int | None]:
        """For the batches of one append to this partition, in order: each one's base offset if it is a
        retry of a retained batch, else None (new). Raises as Kafka's ProducerAppendInfo does, before anything
        is appended: OutOfOrderSequenceError for a sequence that is not the last one + 1 within the epoch or
        a new epoch that does not start at 0, InvalidProducerEpochError for an older epoch. A producer id
        with no state here (never seen, expired, truncated away) may start at any sequence, as in Kafka
        since KIP-360 (so no UNKNOWN_PRODUCER_ID). Batches earlier in the same append count as appended.

        With `guards` (transaction.partition.verification.enable, a client's produce): a transactional batch of a
        producer with no transaction open here must hold its producer's current verification guard
        (verification_guard, then the coordinator said yes), else InvalidTxnStateError (KIP-890)."""
        out: list[int | None] = []
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) of new batches so far
        for h in headers:
            if h.producer_id < 0:
                out.append(None)
                continue
            entry = self._producers.get(h.producer_id)
            if h.is_control:  # a marker: no sequence, but a fenced epoch may not end a transaction
                if entry is not None and h.producer_epoch < entry.epoch:
                    raise InvalidProducerEpochError(
                        f"producer {h.producer_id}: marker epoch {h.producer_epoch} is older than {entry.epoch}"
                    )
                out.append(None)
                continue
            if h.base_sequence < 0:  # no sequence (a transactional offset commit's batch): nothing to check
                out.append(None)
                continue
            dup = _retained_offset(entry, h)
            if dup is not None:
                out.append(dup)
                continue
            if guards is not None and h.is_transactional and h.producer_id not in self._open:
                v = self._verifying.get(h.producer_id)
                if v is None or guards.get(h.producer_id) is not v.guard:
                    raise InvalidTxnStateError(
                        f"producer {h.producer_id}: the batch is not part of an ongoing transaction its coordinator "
                        "knows of on this partition"
                    )
            last = pending.get(h.producer_id)
            if last is None and entry is not None:
                last = (entry.epoch, entry.batches[-1][1] if entry.batches else -1)
            if last is not None:
                _check_sequence(h, *last)
            else:
                self._check_not_past_refused(h)
            pending[h.producer_id] = (h.producer_epoch, h.base_sequence + h.record_count - 1)
            out.append(None)
        return out

    def note_refused(self, headers: Iterable[BatchHeader]) -> None:
        """Batches of an append refused before anything was written (not the leader yet, the ISR below
        min.insync.replicas, ...). A producer with no state here may start at any sequence (check_append), so
        without this a later request of the same producer, pipelined behind the refused one and accepted
        because the refusal's cause passed in between, would be appended past a gap: and librdkafka counts
        the earlier batch as written when a later one succeeds (its implicit ack). Kafka guards a transaction's
        first batches the same way (VerificationStateEntry.lowestSequence)."""
        for h in headers:
            if h.producer_id < 0 or h.is_control or h.base_sequence < 0:
                continue
            known = self._refused.get(h.producer_id)
            if known is not None and known[0] == h.producer_epoch and known[1] <= h.base_sequence:
                continue
            self._refused.pop(h.producer_id, None)  # re-inserted last: the dict's order is the eviction order
            self._refused[h.producer_id] = (h.producer_epoch, h.base_sequence)
            if len(self._refused) > MAX_REFUSED_PRODUCERS:
                del self._refused[next(iter(self._refused))]

    def _check_not_past_refused(self, h: BatchHeader) -> None:
        """A producer with no state here: its batch may not skip a sequence refused here (note_refused)."""
        refused = self._refused.get(h.producer_id)
        if refused is not None and refused[0] == h.producer_epoch and h.base_sequence > refused[1]:
            raise OutOfOrderSequenceError(
                f"producer {h.producer_id}: sequence {h.base_sequence} skips {refused[1]}, which was refused here "
                "and not written since"
            )

    def update(self, h: BatchHeader, base_offset: int, marker: ControlRecord | None = None) -> AbortedTxn | None:
        """A batch appended at `base_offset`; for a control batch, `marker` is its commit or abort record.
        Returns the transaction an abort marker ended (for the `.txnindex`), else None."""
        if h.producer_id < 0:
            return None
        entry = self._producers.get(h.producer_id)
        if h.is_control:
            if entry is None:
                entry = self._producers[h.producer_id] = _Entry(h.producer_epoch)
            elif h.producer_epoch > entry.epoch:  # the coordinator fenced the producer: its sequences restart
                entry.epoch = h.producer_epoch
                entry.batches.clear()
            first, entry.txn_first = entry.txn_first, -1
            self._open.pop(h.producer_id, None)
            self._verifying.pop(h.producer_id, None)  # a verification started before the marker is stale
            entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
            if marker is not None and not marker.commit and first >= 0:
                # Kafka's lastStableOffset(completedTxn): the oldest other open transaction, or just past the marker.
                lso = self.first_unstable_offset()
                return AbortedTxn(h.producer_id, first, base_offset, base_offset + 1 if lso is None else lso)
            return None
        if self._refused:
            self._refused.pop(h.producer_id, None)  # written now: its sequence rules apply from here
        if entry is None or entry.epoch != h.producer_epoch:
            txn_first = entry.txn_first if entry is not None else -1
            entry = self._producers[h.producer_id] = _Entry(h.producer_epoch, txn_first=txn_first)
        if h.base_sequence >= 0:
            entry.batches.append((h.base_sequence, h.base_sequence + h.record_count - 1, base_offset))
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if h.is_transactional and entry.txn_first < 0:
            entry.txn_first = base_offset
            self._open[h.producer_id] = base_offset
            self._verifying.pop(h.producer_id, None)  # from now on the open transaction vouches for its batches
        return None

    def replay(
        self, headers: Iterable[BatchHeader], markers: dict[int, ControlRecord] | None = None
    ) -> list[AbortedTxn]:
        """Apply batch headers read back from the log (their base offsets are stamped); `markers` holds the
        control records of its control batches, by offset. Returns the aborts met, in order."""
        aborted = []
        for h in headers:
            self.replayed_batches += 1
            if h.producer_id >= 0:
                txn = self.update(h, h.base_offset, (markers or {}).get(h.base_offset))
                if txn is not None:
                    aborted.append(txn)
        return aborted

    # --- transactions ---------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest ongoing transaction here, or None."""
        return min(self._open.values()) if self._open else None

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        return producer_id in self._open

    def verification_guard(self, producer_id: int, epoch: int, now_ms: int) -> object:
        """The guard a transaction's first batch here must hold once its coordinator has verified it (KIP-890).
        Produces of one epoch verifying at once share it; a newer epoch's replaces an older one's."""
        v = self._verifying.get(producer_id)
        if v is None or epoch > v.epoch:
            v = self._verifying[producer_id] = _Verification(epoch, now_ms)
        return v.guard

    def ongoing_transactions(self) -> list[tuple[int, int, int]]:
        """(producer id, epoch, first offset) of each ongoing transaction (DescribeProducers, find-hanging)."""
        return [(pid, e.epoch, e.txn_first) for pid, e in self._producers.items() if e.txn_first >= 0]

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
        # A producer with a transaction open here is kept: its marker must still find where the transaction began.
        old = [
            pid for pid, e in self._producers.items() if now_ms - e.last_timestamp > expiration_ms and e.txn_first < 0
        ]
        for pid in old:
            del self._producers[pid]
        # Verifications never answered (a coordinator that did not reply): forgotten as producers are.
        stale = [pid for pid, v in self._verifying.items() if now_ms - v.started_ms > expiration_ms]
        for pid in stale:
            del self._verifying[pid]
        return len(old)

    # --- snapshots -----------------------------------------------------------------------

    def _encode(self, offset: int) -> bytes:
        body = msgpack.packb(
            {
                "offset": offset,
                "producers": [
                    [pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches], e.txn_first]
                    for pid, e in self._producers.items()
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
        if version not in _READABLE_VERSIONS:
            raise ValueError(f"unknown version {version}")
        if crc32c(body) != crc:
            raise ValueError("CRC mismatch")
        doc = msgpack.unpackb(body)
        mgr = cls(dir)
        for row in doc["producers"]:
            pid, epoch, ts, batches = row[:4]
            txn_first = int(row[4]) if len(row) > 4 else -1  # version 1 had no transactions
            e = mgr._producers[int(pid)] = _Entry(int(epoch), int(ts), txn_first)
            e.batches.extend((int(a), int(b), int(c)) for a, b, c in batches)
        if version == 2:  # its aborted transactions, for the .txnindex files (version 3 has none)
            mgr.legacy_aborted = [AbortedTxn(int(a), int(b), int(c), -1) for a, b, c in doc.get("aborted", ())]
        mgr._open = {pid: e.txn_first for pid, e in mgr._producers.items() if e.txn_first >= 0}
        return mgr, int(doc["offset"])

    @classmethod
    def load(
        cls, dir: Path, log_start: int, log_end: int, at_most: int | None = None, read_only: bool = False
    ) -> tuple[ProducerStateManager, int]:
        """The newest readable snapshot at an offset in [log_start, min(log_end, at_most)] and the offset to
        replay from; with none, an empty state and `log_start`. Snapshots above the log end (data since
        truncated) and unreadable ones are deleted, with a warning for the latter, unless `read_only` (a
        reader of a live broker's files, pipeline/segments.py)."""
        limit = log_end if at_most is None else min(log_end, at_most)
        for off in reversed(snapshot_offsets(dir)):
            path = snapshot_path(dir, off)
            if off > log_end and not read_only:
                path.unlink(missing_ok=True)
                continue
            if off > limit:
                continue
            if off < log_start:
                break
            try:
                mgr, at = cls._decode(path.read_bytes(), dir)
                if at != off:
                    raise ValueError(f"holds offset {at}")
                return mgr, off
            except (OSError, ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
                if read_only:
                    continue  # being replaced by the broker, or damaged: an older one will do
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
