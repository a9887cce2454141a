"""A group's own configs (Kafka's GroupConfig: KIP-848's consumer.* for consumer groups, KIP-932's share.* for
share groups): set by IncrementalAlterConfigs / AlterConfigs on the GROUP resource (type 32), kept in the metadata
log (`group_config` records), each overriding the broker's default of the same meaning for that group only, within
the broker's group.*.min/max.* bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from net.errors import InvalidConfigError

Props = dict[str, Any]  # the broker's config as properties (BrokerConfig.to_props())


@dataclass(frozen=True)
class GroupKey:
    name: str
    type: str  # net/config_def.py's type names: int, string
    doc: str
    # The broker config whose value is the default (a synonym in DescribeConfigs); None: Kafka has none, the
    # default is `default`.
    broker_key: str | None
    check: Callable[[str, Props], None]  # the value, against the broker's bounds
    default: str = ""


def _int_within(lo_key: str, hi_key: str) -> Callable[[str, Props], None]:
    """Kafka's GroupConfig rule: between the broker's group.share.min.* and group.share.max.* of the same meaning."""

    def check(v: str, props: Props) -> None:
        try:
            n = int(v)
        except ValueError:
            raise InvalidConfigError(f"{v!r} is not an integer") from None
        lo, hi = int(props[lo_key]), int(props[hi_key])
        if not lo <= n <= hi:
            raise InvalidConfigError(f"{n} is not in [{lo}, {hi}] ({lo_key}, {hi_key})")

    return check


def _one_of(*values: str) -> Callable[[str, Props], None]:
    def check(v: str, _props: Props) -> None:
        if v not in values:
            raise InvalidConfigError(f"{v!r} is not one of {', '.join(values)}")

    return check


GROUP_KEYS: dict[str, GroupKey] = {
    k.name: k
    for k in (
        GroupKey(
            "consumer.session.timeout.ms",
            "int",
            "How long a member of the consumer group (KIP-848's protocol) may go without a heartbeat.",
            "group.consumer.session.timeout.ms",
            _int_within("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
        ),
        GroupKey(
            "consumer.heartbeat.interval.ms",
            "int",
            "How often members of the consumer group (KIP-848's protocol) are told to heartbeat.",
            "group.consumer.heartbeat.interval.ms",
            _int_within("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
        ),
        GroupKey(
            "share.auto.offset.reset",
            "string",
            "Where the share group starts on a partition it has no state for: latest or earliest.",
            "share.auto.offset.reset",
            _one_of("latest", "earliest"),
        ),
        GroupKey(
            "share.isolation.level",
            "string",
            "What the share group's members are given of transactional records: read_uncommitted, every record up "
            "to the high watermark; read_committed, up to the last stable offset and never an aborted "
            "transaction's.",
            None,
            _one_of("read_uncommitted", "read_committed"),
            "read_uncommitted",
        ),
        GroupKey(
            "share.record.lock.duration.ms",
            "int",
            "How long a record a member acquired stays locked to it.",
            "group.share.record.lock.duration.ms",
            _int_within("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
        ),
        GroupKey(
            "share.delivery.count.limit",
            "int",
            "How many times a record is delivered before it is archived.",
            "group.share.delivery.count.limit",
            _int_within("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
        ),
        GroupKey(
            "share.partition.max.record.locks",
            "int",
            "The most records of one share-partition acquired (locked to members) at one time.",
            "group.share.partition.max.record.locks",
            _int_within("group.share.min.partition.max.record.locks", "group.share.max.partition.max.record.locks"),
        ),
        GroupKey(
            "share.session.timeout.ms",
            "int",
            "How long a member may go without a heartbeat.",
            "group.share.session.timeout.ms",
            _int_within("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
        ),
        GroupKey(
            "share.heartbeat.interval.ms",
            "int",
            "How often members heartbeat.",
            "group.share.heartbeat.interval.ms",
            _int_within("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
        ),
    )
}


def default_of(key: GroupKey, props: Props) -> str:
    """The value a group without its own has: the broker's of the same meaning, else Kafka's default."""
    return str(props[key.broker_key]) if key.broker_key is not None else key.default


def altered(current: dict[str, str], changes: dict[str, Any], props: Props) -> dict[str, str]:
    """The group's overrides after `changes` (a value sets a key, None deletes it, back to the broker's default),
    checked against the broker's bounds (`props`); an unknown key or a bad value is INVALID_CONFIG and changes
    nothing."""
    out = dict(current)
    for name, value in changes.items():
        key = GROUP_KEYS.get(str(name))
        if key is None:
            raise InvalidConfigError(f"unknown group config {name!r} (group configs: {', '.join(sorted(GROUP_KEYS))})")
        if value is None:
            out.pop(key.name, None)
            continue
        if not isinstance(value, str):
            raise InvalidConfigError(f"{name}: append and subtract apply to list configs only")
        try:
            key.check(value, props)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"invalid value for group config {name}: {e}") from None
        out[key.name] = value
    return out


class GroupConfigs:
    """A group's effective configs: its overrides (the metadata image's), else the broker's."""

    def __init__(self, props: Props, overrides: Callable[[], dict[str, dict[str, str]]]) -> None:
        # props: the broker's config (BrokerConfig.to_props()), which does not change while it runs
        self.defaults = {k.name: default_of(k, props) for k in GROUP_KEYS.values()}
        self._overrides = overrides

    def _get(self, group: str, name: str) -> str:
        own = self._overrides().get(group)
        return own[name] if own and name in own else self.defaults[name]

    def consumer_session_timeout_ms(self, group: str) -> int:
        return int(self._get(group, "consumer.session.timeout.ms"))

    def consumer_heartbeat_interval_ms(self, group: str) -> int:
        return int(self._get(group, "consumer.heartbeat.interval.ms"))

    def session_timeout_ms(self, group: str) -> int:
        return int(self._get(group, "share.session.timeout.ms"))

    def heartbeat_interval_ms(self, group: str) -> int:
        return int(self._get(group, "share.heartbeat.interval.ms"))

    def auto_offset_reset(self, group: str) -> str:
        return self._get(group, "share.auto.offset.reset")

    def lock_duration_ms(self, group: str) -> int:
        return int(self._get(group, "share.record.lock.duration.ms"))

    def delivery_count_limit(self, group: str) -> int:
        return int(self._get(group, "share.delivery.count.limit"))

    def max_record_locks(self, group: str) -> int:
        return int(self._get(group, "share.partition.max.record.locks"))

    def read_committed(self, group: str) -> bool:
        return self._get(group, "share.isolation.level") == "read_committed"
