"""The broker's share-group keys (Kafka's group.share.* names), mixed into BrokerConfig."""

from __future__ import annotations

from net.config_def import ConfigDef, Int, choice, key


class ShareKeys(ConfigDef):
    """Kafka's group.share.* broker settings (KIP-932) and the default of the group config share.auto.offset.reset."""

    group_share_session_timeout_ms: Int = key(
        "group.share.session.timeout.ms",
        45000,
        "A share group member that sends no ShareGroupHeartbeat for this long leaves the group.",
        ge=1,
    )
    group_share_heartbeat_interval_ms: Int = key(
        "group.share.heartbeat.interval.ms", 5000, "How often share group members are told to heartbeat.", ge=1
    )
    group_share_record_lock_duration_ms: Int = key(
        "group.share.record.lock.duration.ms",
        30000,
        "How long a record a share consumer acquired stays its own before it is available again (acquisition lock).",
        ge=1000,
        le=3600000,
    )
    group_share_delivery_count_limit: Int = key(
        "group.share.delivery.count.limit",
        5,
        "How many times a record is delivered to share consumers before it is archived (never delivered again).",
        ge=2,
        le=10,
    )
    group_share_partition_max_record_locks: Int = key(
        "group.share.partition.max.record.locks",
        2000,
        "The most records of one share-partition acquired at one time.",
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
