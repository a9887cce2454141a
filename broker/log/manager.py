"""LogManager: every partition log in the broker's data directories (Kafka's log.dirs).

Per data directory it keeps Kafka's bookkeeping files:
  .kafka_cleanshutdown               written last on a clean shutdown; its absence means recover
  recovery-point-offset-checkpoint   offsets below which each log is known to be fsynced
  log-start-offset-checkpoint        each log's start offset (retention may be ahead of segment bases)
  cleaner-offset-checkpoint          how far each compacted log is cleaned (broker/log/cleaner.py)
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from broker.log.checkpoint import CorruptCheckpointError, fsync_dir, read_checkpoint, write_checkpoint
from broker.log.cleaner import CleanStats, HighWatermarks, LogCleaner
from broker.log.config import LogConfig
from broker.log.deferred_files import DeferredFileCreator
from broker.log.file_handles import FILE_HANDLES
from broker.log.log import Log
from net.errors import KafkaStorageError

log = logging.getLogger("kafkalite.log")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# Kafka's name and format: each partition's high watermark, so that a restarted broker serves what was
# committed at once, and readers of the files (pipeline/segments.py) know what is committed.
HW_CHECKPOINT = "replication-offset-checkpoint"
DELETE_SUFFIX = "-delete"

TopicPartition = tuple[str, int]


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """`<topic>-<partition>` split at the last '-', since topic names may contain '-'."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class LogManager:
    def __init__(
        self,
        data_dirs: list[Path],
        default_config: LogConfig,
        clock: Callable[[], float] = time.time,
        topic_config: Callable[[str], LogConfig | None] | None = None,
        open_files_max: int | None = None,
    ) -> None:
        if not data_dirs:
            raise ValueError("at least one data directory is required")
        if open_files_max is not None:
            FILE_HANDLES.set_capacity(open_files_max)  # log.segment.open.files.max: one broker per process
        self.data_dirs = [Path(d) for d in data_dirs]
        self.default_config = default_config
        self._clock = clock
        # Config for logs found on disk at startup, before the metadata has told us their overrides.
        self._topic_config = topic_config
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self._dir_counts: dict[Path, int] = dict.fromkeys(self.data_dirs, 0)  # logs per dir, for placement
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self.had_clean_shutdown: dict[Path, bool] = {}
        # High watermarks as last checkpointed, read at startup: the initial HW of each Partition.
        self.checkpointed_high_watermarks: dict[TopicPartition, int] = {}
        self.cleaner = LogCleaner(clock)
        self.file_creator = DeferredFileCreator()  # the files of logs created with defer_files

    # --- startup -------------------------------------------------------------------

    def startup(self) -> None:
        for d in self.data_dirs:
            d.mkdir(parents=True, exist_ok=True)
            self._load_dir(d)

    def _load_dir(self, d: Path) -> None:
        marker = d / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean:
            # Gone before any write: a crash from here on must not look like a clean shutdown.
            marker.unlink()
            fsync_dir(d)
        self.had_clean_shutdown[d] = clean
        recovery_points = self._read_checkpoint(d / RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(d / LOG_START_OFFSET_CHECKPOINT)
        self.checkpointed_high_watermarks.update(self._read_checkpoint(d / HW_CHECKPOINT))
        t0 = time.monotonic()
        loaded: dict[TopicPartition, Log] = {}
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_SUFFIX):
                log.info("removing partition directory %s left by an unfinished delete", entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            tp = parse_log_dir_name(entry.name)
            if tp is None:
                log.warning("ignoring directory %s: not a <topic>-<partition> name", entry.path)
                continue
            with self._lock:
                if tp in self._logs:
                    raise KafkaStorageError(
                        f"duplicate log directories for {tp[0]}-{tp[1]}: {self._log_dir_of[tp]} and {d}"
                    )
            lg = Log(
                Path(entry.path),
                tp[0],
                tp[1],
                self._config_for(tp[0]),
                recovery_points.get(tp, 0),
                start_offsets.get(tp),
                clean,
                self._clock,
            )
            self._register(tp, lg, d)
            loaded[tp] = lg
        self.cleaner.load_checkpoint(d, loaded)
        log.info(
            "loaded %d logs from %s in %.2fs (%s shutdown)",
            len(loaded),
            d,
            time.monotonic() - t0,
            "clean" if clean else "unclean",
        )

    def _read_checkpoint(self, path: Path) -> dict[TopicPartition, int]:
        try:
            return read_checkpoint(path)
        except CorruptCheckpointError as e:
            # An empty recovery point means full recovery; an empty log start means segment bases: both safe.
            log.warning("%s; ignoring it", e)
            return {}

    def _config_for(self, topic: str) -> LogConfig:
        cfg = self._topic_config(topic) if self._topic_config is not None else None
        return cfg or self.default_config

    def _register(self, tp: TopicPartition, lg: Log, d: Path) -> None:
        with self._lock:
            self._logs[tp] = lg
            self._log_dir_of[tp] = d
            self._dir_counts[d] = self._dir_counts.get(d, 0) + 1

    # --- logs ----------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, defer_files: bool = False
    ) -> Log:
        """The existing log (its config updated if `config` is given) or a new one in the emptiest dir.
        `defer_files`: a new log's directory and files are created by the file creator's thread, not here
        (a flood of partitions: broker/log/deferred_files.py)."""
        tp = (topic, partition)
        with self._lock:
            lg = self._logs.get(tp)
            if lg is not None:
                if config is not None and config != lg.config:
                    lg.update_config(config)
                return lg
            # Counted as logs come and go, not recounted: a flood of creations must not cost O(logs) each.
            d = min(self.data_dirs, key=lambda x: self._dir_counts.get(x, 0))
            lg = Log(
                d / f"{topic}-{partition}",
                topic,
                partition,
                config or self._config_for(topic),
                clean_shutdown=True,
                clock=self._clock,
                defer_files=defer_files,
            )
            self._register(tp, lg, d)
        if defer_files:
            self.file_creator.submit(lg)  # one log line for the lot, when the creator is done
        else:
            log.info("created log for %s-%d in %s", topic, partition, d)
        return lg

    def delete_log(self, topic: str, partition: int) -> bool:
        """Rename to `<topic>-<partition>.<uuid>-delete` (atomic: a crash never resurrects it), then remove."""
        tp = (topic, partition)
        with self._lock:
            lg = self._logs.pop(tp, None)
            d = self._log_dir_of.pop(tp, None)
            if d is not None:
                self._dir_counts[d] -= 1
        if lg is None:
            return False
        lg.close()  # after it, a deferred log's files are never created: on_disk is final
        self.file_creator.discard(lg)
        if not lg.on_disk:
            log.info("deleted log for %s-%d (it had no files yet)", topic, partition)
            return True
        doomed = lg.dir.with_name(f"{lg.dir.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        os.rename(lg.dir, doomed)
        fsync_dir(doomed.parent)
        shutil.rmtree(doomed, ignore_errors=True)
        log.info("deleted log for %s-%d", topic, partition)
        return True

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]:
        with self._lock:
            out: dict[Path, dict[TopicPartition, Log]] = {d: {} for d in self.data_dirs}
            for tp, lg in self._logs.items():
                out[self._log_dir_of[tp]][tp] = lg
            return out

    # --- periodic work (worker threads) ---------------------------------------------

    def checkpoint(self) -> None:
        """Write both checkpoint files of every data directory."""
        with self._checkpoint_lock:
            for d, logs in self.logs_by_dir().items():
                write_checkpoint(d / RECOVERY_POINT_CHECKPOINT, {tp: lg.recovery_point for tp, lg in logs.items()})
                write_checkpoint(d / LOG_START_OFFSET_CHECKPOINT, {tp: lg.log_start_offset for tp, lg in logs.items()})

    def checkpoint_high_watermarks(self, high_watermarks: dict[TopicPartition, int]) -> None:
        """Write replication-offset-checkpoint in every data directory, for the partitions it holds.

        Each value is capped at the log's end: a follower may hear of a high watermark above what it has
        fetched so far, and a reader must never take it for records the file does not hold."""
        with self._checkpoint_lock:
            for d, logs in self.logs_by_dir().items():
                hws = {
                    tp: min(high_watermarks[tp], lg.log_end_offset) for tp, lg in logs.items() if tp in high_watermarks
                }
                write_checkpoint(d / HW_CHECKPOINT, hws)

    def flush_dirty(self, now_ms: int | None = None) -> None:
        """fsync what is due, advance recovery points, checkpoint.

        As in Kafka, rolled segments are always flushed (so recovery after a crash only has to scan the
        active segments); the active segment only when flush.ms has passed since the last flush.
        """
        now = int(self._clock() * 1000) if now_ms is None else now_ms
        for lg in self.all_logs():
            try:
                if now - lg.last_flush_ms >= lg.config.flush_ms:
                    lg.flush()
                else:
                    lg.flush(lg.active_segment.base_offset)
            except KafkaStorageError:
                log.exception("flush of %s failed", lg)
        self.checkpoint()

    def cleanup(self, now_ms: int | None = None) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        deleted = 0
        for lg in self.all_logs():
            try:
                deleted += lg.delete_retention_segments(now_ms)
            except OSError:
                log.exception("retention of %s failed", lg)
        return deleted

    def clean_compacted_logs(self, high_watermark: HighWatermarks | None = None) -> list[CleanStats]:
        """One log cleaner pass over the compacted logs (in a worker thread: it rewrites segments).
        `high_watermark(tp)` bounds each log's cleaning (None: skip the log); without it, logs are cleaned
        up to their active segment."""
        return self.cleaner.clean_logs(self.logs_by_dir(), high_watermark)

    def shutdown(self, high_watermarks: dict[TopicPartition, int] | None = None) -> None:
        """Flush, checkpoint, close; the clean-shutdown marker is written last, only if all of that worked."""
        self.cleaner.shutdown()  # first: a pass in progress must not swap segments while they close
        self.file_creator.shutdown()  # logs still deferred stay so: empty, recreated from the metadata at start
        logs = self.all_logs()
        for lg in logs:
            lg.flush()
        self.checkpoint()
        if high_watermarks is not None:
            self.checkpoint_high_watermarks(high_watermarks)
        for lg in logs:
            lg.close()
        for d in self.data_dirs:
            marker = d / CLEAN_SHUTDOWN_FILE
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(d)
        log.info("log manager shut down cleanly (%d logs)", len(logs))
