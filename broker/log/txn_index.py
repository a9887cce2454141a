"""TransactionIndex: a segment's aborted transactions, Kafka's `<base>.txnindex` (docs/FORMAT.md §11).

One 34-byte entry per transaction aborted in the segment (the segment holding its abort marker), in marker
order: version int16 (0), producerId int64, firstOffset int64, lastOffset int64 (the marker's offset),
lastStableOffset int64 (the partition's LSO once the marker was appended), big-endian, no file header.

As in Kafka the file is created at the first abort in the segment, so segments of topics without aborted
transactions have none; a missing file means "no aborted transaction here". It is written when an abort
marker is appended, truncated with its segment, deleted with it, renamed with it by the compaction swap,
and rebuilt by the producer-state replay when its segment is recovered after an unclean shutdown (Kafka's
LogLoader.recoverSegment). Entries are kept in memory once read (a few per segment): a read_committed fetch
walks them without touching the file.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import NamedTuple

from broker.log.checkpoint import atomic_write
from broker.log.index import CorruptIndexError
from net.errors import KafkaStorageError

TXN_INDEX_SUFFIX = ".txnindex"
VERSION = 0
ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset: 34 bytes

__all__ = ["ENTRY", "TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex"]


class AbortedTxn(NamedTuple):
    """An aborted transaction of one producer on one partition: Kafka's AbortedTxn."""

    producer_id: int
    first_offset: int  # its first batch here
    last_offset: int  # its abort marker
    last_stable_offset: int  # the partition's LSO once the marker was appended

    def to_bytes(self) -> bytes:
        return ENTRY.pack(VERSION, *self)


def decode_entries(data: bytes, path: Path | str = "") -> list[AbortedTxn]:
    """The entries of a `.txnindex` file's bytes; CorruptIndexError for a torn entry or an unknown version.
    Pure, so that offline readers of the files (pipeline/) use it too."""
    if len(data) % ENTRY.size:
        raise CorruptIndexError(f"transaction index {path}: {len(data)} bytes is not a whole number of entries")
    out = []
    for pos in range(0, len(data), ENTRY.size):
        version, *fields = ENTRY.unpack_from(data, pos)
        if version != VERSION:
            raise CorruptIndexError(f"transaction index {path}: entry at byte {pos} has version {version}")
        out.append(AbortedTxn(*fields))
    return out


def collect(entries: list[AbortedTxn], fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
    """Kafka's TransactionIndex.collectAbortedTxns: the entries a fetch of [fetch_offset, upper_bound) must
    report (they end at or after it and begin before its end), and whether the search is complete: an entry
    whose LSO reached `upper_bound` means no later segment holds a transaction that began before it."""
    out = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
            out.append(txn)
        if txn.last_stable_offset >= upper_bound:
            return out, True
    return out, False


class TransactionIndex:
    def __init__(self, path: Path, base_offset: int, read: bool = True) -> None:
        """`read=False`: the index of a segment whose files do not exist yet (a placeholder), empty."""
        self.path = Path(path)
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None if read else []  # read at first use
        self._dirty = False  # appended since the last flush

    @property
    def entries(self) -> list[AbortedTxn]:
        """All entries, read from the file the first time (CorruptIndexError if it is damaged)."""
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            except OSError as e:
                raise KafkaStorageError(f"cannot read {self.path}: {e.strerror}") from e
            self._entries = decode_entries(data, self.path)
        return self._entries

    def sanity_check(self) -> None:
        """Raises CorruptIndexError if the file is damaged; the segment is then recovered (and this rebuilt)."""
        self.entries  # noqa: B018 (reading is the check)

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset, or -1."""
        e = self.entries
        return e[-1].last_offset if e else -1

    def append(self, txn: AbortedTxn) -> bool:
        """Add an abort whose marker follows every entry's (Kafka refuses an out-of-order one). Returns False,
        writing nothing, for one at or before the last entry: a replay meeting an abort it already holds."""
        if txn.last_offset <= self.last_offset:
            return False
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, txn.to_bytes())
            finally:
                os.close(fd)
        except OSError as e:
            what = "disk full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
            raise KafkaStorageError(f"error appending to {self.path}: {what}") from e
        self.entries.append(txn)
        self._dirty = True
        return True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        return collect(self.entries, fetch_offset, upper_bound)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (Kafka's TransactionIndex.truncateTo)."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self._entries = keep
        self._rewrite()

    def reset(self) -> None:
        """Empty the index and remove its file: the segment is being recovered and the replay rebuilds it."""
        self._entries = []
        self.path.unlink(missing_ok=True)

    def _rewrite(self) -> None:
        if not self._entries:
            self.path.unlink(missing_ok=True)
            return
        try:
            # Atomic (tmp, fsync, rename): a truncation can reach segments below the recovery point, which a
            # restart after a crash would not recover, so a half-written file must never be seen.
            atomic_write(self.path, b"".join(t.to_bytes() for t in self._entries))
        except OSError as e:
            raise KafkaStorageError(f"error writing {self.path}: {e.strerror}") from e
        self._dirty = True

    def flush(self) -> None:
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._dirty = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def rename(self, path: Path) -> None:
        """Follow the segment's renames (compaction swap); there may be no file to rename."""
        try:
            os.rename(self.path, path)
        except FileNotFoundError:
            pass
        self.path = Path(path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
