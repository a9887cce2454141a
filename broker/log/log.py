"""Log: the segments of one topic-partition, `<data_dir>/<topic>-<partition>/`.

Batches are opaque: the log validates headers and CRCs, stamps offsets and
leader epochs into the header, and never decodes a record. An append does
O(batches) work plus one copy of the request bytes.
"""

from __future__ import annotations

import logging
import os
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
from broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)
from net.batch import CRC_OFFSET, CRC_START, TIMESTAMP_LOG_APPEND, BatchHeader, InvalidBatch, stamp, validate
from net.errors import (
    CorruptMessageError,
    ErrorCode,
    KafkaLiteError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)

__all__ = ["Log", "LogAppendInfo", "LogConfig", "UnexpectedAppendOffsetError"]

log = logging.getLogger("kafkalite.log")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# Left behind by an interrupted delete/compaction/swap in Kafka; never valid data here.
_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")
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
    ) -> None:
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
        self.log_start_offset = self.recovery_point = 0  # set by _load
        self.dir.mkdir(parents=True, exist_ok=True)
        self._epochs = LeaderEpochFileCache(self.dir / LeaderEpochCheckpoint.FILE_NAME)
        self._load(recovery_point, log_start_offset, clean_shutdown)
        self.last_flush_ms = self._now_ms()

    def __repr__(self) -> str:
        return f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset})"

    # --- loading -----------------------------------------------------------------

    def _load(self, recovery_point: int, log_start_offset: int | None, clean_shutdown: bool) -> None:
        bases, indexes = [], []
        for entry in os.scandir(self.dir):
            name = entry.name
            if name.endswith(_LEFTOVER_SUFFIXES):
                log.info("%s: removing leftover file %s", self, name)
                os.unlink(entry.path)
            elif name.endswith(LOG_SUFFIX) and _is_offset(name[: -len(LOG_SUFFIX)]):
                bases.append(int(name[: -len(LOG_SUFFIX)]))
            elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
                indexes.append(entry)
        have = {filename_prefix(b) for b in bases}
        for entry in indexes:
            if entry.name.split(".")[0] not in have:
                os.unlink(entry.path)  # an index without its log: from a crash during a delete
        bases.sort()
        for base in bases:
            self._add_segment(self._open_segment(base))

        # Without a clean shutdown everything after the recovery point may be torn: recover it.
        first_unflushed = len(self._segments)
        if not clean_shutdown:
            first_unflushed = max(0, bisect_right(self._bases, recovery_point) - 1)
        i = 0
        while i < len(self._segments):
            seg = self._segments[i]
            if i >= first_unflushed or seg.needs_recovery:
                truncated = seg.recover(self.config.max_message_bytes, self._recover_epoch)
                log.info(
                    "%s: recovered segment %s (%d bytes of torn or invalid tail truncated)",
                    self,
                    seg.path.name,
                    truncated,
                )
                if truncated and i >= first_unflushed and i + 1 < len(self._segments):
                    log.warning(
                        "%s: deleting %d segments after the corruption in %s",
                        self,
                        len(self._segments) - i - 1,
                        seg.path.name,
                    )
                    for later in self._segments[i + 1 :]:
                        later.delete()
                    del self._segments[i + 1 :], self._bases[i + 1 :]
            i += 1
        if not self._segments:
            self._add_segment(self._create_segment(log_start_offset or 0))

        leo = self.log_end_offset
        start = max(self._segments[0].base_offset, log_start_offset or 0)
        self.log_start_offset = min(start, leo)
        # Recovered data was read from the page cache, not necessarily from disk: keep the old point.
        self.recovery_point = leo if clean_shutdown else min(max(recovery_point, self._segments[0].base_offset), leo)
        self._epochs.truncate_from_end(leo)
        self._epochs.truncate_from_start(self.log_start_offset)

    def _recover_epoch(self, h: BatchHeader) -> None:
        if h.leader_epoch > self._epochs.latest_epoch:
            self._epochs.assign(h.leader_epoch, h.base_offset)

    def _open_segment(self, base: int) -> LogSegment:
        c = self.config
        return LogSegment(self.dir, base, c.index_interval_bytes, c.segment_index_bytes, self._clock)

    def _create_segment(self, base: int) -> LogSegment:
        prefix = self.dir / filename_prefix(base)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            stale = prefix.with_suffix(suffix)
            if stale.exists():
                log.warning("%s: removing stale %s before creating a segment there", self, stale.name)
                stale.unlink()
        return self._open_segment(base)

    def _add_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

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
            out.append((pos, h))
            pos += h.size
        return out

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> LogAppendInfo:
        """Assign offsets from the log end offset, stamp `leader_epoch`, append. Raises CorruptMessageError,
        MessageTooLargeError or KafkaStorageError with nothing appended."""
        batches = self._analyze(records, leader=True)
        if not batches:
            return _EMPTY
        buf = bytearray(records)  # the one copy: offsets and epochs are stamped in place
        now = self._now_ms()
        append_time = now if self.config.log_append_time else -1
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
                    _set_log_append_time(buf, pos, h, append_time)
                if ts > max_ts:
                    max_ts, max_ts_offset = ts, last
                count += h.record_count
                offset = last + 1
            self._append(buf, offset - 1, max_ts, max_ts_offset, now)
            self._epochs.assign(leader_epoch, first)
            return LogAppendInfo(first, offset - 1, max_ts, max_ts_offset, append_time, count, len(buf))

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches replicated from the leader, keeping their offsets and epochs."""
        batches = self._analyze(records, leader=False)
        if not batches:
            return _EMPTY
        with self._lock:
            self._check_open()
            expected = self.log_end_offset
            max_ts, max_ts_offset, count = -1, expected, 0
            for pos, h in batches:
                if h.base_offset != expected:
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
        seg = self._maybe_roll(len(data), last_offset, now_ms)
        seg.append(last_offset, max_ts, max_ts_offset, data)
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()

    def _maybe_roll(self, size: int, last_offset: int, now_ms: int) -> LogSegment:
        seg = self._segments[-1]
        c = self.config
        if seg.size and (
            seg.size > c.segment_bytes - size
            or (seg.created_ms is not None and now_ms - seg.created_ms > c.segment_ms)
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
                if offset >= seg.next_offset:
                    continue  # past this segment's data (an empty or truncated segment): the next one has it
                max_position = None
                if max_offset is not None and max_offset < seg.next_offset:
                    found = seg.translate_offset(max_offset)
                    max_position = found[0] if found is not None else None
                # Like Kafka, one read never spans segments; an empty result here is final (size or HW limit).
                return seg.read(offset, max_bytes, max_position, min_one_message)
            return b""

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) for ListOffsets: -2 earliest, -1 latest, else the first batch at or after the
        log start whose max timestamp is >= `timestamp`. The offset is that batch's base offset and the
        timestamp its max timestamp: the log works at batch, not record, granularity."""
        with self._lock:
            if timestamp == EARLIEST_TIMESTAMP:
                return self.log_start_offset, -1
            if timestamp == LATEST_TIMESTAMP:
                return self.log_end_offset, -1
            if timestamp < 0:
                return None
            for seg in self._segments:
                if seg.max_timestamp >= timestamp and seg.next_offset > self.log_start_offset:
                    found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                    if found is not None:
                        return found
            return None

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
            if offset < self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                self._segments.pop().delete()
                self._bases.pop()
            self._segments[-1].truncate_to(offset)
            leo = self.log_end_offset
            self.recovery_point = min(self.recovery_point, leo)
            self.log_start_offset = min(self.log_start_offset, leo)
            self._epochs.truncate_from_end(leo)
            log.info("%s: truncated to %d", self, leo)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all data; the log restarts empty at `offset` (a follower far behind the leader's log start)."""
        with self._lock:
            self._check_open()
            for seg in self._segments:
                seg.delete()
            self._segments, self._bases = [], []
            self._add_segment(self._create_segment(offset))
            self.log_start_offset = self.recovery_point = offset
            self._epochs.clear()

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
            for seg in self._segments[:n]:
                seg.delete()
            del self._segments[:n], self._bases[:n]
            self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
            self.recovery_point = max(self.recovery_point, self.log_start_offset)
            self._epochs.truncate_from_start(self.log_start_offset)
            log.info("%s: deleted %d segments by retention, log start offset now %d", self, n, self.log_start_offset)
            return n

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
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for seg in self._segments:
                seg.close()

    def delete(self) -> None:
        """Close and remove the partition directory."""
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaLiteError(f"log {self.topic}-{self.partition} is closed", ErrorCode.NOT_LEADER_OR_FOLLOWER)


def _is_offset(stem: str) -> bool:
    return len(stem) == 20 and stem.isdigit()


def _set_log_append_time(buf: bytearray, pos: int, h: BatchHeader, now_ms: int) -> None:
    """Kafka's setMaxTimestamp(LOG_APPEND_TIME, now): flag the batch, set its max timestamp, redo the CRC."""
    _I16.pack_into(buf, pos + _ATTRIBUTES_OFFSET, h.attributes | TIMESTAMP_LOG_APPEND)
    _I64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, now_ms)
    with memoryview(buf)[pos + CRC_START : pos + h.size] as body:
        _U32.pack_into(buf, pos + CRC_OFFSET, crc32c(body))
