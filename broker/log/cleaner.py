"""LogCleaner: Kafka's log compaction, for topics with cleanup.policy=compact (or compact,delete).

A pass (LogManager.clean_compacted_logs, every log.cleaner.backoff.ms in a worker thread) cleans every
compacted log whose dirty ratio reached min.cleanable.dirty.ratio, filthiest first. For one log:

1. The cleanable range: closed segments only, up to the first uncleanable offset (the active segment,
   the high watermark, min.compaction.lag.ms). Its dirty part starts at the cleaner checkpoint.
2. An offset map, key -> offset of the key's latest record, built from the dirty part.
3. Every closed segment from the log start to the map's end is rewritten, in groups of consecutive
   segments that fit in one, keeping each record unless a later record has its key, it has no key, or
   it is a tombstone whose batch's delete horizon has passed. Kept records keep their offsets;
   a batch that lost some records is re-encoded keeping its base offset, leader epoch, producer fields
   and last offset delta; a batch that lost them all is gone.
4. Each group's new segment replaces the old ones through Log.replace_segments (`.cleaned`, `.swap`).
5. The checkpoint (`cleaner-offset-checkpoint` in each data dir) moves to the map's end.

Transactions, as Kafka's cleaner (its CleanedTransactionMetadata): the batches of aborted transactions (the
segments' `.txnindex`) count for no key and are removed; a commit or abort marker stays while any batch of its
transaction remains. An abort marker kept keeps its `.txnindex` entry in the cleaned segment. Nothing at or
above the last stable offset is cleaned (the caller's bound), so an open transaction's records are never touched.

The delete horizon (Kafka's KIP-534), kept in the log itself so that a restart neither resets nor forgets it:
when a cleaning first keeps a tombstone, or a marker no batch of its transaction remains with, it rewrites that
batch with the DELETE_HORIZON attribute and the cleaning's start + delete.retention.ms as its base timestamp
(record timestamps unchanged, net/batch.py). A later cleaning at or after that time removes the tombstones and
the marker. A log whose earliest such horizon has passed is cleaned even when it is not dirty enough (beyond
Kafka, whose idle logs keep them until new writes make them dirty), so removal needs no new writes.

Records are decoded here, and only here, on the broker side: compaction needs their keys.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from broker.log.checkpoint import CorruptCheckpointError, read_checkpoint, write_checkpoint
from broker.log.config import LogConfig
from broker.log.log import Log, set_log_append_time
from broker.log.segment import MAX_RELATIVE_OFFSET, LogSegment, iter_headers
from broker.log.txn_index import AbortedTxn
from net.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_LOG_APPEND,
    BatchHeader,
    InvalidBatch,
    build,
    control_record,
    parse_header,
    records_of,
    stamp,
    validate,
)

log = logging.getLogger("kafkalite.log.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# Kafka bounds its offset map by log.cleaner.dedupe.buffer.size; a dict of this many keys is about as big.
DEFAULT_MAX_MAP_KEYS = 1_000_000
# Batch headers read per pass to learn the delete horizons of logs the cleaner has not cleaned since it started
# (~3 us each): a restart's scan of large compacted logs is spread over passes instead of one long burst.
DEFAULT_SCAN_BATCHES_PER_PASS = 200_000
_READ_CHUNK = 1024 * 1024

TopicPartition = tuple[str, int]
HighWatermarks = Callable[[TopicPartition], int | None]
_Record = Sequence[Any]  # [offset_delta, timestamp_delta, key, value, headers]


class CleanerAborted(Exception):
    """The log changed under the cleaner, or the broker is stopping: this log's cleaning is dropped."""


@dataclass(slots=True)
class CleanStats:
    topic: str
    partition: int
    first_dirty: int
    end_offset: int  # the new checkpoint: everything below it is clean
    bytes_before: int = 0
    bytes_after: int = 0
    records_read: int = 0
    records_removed: int = 0
    groups_swapped: int = 0
    # The earliest delete horizon among the tombstones and lone markers the cleaned range keeps (None: none).
    delete_horizon_ms: int | None = None

    def keeps_until(self, horizon: int) -> None:
        if self.delete_horizon_ms is None or horizon < self.delete_horizon_ms:
            self.delete_horizon_ms = horizon


@dataclass(frozen=True, slots=True)
class _Cleanable:
    segments: list[LogSegment]  # closed segments from the log start to the first uncleanable offset
    ends: list[int]  # each segment's end: the next segment's base offset
    first_dirty: int
    generation: int

    @property
    def dirty_bytes(self) -> int:
        return sum(s.size for s, end in zip(self.segments, self.ends) if end > self.first_dirty)

    def overdue(self, now: int, config: LogConfig) -> bool:
        """max.compaction.lag.ms: a dirty segment entirely older than it makes the log cleanable whatever its
        dirty ratio (Kafka goes by the segment's first record; its newest is what a segment keeps here, so a
        segment is due up to its own time span later)."""
        lag = config.max_compaction_lag_ms
        return any(
            end > self.first_dirty and s.largest_timestamp <= now - lag for s, end in zip(self.segments, self.ends)
        )

    @property
    def dirty_ratio(self) -> float:
        total = sum(s.size for s in self.segments)
        return self.dirty_bytes / total if total else 0.0


class _Transactions:
    """Kafka's CleanedTransactionMetadata: which batches of a pass over [start, end) belong to aborted
    transactions, and which markers no batch of their transaction follows any more. Fed every batch in
    offset order."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset)  # not yet begun in the pass
        self._next = 0
        self._aborted: dict[int, list[Any]] = {}  # producer id -> [its aborted txn, a batch of it was seen]
        self._committed: set[int] = set()  # producers with a (not aborted) transactional batch since their marker

    def _begin_up_to(self, offset: int) -> None:
        while self._next < len(self._pending) and self._pending[self._next].first_offset <= offset:
            txn = self._pending[self._next]
            self._aborted.setdefault(txn.producer_id, [txn, False])
            self._next += 1

    def is_aborted(self, h: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (it goes, and counts for no key)."""
        self._begin_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        state = self._aborted.get(h.producer_id)
        if state is not None:
            state[1] = True
            return True
        self._committed.add(h.producer_id)
        return False

    def on_marker(self, h: BatchHeader, data: bytes) -> tuple[bool, AbortedTxn | None]:
        """A control batch: (whether no batch of its transaction was seen in this pass, so that it may go
        once its delete horizon has passed; the aborted transaction to keep in the cleaned `.txnindex`)."""
        self._begin_up_to(h.last_offset)
        if h.record_count == 0:
            return True, None  # an empty control batch (an emptied one, as Kafka's cleaner leaves): nothing to keep
        marker = control_record(data, 0, h)
        if marker is None:
            return False, None  # a control record of another type: kept, as Kafka does
        if marker.commit:
            seen = h.producer_id in self._committed
            self._committed.discard(h.producer_id)
            return not seen, None
        state = self._aborted.pop(h.producer_id, None)
        if state is not None and state[1]:
            return False, state[0]  # its batches went in this pass: the marker stays, and so does its entry
        return True, None


@dataclass(slots=True)
class HorizonScan:
    """Where reading a log's delete horizons from its batch headers has got to, and the earliest so far: the
    earliest of a marker, or of a batch that still holds a tombstone."""

    base: int = -1  # the base offset of the segment being read
    position: int = 0  # the next batch's position in it
    earliest: int | None = None

    def advance(self, segments: Sequence[LogSegment], budget: int) -> tuple[bool, int]:
        """Read on through `segments` (closed ones: no batch moves under a position) for at most `budget`
        batches; (whether all were read, how many batches were). Segments retention or truncation took away
        meanwhile are simply not there; ones compaction replaced are not (it starts the scan afresh)."""
        done = 0
        for seg in segments:
            if seg.base_offset < self.base:
                continue
            if seg.base_offset > self.base:
                self.base, self.position = seg.base_offset, 0
            fd = os.open(seg.path, os.O_RDONLY)  # a private fd, as read_batches
            try:
                for pos, h in iter_headers(fd, self.position, seg.size):
                    if pos + h.size > seg.size:
                        break  # a torn tail (the cleaning would fail on it): the segment's end
                    if done == budget:
                        self.position = pos
                        return False, done
                    done += 1
                    self._consider(fd, pos, h)
                self.position = seg.size
            finally:
                os.close(fd)
        return True, done

    def _consider(self, fd: int, pos: int, h: BatchHeader) -> None:
        horizon = h.delete_horizon_ms
        if horizon is None or (self.earliest is not None and horizon >= self.earliest):
            return
        if not h.is_control:
            data = os.pread(fd, h.size, pos)
            validate(data)
            if all(r[3] is not None for r in records_of(data, 0, h)):
                return  # its tombstones went, its other records stay: nothing waits for its horizon
        self.earliest = horizon


class _Retention:
    """What one cleaning keeps of each batch, as Kafka's cleaner's RecordFilter: a record unless a later record
    of its key supersedes it or it has no key; tombstones and lone markers until their batch's delete horizon,
    which it sets (now + delete.retention.ms) on the batches where it keeps them for the first time. Each
    method returns the batch to write: `data` itself if unchanged, a rebuilt batch, or None if nothing stays."""

    def __init__(
        self, offset_map: dict[Hashable, int], txns: _Transactions, now: int, retention_ms: int, stats: CleanStats
    ) -> None:
        self._map = offset_map
        self._txns = txns
        self._now = now
        self._new_horizon = now + retention_ms
        self._stats = stats

    def marker(self, h: BatchHeader, data: bytes, new: LogSegment) -> bytes | None:
        """A control batch; an abort marker kept for its transaction's batches keeps its entry in `new`'s
        `.txnindex`."""
        self._stats.records_read += h.record_count
        alone, txn = self._txns.on_marker(h, data)
        if alone:
            horizon = h.delete_horizon_ms
            if h.record_count == 0 or (horizon is not None and horizon <= self._now):
                self._stats.records_removed += h.record_count
                return None
            if horizon is None:  # found alone for the first time: it stays until then
                horizon = self._new_horizon
                data = rebuild_batch(h, records_of(data, 0, h), horizon)
            self._stats.keeps_until(horizon)
        if txn is not None:
            new.txn_index.append(txn)
        return data

    def data(self, h: BatchHeader, data: bytes) -> bytes | None:
        stats = self._stats
        if self._txns.is_aborted(h):  # the whole batch goes: no reader may see it
            stats.records_read += h.record_count
            stats.records_removed += h.record_count
            return None
        records = records_of(data, 0, h)
        horizon = h.delete_horizon_ms
        kept = [r for r in records if self._keep(h.base_offset + r[0], r, horizon)]
        stats.records_read += len(records)
        stats.records_removed += len(records) - len(kept)
        if not kept:
            return None  # the whole batch goes; a fetch at its offsets returns the next batch
        new_horizon = None
        if any(r[3] is None for r in kept):
            if horizon is None:
                horizon = new_horizon = self._new_horizon
            stats.keeps_until(horizon)
        if len(kept) < len(records) or new_horizon is not None:
            return rebuild_batch(h, kept, new_horizon)
        return data

    def _keep(self, offset: int, record: _Record, horizon: int | None) -> bool:
        key = _map_key(record[2])
        if key is None:
            return False  # Kafka's cleaner drops keyless records; appends to compacted topics refuse them
        latest = self._map.get(key)
        if latest is not None and offset < latest:
            return False
        # A tombstone stays until its batch's delete horizon, delete.retention.ms after the cleaning that first
        # kept it (and removed the older records of its key), so a consumer reading from the start meanwhile
        # sees the delete.
        return record[3] is not None or horizon is None or self._now < horizon


class LogCleaner:
    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        max_map_keys: int = DEFAULT_MAX_MAP_KEYS,
        scan_batches_per_pass: int = DEFAULT_SCAN_BATCHES_PER_PASS,
    ) -> None:
        self._clock = clock
        self.max_map_keys = max_map_keys
        self.scan_batches_per_pass = scan_batches_per_pass
        self._scan_budget = 0  # what is left of it in this pass
        self._run_lock = threading.Lock()  # one pass at a time; shutdown waits for it
        self._stopping = threading.Event()
        # Both keyed by Log object, not name: a deleted and re-created topic starts dirty again.
        self._checkpoints: dict[Log, int] = {}  # first dirty offset
        # The earliest delete horizon of a tombstone or lone marker in the log's cleanable range (None: none),
        # so that the log is cleaned when it passes. Only a summary of what the batches hold: absent (after a
        # restart, an aborted cleaning) means unknown, and the batches' headers are read again (_scans).
        self._horizons: dict[Log, int | None] = {}
        self._scans: dict[Log, HorizonScan] = {}

    # --- lifecycle ---------------------------------------------------------------------

    def load_checkpoint(self, data_dir: Path, logs: dict[TopicPartition, Log]) -> None:
        """At startup, for the logs found in `data_dir`."""
        try:
            offsets = read_checkpoint(Path(data_dir) / CLEANER_CHECKPOINT)
        except CorruptCheckpointError as e:
            log.warning("%s; compacted logs in %s will be cleaned from their start", e, data_dir)
            return
        for tp, lg in logs.items():
            if tp in offsets:
                self._checkpoints[lg] = offsets[tp]

    def shutdown(self) -> None:
        """Stop a pass in progress (its current group is discarded) and wait for it."""
        self._stopping.set()
        with self._run_lock:
            pass

    # --- a pass --------------------------------------------------------------------------

    def clean_logs(
        self, logs_by_dir: dict[Path, dict[TopicPartition, Log]], high_watermark: HighWatermarks | None = None
    ) -> list[CleanStats]:
        """Clean every compacted log that is dirty enough, filthiest first. `high_watermark(tp)` bounds a
        log's cleaning (None: leave it alone); without it, logs are cleaned up to their active segment."""
        with self._run_lock:
            if self._stopping.is_set():
                return []
            now = self._now_ms()
            self._scan_budget = self.scan_batches_per_pass
            stale_dirs = self._forget_deleted({lg for logs in logs_by_dir.values() for lg in logs.values()})
            todo = []
            for d, logs in logs_by_dir.items():
                if self._apply_truncations(logs) or d in stale_dirs:
                    self._write_checkpoint(d, logs)
                for tp, lg in logs.items():
                    c = self._cleanable_if_dirty(lg, tp, high_watermark, now)
                    if c is not None:
                        todo.append((c.dirty_ratio, d, lg, c))
            done = []
            for _, d, lg, c in sorted(todo, key=lambda t: -t[0]):
                if self._stopping.is_set():
                    break
                stats = self._clean_and_checkpoint(d, logs_by_dir[d], lg, c, now)
                if stats is not None:
                    done.append(stats)
            return done

    def _cleanable_if_dirty(
        self, lg: Log, tp: TopicPartition, high_watermark: HighWatermarks | None, now: int
    ) -> _Cleanable | None:
        if not lg.config.compact_enabled or lg.closed:
            return None
        bound = lg.log_end_offset if high_watermark is None else high_watermark(tp)
        if bound is None:
            return None
        try:
            c = self.cleanable(lg, bound, now)
            if c.dirty_bytes and (c.dirty_ratio >= lg.config.min_cleanable_dirty_ratio or c.overdue(now, lg.config)):
                return c
            if c.segments and self._horizon_passed(lg, c, now):
                return c  # tombstones or markers to remove, whether anything was written since or not
        except OSError:  # a segment deleted meanwhile (retention of a compact,delete log): next pass
            return None
        return None

    def _horizon_passed(self, lg: Log, c: _Cleanable, now: int) -> bool:
        if lg in self._horizons:
            horizon = self._horizons[lg]
        else:  # unknown: read on from the headers, as far as this pass's budget goes
            scan = self._scans.setdefault(lg, HorizonScan())
            try:
                finished, done = scan.advance(c.segments, self._scan_budget)
            except InvalidBatch as e:  # the cleaning itself would fail on it too: left to the dirty ratio
                log.warning("%s: delete horizons not read: %s", lg, e)
                finished, done = True, 0
            self._scan_budget -= done
            if finished:
                self._horizons[lg] = scan.earliest
                del self._scans[lg]
            horizon = scan.earliest  # part of the log read: what it holds may be due already
        return horizon is not None and horizon <= now

    def _clean_and_checkpoint(
        self, d: Path, logs: dict[TopicPartition, Log], lg: Log, c: _Cleanable, now: int
    ) -> CleanStats | None:
        # Groups swapped before a failure stay: what the log holds is unknown until its headers are read again.
        self._horizons.pop(lg, None)
        self._scans.pop(lg, None)  # segments it read may be replaced
        try:
            # Kafka's currentTime: when this log's cleaning starts, not the pass (a pass may take long).
            stats = self.clean(lg, c, self._now_ms())
        except CleanerAborted as e:
            log.info("%s: cleaning aborted: %s", lg, e)
            return None
        except Exception:
            # A corrupt batch or an I/O error in one log must not stop the others (Kafka marks the
            # partition uncleanable); the old segments are untouched, the next pass retries.
            log.exception("%s: cleaning failed", lg)
            return None
        self._checkpoints[lg] = stats.end_offset
        self._horizons[lg] = stats.delete_horizon_ms
        self._write_checkpoint(d, logs)
        log.info(
            "%s: cleaned [%d, %d): %d of %d records removed, %d -> %d bytes",
            lg,
            stats.first_dirty,
            stats.end_offset,
            stats.records_removed,
            stats.records_read,
            stats.bytes_before,
            stats.bytes_after,
        )
        return stats

    # --- checkpoint ----------------------------------------------------------------------

    def first_dirty_offset(self, lg: Log) -> int:
        """Kafka's rule: the checkpoint, or the log start if there is none or it is out of range."""
        cp = self._checkpoints.get(lg)
        if cp is None or not lg.log_start_offset <= cp <= lg.log_end_offset:
            return lg.log_start_offset
        return cp

    def _forget_deleted(self, present: set[Log]) -> set[Path]:
        """Drop the state of logs that were deleted; returns the data dirs whose checkpoint named them."""
        for state in (self._horizons, self._scans):
            for gone in [lg for lg in state if lg not in present]:
                del state[gone]
        dropped = [lg for lg in self._checkpoints if lg not in present]
        for lg in dropped:
            del self._checkpoints[lg]
        return {lg.dir.parent for lg in dropped}

    def _apply_truncations(self, logs: dict[TopicPartition, Log]) -> bool:
        """Lower checkpoints to truncation points; True if the checkpoint file needs rewriting."""
        changed = False
        for lg in logs.values():
            point = lg.take_truncation_point()
            if point is None:
                continue
            # What follows the truncation point is new data: dirty, never cleaned. (The log's earliest delete
            # horizon stays: a truncation only takes batches away, so it can only be early, costing one pass.)
            if lg in self._checkpoints and self._checkpoints[lg] > point:
                self._checkpoints[lg] = point
                changed = True
        return changed

    def _write_checkpoint(self, d: Path, logs: dict[TopicPartition, Log]) -> None:
        offsets = {tp: self._checkpoints[lg] for tp, lg in logs.items() if lg in self._checkpoints}
        write_checkpoint(Path(d) / CLEANER_CHECKPOINT, offsets)

    # --- one log -------------------------------------------------------------------------

    def cleanable(self, lg: Log, bound: int, now: int) -> _Cleanable:
        """The closed segments the cleaner may rewrite: never the active segment, nothing at or above
        `bound` (a record above the high watermark may still be truncated away, so it must not make
        older records of its key disposable), no dirty segment newer than min.compaction.lag.ms."""
        segments, generation = lg.cleaning_snapshot()
        first_dirty = self.first_dirty_offset(lg)
        lag = lg.config.min_compaction_lag_ms
        n = 0
        for i, seg in enumerate(segments[:-1]):
            end = segments[i + 1].base_offset
            if end > bound or (end > first_dirty and lag > 0 and seg.largest_timestamp > now - lag):
                break
            n = i + 1
        return _Cleanable(segments[:n], [s.base_offset for s in segments[1 : n + 1]], first_dirty, generation)

    def clean(self, lg: Log, c: _Cleanable, now: int) -> CleanStats:
        """Clean `lg` as planned in `c`, at time `now` (delete horizons are set from it and compared with
        it). Raises CleanerAborted if the log changed meanwhile; groups swapped before that stay (each swap
        is complete on its own), the checkpoint does not move."""
        offset_map, end = self._build_offset_map(lg, c)
        # Rewrite from the log start: the clean part may hold older records of keys in the map.
        n = sum(1 for e in c.ends if e <= end)
        stats = CleanStats(lg.topic, lg.partition, c.first_dirty, end)
        if not n:
            return stats
        txns = _Transactions(lg.collect_aborted_txns(c.segments[0].base_offset, end))
        retention = _Retention(offset_map, txns, now, lg.config.delete_retention_ms, stats)
        for group in group_segments(c.segments[:n], c.ends[:n], lg.config):
            self._clean_group(lg, group, retention, c.generation, stats)
        return stats

    def _build_offset_map(self, lg: Log, c: _Cleanable) -> tuple[dict[Hashable, int], int]:
        """key -> offset of its latest record in the dirty part, and the offset the map covers up to
        (a segment boundary: with max_map_keys reached, the rest waits for the next pass, as in Kafka).
        Markers and the records of aborted transactions count for no key."""
        offset_map: dict[Hashable, int] = {}
        end = c.first_dirty
        txns = _Transactions(lg.collect_aborted_txns(c.first_dirty, c.ends[-1] if c.ends else c.first_dirty))
        for seg, seg_end in zip(c.segments, c.ends):
            if seg_end <= c.first_dirty:
                continue
            for h, data in self._batches(seg):
                if h.last_offset < c.first_dirty:
                    continue
                if h.is_control:
                    txns.on_marker(h, data)  # ends its transaction: the producer's later batches are new ones
                    continue
                if txns.is_aborted(h):
                    continue
                for rec in records_of(data, 0, h):
                    offset, key = h.base_offset + rec[0], _map_key(rec[2])
                    if key is not None and offset >= c.first_dirty:
                        offset_map[key] = offset
            end = seg_end
            if len(offset_map) >= self.max_map_keys:
                break
        return offset_map, end

    def _clean_group(
        self, lg: Log, group: list[LogSegment], retention: _Retention, generation: int, stats: CleanStats
    ) -> None:
        if lg.closed:  # deleted or shutting down: its directory may be gone already
            raise CleanerAborted("the log was closed")
        new = lg.new_cleaned_segment(group[0].base_offset)
        try:
            changed = self._copy_retained(group, new, retention, stats)
            if len(group) == 1 and not changed:
                new.delete()  # the same segment again: not worth a swap
                stats.bytes_after += group[0].size
                return
            new.on_become_inactive()
            new.flush()
            new.release_index_fds()
            # Retention of an empty segment goes by mtime: keep the old one's, as Kafka does.
            st = os.stat(group[-1].path)
            os.utime(new.path, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            new.delete()
            raise
        stats.bytes_after += new.size
        if not lg.replace_segments(group, new, generation):
            raise CleanerAborted("the log was truncated, lost segments to retention or closed")
        stats.groups_swapped += 1

    def _copy_retained(self, group: list[LogSegment], new: LogSegment, retention: _Retention, stats: CleanStats) -> int:
        """Append what survives of `group` to `new`; returns how many batches changed (lost records or were
        given a delete horizon)."""
        changed = 0
        for seg in group:
            stats.bytes_before += seg.size
            for h, data in self._batches(seg):
                kept = retention.marker(h, data, new) if h.is_control else retention.data(h, data)
                if kept is not data:
                    changed += 1
                if kept is not None:
                    new.append(h.last_offset, parse_header(kept).max_timestamp, h.last_offset, kept)
        return changed

    def _batches(self, seg: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
        for h, data in read_batches(seg.path, seg.size):
            if self._stopping.is_set():
                raise CleanerAborted("the broker is shutting down")
            yield h, data

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


# --- helpers ------------------------------------------------------------------------------


def group_segments(segments: list[LogSegment], ends: list[int], config: LogConfig) -> list[list[LogSegment]]:
    """Consecutive segments that fit in one cleaned segment (Kafka's groupSegmentsBySize): at most
    segment.bytes of log, segment.index.bytes of index, relative offsets within 4 bytes."""
    max_entries = config.segment_index_bytes // 8
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        size, entries, j = first.size, len(first.offset_index), i + 1
        while (
            j < len(segments)
            and size + segments[j].size <= config.segment_bytes
            and entries + len(segments[j].offset_index) <= max_entries
            and ends[j] - 1 - first.base_offset <= MAX_RELATIVE_OFFSET
        ):
            size += segments[j].size
            entries += len(segments[j].offset_index)
            j += 1
        groups.append(segments[i:j])
        i = j
    return groups


def read_batches(path: Path, size: int, chunk: int = _READ_CHUNK) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch in the first `size` bytes of a segment file, CRC-checked (raises InvalidBatch). Through
    a private fd: retention may close the segment's own meanwhile (the swap then notices)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pos, buf, buf_pos = 0, b"", 0  # buf holds file bytes [buf_pos, buf_pos + len(buf))
        while pos < size:
            off = pos - buf_pos
            want = _batch_bytes(buf, off)
            if len(buf) - off < want:
                buf, buf_pos, off = os.pread(fd, min(max(chunk, want), size - pos), pos), pos, 0
                want = _batch_bytes(buf, 0)
                if len(buf) < want:  # a batch larger than the chunk: now its size is known
                    buf = os.pread(fd, min(want, size - pos), pos)
            h = validate(buf, off)
            yield h, buf[off : off + h.size]
            pos += h.size
    finally:
        os.close(fd)


def _batch_bytes(buf: bytes, off: int) -> int:
    """How many bytes from `off` the batch there needs, as far as `buf` tells (at least a header)."""
    if len(buf) - off < LOG_OVERHEAD:
        return HEADER_SIZE
    return max(HEADER_SIZE, int.from_bytes(buf[off + 8 : off + 12], "big", signed=True) + LOG_OVERHEAD)


def _map_key(key: object) -> Hashable | None:
    """Keys are msgpack bin. Anything else a client managed to write is keyed by its encoding, in a
    tuple so that it can never equal a bin key."""
    if key is None or isinstance(key, bytes):
        return key
    return ("msgpack", msgpack.packb(key, use_bin_type=True))


def rebuild_batch(h: BatchHeader, kept: Sequence[_Record], delete_horizon: int | None = None) -> bytes:
    """Re-encode the kept records of batch `h` with its codec. Offsets, timestamps, leader epoch, producer
    fields and the control flag stay, and so does lastOffsetDelta: the batch still ends where it did, so the
    next fetch offset (base + lastOffsetDelta + 1) is unchanged even if its last record went. The batch keeps
    its delete horizon, or gets `delete_horizon` (Kafka's MemoryRecords.filterTo)."""
    horizon = h.delete_horizon_ms if delete_horizon is None else delete_horizon
    # Without a horizon firstTimestamp becomes the first kept record's, as the format says; with one it is
    # the horizon and build() counts the deltas from it.
    shift = kept[0][1] if horizon is None else 0
    records = [[r[0], r[1] - shift, r[2], r[3], r[4]] for r in kept]
    first_ts = h.first_timestamp + shift
    log_append_time = bool(h.attributes & TIMESTAMP_LOG_APPEND)
    max_ts = h.max_timestamp if log_append_time else max(first_ts + r[1] for r in records)
    out = bytearray(
        build(
            records,
            first_ts,
            max_ts,
            h.codec,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.base_offset,
            last_offset_delta=h.last_offset_delta,
            transactional=h.is_transactional,  # a committed transaction's batch stays one
            control=h.is_control,
            delete_horizon=horizon,
        )
    )
    stamp(out, h.base_offset, h.leader_epoch)
    if log_append_time:
        set_log_append_time(out, 0, parse_header(out), h.max_timestamp)
    return bytes(out)
