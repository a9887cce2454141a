"""PySpark's worker daemon, with what every worker of a `kafkalite` job imports imported once, before it forks.

Spark runs Python tasks in workers forked from one daemon per executor (`pyspark.daemon`). PySpark imports its
worker module and, through the task's unpickling, our data source only after each fork, because a fork copies
just the forking thread and pandas or pyarrow start threads when imported. So every worker paid for the same
imports: about 0.7 CPU-s (pyspark.worker, pipeline.datasource/stream/sink with the client they use), measured in a
fresh interpreter. None of these modules starts a thread, so they can be imported once, before the fork. The arrow
reader (pyarrow, numpy, numba) still loads in the worker, after it: importing it starts threads (OpenBLAS, jemalloc),
and a variant that stopped those and also warmed numba's compiled code in the daemon measured no better, since a
session forks only a few workers and reuses them. On five tests of tests/integration/test_spark.py (one session),
Spark's Python processes took 13.3 CPU-s with this daemon against 14.6 with PySpark's (median of 3 runs each,
alternating, 2026-11-29; the runs spread by about as much): a small gain.

`spark.python.daemon.module` (Spark's setting, set by pipeline/session.py) names this module. If the imports
ever started a thread after all, forking would be unsafe: the daemon then replaces itself with PySpark's own,
which forks a clean process (tests/unit/test_spark_daemon.py checks that they start none).
"""

from __future__ import annotations

import importlib
import os
import sys

# What a worker of a kafkalite read or write imports before its first record (pyspark.worker: the task loop).
PRELOAD = ("pyspark.worker", "pipeline.datasource", "pipeline.stream", "pipeline.sink")


def os_threads() -> int:
    """Threads of this process, native ones included (a Python-level count misses OpenBLAS's, jemalloc's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1  # not Linux: unknown, treated as unsafe


def preload(modules: tuple[str, ...] = PRELOAD) -> bool:
    """Import `modules`; True if the process is still single-threaded (safe to fork)."""
    for name in modules:
        importlib.import_module(name)
    return os_threads() == 1


def main() -> None:
    if not preload():
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
