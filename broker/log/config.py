"""LogConfig: per-topic log settings under Kafka's topic config names, with Kafka's defaults and validators
(TopicConfig / LogConfig.configDef), declared once in net/config_def.py's schema."""

from __future__ import annotations

from typing import ClassVar

from net.config_def import INT_MAX, LONG_MAX, Bool, ConfigDef, Float, Int, choice, key

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


def _sorted_policy(v: str) -> str:
    return ",".join(sorted(p.strip() for p in v.split(",")))


class LogConfig(ConfigDef):
    FAMILY: ClassVar[str] = "topic"

    segment_bytes: Int = key(
        "segment.bytes", 1073741824, "Size of one segment file; the log rolls a new one past it.", ge=14, le=INT_MAX
    )
    segment_ms: Int = key(
        "segment.ms", 604800000, "Roll a new segment after this long even if it is not full.", ge=1, le=LONG_MAX
    )
    retention_ms: Int = key(
        "retention.ms",
        604800000,
        "Delete closed segments whose newest record is older than this (-1: keep forever).",
        ge=-1,
        le=LONG_MAX,
    )
    retention_bytes: Int = key(
        "retention.bytes", -1, "Delete the oldest segments while the log is larger than this (-1: no limit).", ge=-1
    )
    index_interval_bytes: Int = key(
        "index.interval.bytes", 4096, "Bytes of log between two offset-index entries.", ge=0, le=INT_MAX
    )
    segment_index_bytes: Int = key(
        "segment.index.bytes", 10485760, "Maximum size of a segment's offset index; full rolls.", ge=8, le=INT_MAX
    )
    max_message_bytes: Int = key(
        "max.message.bytes", 1048588, "Largest record batch the topic accepts (after compression).", ge=0, le=INT_MAX
    )
    message_timestamp_type: choice(CREATE_TIME, LOG_APPEND_TIME) = key(  # type: ignore[valid-type]
        "message.timestamp.type",
        CREATE_TIME,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's clock at append.",
    )
    min_insync_replicas: Int = key(
        "min.insync.replicas",
        1,
        "Replicas that must be in sync for an acks=all produce to be accepted.",
        ge=1,
        le=INT_MAX,
    )
    # "compact" turns on the log cleaner (broker/log/cleaner.py); without "delete" retention is off.
    cleanup_policy: choice("delete", "compact", "compact,delete", normalize=_sorted_policy) = key(  # type: ignore[valid-type]
        "cleanup.policy", "delete", "delete: retention by time and size; compact: keep the latest record per key."
    )
    min_cleanable_dirty_ratio: Float = key(
        "min.cleanable.dirty.ratio", 0.5, "Clean a compacted log once this share of it is uncleaned.", ge=0, le=1
    )
    delete_retention_ms: Int = key(
        "delete.retention.ms",
        86400000,
        "How long a tombstone stays after its first cleaning, so that consumers see it.",
        ge=0,
        le=LONG_MAX,
    )
    min_compaction_lag_ms: Int = key(
        "min.compaction.lag.ms", 0, "Records younger than this are never compacted.", ge=0, le=LONG_MAX
    )
    unclean_leader_election_enable: Bool = key(
        "unclean.leader.election.enable",
        False,
        "Allow a replica outside the ISR to become leader when no in-sync replica is left (may lose data).",
    )
    # Never fsync on the append path by default: durability comes from replication and the page cache.
    flush_messages: Int = key(
        "flush.messages", LONG_MAX, "fsync the log after this many records (default: never).", ge=1, le=LONG_MAX
    )
    flush_ms: Int = key("flush.ms", LONG_MAX, "fsync the log this often (default: never).", ge=0, le=LONG_MAX)

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        append_time: bool = self.message_timestamp_type == LOG_APPEND_TIME
        return append_time
