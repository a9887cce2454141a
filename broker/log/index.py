"""Sparse offset and time indexes of a log segment (Kafka's `.index` and `.timeindex`).

The whole index lives in memory (two arrays) for bisect lookups; the file is
only appended to with os.write and read back at startup. Its descriptor is opened only to append, truncate
or fsync, through the logs' bounded cache of open files (broker/log/file_handles.py). Entries are not
fsynced one by one: an index is rebuilt from the log whenever it fails the
sanity check, so the log file is the only thing that has to be durable.
Files are not preallocated (unlike Kafka's mmap'ed indexes), so their length
is always a whole number of entries.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
from abc import ABC, abstractmethod
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.log.file_handles import CachedFile, create_file
from net.errors import KafkaStorageError

_OFFSET_ENTRY = struct.Struct(">II")  # relative offset, file position
_TIME_ENTRY = struct.Struct(">qI")  # timestamp, relative offset
_BIG_ENDIAN = sys.byteorder == "big"


class CorruptIndexError(KafkaStorageError):
    """An index file that does not match its segment; the segment is recovered to rebuild it."""


class _IndexFile(ABC):
    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_index_size: int, create: bool = True) -> None:
        """`create=False`: the file is not created (nor read): the index of a segment whose files do not
        exist yet (Log's deferred files), empty, never written to before they do."""
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self.existed = create_file(self.path) if create else False
        self._handle = CachedFile(self.path, os.O_RDWR | os.O_APPEND)
        self._dirty = False
        self._pending: bytearray | None = None  # entries held back by buffered(), written at its end
        size = os.stat(self.path).st_size if self.existed else 0
        # A torn last entry is reported by sanity_check; the whole entries are still usable until then.
        self._torn = size % self.entry_size
        data = b""
        if size - self._torn:
            with self._handle.fd() as fd:
                data = os.pread(fd, size - self._torn, 0)
        self._load(data)

    @abstractmethod
    def _load(self, data: bytes) -> None:
        """Implemented by OffsetIndex and TimeIndex."""

    @abstractmethod
    def _clear(self) -> None:
        """Implemented by OffsetIndex and TimeIndex."""

    @abstractmethod
    def _del_from(self, i: int) -> None:
        """Implemented by OffsetIndex and TimeIndex."""

    @abstractmethod
    def __len__(self) -> int:
        """Implemented by OffsetIndex and TimeIndex."""

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return len(self) * self.entry_size

    @property
    def is_open(self) -> bool:
        """Whether a descriptor is open (lookups use memory: only appends, truncation and fsync need one)."""
        return self._handle.is_open

    def _write(self, entry: bytes) -> None:
        self._dirty = True
        if self._pending is not None:
            self._pending += entry
            return
        with self._handle.fd() as fd:
            if os.write(fd, entry) != len(entry):  # never partial for 8-12 bytes on a local fs
                raise OSError(errno.EIO, f"short write to {self.path}")

    @contextmanager
    def buffered(self) -> Iterator[None]:
        """Appends inside are written to the file in one write at the end (also when the block raises, so the
        file holds what memory holds): a segment's recovery rebuilds hundreds of entries, one syscall each
        otherwise (~0.1 s of a 100-partition restart). Only appends may happen inside."""
        self._pending = bytearray()
        try:
            yield
        finally:
            data, self._pending = self._pending, None
            if data:
                with self._handle.fd() as fd:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]

    def _truncate_entries(self, i: int) -> None:
        if i < len(self) or self._torn:
            self._dirty = True
            with self._handle.fd() as fd:
                os.ftruncate(fd, i * self.entry_size)
            self._del_from(i)
            self._torn = 0

    def reset(self) -> None:
        self._dirty = True
        if self._handle.is_open or os.stat(self.path).st_size:
            with self._handle.fd() as fd:
                os.ftruncate(fd, 0)
        if self._pending is not None:
            self._pending.clear()
        self._clear()
        self._torn = 0

    def flush(self) -> None:
        if self._dirty and not self._handle.closed:
            self._dirty = False  # before the fsync: an append racing with a flush thread marks it dirty again
            try:
                with self._handle.fd() as fd:
                    os.fsync(fd)
            except OSError:
                self._dirty = True
                raise

    def release(self) -> None:
        """Close the fd of a flushed index now rather than when the cache needs room."""
        if not self._dirty:
            self._handle.release()

    def close(self) -> None:
        self._handle.close()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = Path(path)
        self._handle.renamed(self.path)

    def _check_size(self) -> None:
        if self._torn:
            raise CorruptIndexError(
                f"index file {self.path} has size {len(self) * self.entry_size + self._torn}, "
                f"not a multiple of the entry size {self.entry_size}"
            )


class OffsetIndex(_IndexFile):
    """Maps an offset to the file position of the append that wrote it.

    An entry (offset, position) means: the batches starting at `position`
    hold offsets up to `offset` (Kafka indexes the largest offset of an append
    with the position where the append started), so the batch holding any
    offset >= entry.offset is at or after `position`.
    """

    entry_size = _OFFSET_ENTRY.size

    def _load(self, data: bytes) -> None:
        flat = array("I", data)
        if not _BIG_ENDIAN:
            flat.byteswap()
        self._rel = flat[0::2]
        self._pos = flat[1::2]

    def _clear(self) -> None:
        self._rel = array("I")
        self._pos = array("I")

    def _del_from(self, i: int) -> None:
        del self._rel[i:]
        del self._pos[i:]

    def __len__(self) -> int:
        return len(self._rel)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and rel <= self._rel[-1]:
            raise ValueError(f"offset {offset} is not larger than the last indexed offset in {self.path}")
        self._write(_OFFSET_ENTRY.pack(rel, position))
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry with offset <= `offset`, else (base_offset, 0)."""
        i = bisect_right(self._rel, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._rel:
            return self.base_offset, 0
        return self.base_offset + self._rel[-1], self._pos[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= `offset`."""
        self._truncate_entries(bisect_left(self._rel, max(0, offset - self.base_offset)))

    def sanity_check(self, log_size: int) -> None:
        self._check_size()
        rel, pos = self._rel, self._pos
        for i in range(1, len(rel)):
            if rel[i] <= rel[i - 1] or pos[i] < pos[i - 1]:
                raise CorruptIndexError(f"index file {self.path}: entry {i} is not monotonic")
        if pos and pos[-1] >= max(log_size, 1):
            raise CorruptIndexError(f"index file {self.path}: position {pos[-1]} beyond log size {log_size}")


class TimeIndex(_IndexFile):
    """Maps a timestamp to the offset where the segment's max timestamp first reached it.

    Entries are appended only when the max timestamp grows, so timestamps are
    strictly increasing and lookup is a bisect.
    """

    entry_size = _TIME_ENTRY.size

    def _load(self, data: bytes) -> None:
        self._ts = array("q")
        self._rel = array("I")
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            self._ts.append(ts)
            self._rel.append(rel)

    def _clear(self) -> None:
        self._ts = array("q")
        self._rel = array("I")

    def _del_from(self, i: int) -> None:
        del self._ts[i:]
        del self._rel[i:]

    def __len__(self) -> int:
        return len(self._ts)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        if timestamp < 0 or (self._ts and timestamp <= self._ts[-1]):
            return
        if not skip_full_check and self.is_full:
            return
        rel = offset - self.base_offset
        if self._rel and rel < self._rel[-1]:
            return  # a timestamp can only be reached at or after the previous entry's offset
        self._write(_TIME_ENTRY.pack(timestamp, rel))
        self._ts.append(timestamp)
        self._rel.append(rel)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= `timestamp`, else (-1, base_offset).

        All batches before that entry's offset have smaller timestamps, so the
        caller scans the log forward from there for the first batch whose max
        timestamp is >= the target, as Kafka does.
        """
        i = bisect_right(self._ts, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._ts:
            return -1, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= `offset`."""
        self._truncate_entries(bisect_left(self._rel, max(0, offset - self.base_offset)))

    def sanity_check(self, log_size: int) -> None:
        self._check_size()
        ts, rel = self._ts, self._rel
        for i in range(1, len(ts)):
            if ts[i] <= ts[i - 1] or rel[i] < rel[i - 1]:
                raise CorruptIndexError(f"time index file {self.path}: entry {i} is not monotonic")
        if ts and log_size == 0:
            raise CorruptIndexError(f"time index file {self.path} has entries but the log is empty")
