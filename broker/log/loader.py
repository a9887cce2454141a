"""LogLoader: opens a partition directory's segments at startup and recovers what may be torn (Kafka's LogLoader).

1. finish or undo an interrupted compaction swap (broker/log/swap.py);
2. remove leftovers (`.deleted`, `.cleaned`, `.swap`, `.tmp`, indexes without their `.log`);
3. open every segment in base-offset order;
4. after an unclean shutdown, recover (re-validate, rebuild indexes, truncate a torn tail) every segment from
   the one holding the recovery point on, and any segment whose indexes fail their sanity check; segments
   after a corruption in the unflushed part are deleted, since they were written after data that is gone.
   A recovered segment's `.txnindex` is emptied here and rebuilt by the Partition's producer-state replay
   (`txn_rebuild_from`);
5. derive the log start offset, the recovery point and the leader-epoch cache's bounds.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.epoch import LeaderEpochFileCache
from broker.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)
from broker.log.swap import finish_interrupted_swaps, is_offset
from broker.log.txn_index import TXN_INDEX_SUFFIX
from net.batch import BatchHeader

log = logging.getLogger("kafkalite.log")


class HeaderBudget:
    """How many recovered batch headers the logs of this process hold for their producer-state replay (~350 bytes
    each), bounded: a broker recovering thousands of large segments at once keeps none past the bound, and those
    logs' replays read their segments again as before. A log returns its share when the headers are taken or
    dropped (broker/log/log.py)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def available(self) -> int:
        return self.limit - self.held

    def take(self, n: int) -> bool:
        with self._lock:
            if self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give_back(self, n: int) -> None:
        with self._lock:
            self.held -= n


RECOVERED_HEADERS = HeaderBudget(100_000)  # ~35 MB at most; 100 partitions of 1.6 MB need ~19,000
# Left behind by an interrupted delete or compaction once finish_interrupted_swaps has run: never data.
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")


def open_segment(dir: Path, base: int, config: LogConfig, clock: Callable[[], float]) -> LogSegment:
    return LogSegment(dir, base, config.index_interval_bytes, config.segment_index_bytes, clock)


def create_segment(dir: Path, base: int, config: LogConfig, clock: Callable[[], float]) -> LogSegment:
    """A new, empty segment at `base`; stale files of that name (from a crash mid-delete) are removed first."""
    prefix = dir / filename_prefix(base)
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        stale = prefix.with_suffix(suffix)
        if stale.exists():
            log.warning("%s: removing stale %s before creating a segment there", dir.name, stale.name)
            stale.unlink()
    return open_segment(dir, base, config, clock)


@dataclass
class LoadedLog:
    segments: list[LogSegment]  # never empty
    log_start_offset: int
    recovery_point: int
    # The base offset of the first segment recovered: its `.txnindex` and every later one's are to be rebuilt
    # by the producer-state replay (the aborts need the producers' open transactions); None: none recovered.
    txn_rebuild_from: int | None = None
    # Every batch header of the recovered segments, from the first one recovered (its base offset) to the log end,
    # when all segments from there on were recovered: the producer-state replay that follows takes them rather
    # than reading those segments a second time (Kafka's recoverSegment replays while it recovers). None when
    # none were recovered, a segment after a recovered one was not, or RECOVERED_HEADERS had no room for them.
    recovered_batches: tuple[int, list[BatchHeader]] | None = None


class LogLoader:
    def __init__(
        self, dir: Path, config: LogConfig, epochs: LeaderEpochFileCache, clock: Callable[[], float], name: str
    ) -> None:
        self.dir, self.config, self.epochs, self.clock, self.name = dir, config, epochs, clock, name

    def load(self, recovery_point: int, log_start_offset: int | None, clean_shutdown: bool) -> LoadedLog:
        finish_interrupted_swaps(self.dir, self.config, self.clock)
        segments = [open_segment(self.dir, b, self.config, self.clock) for b in self._segment_bases()]
        bases = [s.base_offset for s in segments]

        # Without a clean shutdown everything after the recovery point may be torn: recover it.
        first_unflushed = len(segments)
        if not clean_shutdown:
            first_unflushed = max(0, bisect_right(bases, recovery_point) - 1)
        i = 0
        rebuild_from: int | None = None
        headers: list[BatchHeader] | None = []  # of the recovered segments (LoadedLog.recovered_batches)
        room = RECOVERED_HEADERS.available()

        def on_batch(h: BatchHeader) -> None:
            nonlocal headers
            self._recover_epoch(h)
            if headers is not None:
                headers.append(h)
                if len(headers) > room:
                    headers = None  # no room: the replay reads the segments

        while i < len(segments):
            seg = segments[i]
            if i >= first_unflushed or seg.needs_recovery:
                truncated = seg.recover(self.config.max_message_bytes, on_batch)
                seg.txn_index.reset()
                if rebuild_from is None:
                    rebuild_from = seg.base_offset
                log.info(
                    "%s: recovered segment %s (%d bytes of torn or invalid tail truncated)",
                    self.name,
                    seg.path.name,
                    truncated,
                )
                if truncated and i >= first_unflushed and i + 1 < len(segments):
                    log.warning(
                        "%s: deleting %d segments after the corruption in %s",
                        self.name,
                        len(segments) - i - 1,
                        seg.path.name,
                    )
                    for later in segments[i + 1 :]:
                        later.delete()
                    del segments[i + 1 :]
            elif rebuild_from is not None:
                headers = None  # a segment kept as it was after a recovered one: the headers leave a gap
            i += 1
        if not segments:
            segments.append(create_segment(self.dir, log_start_offset or 0, self.config, self.clock))

        leo = segments[-1].next_offset
        start = min(max(segments[0].base_offset, log_start_offset or 0), leo)
        # Recovered data was read from the page cache, not necessarily from disk: keep the old point.
        point = leo if clean_shutdown else min(max(recovery_point, segments[0].base_offset), leo)
        self.epochs.truncate_from_end(leo)
        self.epochs.truncate_from_start(start)
        recovered = None
        if rebuild_from is not None and headers is not None and RECOVERED_HEADERS.take(len(headers)):
            recovered = (rebuild_from, headers)
        return LoadedLog(segments, start, point, rebuild_from, recovered)

    def _segment_bases(self) -> list[int]:
        """Base offsets of the `.log` files, sorted; leftovers and orphaned indexes are deleted on the way."""
        bases, indexes = [], []
        for entry in os.scandir(self.dir):
            name = entry.name
            if name.endswith(_LEFTOVER_SUFFIXES):
                log.info("%s: removing leftover file %s", self.name, name)
                os.unlink(entry.path)
            elif name.endswith(LOG_SUFFIX) and is_offset(name[: -len(LOG_SUFFIX)]):
                bases.append(int(name[: -len(LOG_SUFFIX)]))
            elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                indexes.append(entry)
        have = {filename_prefix(b) for b in bases}
        for entry in indexes:
            if entry.name.split(".")[0] not in have:
                os.unlink(entry.path)  # an index without its log: from a crash during a delete
        return sorted(bases)

    def _recover_epoch(self, h: BatchHeader) -> None:
        if h.leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(h.leader_epoch, h.base_offset)
