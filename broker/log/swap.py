"""The compaction swap: how a cleaned segment replaces old ones on disk (Kafka's `.cleaned`/`.swap` protocol).

The steps, each a rename, so that a crash between any two leaves files the loader can finish or undo:

1. the cleaner writes `<base>.log.cleaned` (and its indexes) and fsyncs them (`new_cleaned_segment`);
2. `begin_swap`: rename `.cleaned` -> `.swap` and fsync the directory. This is the commit point;
3. `commit_swap`: rename the old segments' files to `.deleted` and the new files to their final names;
4. the old files are closed and unlinked.

`finish_interrupted_swaps` is step 2's other half, run by the loader at startup: `.cleaned` files are an
unfinished cleaning and go, together with any `.swap` at or above the lowest of them (its renames had not
finished); a `<base>.log.swap` without those was committed, so it replaces every segment from `base` up to
its own end. The in-memory half (which segments a swap may still replace) is `Log.replace_segments`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from broker.log.checkpoint import fsync_dir
from broker.log.config import LogConfig
from broker.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file,
)
from broker.log.txn_index import TXN_INDEX_SUFFIX

log = logging.getLogger("kafkalite.log")


_SEGMENT_FILES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def is_offset(stem: str) -> bool:
    """True for a 20-digit segment base name."""
    return len(stem) == 20 and stem.isdigit()


def base_of(name: str) -> int | None:
    """The base offset in a segment file name such as `00000000000000000042.index.swap`."""
    stem = name.split(".", 1)[0]
    return int(stem) if is_offset(stem) else None


def new_cleaned_segment(dir: Path, base_offset: int, config: LogConfig, clock: Callable[[], float]) -> LogSegment:
    """Step 1: an empty segment with `.cleaned` files for the cleaner to fill (an aborted run's are removed)."""
    for kind in _SEGMENT_FILES:
        segment_file(dir, base_offset, kind, CLEANED_SUFFIX).unlink(missing_ok=True)
    return LogSegment(dir, base_offset, config.index_interval_bytes, config.segment_index_bytes, clock, CLEANED_SUFFIX)


def begin_swap(new: LogSegment) -> None:
    """Step 2's rename; the caller fsyncs the directory (`commit_point`) before touching an old file."""
    new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)


def commit_point(dir: Path) -> None:
    """Make the `.swap` rename durable: from here a crash can only complete the swap."""
    fsync_dir(dir)


def commit_swap(old: list[LogSegment], new: LogSegment) -> None:
    """Step 3: old files to `.deleted`, new files to their final names. Step 4 is `LogSegment.delete` on `old`."""
    for seg in old:
        seg.change_file_suffixes("", DELETED_SUFFIX)
    new.change_file_suffixes(SWAP_SUFFIX, "")


def abort_swap(dir: Path, new: LogSegment) -> None:
    """Discard a committed-but-unapplied swap whose old segments are changing (truncation, retention, close)."""
    new.delete()
    fsync_dir(dir)  # a crash must not complete a swap of segments that are changing now


def finish_interrupted_swaps(dir: Path, config: LogConfig, clock: Callable[[], float] = time.time) -> None:
    """At load: complete committed swaps and remove what unfinished ones left (module docstring)."""
    names = os.listdir(dir)
    cleaned = [b for n in names if n.endswith(CLEANED_SUFFIX) and (b := base_of(n)) is not None]
    lowest_cleaned = min(cleaned, default=None)
    committed = sorted(
        b
        for n in names
        if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)
        and (b := base_of(n)) is not None
        and (lowest_cleaned is None or b < lowest_cleaned)
    )
    for name in names:
        if name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX)) or (
            name.endswith(SWAP_SUFFIX) and base_of(name) not in committed
        ):
            log.info("%s: removing %s left by an interrupted compaction", dir.name, name)
            os.unlink(dir / name)
    for base in committed:
        _complete_swap(dir, base, config, clock)


def _complete_swap(dir: Path, base: int, config: LogConfig, clock: Callable[[], float]) -> None:
    seg = LogSegment(dir, base, config.index_interval_bytes, config.segment_index_bytes, clock, SWAP_SUFFIX)
    try:
        seg.recover(config.max_message_bytes)  # it was fsynced before the rename; this rebuilds its indexes
    finally:
        seg.close()
    # An empty cleaned segment still replaces the segment with its base offset.
    end = max(seg.next_offset, base + 1)
    replaced = 0
    for name in os.listdir(dir):
        b = base_of(name)
        if b is not None and base <= b < end and name.endswith(_SEGMENT_FILES):
            os.unlink(dir / name)
            replaced += 1
    seg.change_file_suffixes(SWAP_SUFFIX, "")
    fsync_dir(dir)
    log.info(
        "%s: completed the interrupted compaction swap of [%d, %d) (%d old files removed)",
        dir.name,
        base,
        end,
        replaced,
    )
