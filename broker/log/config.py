"""LogConfig: per-topic log settings under Kafka's topic config names, with Kafka's defaults and validators
(TopicConfig / LogConfig.configDef), declared once in net/config_def.py's schema."""

from __future__ import annotations

import functools
import re
from typing import Annotated, ClassVar

from pydantic import AfterValidator

from net.compression import CODECS
from net.config_def import INT_MAX, LONG_MAX, Bool, ConfigDef, Float, Int, Str, choice, key

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
# compression.type: "producer" keeps the producer's codec; the others are the codec every stored batch has.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _policy_list(v: str) -> str:
    """cleanup.policy is Kafka's list type: each item compact or delete, kept in the order given (Kafka
    describes `delete,compact` as written), a repeat dropped; empty (infinite retention, no cleaning) allowed."""
    items: list[str] = []
    for item in (p.strip() for p in v.split(",")):
        if item and item not in items:
            if item not in ("compact", "delete"):
                raise ValueError(f"{item!r} is not one of [compact, delete]")
            items.append(item)
    return ",".join(items)


_THROTTLED = re.compile(r"\d+:\d+")


def _throttled_replicas(v: str) -> str:
    """Kafka's ThrottledReplicaListValidator: empty, `*`, or partition:broker,... pairs."""
    items = [p.strip() for p in v.split(",") if p.strip()]
    if items == ["*"] or all(_THROTTLED.fullmatch(i) for i in items):
        return ",".join(items)
    raise ValueError("expected [partitionId]:[brokerId],[partitionId]:[brokerId],... or the wildcard '*'")


def _gzip_level(v: int) -> int:
    if v != -1 and not 1 <= v <= 9:
        raise ValueError("expected [1,...,9] or -1")
    return v


PolicyList = Annotated[Str, AfterValidator(_policy_list)]
ThrottledReplicas = Annotated[Str, AfterValidator(_throttled_replicas)]
GzipLevel = Annotated[Int, AfterValidator(_gzip_level)]
_THROTTLED_VALID = "[partitionId]:[brokerId],[partitionId]:[brokerId],... or the wildcard '*'"
_TIERED = "Accepted and described; Kafka Lite has no tiered storage, so it has no effect."


class LogConfig(ConfigDef):
    """Every topic config of Kafka 4.x (its topic_config.html), with Kafka's types, defaults and valid values.
    A few bounds are wider than Kafka's (segment.bytes, kept low for tests and small logs) or narrower
    (segment.index.bytes: an offset-index entry is 8 bytes); docs/COMPATIBILITY.md lists which keys act."""

    FAMILY: ClassVar[str] = "topic"

    segment_bytes: Int = key(
        "segment.bytes",
        1073741824,
        "Size of one segment file; the log rolls a new one past it.",
        ge=14,
        le=INT_MAX,
        kafka_type="int",
    )
    segment_ms: Int = key(
        "segment.ms", 604800000, "Roll a new segment after this long even if it is not full.", ge=1, le=LONG_MAX
    )
    segment_jitter_ms: Int = key(
        "segment.jitter.ms",
        0,
        "Up to this much (a per-segment amount) is taken off segment.ms, so that logs created together do not "
        "all roll at once.",
        ge=0,
        le=LONG_MAX,
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
        "index.interval.bytes",
        4096,
        "Bytes of log between two offset-index entries.",
        ge=0,
        le=INT_MAX,
        kafka_type="int",
    )
    segment_index_bytes: Int = key(
        "segment.index.bytes",
        10485760,
        "Maximum size of a segment's offset index; full rolls.",
        ge=8,
        le=INT_MAX,
        kafka_type="int",
    )
    max_message_bytes: Int = key(
        "max.message.bytes",
        1048588,
        "Largest record batch the topic accepts (after compression).",
        ge=0,
        le=INT_MAX,
        kafka_type="int",
    )
    message_timestamp_type: choice(CREATE_TIME, LOG_APPEND_TIME) = key(  # type: ignore[valid-type]
        "message.timestamp.type",
        CREATE_TIME,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's clock at append.",
    )
    # Checked on the leader's append for CreateTime topics, on each batch's first and largest timestamp.
    message_timestamp_before_max_ms: Int = key(
        "message.timestamp.before.max.ms",
        LONG_MAX,
        "A batch with a record timestamped more than this before the broker's clock is refused "
        "(INVALID_TIMESTAMP); CreateTime topics only.",
        ge=0,
        le=LONG_MAX,
    )
    message_timestamp_after_max_ms: Int = key(
        "message.timestamp.after.max.ms",
        3600000,
        "A batch with a record timestamped more than this after the broker's clock is refused "
        "(INVALID_TIMESTAMP); CreateTime topics only.",
        ge=0,
        le=LONG_MAX,
    )
    min_insync_replicas: Int = key(
        "min.insync.replicas",
        1,
        "Replicas that must be in sync for an acks=all produce to be accepted.",
        ge=1,
        le=INT_MAX,
        kafka_type="int",
    )
    # "compact" turns on the log cleaner (broker/log/cleaner.py); without "delete" retention is off.
    cleanup_policy: PolicyList = key(
        "cleanup.policy",
        "delete",
        "delete: retention by time and size; compact: keep the latest record per key; both: delete,compact; "
        "empty: keep everything.",
        kafka_type="list",
        valid="[compact, delete]",
    )
    min_cleanable_dirty_ratio: Float = key(
        "min.cleanable.dirty.ratio", 0.5, "Clean a compacted log once this share of it is uncleaned.", ge=0, le=1
    )
    delete_retention_ms: Int = key(
        "delete.retention.ms",
        86400000,
        "How long a tombstone or a lone transaction marker stays after the cleaning that first keeps it (the "
        "delete horizon written in its batch), so that consumers reading from the start see it.",
        ge=0,
        le=LONG_MAX,
    )
    min_compaction_lag_ms: Int = key(
        "min.compaction.lag.ms", 0, "Records younger than this are never compacted.", ge=0, le=LONG_MAX
    )
    max_compaction_lag_ms: Int = key(
        "max.compaction.lag.ms",
        LONG_MAX,
        "A compacted log whose uncleaned part holds a segment entirely older than this is cleaned whatever its "
        "dirty ratio.",
        ge=1,
        le=LONG_MAX,
    )
    file_delete_delay_ms: Int = key(
        "file.delete.delay.ms",
        60000,
        "Accepted and described; segments are unlinked at once (reads hold the log's lock, so no reader can "
        "still be in a deleted file, which the delay exists for in Kafka).",
        ge=0,
        le=LONG_MAX,
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
    compression_type: choice(*COMPRESSION_TYPES) = key(  # type: ignore[valid-type]
        "compression.type",
        "producer",
        "producer: batches are stored with the producer's codec; a codec (or uncompressed): the leader "
        "recompresses every batch produced with another one to it before appending.",
    )
    compression_gzip_level: GzipLevel = key(
        "compression.gzip.level",
        -1,
        "Level of the broker's gzip recompression when compression.type is gzip.",
        kafka_type="int",
        valid="[1,...,9] or -1",
    )
    compression_lz4_level: Int = key(
        "compression.lz4.level",
        9,
        "Level of the broker's lz4 recompression when compression.type is lz4.",
        ge=1,
        le=17,
        kafka_type="int",
    )
    compression_zstd_level: Int = key(
        "compression.zstd.level",
        3,
        "Level of the broker's zstd recompression when compression.type is zstd.",
        ge=-131072,
        le=22,
        kafka_type="int",
    )
    preallocate: Bool = key(
        "preallocate", False, "Accepted and described; segment files grow as written (never preallocated)."
    )
    leader_replication_throttled_replicas: ThrottledReplicas = key(
        "leader.replication.throttled.replicas",
        "",
        "Replicas whose fetches their leader serves under the leader's leader.replication.throttled.rate, while "
        "they are not in the ISR: partition:broker of the leader, or * for all.",
        kafka_type="list",
        valid=_THROTTLED_VALID,
    )
    follower_replication_throttled_replicas: ThrottledReplicas = key(
        "follower.replication.throttled.replicas",
        "",
        "Replicas that fetch under their broker's follower.replication.throttled.rate, while they are not in the "
        "ISR: partition:broker of the follower, or * for all.",
        kafka_type="list",
        valid=_THROTTLED_VALID,
    )
    remote_storage_enable: Bool = key("remote.storage.enable", False, _TIERED)
    remote_log_copy_disable: Bool = key("remote.log.copy.disable", False, _TIERED)
    remote_log_delete_on_disable: Bool = key("remote.log.delete.on.disable", False, _TIERED)
    local_retention_ms: Int = key("local.retention.ms", -2, _TIERED, ge=-2, le=LONG_MAX)
    local_retention_bytes: Int = key("local.retention.bytes", -2, _TIERED, ge=-2, le=LONG_MAX)

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

    @property
    def stored_codec(self) -> int | None:
        """The codec compression.type names, which the leader recompresses other batches to; None: producer."""
        if self.compression_type == "producer":
            return None
        return CODECS["none" if self.compression_type == "uncompressed" else self.compression_type]

    @property
    def compression_level(self) -> int | None:
        """compression.<codec>.level of the codec compression.type names (snappy has none)."""
        levels = {
            "gzip": self.compression_gzip_level,
            "lz4": self.compression_lz4_level,
            "zstd": self.compression_zstd_level,
        }
        return levels.get(self.compression_type)

    def roll_jitter_ms(self, base_offset: int) -> int:
        """The part of segment.jitter.ms taken off segment.ms for the segment at `base_offset`: fixed per
        segment (a hash, not a draw, so a restart does not change it), below segment.ms as Kafka's is."""
        bound = min(self.segment_jitter_ms, self.segment_ms)
        return (base_offset * 2654435761) % bound if bound > 0 else 0


def log_config_for(defaults: dict[str, str], overrides: dict[str, str] | None = None) -> LogConfig:
    """The LogConfig of `defaults` (the broker's log.* values under topic names) with a topic's `overrides`,
    validated once per distinct pair: a flood of 5,000 partitions asked for its topic's config per partition,
    and two pydantic validations each were a second of a broker's event loop (issue 25 §4). LogConfig is
    frozen, so sharing one object is safe."""
    return _log_config_for(tuple(sorted(defaults.items())), tuple(sorted((overrides or {}).items())))


@functools.lru_cache(maxsize=1024)
def _log_config_for(defaults: tuple[tuple[str, str], ...], overrides: tuple[tuple[str, str], ...]) -> LogConfig:
    base = LogConfig.from_props(dict(defaults))
    return base.merged(dict(overrides)) if overrides else base
