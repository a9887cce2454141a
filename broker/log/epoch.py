"""LeaderEpochFileCache (KIP-101): which leader epoch started at which offset.

A follower asks the leader for the end offset of its latest epoch and
truncates to it, instead of trusting its high watermark.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from pathlib import Path

from broker.log.checkpoint import CorruptCheckpointError, LeaderEpochCheckpoint

log = logging.getLogger("kafkalite.log")

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    def __init__(self, path: Path, read: bool = True) -> None:
        """`read=False`: a new log's cache, empty, its file not looked for (its directory may not exist yet)."""
        self._checkpoint = LeaderEpochCheckpoint(path)
        try:
            entries = self._checkpoint.read() if read else []
        except CorruptCheckpointError as e:
            # Safe to drop: the cache is rebuilt from the batch epochs of recovered segments.
            log.warning("%s; starting with an empty leader epoch cache", e)
            entries = []
        self._epochs = [e for e, _ in entries]
        self._offsets = [o for _, o in entries]

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (Kafka's LeaderEpochFileCache.assign)."""
        if epoch < 0:
            return
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._offsets[-1]:
            return  # the common case: one more append in the current epoch
        # Remove entries that would break monotonicity of epochs and offsets, then append.
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._flush()

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) per KIP-101/KIP-279: the start offset of the first epoch after `epoch`, or
        the log end offset if `epoch` is the latest; the epoch returned is the largest known <= `epoch`."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # asked about an epoch newer than ours
        if higher == 0:
            return epoch, self._offsets[0]  # older than anything we know: we have nothing before this offset
        return self._epochs[higher - 1], self._offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after `end_offset` (the log was truncated there)."""
        n = len(self._offsets)
        while self._offsets and self._offsets[-1] >= end_offset:
            self._epochs.pop()
            self._offsets.pop()
        if len(self._offsets) != n:
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop older epochs, keeping the one covering it."""
        i = bisect_right(self._offsets, start_offset) - 1
        if i < 0 or (i == 0 and self._offsets[0] == start_offset):
            return
        self._epochs = self._epochs[i:]
        self._offsets = [start_offset, *self._offsets[i + 1 :]]
        self._flush()

    def clear(self) -> None:
        if self._epochs:
            self._epochs, self._offsets = [], []
            self._flush()

    def _flush(self) -> None:
        self._checkpoint.write(self.entries)
