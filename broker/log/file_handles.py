"""Bounded open files for the logs: segment and index descriptors, opened lazily and cached LRU.

A broker hosting thousands of partitions must not hold three descriptors per segment for as long as it runs
(issue 25: two topics of 9,000 partitions left each broker with ~6,200 open files). Every segment and index
file is a `CachedFile`: its descriptor is opened on first use and kept in one process-wide LRU
(`FILE_HANDLES`); when more than `capacity` are open (`log.segment.open.files.max`), the least recently used
ones nobody is using are closed, to be reopened on their next use. A partition that never gets data never
opens a file. Reopening costs one open(2); the data itself stays in the page cache.

A use pins the descriptor (`with f.fd() as fd:`), so a flush thread's fsync or a reader's pread never sees
its descriptor closed (and its number reused for another file) under it; a close asked for while it is
pinned happens at the last unpin. The cache's lock is held only to open, pin, unpin and close, never during
the I/O itself.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEFAULT_CAPACITY = 1024


class FileHandleCache:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._open: OrderedDict[CachedFile, None] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self.opens = 0  # descriptors opened so far (reopens included): what eviction costs

    @property
    def open_count(self) -> int:
        return len(self._open)

    def set_capacity(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        with self._lock:
            self.capacity = capacity
            self._evict()

    def _acquire(self, f: CachedFile) -> int:
        with self._lock:
            if f._closed:
                raise OSError(errno.EBADF, f"{f.path} is closed")
            if f._fd < 0:
                f._fd = os.open(f.path, f.flags)
                self.opens += 1
                self._open[f] = None
                f._pins += 1  # before evicting, so that it is not its own victim
                self._evict()
            else:
                self._open.move_to_end(f)
                f._pins += 1
            return f._fd

    def _release(self, f: CachedFile) -> None:
        with self._lock:
            f._pins -= 1
            if f._pins == 0 and f._closed:
                self._drop(f)
            elif len(self._open) > self.capacity:
                self._evict()

    def _evict(self) -> None:
        """Under the lock: close least recently used unpinned descriptors down to the capacity (pinned ones
        may keep it above for as long as they are in use)."""
        excess = len(self._open) - self.capacity
        if excess <= 0:
            return
        victims = []
        for g in self._open:
            if g._pins == 0:
                victims.append(g)
                if len(victims) == excess:
                    break
        for g in victims:
            self._drop(g)

    def _drop(self, f: CachedFile) -> None:
        self._open.pop(f, None)
        if f._fd >= 0:
            fd, f._fd = f._fd, -1
            os.close(fd)

    def _release_idle(self, f: CachedFile) -> None:
        with self._lock:
            if f._pins == 0:
                self._drop(f)

    def _close(self, f: CachedFile) -> None:
        with self._lock:
            f._closed = True
            if f._pins == 0:
                self._drop(f)


# One per process: a broker sets its capacity from log.segment.open.files.max (broker/log/manager.py).
FILE_HANDLES = FileHandleCache()


class CachedFile:
    """One file's descriptor, opened when first used and possibly closed between uses by the cache."""

    __slots__ = ("_closed", "_fd", "_pins", "cache", "flags", "path")

    def __init__(self, path: Path, flags: int, cache: FileHandleCache | None = None) -> None:
        self.path = Path(path)
        self.flags = flags & ~(os.O_CREAT | os.O_TRUNC | os.O_EXCL)  # reopening must never create or truncate
        self.cache = cache if cache is not None else FILE_HANDLES
        self._fd = -1
        self._pins = 0
        self._closed = False

    @contextmanager
    def fd(self) -> Iterator[int]:
        """The open descriptor, pinned for the block."""
        fd = self.cache._acquire(self)
        try:
            yield fd
        finally:
            self.cache._release(self)

    @property
    def is_open(self) -> bool:
        """Whether a descriptor is open now (the cache may close it at any time when unpinned)."""
        return self._fd >= 0

    @property
    def closed(self) -> bool:
        return self._closed

    def release(self) -> None:
        """Close the descriptor now if nobody uses it; the next use reopens it."""
        self.cache._release_idle(self)

    def close(self) -> None:
        """For good: later uses raise EBADF (a segment deleted by retention while a flush thread had it)."""
        self.cache._close(self)

    def renamed(self, path: Path) -> None:
        """The file was renamed: an open descriptor stays valid, a reopen must use the new name."""
        self.path = Path(path)


def create_file(path: Path, mode: int = 0o644) -> bool:
    """Create `path` if missing, without keeping a descriptor; whether it existed."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode))
        return False
    except FileExistsError:
        return True
