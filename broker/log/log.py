"""Log: the segments of one topic-partition, `<data_dir>/<topic>-<partition>/`.

Loading and recovery at startup are broker/log/loader.py's (Kafka's LogLoader); the on-disk steps of the
compaction swap are broker/log/swap.py's. This module is the live log: append, roll, read, truncate,
retention, flush.

Batches are opaque: the log validates headers and CRCs, stamps offsets and
leader epochs into the header, and never decodes a record. An append does
O(batches) work plus one copy of the request bytes.
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from broker.log.checkpoint import LeaderEpochCheckpoint
from broker.log.config import LogConfig
from broker.log.epoch import LeaderEpochFileCache
from broker.log.loader import RECOVERED_HEADERS, LogLoader, create_segment
from broker.log.segment import MAX_RELATIVE_OFFSET, LogSegment
from broker.log.swap import abort_swap, begin_swap, commit_point, commit_swap, new_cleaned_segment
from broker.log.txn_index import AbortedTxn
from net.batch import (
    CRC_OFFSET,
    CRC_START,
    MAGIC,
    TIMESTAMP_LOG_APPEND,
    BatchHeader,
    InvalidBatch,
    parse_header,
    recompress,
    records_of,
    stamp,
    validate,
)
from net.errors import (
    CorruptMessageError,
    ErrorCode,
    InvalidTimestampError,
    KafkaLiteError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from net.protocol import OffsetSpec

__all__ = ["Log", "LogAppendInfo", "LogConfig", "UnexpectedAppendOffsetError"]

log = logging.getLogger("kafkalite.log")

_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


class UnexpectedAppendOffsetError(KafkaLiteError):
    """A follower append that does not continue the log (Kafka's UnexpectedAppendOffsetException)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class RecordListTooLargeError(KafkaLiteError):
    """A batch larger than segment.bytes (Kafka's RecordBatchTooLargeException)."""

    code = ErrorCode.RECORD_LIST_TOO_LARGE


@dataclass(slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime
    record_count: int
    valid_bytes: int


_EMPTY = LogAppendInfo(-1, -1, -1, -1, -1, 0, 0)


class Log:
    def __init__(
        self,
        dir: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        clean_shutdown: bool = False,
        clock: Callable[[], float] = time.time,
        defer_files: bool = False,
    ) -> None:
        """`defer_files`: a new, empty log whose directory and first segment files are not created here but
        by `create_files()`, later and possibly in another thread, or at the first write at the latest. It
        serves reads, ListOffsets and the leader-epoch lookups of an empty log meanwhile (issue 25: creating
        5,000 partitions' files on the event loop cost 11 s of syscalls and stalled produce)."""
        self.dir = Path(dir)
        self.topic = topic
        self.partition = partition
        self.config = config
        self._clock = clock
        # Appends/reads run on the event loop, retention and flush in worker threads.
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._closed = False
        # Compaction (broker/log/cleaner.py) reads closed segments without the lock; anything that truncates
        # or deletes segments bumps the generation, so the cleaner's swap can tell its input is gone.
        self._generation = 0
        self._truncated_to: int | None = None  # lowest truncation since the cleaner last asked
        self._pending_swap: LogSegment | None = None  # a committed `.swap` not yet in the segment list
        # The Partition's producer-state snapshot at each roll (Kafka's ProducerStateManager.takeSnapshot).
        self.on_roll: Callable[[int], None] | None = None
        self.log_start_offset = self.recovery_point = 0  # set by _load
        # The first segment whose `.txnindex` the loader emptied (recovered): the owner's producer-state replay
        # from there rebuilds them (take_txn_rebuild_from, append_aborted_txn).
        self._txn_rebuild_from: int | None = None
        # The loader's recovered batch headers, for that replay (take_recovered_batches); dropped at any change.
        self._recovered_batches: tuple[int, list[BatchHeader]] | None = None
        # The segments whose .txnindex has entries, in order (None: to be listed again): a read_committed fetch
        # walks only these, not every segment after its offset.
        self._txn_segments: list[LogSegment] | None = None
        # Taken around creating deferred files, before `_lock` (never the other way round): the file work runs
        # outside `_lock`, so reads and appends of the log are not held up by it.
        self._files_lock = threading.Lock()
        self._on_disk = not defer_files
        if defer_files:
            self._epochs = LeaderEpochFileCache(self.dir / LeaderEpochCheckpoint.FILE_NAME, read=False)
            self._add_segment(LogSegment(self.dir, 0, clock=clock, create=False))  # empty: no file to read
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._epochs = LeaderEpochFileCache(self.dir / LeaderEpochCheckpoint.FILE_NAME)
            self._load(recovery_point, log_start_offset, clean_shutdown)
        self.last_flush_ms = self._now_ms()

    def __repr__(self) -> str:
        end = self.log_end_offset if self._segments else "?"  # "?" while _load has not opened any segment
        return f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={end})"

    # --- loading (broker/log/loader.py) ---------------------------------------------

    def _load(self, recovery_point: int, log_start_offset: int | None, clean_shutdown: bool) -> None:
        loaded = LogLoader(self.dir, self.config, self._epochs, self._clock, repr(self)).load(
            recovery_point, log_start_offset, clean_shutdown
        )
        for seg in loaded.segments:
            self._add_segment(seg)
        self.log_start_offset, self.recovery_point = loaded.log_start_offset, loaded.recovery_point
        self._txn_rebuild_from = loaded.txn_rebuild_from
        self._recovered_batches = loaded.recovered_batches

    def _create_segment(self, base: int) -> LogSegment:
        return create_segment(self.dir, base, self.config, self._clock)

    @property
    def on_disk(self) -> bool:
        """Whether the log's directory and files exist (False for a `defer_files` log until `create_files`)."""
        return self._on_disk

    def create_files(self) -> bool:
        """Create the directory and the (empty) active segment's files of a `defer_files` log; whether it
        did. Nothing happens for a log already on disk or closed (deleted meanwhile: it must leave nothing)."""
        if self._on_disk:
            return False
        with self._files_lock:
            if self._on_disk or self._closed:
                return False
            placeholder = self._segments[-1]  # the only segment: nothing is appended before the files exist
            self.dir.mkdir(parents=True, exist_ok=True)
            seg = self._create_segment(placeholder.base_offset)
            with self._lock:
                self._segments[-1] = seg
                self._on_disk = True
            placeholder.close()
            return True

    def _ensure_files(self) -> None:
        """Before a write, outside `_lock`: a deferred log gets its files now if the creator has not yet."""
        if not self._on_disk:
            try:
                self.create_files()
            except OSError as e:
                raise KafkaStorageError(f"cannot create the files of {self.topic}-{self.partition}: {e}") from e

    def _add_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._txn_segments = None

    # --- state -------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    @property
    def leader_epoch_entries(self) -> list[tuple[int, int]]:
        return self._epochs.entries

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        with self._lock:
            return self._epochs.end_offset_for_epoch(epoch, self.log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        # segment.index.bytes applies to segments created from now on, as in Kafka.
        with self._lock:
            self.config = config
            for seg in self._segments:
                seg.index_interval_bytes = config.index_interval_bytes

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # --- append ------------------------------------------------------------------

    def _analyze(self, records: bytes | bytearray | memoryview, leader: bool) -> list[tuple[int, BatchHeader]]:
        """Validate every batch before anything is written: an append is all or nothing."""
        out = []
        pos, end = 0, len(records)
        max_bytes, segment_bytes = self.config.max_message_bytes, self.config.segment_bytes
        while pos < end:
            try:
                h = validate(records, pos, end)
            except InvalidBatch as e:
                raise CorruptMessageError(f"{self.topic}-{self.partition}: batch at byte {pos}: {e}") from None
            if h.size > max_bytes:
                raise MessageTooLargeError(
                    f"batch of {h.size} bytes exceeds max.message.bytes={max_bytes} of {self.topic}"
                )
            if h.size > segment_bytes:
                raise RecordListTooLargeError(
                    f"batch of {h.size} bytes exceeds segment.bytes={segment_bytes} of {self.topic}"
                )
            if leader and (h.record_count < 1 or h.record_count != h.last_offset_delta + 1):
                raise CorruptMessageError(
                    f"batch at byte {pos}: record count {h.record_count} does not match "
                    f"last offset delta {h.last_offset_delta}"
                )
            if leader and self.config.compact_enabled:
                self._check_keys(records, pos, h)
            out.append((pos, h))
            pos += h.size
        return out

    def _check_keys(self, records: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> None:
        """Kafka refuses keyless records on a compacted topic (the cleaner would have to drop them). The
        only place the log decodes records, and only for compacted topics, as Kafka's LogValidator."""
        try:
            keyless = any(r[2] is None for r in records_of(records, pos, h))
        except Exception as e:  # a bad codec frame or msgpack: whatever the codec library raises
            raise CorruptMessageError(f"{self.topic}-{self.partition}: batch at byte {pos}: {e}") from None
        if keyless:
            raise CorruptMessageError(
                f"compacted topic {self.topic} cannot accept a record without a key (partition {self.partition})"
            )

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> LogAppendInfo:
        """Assign offsets from the log end offset, stamp `leader_epoch`, append. Raises CorruptMessageError,
        MessageTooLargeError or KafkaStorageError with nothing appended."""
        batches = self._analyze(records, leader=True)
        if not batches:
            return _EMPTY
        if self.config.compression_type != "producer":  # names a codec: recompress (the default never does)
            records, batches = self._recompressed(records, batches, self.config.stored_codec or 0)
        now = self._now_ms()
        append_time = now if self.config.log_append_time else -1
        if append_time < 0:
            self._check_timestamps(batches, now)
        buf = bytearray(records)  # the one copy: offsets and epochs are stamped in place
        self._ensure_files()
        with self._lock:
            self._check_open()
            first = offset = self.log_end_offset
            max_ts, max_ts_offset, count = -1, first, 0
            for pos, h in batches:
                stamp(buf, offset, leader_epoch, pos)
                last = offset + h.last_offset_delta
                ts = h.max_timestamp
                if append_time >= 0:
                    ts = append_time
                    set_log_append_time(buf, pos, h, append_time)
                if ts > max_ts:
                    max_ts, max_ts_offset = ts, last
                count += h.record_count
                offset = last + 1
            self._append(buf, offset - 1, max_ts, max_ts_offset, now)
            self._epochs.assign(leader_epoch, first)
            return LogAppendInfo(first, offset - 1, max_ts, max_ts_offset, append_time, count, len(buf))

    def _recompressed(
        self, records: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]], codec: int
    ) -> tuple[bytes | bytearray | memoryview, list[tuple[int, BatchHeader]]]:
        """Kafka's broker-side recompression: every batch not in the topic's codec, recompressed to it (a
        batch of Kafka Lite 0.1's format stays as it is). max.message.bytes applies to the result."""
        if all(h.codec == codec or h.magic != MAGIC for _, h in batches):
            return records, batches
        level = self.config.compression_level
        parts, out, pos = [], [], 0
        for p, h in batches:
            if h.codec == codec or h.magic != MAGIC:
                data = bytes(records[p : p + h.size])
            else:
                try:
                    data = recompress(records, p, h, codec, level)
                except Exception as e:  # a compressed section that does not decompress (cramjam's errors)
                    raise CorruptMessageError(f"{self.topic}-{self.partition}: batch at byte {p}: {e}") from None
                if len(data) > self.config.max_message_bytes:
                    raise MessageTooLargeError(
                        f"batch of {len(data)} bytes after recompression exceeds max.message.bytes="
                        f"{self.config.max_message_bytes} of {self.topic}"
                    )
            out.append((pos, parse_header(data)))
            parts.append(data)
            pos += len(data)
        return b"".join(parts), out

    def _check_timestamps(self, batches: list[tuple[int, BatchHeader]], now: int) -> None:
        """message.timestamp.before/after.max.ms of a CreateTime topic, on each batch's first and largest
        timestamp (Kafka checks every record; a record between the two passes here too). Two comparisons a
        batch: nothing is decoded."""
        c = self.config
        for _, h in batches:
            if h.first_timestamp < now - c.message_timestamp_before_max_ms or (
                h.max_timestamp > now + c.message_timestamp_after_max_ms
            ):
                bad = (
                    h.first_timestamp
                    if h.first_timestamp < now - c.message_timestamp_before_max_ms
                    else h.max_timestamp
                )
                raise InvalidTimestampError(
                    f"{self.topic}-{self.partition}: timestamp {bad} is out of range for the broker's time {now} "
                    f"(message.timestamp.before.max.ms={c.message_timestamp_before_max_ms}, "
                    f"message.timestamp.after.max.ms={c.message_timestamp_after_max_ms})"
                )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches replicated from the leader, keeping their offsets and epochs."""
        batches = self._analyze(records, leader=False)
        if not batches:
            return _EMPTY
        self._ensure_files()
        with self._lock:
            self._check_open()
            expected = self.log_end_offset
            # The leader's compacted log has gaps where the cleaner removed whole batches: accept a batch
            # beyond our end there, as Kafka does. Other logs are contiguous, so a gap is a bug.
            gaps_ok = self.config.compact_enabled
            max_ts, max_ts_offset, count = -1, expected, 0
            for pos, h in batches:
                if h.base_offset < expected or (h.base_offset != expected and not gaps_ok):
                    raise UnexpectedAppendOffsetError(
                        f"{self.topic}-{self.partition}: batch at byte {pos} has base offset {h.base_offset}, "
                        f"expected {expected}"
                    )
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_offset = h.max_timestamp, h.last_offset
                count += h.record_count
                expected = h.next_offset
            first = batches[0][1].base_offset
            self._append(records, expected - 1, max_ts, max_ts_offset, self._now_ms())
            for _, h in batches:
                self._epochs.assign(h.leader_epoch, h.base_offset)
            return LogAppendInfo(first, expected - 1, max_ts, max_ts_offset, -1, count, len(records))

    def _append(
        self, data: bytes | bytearray | memoryview, last_offset: int, max_ts: int, max_ts_offset: int, now_ms: int
    ) -> None:
        self._drop_recovered_batches()  # they no longer reach the log end
        seg = self._maybe_roll(len(data), last_offset, now_ms)
        seg.append(last_offset, max_ts, max_ts_offset, data)
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()

    def _maybe_roll(self, size: int, last_offset: int, now_ms: int) -> LogSegment:
        seg = self._segments[-1]
        c = self.config
        if seg.size and (
            seg.size > c.segment_bytes - size
            or (
                seg.created_ms is not None
                and now_ms - seg.created_ms
                > c.segment_ms - (c.roll_jitter_ms(seg.base_offset) if c.segment_jitter_ms else 0)
            )
            or seg.is_full()
            or last_offset - seg.base_offset > MAX_RELATIVE_OFFSET
        ):
            return self.roll()
        return seg

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active segment is empty)."""
        with self._lock:
            self._check_open()
            seg = self._segments[-1]
            if seg.size == 0:
                return seg
            seg.on_become_inactive()
            new = self._create_segment(self.log_end_offset)
            self._add_segment(new)
            log.debug("%s: rolled new segment %s", self, new.path.name)
            if self.on_roll is not None:
                self.on_roll(new.base_offset)
            return new

    # --- read --------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one_message: bool = True) -> bytes:
        """Whole batches starting with the one that holds `offset`, up to `max_bytes` (one oversized batch
        if `min_one_message`). Only batches entirely below `max_offset` (the high watermark) are returned."""
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range [{self.log_start_offset}, {leo}] "
                    f"for {self.topic}-{self.partition}"
                )
            if offset == leo or (max_offset is not None and offset >= max_offset):
                return b""
            for seg in self._segments[bisect_right(self._bases, offset) - 1 :]:
                if offset >= seg.next_offset or seg.size == 0:
                    # Past this segment's data (truncated, or compaction removed its tail) or the segment is
                    # empty (compaction removed all of it): the next one has the next batch.
                    continue
                max_position = None
                if max_offset is not None and max_offset < seg.next_offset:
                    found = seg.translate_offset(max_offset)
                    max_position = found[0] if found is not None else None
                # Like Kafka, one read never spans segments; an empty result here is final (size or HW limit).
                return seg.read(offset, max_bytes, max_position, min_one_message)
            return b""

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) for ListOffsets: the earliest (-2, or -4 for the first local offset: the same
        without tiered storage) or latest (-1) offset with timestamp -1; the record with the largest timestamp
        (-3, KIP-734); else the first record at or after the log start whose timestamp is >= `timestamp`, its
        offset and its own timestamp, as Kafka answers. None: no such record (nothing is tiered, -5)."""
        with self._lock:
            if timestamp in (OffsetSpec.EARLIEST, OffsetSpec.EARLIEST_LOCAL):
                return self.log_start_offset, -1
            if timestamp == OffsetSpec.LATEST:
                return self.log_end_offset, -1
            live = [seg for seg in self._segments if seg.next_offset > self.log_start_offset]
            if timestamp == OffsetSpec.MAX_TIMESTAMP:
                newest = max((seg.max_timestamp for seg in live), default=-1)
                if newest < 0:
                    return None
                timestamp = newest  # the first record stamped with it
            elif timestamp < 0:
                return None
            for seg in live:
                if seg.max_timestamp >= timestamp:
                    found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                    if found is not None:
                        return found
            return None

    # --- aborted transactions (the segments' .txnindex files) -----------------------

    def take_txn_rebuild_from(self) -> int | None:
        """Once, after loading: the offset from which aborts must be re-added to the `.txnindex` files (the
        first recovered segment's base offset), or None."""
        with self._lock:
            point, self._txn_rebuild_from = self._txn_rebuild_from, None
            return point

    def take_recovered_batches(self, from_offset: int) -> list[BatchHeader] | None:
        """Once, after loading: the headers of every batch from the one holding `from_offset` to the log end, as
        the recovery read them, or None (not recovered from there, or the log changed since): the producer-state
        replay then reads the log."""
        with self._lock:
            recovered = self._recovered_batches
            self._drop_recovered_batches()
        if recovered is None or from_offset < recovered[0]:
            return None
        return [h for h in recovered[1] if h.base_offset + h.last_offset_delta >= from_offset]

    def append_aborted_txn(self, txn: AbortedTxn) -> bool:
        """Record an abort in the `.txnindex` of the segment holding its marker; False if it is there already
        (a replay over an index that has it) or its segment is gone."""
        with self._lock:
            self._check_open()
            i = bisect_right(self._bases, txn.last_offset) - 1
            if i < 0 or not self._segments[i].txn_index.append(txn):
                return False
            self._txn_segments = None
            return True

    def collect_aborted_txns(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read of [start, upper_bound) overlaps (Kafka's Log.collectAbortedTransactions):
        from the segment holding `start` on, until an entry's LSO shows no later abort can concern the read."""
        out: list[AbortedTxn] = []
        with self._lock:
            if self._txn_segments is None:
                self._txn_segments = [seg for seg in self._segments if seg.txn_index.entries]
            first = self._bases[max(0, bisect_right(self._bases, start) - 1)]
            for seg in self._txn_segments:
                if seg.base_offset < first:
                    continue  # before the segment holding `start`: as Kafka, not looked at
                found, complete = seg.txn_index.collect(start, upper_bound)
                out.extend(found)
                if complete:  # else a later marker may end a transaction that began before upper_bound
                    break
        return out

    # --- truncation and retention ------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and above `offset` (at a batch boundary: the batch holding `offset` goes).
        Returns False if there was nothing to remove."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return False
            self._invalidate_cleaning()
            if offset < self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                self._segments.pop().delete()
                self._bases.pop()
            self._segments[-1].truncate_to(offset)
            leo = self.log_end_offset
            self._note_truncation(leo)  # at a batch boundary, possibly well below `offset` in a compacted log
            self.recovery_point = min(self.recovery_point, leo)
            self.log_start_offset = min(self.log_start_offset, leo)
            self._epochs.truncate_from_end(leo)
            log.info("%s: truncated to %d", self, leo)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all data; the log restarts empty at `offset` (a follower far behind the leader's log start)."""
        self._ensure_files()  # then its log start offset is checkpointed with a directory to find it by
        with self._lock:
            self._check_open()
            self._invalidate_cleaning()
            self._note_truncation(offset)
            for seg in self._segments:
                seg.delete()
            self._segments, self._bases = [], []
            self._add_segment(self._create_segment(offset))
            self.log_start_offset = self.recovery_point = offset
            self._epochs.clear()

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to `offset` (Kafka's maybeIncrementLogStartOffset: DeleteRecords on a leader,
        the leader's log start on a follower). Records below it are no longer served; the segments wholly below it
        are deleted by the next retention pass. The caller checkpoints it (LogManager.checkpoint) to keep it across
        a restart. False if the log already starts there or later."""
        with self._lock:
            self._check_open()
            if offset <= self.log_start_offset:
                return False
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"cannot start {self.topic}-{self.partition} at {offset}: its log ends at {self.log_end_offset}"
                )
            self.log_start_offset = offset
            self.recovery_point = max(self.recovery_point, offset)
            self._epochs.truncate_from_start(offset)
            log.info("%s: log start offset moved to %d", self, offset)
            return True

    def delete_retention_segments(self, now_ms: int | None = None) -> int:
        """Delete the oldest closed segments that are past retention.ms (by their largest timestamp), over
        retention.bytes, or wholly below the log start offset. Returns how many were deleted."""
        now = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return 0
            c = self.config
            by_policy = c.delete_enabled
            diff = self.size_bytes - c.retention_bytes if by_policy and c.retention_bytes >= 0 else None
            n = 0
            for seg, next_base in zip(self._segments[:-1], self._bases[1:], strict=True):
                expired = next_base <= self.log_start_offset
                if by_policy and c.retention_ms >= 0 and now - seg.largest_timestamp > c.retention_ms:
                    expired = True
                if diff is not None and diff - seg.size >= 0:
                    expired = True
                if not expired:
                    break
                if diff is not None:
                    diff -= seg.size
                n += 1
            if not n:
                return 0
            self._invalidate_cleaning()
            for seg in self._segments[:n]:
                seg.delete()
            del self._segments[:n], self._bases[:n]
            self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
            self.recovery_point = max(self.recovery_point, self.log_start_offset)
            self._epochs.truncate_from_start(self.log_start_offset)
            log.info("%s: deleted %d segments by retention, log start offset now %d", self, n, self.log_start_offset)
            return n

    # --- compaction: the log's side of broker/log/cleaner.py ----------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def cleaning_snapshot(self) -> tuple[list[LogSegment], int]:
        """The segments and the generation they belong to, read together."""
        with self._lock:
            return list(self._segments), self._generation

    def take_truncation_point(self) -> int | None:
        """The lowest offset the log was truncated to since the last call, or None: the cleaner's
        checkpoint must come down to it, since what follows it now is new, uncleaned data."""
        with self._lock:
            point, self._truncated_to = self._truncated_to, None
            return point

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty segment with `.cleaned` files for the cleaner to fill (broker/log/swap.py step 1)."""
        return new_cleaned_segment(self.dir, base_offset, self.config, self._clock)

    def replace_segments(self, old: list[LogSegment], new: LogSegment, generation: int) -> bool:
        """Swap the flushed `.cleaned` segment `new` in for `old`, consecutive closed segments the first of
        which has new's base offset. Returns False, with `new` deleted, if the log was truncated, lost
        segments to retention or was closed since `generation`.

        1. rename new's files `.cleaned` -> `.swap` and fsync the directory: the commit point;
        2. under the lock, put `new` in the segment list in place of `old` (a new list: readers hold the
           lock, so they see the old segments or the new one, never a mix), rename old's files to
           `.deleted` and new's to their final names;
        3. close old's files and unlink them.
        The renames are broker/log/swap.py's; at load, its finish_interrupted_swaps completes or discards a
        swap interrupted between any two renames, and anything that truncates or deletes segments meanwhile
        aborts it (_abort_pending_swap).
        """
        with self._lock:
            if self._closed or generation != self._generation or self._position_of(old) is None:
                new.delete()
                return False
            begin_swap(new)
            self._pending_swap = new
        # Durable before any old file is renamed, so that a crash can only complete the swap. Outside the
        # lock: a directory fsync can take milliseconds, and appends and fetches wait for the lock.
        commit_point(self.dir)
        with self._lock:
            if self._pending_swap is not new:
                return False  # a truncation, retention or close aborted (and deleted) it meanwhile
            self._pending_swap = None
            # Same generation, so only appends happened: `old` is where it was.
            i = self._position_of(old)
            assert i is not None
            segments = self._segments[:i] + [new] + self._segments[i + len(old) :]
            self._segments, self._bases = segments, [s.base_offset for s in segments]
            self._txn_segments = None
            self._drop_recovered_batches()
            commit_swap(old, new)
        for seg in old:
            seg.delete()  # nobody reads them any more: readers take the lock and see the new list
        return True

    def _position_of(self, old: list[LogSegment]) -> int | None:
        """The index of `old` in the segment list if it is there, in order, and not the active segment."""
        i = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
        if i is None or i + len(old) >= len(self._segments):
            return None
        if any(a is not b for a, b in zip(self._segments[i : i + len(old)], old)):
            return None
        return i

    def _invalidate_cleaning(self) -> None:
        """Under the lock, before segments are truncated or deleted: a cleaning may be reading them."""
        self._generation += 1
        self._drop_recovered_batches()  # the recovery's headers no longer describe the segments
        self._txn_segments = None
        self._abort_pending_swap()

    def _drop_recovered_batches(self) -> None:
        """Under the lock (or while loading): forget the recovery's headers, their share of the budget back."""
        if self._recovered_batches is not None:
            RECOVERED_HEADERS.give_back(len(self._recovered_batches[1]))
            self._recovered_batches = None

    def _note_truncation(self, log_end_offset: int) -> None:
        if self._truncated_to is None or log_end_offset < self._truncated_to:
            self._truncated_to = log_end_offset

    def _abort_pending_swap(self) -> None:
        new, self._pending_swap = self._pending_swap, None
        if new is not None:
            abort_swap(self.dir, new)
            log.info("%s: aborted the compaction swap of %s", self, new.path.name)

    # --- durability and lifecycle -------------------------------------------------

    def flush(self, upto: int | None = None) -> None:
        """fsync segments holding offsets below `upto` (default: the log end offset), then advance the
        recovery point. The fsyncs run without the lock so appends continue meanwhile."""
        with self._lock:
            if self._closed:
                return
            leo = self.log_end_offset
            upto = leo if upto is None else min(upto, leo)
            if upto <= self.recovery_point:
                return
            todo = [s for s in self._segments if s.base_offset < upto and s.next_offset > self.recovery_point]
        for seg in todo:
            seg.flush()
        with self._lock:
            for seg in todo:
                if seg is not self._segments[-1]:
                    seg.release_index_fds()  # under the lock: appends/truncation reopen them under it too
            self.recovery_point = max(self.recovery_point, min(upto, self.log_end_offset))
            self.last_flush_ms = self._now_ms()

    def close(self) -> None:
        # The files lock first: a creation under way finishes before, and none starts after (on_disk is final).
        with self._files_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            self._abort_pending_swap()
            self._drop_recovered_batches()
            for seg in self._segments:
                seg.close()

    def delete(self) -> None:
        """Close and remove the partition directory."""
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaLiteError(f"log {self.topic}-{self.partition} is closed", ErrorCode.NOT_LEADER_OR_FOLLOWER)


def set_log_append_time(buf: bytearray, pos: int, h: BatchHeader, now_ms: int) -> None:
    """Kafka's setMaxTimestamp(LOG_APPEND_TIME, now): flag the batch, set its max timestamp, redo the CRC."""
    _I16.pack_into(buf, pos + _ATTRIBUTES_OFFSET, h.attributes | TIMESTAMP_LOG_APPEND)
    _I64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, now_ms)
    with memoryview(buf)[pos + CRC_START : pos + h.size] as body:
        _U32.pack_into(buf, pos + CRC_OFFSET, crc32c(body))
