"""The broker's share-group keys (Kafka's group.share.* names), mixed into BrokerConfig."""

from __future__ import annotations

from net.config_def import ConfigDef, Int, choice, key

# Kafka's ShareGroupConfig rule: each of these broker values lies between its group.share.min.* and
# group.share.max.* (which also bound a share group's own config of the same meaning).
SHARE_BOUNDED = (
    "record.lock.duration.ms",
    "delivery.count.limit",
    "partition.max.record.locks",
    "session.timeout.ms",
    "heartbeat.interval.ms",
)


class ShareKeys(ConfigDef):
    """Kafka's group.share.* broker settings (KIP-932) and the default of the group config share.auto.offset.reset."""

    group_share_session_timeout_ms: Int = key(
        "group.share.session.timeout.ms",
        45000,
        "A share group member that sends no ShareGroupHeartbeat for this long leaves the group.",
        ge=1,
    )
    group_share_min_session_timeout_ms: Int = key(
        "group.share.min.session.timeout.ms", 45000, "The least share.session.timeout.ms a share group may set.", ge=1
    )
    group_share_max_session_timeout_ms: Int = key(
        "group.share.max.session.timeout.ms", 60000, "The most share.session.timeout.ms a share group may set.", ge=1
    )
    group_share_heartbeat_interval_ms: Int = key(
        "group.share.heartbeat.interval.ms", 5000, "How often share group members are told to heartbeat.", ge=1
    )
    group_share_min_heartbeat_interval_ms: Int = key(
        "group.share.min.heartbeat.interval.ms",
        5000,
        "The least share.heartbeat.interval.ms a share group may set.",
        ge=1,
    )
    group_share_max_heartbeat_interval_ms: Int = key(
        "group.share.max.heartbeat.interval.ms",
        15000,
        "The most share.heartbeat.interval.ms a share group may set.",
        ge=1,
    )
    group_share_record_lock_duration_ms: Int = key(
        "group.share.record.lock.duration.ms",
        30000,
        "How long a record a share consumer acquired stays its own before it is available again (acquisition lock).",
        ge=1000,
        le=3600000,
    )
    group_share_min_record_lock_duration_ms: Int = key(
        "group.share.min.record.lock.duration.ms",
        15000,
        "The least acquisition lock duration: of the broker's, and of a share group's share.record.lock.duration.ms.",
        ge=1000,
        le=30000,
    )
    group_share_max_record_lock_duration_ms: Int = key(
        "group.share.max.record.lock.duration.ms",
        60000,
        "The most acquisition lock duration: of the broker's, and of a share group's share.record.lock.duration.ms.",
        ge=30000,
        le=3600000,
    )
    group_share_delivery_count_limit: Int = key(
        "group.share.delivery.count.limit",
        5,
        "How many times a record is delivered to share consumers before it is archived (never delivered again).",
        ge=2,
        le=10,
    )
    group_share_min_delivery_count_limit: Int = key(
        "group.share.min.delivery.count.limit",
        2,
        "The least delivery count limit: of the broker's, and of a share group's share.delivery.count.limit.",
        ge=2,
        le=5,
    )
    group_share_max_delivery_count_limit: Int = key(
        "group.share.max.delivery.count.limit",
        10,
        "The most delivery count limit: of the broker's, and of a share group's share.delivery.count.limit.",
        ge=5,
        le=10,
    )
    group_share_partition_max_record_locks: Int = key(
        "group.share.partition.max.record.locks",
        2000,
        "The most records of one share-partition acquired at one time.",
        ge=100,
        le=10000,
    )
    group_share_min_partition_max_record_locks: Int = key(
        "group.share.min.partition.max.record.locks",
        100,
        "The least share.partition.max.record.locks a share group may set.",
        ge=100,
        le=10000,
    )
    group_share_max_partition_max_record_locks: Int = key(
        "group.share.max.partition.max.record.locks",
        4000,
        "The most share.partition.max.record.locks a share group may set.",
        ge=100,
        le=10000,
    )
    share_auto_offset_reset: choice("latest", "earliest") = key(  # type: ignore[valid-type]
        "share.auto.offset.reset",
        "latest",
        "Where a share group starts reading a partition it has no state for (Kafka's group config; this is its "
        "default for every share group).",
    )
    # The share coordinator's log (Kafka's share.coordinator.state.topic.*)
    share_coordinator_state_topic_num_partitions: Int = key(
        "share.coordinator.state.topic.num.partitions", 50, "Partitions of __share_group_state.", ge=1
    )
    share_coordinator_state_topic_replication_factor: Int = key(
        "share.coordinator.state.topic.replication.factor",
        -1,
        "Replication factor of __share_group_state (-1: min(3, brokers)).",
        ge=-1,
    )
    share_coordinator_state_topic_min_isr: Int = key(
        "share.coordinator.state.topic.min.isr", 2, "min.insync.replicas of __share_group_state.", ge=1
    )
    share_coordinator_write_timeout_ms: Int = key(
        "share.coordinator.write.timeout.ms", 5000, "How long a share-group state write waits for replication.", ge=1
    )
