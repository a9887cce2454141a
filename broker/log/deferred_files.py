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
import queue
import threading
import time
from typing import TYPE_CHECKING

from broker.long_lived import freeze_long_lived

if TYPE_CHECKING:
    from broker.log.log import Log

log = logging.getLogger("kafkalite.log")
# Logs given their files between two freezes of what they made (broker/long_lived.py): as many as an apply applies
# at once (broker/replica_manager.py APPLY_AT_ONCE).
FREEZE_EVERY = 256


class DeferredFileCreator:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Log | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0  # queued and not yet done
        self._idle = threading.Condition(self._lock)
        self._stopped = False

    def submit(self, lg: Log) -> None:
        with self._lock:
            if self._stopped:
                return  # shutting down: the log stays deferred (a write creates its files; a restart recreates it)
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="log-file-creator", daemon=True)
                self._thread.start()
        self._queue.put(lg)

    @property
    def pending(self) -> int:
        return self._pending

    def wait_idle(self, timeout: float) -> bool:
        """Until every queued log has its files (or was skipped); whether that happened within `timeout`."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop after the log in hand; logs still queued stay deferred."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _run(self) -> None:
        created, t0 = 0, None  # of the current burst: from its first log until the queue is empty
        unfrozen = 0  # logs whose files (segments, indexes) were made since the last freeze
        while True:
            lg = self._queue.get()
            if lg is None or self._stopped:
                return
            t0 = time.monotonic() if t0 is None else t0
            try:
                made = lg.create_files()
                created += made
                unfrozen += made
            except OSError as e:  # a full or read-only disk: the first write retries and answers the error
                log.error("cannot create the files of %s: %s", lg, e)
            with self._idle:
                self._pending -= 1
                if unfrozen >= FREEZE_EVERY or (unfrozen and self._pending == 0):
                    # What a flood's files made lives as long as its logs: out of the full collections, as the
                    # apply's slices do (broker/long_lived.py), or each one walks them all again.
                    freeze_long_lived()
                    unfrozen = 0
                if self._pending == 0:
                    log.info("created the files of %d deferred logs in %.2fs", created, time.monotonic() - t0)
                    created, t0 = 0, None
                    self._idle.notify_all()
