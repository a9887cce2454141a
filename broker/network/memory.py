"""Giving memory back to the system after a flood of connections.

Each TLS connection costs the broker tens of kB of buffers (asyncio's 256 kB read buffer, OpenSSL's state).
Freed, they go back to glibc's heap, which keeps them: 2,000 connections that never finished a handshake
left the broker's RSS 85 MB higher once they had all closed. `malloc_trim(0)` hands free heap pages back to
the kernel; the listeners call it once enough connections have come and gone (`ConnectionChurn`). Elsewhere
than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Callable

log = logging.getLogger("kafkalite.net")

# Connections closed since the last release that make another one worth its cost (a few ms of heap walk).
RELEASE_AFTER_CLOSED = 256
# Fewer, once no connection has come or gone for a sweep: the tail of a flood (not each client's goodbye).
SETTLED_AFTER_CLOSED = 16


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc: nothing to call
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_freed_memory() -> bool:
    """Return the heap's free pages to the kernel; whether anything could be called."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


class ConnectionChurn:
    """Counts connections accepted and still open, and says when enough have closed since the last release."""

    def __init__(self, threshold: int = RELEASE_AFTER_CLOSED) -> None:
        self.threshold = threshold
        self._accepted = 0  # since the last release
        self._open_at_release = 0
        self._previous = (0, 0)  # (accepted, open) at the previous call

    def accepted(self) -> None:
        self._accepted += 1

    def closed_since_release(self, open_now: int) -> int:
        return self._accepted + self._open_at_release - open_now

    def release_if_due(self, open_now: int) -> bool:
        """Release freed memory if `threshold` connections closed since the last time, or some did and the
        churn has settled since the previous call (the tail of a flood); whether it did."""
        closed = self.closed_since_release(open_now)
        settled = (self._accepted, open_now) == self._previous
        self._previous = (self._accepted, open_now)
        if closed < self.threshold and not (settled and closed >= SETTLED_AFTER_CLOSED):
            return False
        self._accepted, self._open_at_release = 0, open_now
        self._previous = (0, open_now)
        release_freed_memory()
        log.debug("%d connections closed: freed memory returned to the system", closed)
        return True
