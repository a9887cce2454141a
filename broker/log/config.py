"""LogConfig: per-topic log settings under Kafka's topic config names, with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from net.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True)
class _Key:
    field: str
    kind: type  # int, float, bool or str
    low: int | float | None = None
    high: int | float | None = None
    choices: tuple[str, ...] = ()


# Kafka's names, types and validators (TopicConfig / LogConfig.configDef).
KEYS: dict[str, _Key] = {
    "segment.bytes": _Key("segment_bytes", int, 14, INT_MAX),
    "segment.ms": _Key("segment_ms", int, 1, LONG_MAX),
    "retention.ms": _Key("retention_ms", int, -1, LONG_MAX),
    "retention.bytes": _Key("retention_bytes", int, -1, LONG_MAX),
    "index.interval.bytes": _Key("index_interval_bytes", int, 0, INT_MAX),
    "segment.index.bytes": _Key("segment_index_bytes", int, 8, INT_MAX),
    "max.message.bytes": _Key("max_message_bytes", int, 0, INT_MAX),
    "message.timestamp.type": _Key("message_timestamp_type", str, choices=(CREATE_TIME, LOG_APPEND_TIME)),
    "min.insync.replicas": _Key("min_insync_replicas", int, 1, INT_MAX),
    # "compact" turns on the log cleaner (broker/log/cleaner.py); without "delete" retention is off.
    "cleanup.policy": _Key("cleanup_policy", str, choices=("delete", "compact", "compact,delete")),
    "min.cleanable.dirty.ratio": _Key("min_cleanable_dirty_ratio", float, 0, 1),
    "delete.retention.ms": _Key("delete_retention_ms", int, 0, LONG_MAX),
    "min.compaction.lag.ms": _Key("min_compaction_lag_ms", int, 0, LONG_MAX),
    "unclean.leader.election.enable": _Key("unclean_leader_election_enable", bool),
    "flush.messages": _Key("flush_messages", int, 1, LONG_MAX),
    "flush.ms": _Key("flush_ms", int, 0, LONG_MAX),
}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000  # -1: keep forever
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    max_message_bytes: int = 1048588
    message_timestamp_type: str = CREATE_TIME
    min_insync_replicas: int = 1
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86400000  # tombstones stay this long after their first cleaning
    min_compaction_lag_ms: int = 0
    unclean_leader_election_enable: bool = False
    # Never fsync on the append path by default: durability comes from replication and the page cache.
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> LogConfig:
        return cls().merged(props)

    def merged(self, overrides: dict[str, Any]) -> LogConfig:
        """A copy with `overrides` (Kafka config names) applied; raises InvalidConfigError naming the key."""
        changes = {}
        for key, raw in overrides.items():
            spec = KEYS.get(key)
            if spec is None:
                raise InvalidConfigError(f"unknown topic config {key!r}")
            changes[spec.field] = _parse(key, spec, raw)
        return replace(self, **changes)

    def to_props(self) -> dict[str, str]:
        out = {}
        for key, spec in KEYS.items():
            v = getattr(self, spec.field)
            out[key] = ("true" if v else "false") if spec.kind is bool else str(v)
        return out

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME


def _parse(key: str, spec: _Key, raw: Any) -> Any:
    if spec.kind is bool:
        s = str(raw).strip().lower()
        if isinstance(raw, bool) or s in ("true", "false"):
            return raw if isinstance(raw, bool) else s == "true"
        raise InvalidConfigError(f"invalid value {raw!r} for config {key!r}: expected true or false")
    if spec.kind is str:
        s = str(raw).strip()
        if spec.field == "cleanup_policy":
            s = ",".join(sorted(p.strip() for p in s.split(",")))
        if s not in spec.choices:
            raise InvalidConfigError(f"invalid value {raw!r} for config {key!r}: expected one of {list(spec.choices)}")
        return s
    if spec.kind is float:
        return _parse_float(key, spec, raw)
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise InvalidConfigError(f"invalid value {raw!r} for config {key!r}: expected an integer")
    try:
        v = int(raw)
    except ValueError:
        raise InvalidConfigError(f"invalid value {raw!r} for config {key!r}: expected an integer") from None
    if (spec.low is not None and v < spec.low) or (spec.high is not None and v > spec.high):
        raise InvalidConfigError(f"value {v} for config {key!r} is out of range [{spec.low}, {spec.high}]")
    return v


def _parse_float(key: str, spec: _Key, raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise InvalidConfigError(f"invalid value {raw!r} for config {key!r}: expected a number")
    try:
        v = float(raw)
    except ValueError:
        raise InvalidConfigError(f"invalid value {raw!r} for config {key!r}: expected a number") from None
    # Written as conditions that must hold, so NaN (which float() accepts) fails them.
    if not (spec.low is None or spec.low <= v) or not (spec.high is None or v <= spec.high):
        raise InvalidConfigError(f"value {v} for config {key!r} is out of range [{spec.low}, {spec.high}]")
    return v
