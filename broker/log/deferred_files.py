"""DeferredFileCreator: creates the directories and first segment files of new logs in a worker thread.

A flood of partitions (issue 25: 5,000 created at once, RF 3) made each broker create 5,000 directories and
15,000 empty segment and index files on its event loop: 11 s of mkdir and open(2) that produce, fetch and the
election waited behind, however finely the work was sliced. A log created with `defer_files` is usable at once
(empty, in memory) and queued here; this thread creates its files soon after, while the event loop serves
requests (the syscalls release the GIL). A write to the log before its turn creates them itself
(`Log._ensure_files`), and a log closed or deleted first is skipped, so nothing is left behind. The directory
layout ends up as Kafka's, which creates them eagerly: offline readers (pipeline/segments.py), DescribeLogDirs
and the file modes see the same files, a few seconds later.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from broker.utils.long_lived import freeze_long_lived

if TYPE_CHECKING:
    from broker.log.log import Log

log = logging.getLogger("kafkalite.log")
# Logs given their files between two freezes of what they made (broker/utils/long_lived.py): as many as an apply applies
# at once (broker/replica/replica_manager.py APPLY_AT_ONCE).
FREEZE_EVERY = 256
# The share of the interpreter the creator may take: after each BURST_S of its own CPU it sleeps three times as
# long. It shares the GIL with the event loop, which gives it up at every syscall (each socket read and write).
# Run flat out during a 5,000-partition flood, the followers' fetch rounds of a busy partition slowed from ~20 ms
# to 100-300 ms and every acks=all produce waited on them: probe p50 0.6-1.1 s, p99 0.9-2.1 s; with this duty
# cycle, same run, p50 15 ms and p99 0.65-0.7 s (issue 25 §4). The files come a few seconds later; a write to a
# log never waits for them (Log._ensure_files).
DUTY = 0.25
BURST_S = 0.002


class DeferredFileCreator:
    def __init__(self) -> None:
        # Queued logs by id, in order. A log deleted before its turn leaves the queue at once (`discard`): held
        # here, a removed replica's reference cycles would survive the reclaim that follows a large removal and be
        # frozen for good (broker/utils/long_lived.py).
        self._queue: dict[int, Log] = {}
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._in_hand = 0  # taken off the queue, files being made
        self._changed = threading.Condition(self._lock)
        self._stopped = False

    def submit(self, lg: Log) -> None:
        with self._lock:
            if self._stopped:
                return  # shutting down: the log stays deferred (a write creates its files; a restart recreates it)
            self._queue[id(lg)] = lg
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="log-file-creator", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def discard(self, lg: Log) -> None:
        """`lg` was closed (deleted): it needs no files, and the queue lets go of it now."""
        with self._lock:
            if self._queue.pop(id(lg), None) is not None and not self.pending:
                self._changed.notify_all()

    @property
    def pending(self) -> int:
        return len(self._queue) + self._in_hand

    def wait_idle(self, timeout: float) -> bool:
        """Until every queued log has its files (or was skipped); whether that happened within `timeout`."""
        with self._changed:
            return self._changed.wait_for(lambda: self.pending == 0, timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop after the log in hand; logs still queued stay deferred."""
        with self._lock:
            self._stopped = True
            thread = self._thread
            self._changed.notify_all()
        if thread is not None:
            thread.join(timeout)

    def _next(self) -> Log | None:
        """The next queued log, waiting for one; None once stopped."""
        with self._changed:
            self._changed.wait_for(lambda: self._queue or self._stopped)
            if self._stopped:
                return None
            lg = self._queue.pop(next(iter(self._queue)))
            self._in_hand = 1
            return lg

    def _run(self) -> None:
        created, t0 = 0, None  # of the current burst: from its first log until the queue is empty
        unfrozen = 0  # logs whose files (segments, indexes) were made since the last freeze
        busy = 0.0  # seconds of work since the last pause (DUTY)
        while True:
            if busy >= BURST_S:
                time.sleep(busy * (1 - DUTY) / DUTY)
                busy = 0.0
            lg = self._next()
            if lg is None:
                return
            t0 = time.monotonic() if t0 is None else t0
            started = time.thread_time()
            try:
                made = lg.create_files()
                created += made
                unfrozen += made
            except OSError as e:  # a full or read-only disk: the first write retries and answers the error
                log.error("cannot create the files of %s: %s", lg, e)
            busy += time.thread_time() - started
            del lg  # not held while waiting for the next one
            with self._changed:
                self._in_hand = 0
                idle = self.pending == 0
                if unfrozen >= FREEZE_EVERY or (unfrozen and idle):
                    # What a flood's files made lives as long as its logs: out of the full collections, as the
                    # apply's slices do (broker/utils/long_lived.py), or each one walks them all again.
                    freeze_long_lived()
                    unfrozen = 0
                if idle:
                    log.info("created the files of %d deferred logs in %.2fs", created, time.monotonic() - t0)
                    created, t0 = 0, None
                    self._changed.notify_all()
