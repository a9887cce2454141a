"""LogSegment: one `<base>.log` file of stamped record batches plus its two sparse indexes and its aborted
transactions (`.txnindex`, broker/log/txn_index.py).

The segment never decodes records: it only reads batch headers (and, during
recovery, checks the CRC). Data is written with os.write on an unbuffered fd,
so once append() returns the bytes are in the page cache and survive a crash
of the process (not of the machine: that is what flush() and the recovery
point are for). Descriptors come from the logs' bounded cache (broker/log/file_handles.py): a segment opens
its files when first read or written, not when created or loaded empty, and may have them closed between
uses when the broker has more segments than `log.segment.open.files.max`.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from broker.log.file_handles import CachedFile, create_file
from broker.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from broker.log.txn_index import TXN_INDEX_SUFFIX, TransactionIndex
from net.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGICS,
    TIMESTAMP_LOG_APPEND,
    BatchHeader,
    InvalidBatch,
    parse_header,
    records_of,
    validate,
)
from net.errors import KafkaStorageError

log = logging.getLogger("kafkalite.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# Kafka's suffixes for a compaction in progress: the cleaner writes `.cleaned` files, renames them to
# `.swap` (the commit point), renames the segments they replace to `.deleted`, then drops `.swap`.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
# Offsets in the indexes are 4 bytes relative to the base offset; Kafka rolls before Int.MaxValue.
MAX_RELATIVE_OFFSET = 2**31 - 1
_SCAN_CHUNK = 64 * 1024
_TRANSLATE_CHUNK = 8 * 1024
_RECOVER_CHUNK = 1024 * 1024


def filename_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


def segment_file(dir: Path, base_offset: int, kind: str, file_suffix: str = "") -> Path:
    """`<dir>/<base>.log`, or `.index`/`.timeindex`, plus a cleaner suffix such as `.swap`."""
    return dir / f"{filename_prefix(base_offset)}{kind}{file_suffix}"


class _Reader:
    """Chunked pread over [start, end) of a file, so header scans cost one syscall per chunk, not per batch."""

    __slots__ = ("buf", "buf_pos", "chunk", "end", "fd")

    def __init__(self, fd: int, end: int, chunk: int) -> None:
        self.fd, self.end, self.chunk = fd, end, chunk
        self.buf = b""
        self.buf_pos = 0

    def get(self, pos: int, n: int) -> tuple[bytes, int]:
        """A buffer holding file bytes [pos, pos + n) (fewer at EOF) and the index of `pos` in it."""
        off = pos - self.buf_pos
        if off < 0 or off + n > len(self.buf):
            self.buf = os.pread(self.fd, min(max(n, self.chunk), self.end - pos), pos)
            self.buf_pos, off = pos, 0
        return self.buf, off


def iter_headers(fd: int, start: int, end: int, chunk: int = _SCAN_CHUNK) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch of an open segment file from `start`, reading headers only.

    Stops quietly at a trailing piece shorter than a header or at a length too short to be a batch; the
    last batch yielded may extend past `end` (a torn tail: the caller decides). Read-only, so offline
    readers of a live broker's files (pipeline/segments.py) share it."""
    reader = _Reader(fd, end, chunk)
    pos = start
    while pos + HEADER_SIZE <= end:
        buf, off = reader.get(pos, HEADER_SIZE)
        if len(buf) - off < HEADER_SIZE:
            return
        h = parse_header(buf, off)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            return  # garbage: a zero length would loop forever
        yield pos, h
        pos += h.size


class LogSegment:
    def __init__(
        self,
        dir: Path,
        base_offset: int,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
        file_suffix: str = "",
        create: bool = True,
    ) -> None:
        """`file_suffix` (".cleaned", ".swap") names the files of a segment the log cleaner is building.
        `create=False`: an empty segment whose files are not created: the placeholder of a log whose files
        are created later (broker/log/log.py, `defer_files`); it must be replaced before anything is written."""
        self.dir = Path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._clock = clock
        self.path = segment_file(self.dir, base_offset, LOG_SUFFIX, file_suffix)
        self.size = os.stat(self.path).st_size if create and create_file(self.path) else 0
        self._log = CachedFile(self.path, os.O_RDWR | os.O_APPEND)
        index_path = segment_file(self.dir, base_offset, INDEX_SUFFIX, file_suffix)
        self.offset_index = OffsetIndex(index_path, base_offset, max_index_size, create)
        time_index_path = segment_file(self.dir, base_offset, TIME_INDEX_SUFFIX, file_suffix)
        self.time_index = TimeIndex(time_index_path, base_offset, max_index_size, create)
        # Aborted transactions whose abort marker is in this segment (created at the first one, as Kafka's).
        txn_index_path = segment_file(self.dir, base_offset, TXN_INDEX_SUFFIX, file_suffix)
        self.txn_index = TransactionIndex(txn_index_path, base_offset, read=create)
        self.next_offset = base_offset
        self.max_timestamp = -1  # the largest batch max timestamp seen, -1 if none
        self.offset_of_max_timestamp = base_offset
        self._bytes_since_index_entry = 0
        # When the segment got its first data, for segment.ms; see _load_state for reloaded segments.
        self.created_ms: int | None = None
        # Set when the indexes cannot be trusted or the file does not end on a batch boundary.
        self.needs_recovery = False
        if self.size and not self.offset_index.existed:
            log.warning("missing index file %s; the segment will be recovered", self.offset_index.path)
            self.needs_recovery = True
        if create:  # a placeholder has no files: nothing to read (5,000 of them in a flood: issue 25 §4)
            self._load_state()

    # --- state -----------------------------------------------------------------

    def _load_state(self) -> None:
        """Derive next offset / max timestamp from the last index entry and the headers after it."""
        start = 0
        try:
            self.sanity_check()
            _, start = self.offset_index.last_entry()
        except CorruptIndexError as e:
            log.warning("%s; the segment will be recovered", e)
            self.needs_recovery = True
        ts, ts_off = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = ts, ts_off
        next_offset = self.base_offset
        pos = start
        first: BatchHeader | None = None
        for pos, h in self._scan(start, self.size):
            if pos + h.size > self.size:
                break
            first = first or h
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            next_offset = h.next_offset
            pos += h.size
        if pos != self.size or (len(self.time_index) and ts_off >= next_offset):
            self.needs_recovery = True
        self.next_offset = next_offset
        if not self.needs_recovery and self.txn_index.last_offset >= next_offset:
            # Aborts whose markers are past the data: a truncation whose index rewrite was lost. Never served.
            self.txn_index.truncate_to(next_offset)
        self._bytes_since_index_entry = self.size - start
        if self.size and self.created_ms is None:
            # Kafka rolls a reloaded segment by its first batch's timestamp; without one, count from now.
            if start == 0 and first is not None and first.max_timestamp >= 0:
                self.created_ms = first.max_timestamp
            else:
                self.created_ms = int(self._clock() * 1000)

    def sanity_check(self) -> None:
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check(self.size)
        self.txn_index.sanity_check()
        if len(self.offset_index):
            # The last entry must point at a batch holding its offset: catches overwritten index bytes.
            offset, position = self.offset_index.last_entry()
            with self._log.fd() as fd:
                head = os.pread(fd, HEADER_SIZE, position)
            h = parse_header(head) if len(head) == HEADER_SIZE else None
            if h is None or h.magic not in MAGICS or not h.base_offset <= offset or h.base_offset < self.base_offset:
                raise CorruptIndexError(
                    f"index file {self.offset_index.path}: entry ({offset}, {position}) does not point at its batch"
                )

    @property
    def largest_timestamp(self) -> int:
        """Kafka's segment largestTimestamp: the max batch timestamp, or the file mtime if there is none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.path).st_mtime * 1000)

    def is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def __repr__(self) -> str:
        return f"LogSegment({self.path}, base={self.base_offset}, next={self.next_offset}, size={self.size})"

    # --- append ----------------------------------------------------------------

    def append(
        self, largest_offset: int, max_timestamp: int, offset_of_max_ts: int, data: bytes | bytearray | memoryview
    ) -> None:
        """Append already-stamped batches. All or nothing: on an I/O error the segment is left unchanged."""
        if largest_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            raise KafkaStorageError(f"offset {largest_offset} does not fit in segment {self.base_offset}")
        position = self.size
        n_index, n_time = len(self.offset_index), len(self.time_index)
        if max_timestamp > self.max_timestamp:
            new_max_ts, new_max_ts_offset = max_timestamp, offset_of_max_ts
        else:
            new_max_ts, new_max_ts_offset = self.max_timestamp, self.offset_of_max_timestamp
        index_due = self._bytes_since_index_entry >= self.index_interval_bytes
        size = len(data)
        try:
            view = memoryview(data)
            written = 0
            with self._log.fd() as fd:
                while written < size:
                    written += os.write(fd, view[written:])
            if index_due:
                # Kafka indexes the largest offset of the append with the position where it starts.
                self.offset_index.append(largest_offset, position)
                self.time_index.maybe_append(new_max_ts, new_max_ts_offset)
        except OSError as e:
            self._rollback(position, n_index, n_time)
            what = "disk full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
            raise KafkaStorageError(f"error appending to {self.path}: {what}") from e
        self.size = position + size
        self.next_offset = largest_offset + 1
        self.max_timestamp, self.offset_of_max_timestamp = new_max_ts, new_max_ts_offset
        self._bytes_since_index_entry = size if index_due else self._bytes_since_index_entry + size
        if self.created_ms is None:
            self.created_ms = int(self._clock() * 1000)

    def _rollback(self, position: int, n_index: int, n_time: int) -> None:
        # Never leave half a batch (or an index entry for it) behind: the next append would follow garbage.
        try:
            with self._log.fd() as fd:
                os.ftruncate(fd, position)
            self.offset_index._truncate_entries(n_index)
            self.time_index._truncate_entries(n_time)
        except OSError:
            log.exception("cannot truncate %s back to %d after a failed append", self.path, position)
            self.needs_recovery = True

    # --- read ------------------------------------------------------------------

    def _scan(self, start: int, end: int, chunk: int = _SCAN_CHUNK) -> Iterator[tuple[int, BatchHeader]]:
        if start + HEADER_SIZE > end:
            return  # nothing to read: no descriptor needed (an empty segment stays closed)
        with self._log.fd() as fd:
            yield from iter_headers(fd, start, end, chunk)

    def translate_offset(self, offset: int, max_position: int | None = None) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch with last offset >= `offset`, or None if there is none.

        That is the batch containing `offset` or, if the offset fell in a gap,
        the next batch after it.
        """
        end = self.size if max_position is None else min(max_position, self.size)
        _, start = self.offset_index.lookup(offset)
        # Small chunks: the target is usually within one index interval of the entry.
        for pos, h in self._scan(start, end, _TRANSLATE_CHUNK):
            if pos + h.size > end:
                return None
            if h.last_offset >= offset:
                return pos, h
        return None

    def read(
        self, start_offset: int, max_bytes: int, max_position: int | None = None, min_one_message: bool = True
    ) -> bytes:
        """Whole batches from the one containing `start_offset`, at most `max_bytes` (KIP-74: unless the
        first batch alone is larger and `min_one_message`), never past `max_position`."""
        limit = self.size if max_position is None else min(max_position, self.size)
        found = self.translate_offset(start_offset, limit)
        if found is None:
            return b""
        start, first = found
        if first.size > max_bytes and not min_one_message:
            return b""
        with self._log.fd() as fd:
            if first.size > max_bytes:
                return os.pread(fd, first.size, start)
            buf = os.pread(fd, min(max_bytes, limit - start), start)
        # Cut a partial last batch; headers inside the buffer are all we need.
        end, n = 0, len(buf)
        while n - end >= LOG_OVERHEAD:
            size = int.from_bytes(buf[end + 8 : end + 12], "big") + LOG_OVERHEAD
            if end + size > n:
                break
            end += size
        return buf if end == n else buf[:end]

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int = 0) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start_offset` whose timestamp is >= `timestamp`,
        as Kafka's LogSegment.findOffsetByTimestamp: the time index and the batches' max timestamps find the
        batch, then its records are read, since a batch's timestamps need not increase (100, 400, 200 asked
        for 150 answers the record at 400, not the batch's first). A LogAppendTime batch's records all carry
        its max timestamp."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, start_offset))
        while True:
            found: tuple[int, BatchHeader] | None = None
            for pos, h in self._scan(position, self.size):
                if pos + h.size > self.size:
                    break
                if h.max_timestamp >= timestamp and h.last_offset >= start_offset:
                    found = pos, h
                    break
            if found is None:
                return None
            pos, h = found
            if h.attributes & TIMESTAMP_LOG_APPEND:
                return max(h.base_offset, start_offset), h.max_timestamp
            with self._log.fd() as fd:
                data = os.pread(fd, h.size, pos)
            for offset_delta, ts_delta, *_ in records_of(data, 0, h):
                offset, ts = h.base_offset + offset_delta, h.first_timestamp + ts_delta
                if offset >= start_offset and ts >= timestamp:
                    return offset, ts
            position = pos + h.size  # records older than the header said: look on

    # --- recovery and truncation -----------------------------------------------

    def recover(self, max_message_bytes: int = 1048588, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Validate every batch (framing, magic, CRC, increasing offsets), rebuild both indexes and truncate
        at the first bad or short batch. Returns the number of bytes truncated.

        `max_message_bytes` only sizes the read buffer: a batch larger than the current limit but with a
        good CRC was accepted under an older config and is kept.
        """
        with self._log.fd() as fd, self.offset_index.buffered(), self.time_index.buffered():
            return self._recover(fd, max_message_bytes, on_batch)

    def _recover(self, fd: int, max_message_bytes: int, on_batch: Callable[[BatchHeader], None] | None) -> int:
        self.offset_index.reset()
        self.time_index.reset()
        max_ts, max_ts_offset = -1, self.base_offset
        next_offset = self.base_offset
        last_index_pos = 0
        pos = 0
        reader = _Reader(fd, self.size, max(_RECOVER_CHUNK, max_message_bytes))
        first_ts: int | None = None
        while pos < self.size:
            buf, off = reader.get(pos, HEADER_SIZE)
            if len(buf) - off < HEADER_SIZE:
                break
            size = int.from_bytes(buf[off + 8 : off + 12], "big", signed=True) + LOG_OVERHEAD
            if size < HEADER_SIZE or pos + size > self.size:
                break
            buf, off = reader.get(pos, size)
            try:
                h = validate(buf, off, off + size)
            except InvalidBatch as e:
                log.warning("%s: invalid batch at position %d: %s", self.path, pos, e)
                break
            if h.base_offset < next_offset or h.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                log.warning("%s: batch at position %d has out-of-order offset %d", self.path, pos, h.base_offset)
                break
            if first_ts is None:
                first_ts = h.max_timestamp
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.last_offset
            if pos - last_index_pos >= self.index_interval_bytes:
                self.offset_index.append(h.last_offset, pos)
                self.time_index.maybe_append(max_ts, max_ts_offset)
                last_index_pos = pos
            if on_batch is not None:
                on_batch(h)
            next_offset = h.next_offset
            pos += size
        truncated = self.size - pos
        if truncated:
            log.warning("%s: truncating %d invalid bytes at position %d", self.path, truncated, pos)
            os.ftruncate(fd, pos)
            self.size = pos
        self.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self._bytes_since_index_entry = pos - last_index_pos
        if pos == 0:
            self.created_ms = None
        elif self.created_ms is None:
            self.created_ms = first_ts if first_ts is not None and first_ts >= 0 else int(self._clock() * 1000)
        self.needs_recovery = False
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= `offset`; returns the bytes removed.

        Kafka truncates at batch boundaries: a batch holding `offset` goes as a
        whole, so next_offset afterwards may be below `offset`.
        """
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, h = found
        removed = self.size - position
        self.offset_index.truncate_to(h.base_offset)
        self.time_index.truncate_to(h.base_offset)
        self.txn_index.truncate_to(h.base_offset)
        with self._log.fd() as fd:
            os.ftruncate(fd, position)
        self.size = position
        self._load_state()
        if position == 0:
            self.created_ms = None
        return removed

    # --- lifecycle -------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """When rolled: make the time index's last entry the segment's max timestamp (for time lookups)."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)

    def flush(self) -> None:
        try:
            with self._log.fd() as fd:
                os.fsync(fd)
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as e:
            if self._log.closed or e.errno == errno.EBADF:
                return  # closed or deleted by retention while a flush thread held it: nothing left to sync
            raise KafkaStorageError(f"error flushing {self.path}: {e.strerror}") from e

    def release_index_fds(self) -> None:
        """For a flushed inactive segment: close its index descriptors now (lookups use memory) rather than
        when the cache of open files needs room."""
        self.offset_index.release()
        self.time_index.release()

    @property
    def open_files(self) -> int:
        """Descriptors this segment holds right now (0 to 3)."""
        return sum((self._log.is_open, self.offset_index.is_open, self.time_index.is_open))

    def close(self) -> None:
        if self._log.closed:
            return
        try:
            self.on_become_inactive()
        except OSError:
            log.warning("cannot write the last time index entry of %s", self.path)
        self.offset_index.close()
        self.time_index.close()
        self._log.close()

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the three files from suffix `old` to `new` (Kafka's changeFileSuffixes). The `.log` goes
        last, so a `.log.swap` on disk means its indexes were renamed first. Works on a closed segment."""
        for index in (self.offset_index, self.time_index):
            index.rename(_resuffixed(index.path, old, new))
        self.txn_index.rename(_resuffixed(self.txn_index.path, old, new))
        path = _resuffixed(self.path, old, new)
        os.rename(self.path, path)
        self.path = path
        self._log.renamed(path)

    def delete(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self._log.close()
        for p in (self.path, self.offset_index.path, self.time_index.path):
            p.unlink(missing_ok=True)
        self.txn_index.delete()


def _resuffixed(path: Path, old: str, new: str) -> Path:
    name = path.name
    if old and not name.endswith(old):
        raise ValueError(f"{path} does not end with {old!r}")
    return path.with_name(name[: len(name) - len(old)] + new)
