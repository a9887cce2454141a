"""Broker configuration: Kafka's server.properties keys, declared once (net/config_def.py's schema).

Sources, later ones winning: a `.properties` file (`--config`), `--override KEY=VALUE`, then the
dedicated `kl-broker start` flags. Topic-config defaults use Kafka's broker names (`log.segment.bytes`,
...) and are validated by LogConfig, the topic family.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Self

from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr

from broker.controller.leader_balance import RebalancePolicy
from broker.log.config import LogConfig, log_config_for
from broker.security.config import SecurityKeys
from broker.security.listeners import (
    BROKER,
    KAFKA,
    LISTENER_MECHANISMS,
    NATIVE,
    WIRES,
    Listener,
    build_listeners,
    parse_endpoints,
    parse_map,
)
from broker.share.config import SHARE_BOUNDED, ShareKeys
from net.config_def import LONG_MAX, Bool, ConfigDef, Int, KeyDoc, Str, check_within_bounds, choice, key
from net.errors import InvalidConfigError
from net.security import uses_sasl

if TYPE_CHECKING:
    from broker.metadata.image import BrokerInfo

# Broker-level defaults for topic configs use Kafka's broker names (Kafka's ServerTopicConfigSynonyms): in
# server.properties they set every topic's default, and DescribeConfigs names them as each topic config's synonym.
TOPIC_DEFAULT_KEYS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "message.max.bytes": "max.message.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "log.preallocate": "preallocate",
    "log.local.retention.ms": "local.retention.ms",
    "log.local.retention.bytes": "local.retention.bytes",
}
# topic config -> its broker synonym (the topic configs without one: throttles and the remote.* keys).
TOPIC_SYNONYMS = {t: b for b, t in TOPIC_DEFAULT_KEYS.items()}
# Kafka's ConfigDef types of the broker keys that are 32-bit (INT) or 16-bit (SHORT) in Kafka, where our
# schema's integers are all 64-bit: DescribeConfigs' config_type and CONFIGURATION.md give Kafka's.
KAFKA_INT_KEYS = frozenset(
    {
        "broker.id",
        "num.partitions",
        "default.replication.factor",
        "socket.request.max.bytes",
        "log.flush.offset.checkpoint.interval.ms",
        "broker.session.timeout.ms",
        "broker.heartbeat.interval.ms",
        "controller.quorum.election.timeout.ms",
        "zookeeper.session.timeout.ms",
        "leader.imbalance.per.broker.percentage",
        "producer.id.expiration.ms",
        "producer.id.expiration.check.interval.ms",
        "transactional.id.expiration.ms",
        "num.replica.fetchers",
        "replica.fetch.wait.max.ms",
        "replica.socket.timeout.ms",
        "replica.fetch.max.bytes",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.initial.rebalance.delay.ms",
        "offsets.topic.num.partitions",
        "offsets.topic.segment.bytes",
        "offsets.retention.minutes",
        "offsets.commit.timeout.ms",
        "offset.metadata.max.bytes",
        "max.connections",
        "max.connections.per.ip",
        "queued.max.requests",
        "sasl.server.max.receive.size",
        "connection.failed.authentication.delay.ms",
        "quota.window.num",
        "quota.window.size.seconds",
        "controller.quota.window.num",
        "controller.quota.window.size.seconds",
        "replication.quota.window.num",
        "replication.quota.window.size.seconds",
    }
)
KAFKA_SHORT_KEYS = frozenset({"offsets.topic.replication.factor"})


def _paths(v: Any) -> Any:
    if isinstance(v, str):
        return [Path(p.strip()) for p in v.split(",") if p.strip()]
    return v


Paths = Annotated[list[Path], BeforeValidator(_paths)]
OptStr = Annotated[str | None, BeforeValidator(lambda v: v.strip() or None if isinstance(v, str) else v)]


def optional_port(name: str, what: str) -> Any:
    """A listener that is off unless given a port: -1 (default) none, 0 any free port."""
    return key(name, -1, f"Port of {what}; -1 (default): none; 0: any free port.", ge=-1, le=65535)


class BrokerConfig(ShareKeys, SecurityKeys):
    # Not frozen: a broker started on port 0 records the port it was given (BrokerServer.start).
    model_config = ConfigDict(**ConfigDef.model_config | {"frozen": False, "validate_assignment": True})
    FAMILY: ClassVar[str] = "broker"

    broker_id: Int = key("broker.id", 1, "This broker's id, unique in the cluster.", ge=0)
    host: Str = key("host", "127.0.0.1", "Address the broker's listener binds.")
    port: Int = key("port", 9092, "Port of the broker's (msgpack) listener.", ge=0, le=65535)
    metrics_port: Int = optional_port(
        "metrics.port",
        "the Prometheus listener (GET /metrics), apart from the broker's own port, as Prometheus exporters do; "
        "Kafka has none without an exporter",
    )
    advertised_host: OptStr = key("advertised.host", None, "Host clients are told to use (default: host).")
    kafka_port: Int = optional_port(
        "kafka.port",
        "the listener that speaks Apache Kafka's protocol (Kafka clients, kcat); the native (msgpack) listener "
        "stays on port",
    )
    kafka_host: OptStr = key("kafka.host", None, "Address the Kafka listener binds (default: host).")
    kafka_advertised_host: OptStr = key(
        "kafka.advertised.host",
        None,
        "Host Kafka clients are told to use, as Kafka's advertised.listeners (default: advertised.host, else "
        "kafka.host, else host).",
    )
    log_dirs: Paths = key("log.dirs", [Path("data")], "Comma-separated data directories (log.dir: one).")
    # --- who may read the broker's files and metrics (issue 25 §5, docs/SECURITY.md) ---
    log_dirs_group_readable: Bool = key(
        "log.dirs.group.readable",
        False,
        "Data directories 0750 and files 0640 (the broker's group may read them, e.g. a Spark worker) instead "
        "of 0700/0600, whatever the umask; as PostgreSQL's --allow-group-access.",
    )
    metrics_host: Str = key(
        "metrics.host", "127.0.0.1", "Address the metrics listener binds (loopback unless the operator opens it)."
    )
    metrics_topic_labels: Bool = key(
        "metrics.topic.labels",
        False,
        "Per-topic, per-partition and per-group series on /metrics (their names become visible to whoever "
        "scrapes); off: broker-wide series only.",
    )
    metrics_basic_auth_users: Str = key(
        "metrics.basic.auth.users",
        "",
        "user:password,... allowed to scrape /metrics (HTTP basic auth, as Prometheus's web config); empty: anyone.",
        sensitive=True,
    )
    metrics_ssl_keystore_location: Str = key(
        "metrics.ssl.keystore.location", "", "PEM file (key and certificate): serve /metrics over HTTPS."
    )
    auto_create_topics_enable: Bool = key(
        "auto.create.topics.enable",
        True,
        "Create a topic when a producer or a Kafka client's Metadata request names one that does not exist "
        "(with num.partitions and default.replication.factor), as Kafka does; consumers never create topics.",
    )
    num_partitions: Int = key("num.partitions", 1, "Partitions of an automatically created topic.", ge=1)
    max_request_partition_size_limit: Int = key(
        "max.request.partition.size.limit",
        2000,
        "The most partitions one DescribeTopicPartitions answer holds (a client asking for more gets this many and "
        "a cursor to the rest), as in Kafka.",
        ge=1,
    )
    default_replication_factor: Int = key(
        "default.replication.factor", 1, "Replication factor of an automatically created topic.", ge=1
    )
    socket_request_max_bytes: Int = key("socket.request.max.bytes", 104857600, "Largest request accepted.", ge=1)
    log_retention_check_interval_ms: Int = key(
        "log.retention.check.interval.ms", 300000, "How often retention looks for segments to delete.", ge=1
    )
    log_flush_offset_checkpoint_interval_ms: Int = key(
        "log.flush.offset.checkpoint.interval.ms", 60000, "How often the recovery-point checkpoint is written.", ge=1
    )
    replica_high_watermark_checkpoint_interval_ms: Int = key(
        "replica.high.watermark.checkpoint.interval.ms",
        5000,
        "How often each partition's high watermark is written to replication-offset-checkpoint.",
        ge=1,
    )
    log_cleaner_backoff_ms: Int = key(
        "log.cleaner.backoff.ms", 15000, "How often the log cleaner looks for compacted logs to clean.", ge=1
    )
    peers: Str = key("peers", "", "Every broker of the cluster: id@host:port,... (empty: this broker alone).")
    # Kafka's defaults (9 s / 2 s). A killed broker is found within ~0.1 s from its closed connections
    # (broker/network/peers.py); these only judge the silent ones (paused, cut off, host down), and heartbeats
    # travel on a thread of their own (broker/controller/heartbeat.py), so a busy event loop is not silence.
    broker_session_timeout_ms: Int = key(
        "broker.session.timeout.ms",
        9000,
        "A broker with no metadata fetch and no heartbeat for this long is fenced.",
        ge=100,
    )
    broker_heartbeat_interval_ms: Int = key(
        "broker.heartbeat.interval.ms",
        2000,
        "How often a broker heartbeats every other broker, on a thread and connections of its own.",
        ge=10,
    )
    # The controller's liveness as its followers judge it: with no answer to a fetch or a heartbeat from it
    # for this long (+ up to a quarter more, random), they elect another. Below the session timeout, so that a
    # paused controller's partitions move within it (the election, then the new controller fences it at once).
    controller_election_timeout_ms: Int = key(
        "controller.quorum.election.timeout.ms",
        6000,
        "Without word from the controller (fetch answers, heartbeats) for this long, start an election.",
        ge=100,
    )
    coordination: choice("custom", "zookeeper", normalize=str.lower) = key(  # type: ignore[valid-type]
        "coordination",
        "custom",
        "How brokers agree on the controller and metadata: their own quorum, or ZooKeeper (Kafka's classic design).",
    )
    zookeeper_connect: Str = key(
        "zookeeper.connect",
        "",
        "host:port[,host:port...][/chroot] (chroot default /kafkalite), for coordination=zookeeper.",
    )
    # Kafka's default is 18 s; 9 s here, the same as broker.session.timeout.ms, so that the two modes judge a
    # silent broker alike and the failover comparison (docs/BENCHMARKS.md) measures the mechanisms. kazoo pings
    # from a thread of its own, so a busy event loop does not expire the session either.
    zookeeper_session_timeout_ms: Int = key(
        "zookeeper.session.timeout.ms", 9000, "ZooKeeper session timeout (coordination=zookeeper).", ge=1000
    )
    auto_leader_rebalance_enable: Bool = key(
        "auto.leader.rebalance.enable",
        True,
        "The controller moves leadership back to each partition's preferred replica (its first) when a broker's "
        "leader imbalance is above leader.imbalance.per.broker.percentage, checked every "
        "leader.imbalance.check.interval.seconds.",
    )
    leader_imbalance_per_broker_percentage: Int = key(
        "leader.imbalance.per.broker.percentage",
        10,
        "Per broker, the share (%) of the partitions it is the preferred leader of, led by another broker, above "
        "which the automatic rebalance elects their preferred replicas.",
        ge=0,
        le=100,
    )
    leader_imbalance_check_interval_seconds: Int = key(
        "leader.imbalance.check.interval.seconds", 300, "How often the controller checks the leader imbalance.", ge=1
    )
    replica_lag_time_max_ms: Int = key(
        "replica.lag.time.max.ms", 30000, "A follower not caught up for this long leaves the ISR.", ge=100
    )
    # Kafka Lite's own key (Kafka has only the lag time). Issue 29 §3: a follower paused or cut off for 2-4 s
    # stayed in every ISR it was in for replica.lag.time.max.ms, so no partition's high watermark moved and every
    # consumer of the cluster stopped, with two of three brokers up (bench/group_faults.py).
    replica_silence_time_max_ms: Int = key(
        "replica.silence.time.max.ms",
        1000,
        "A follower no fetch has arrived from for this long (it sends one at least every replica.fetch.wait.max.ms), "
        "or, once it was sent records, for this long less replica.fetch.wait.max.ms (it owes the next fetch at "
        "once), and that lags "
        "leaves the ISR at once, not after replica.lag.time.max.ms, if the ISR keeps a majority of the replicas "
        "and min.insync.replicas: a fault on a minority of the replicas then holds back no high watermark of "
        "partitions it does not lead. 0: only the lag time, as in Kafka.",
        ge=0,
    )
    # Kafka Lite's own key. Issue 29 §3: with the ISR rule alone, a follower that is also the controller, once
    # silent, held every high watermark it was in the ISR of until a new controller dropped it (6 s).
    replica_quorum_commit_enable: Bool = key(
        "replica.quorum.commit.enable",
        True,
        "Commit with a quorum, as Raft does, in partitions whose min.insync.replicas is at least a majority of their "
        "replicas (RF=3 with min.insync.replicas=2): the high watermark passes ISR members silent for "
        "replica.silence.time.max.ms once min.insync.replicas replicas have the records, without waiting for the "
        "controller (which may be the silent one) to drop them; and a new leader first learns the log ends of "
        "enough replicas to meet every such quorum, fetches what the most complete of them has, and only then "
        "takes writes (until then NOT_LEADER_OR_FOLLOWER) and answers the latest offset. Such a partition thus "
        "serves only with a majority of its replicas alive. Partitions with a lower minimum keep Kafka's rules. "
        "false: Kafka's rules everywhere.",
    )
    producer_id_expiration_ms: Int = key(
        "producer.id.expiration.ms",
        86400000,
        "An idempotent producer's de-duplication state is dropped this long after its last batch.",
        ge=1,
    )
    producer_id_expiration_check_interval_ms: Int = key(
        "producer.id.expiration.check.interval.ms", 600000, "How often expired producer ids are removed.", ge=1
    )
    # ReplicaFetcher.add cuts a pending long poll short, so a newly followed partition does not wait it out.
    num_replica_fetchers: Int = key(
        "num.replica.fetchers",
        4,
        "Fetch loops per leader broker a follower runs, each over a share of the partitions it follows from "
        "that leader (Kafka's default is 1): an append wakes the one covering its partition, so the cost of a "
        "replication round stays a share of the partitions after a flood of them. A topic's partitions go to "
        "the lanes in runs of 64, so those of a small topic, which a transaction appends to together, share one.",
        ge=1,
    )
    replica_fetch_wait_max_ms: Int = key(
        "replica.fetch.wait.max.ms", 500, "Longest a follower's fetch waits at the leader for new data.", ge=0
    )
    # Kafka's default, 30 s. A lower value (3 s) closes a cut-off leader's connection sooner, so a healed
    # broker's fetches resume on a new connection instead of TCP's retransmission backoff (issue 29 §3's
    # back-to-back faults set it: bench/group_faults.py); but on a machine so busy that a starved leader answers
    # a fetch in more than that, every fetch closed its connection and each new connection's login (a SCRAM
    # exchange, itself seconds long there) failed in turn: replication stopped with both brokers alive
    # (tests/integration/test_busy_machine.py). The fetcher's timeout adapts to slow answers (replica_fetcher.py).
    replica_socket_timeout_ms: Int = key(
        "replica.socket.timeout.ms",
        30000,
        "How long a follower waits for its leader's answer to a fetch before it closes the connection and "
        "makes a new one; at least replica.fetch.wait.max.ms. Lower (e.g. 3000) to resume replication sooner "
        "after a network cut heals, on machines that are never starved of CPU.",
        ge=1,
    )
    replica_fetch_max_bytes: Int = key(
        "replica.fetch.max.bytes",
        1048576,
        "Bytes a follower asks for per partition in one fetch (a larger first batch still comes whole); also "
        "the step in which a replication throttle's rate may be overshot.",
        ge=0,
    )
    # KIP-227 (broker/replica/fetch_session.py): a follower's fetch names only the partitions whose position moved.
    max_incremental_fetch_session_cache_slots: Int = key(
        "max.incremental.fetch.session.cache.slots",
        1000,
        "Incremental fetch sessions (KIP-227) a leader holds for its followers' fetchers; 0: every follower "
        "fetch names every partition it follows.",
        ge=0,
    )
    min_incremental_fetch_session_eviction_ms: Int = key(
        "min.incremental.fetch.session.eviction.ms",
        120000,
        "How long a fetch session must have been idle before a new one may take its slot.",
        ge=0,
    )
    group_min_session_timeout_ms: Int = key(
        "group.min.session.timeout.ms", 6000, "Smallest session.timeout.ms a group member may ask for.", ge=1
    )
    group_max_session_timeout_ms: Int = key(
        "group.max.session.timeout.ms", 1800000, "Largest session.timeout.ms a group member may ask for.", ge=1
    )
    group_initial_rebalance_delay_ms: Int = key(
        "group.initial.rebalance.delay.ms", 3000, "How long a new group waits for more members to join.", ge=0
    )
    # The consumer group protocol (KIP-848): the broker, not the member, sets these.
    group_consumer_session_timeout_ms: Int = key(
        "group.consumer.session.timeout.ms",
        45000,
        "A consumer-protocol member that sends no heartbeat for this long is fenced and its partitions move.",
        ge=1,
    )
    group_consumer_heartbeat_interval_ms: Int = key(
        "group.consumer.heartbeat.interval.ms",
        5000,
        "How often consumer-protocol members heartbeat; each heartbeat is a step of their reconciliation.",
        ge=1,
    )
    group_consumer_min_session_timeout_ms: Int = key(
        "group.consumer.min.session.timeout.ms",
        45000,
        "The least group.consumer.session.timeout.ms, and consumer.session.timeout.ms a consumer group may set.",
        ge=1,
    )
    group_consumer_max_session_timeout_ms: Int = key(
        "group.consumer.max.session.timeout.ms",
        60000,
        "The most group.consumer.session.timeout.ms, and consumer.session.timeout.ms a consumer group may set.",
        ge=1,
    )
    group_consumer_min_heartbeat_interval_ms: Int = key(
        "group.consumer.min.heartbeat.interval.ms",
        5000,
        "The least group.consumer.heartbeat.interval.ms, and consumer.heartbeat.interval.ms a consumer group may set.",
        ge=1,
    )
    group_consumer_max_heartbeat_interval_ms: Int = key(
        "group.consumer.max.heartbeat.interval.ms",
        15000,
        "The most group.consumer.heartbeat.interval.ms, and consumer.heartbeat.interval.ms a consumer group may set.",
        ge=1,
    )
    group_consumer_max_size: Int = key(
        "group.consumer.max.size",
        2147483647,
        "Most members a consumer-protocol group takes (GROUP_MAX_SIZE_REACHED beyond).",
        ge=1,
    )
    group_consumer_assignors: Str = key(
        "group.consumer.assignors",
        "uniform,range",
        "Server-side assignors consumer-protocol members may choose (group.remote.assignor); the first is the "
        "default. Names or Kafka's class names.",
    )
    offsets_topic_num_partitions: Int = key(
        "offsets.topic.num.partitions", 50, "Partitions of __consumer_offsets.", ge=1
    )
    offsets_topic_replication_factor: Int = key(
        "offsets.topic.replication.factor", -1, "Replication factor of __consumer_offsets (-1: min(3, brokers)).", ge=-1
    )
    offsets_topic_segment_bytes: Int = key(
        "offsets.topic.segment.bytes", 104857600, "segment.bytes of __consumer_offsets.", ge=1
    )
    # Transactions (KIP-98): the transaction coordinator and its log, Kafka's names and defaults.
    transaction_state_log_num_partitions: Int = key(
        "transaction.state.log.num.partitions", 50, "Partitions of __transaction_state.", ge=1
    )
    transaction_state_log_replication_factor: Int = key(
        "transaction.state.log.replication.factor",
        -1,
        "Replication factor of __transaction_state (-1: min(3, brokers)).",
        ge=-1,
    )
    transaction_state_log_min_isr: Int = key(
        "transaction.state.log.min.isr", 2, "min.insync.replicas of __transaction_state (at most its RF).", ge=1
    )
    transaction_state_log_segment_bytes: Int = key(
        "transaction.state.log.segment.bytes", 104857600, "segment.bytes of __transaction_state.", ge=1
    )
    transaction_max_timeout_ms: Int = key(
        "transaction.max.timeout.ms",
        900000,
        "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT beyond).",
        ge=1,
    )
    transactional_id_expiration_ms: Int = key(
        "transactional.id.expiration.ms",
        604800000,
        "A transactional id without a transaction for this long is forgotten by its coordinator.",
        ge=1,
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: Int = key(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        10000,
        "How often the coordinator aborts transactions open past their timeout.",
        ge=1,
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: Int = key(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        3600000,
        "How often the coordinator forgets expired transactional ids.",
        ge=1,
    )
    transaction_partition_verification_enable: Bool = key(
        "transaction.partition.verification.enable",
        True,
        "KIP-890: a partition leader asks the transaction coordinator whether a transaction's first batch on the "
        "partition belongs to an ongoing transaction before appending it (INVALID_TXN_STATE otherwise), so a late "
        "produce cannot leave a hanging transaction.",
    )
    offsets_retention_minutes: Int = key(
        "offsets.retention.minutes", 10080, "Committed offsets of an empty group are kept this long.", ge=1
    )
    offsets_commit_timeout_ms: Int = key(
        "offsets.commit.timeout.ms", 5000, "An offset commit waits this long for __consumer_offsets replication.", ge=1
    )
    offset_metadata_max_bytes: Int = key(
        "offset.metadata.max.bytes", 4096, "Largest metadata string of a committed offset.", ge=0
    )
    # Partition floods (issue 25; docs/SECURITY.md "Limits"): KIP-578's caps, KIP-599's controller mutation quota
    # windows, and the cap on the segment files the logs keep open (broker/log/file_handles.py).
    max_partitions: Int = key(
        "max.partitions",
        15000,
        "Most partitions the cluster may hold (each counted once, whatever its replication factor); a "
        "CreateTopics or CreatePartitions that would pass it creates nothing (POLICY_VIOLATION). Enforced by "
        "the active controller (KIP-578).",
        ge=1,
    )
    max_broker_partitions: Int = key(
        "max.broker.partitions",
        10000,
        "Most partition replicas one broker may host; a creation that would place more on any broker creates "
        "nothing (POLICY_VIOLATION). Enforced by the active controller (KIP-578).",
        ge=1,
    )
    controller_quota_window_num: Int = key(
        "controller.quota.window.num",
        11,
        "Samples of the controller mutation quota (controller_mutation_rate, KIP-599): a user may burst "
        "rate x samples x sample length partitions before being throttled.",
        ge=1,
    )
    controller_quota_window_size_seconds: Int = key(
        "controller.quota.window.size.seconds", 1, "Length of one controller-mutation-quota sample.", ge=1
    )
    # Replication throttles (KIP-73, broker/quota/replication_quota.py): dynamic broker configs (kl-configs
    # --entity-type
    # brokers; broker/server/dynamic_config.py), which a value here is the static default of.
    leader_replication_throttled_rate: Int = key(
        "leader.replication.throttled.rate",
        LONG_MAX,
        "Bytes/s this broker, as leader, serves to the replicas its topics' leader.replication.throttled.replicas "
        "name (those not in the ISR); dynamic, per broker or as the cluster default.",
        ge=0,
    )
    follower_replication_throttled_rate: Int = key(
        "follower.replication.throttled.rate",
        LONG_MAX,
        "Bytes/s this broker, as follower, fetches for the replicas its topics' "
        "follower.replication.throttled.replicas name (those not in the ISR); dynamic, per broker or as the "
        "cluster default.",
        ge=0,
    )
    replication_quota_window_num: Int = key(
        "replication.quota.window.num", 11, "Samples a replication throttle's rate is measured over.", ge=1
    )
    replication_quota_window_size_seconds: Int = key(
        "replication.quota.window.size.seconds", 1, "Length of one replication-throttle sample.", ge=1
    )
    log_segment_open_files_max: Int = key(
        "log.segment.open.files.max",
        1024,
        "Most segment and index files the logs keep open at once: least recently used ones are closed and "
        "reopened on their next use; a segment is opened only when first read or written.",
        ge=8,
    )
    # Topic-config defaults (Kafka's log.* keys, TOPIC_DEFAULT_KEYS), as topic config names: LogConfig validates.
    topic_defaults: dict[str, str] = Field(default_factory=dict)
    # What clients are told of each client listener once bound (bind_ports): name -> (host, port, wire).
    _advertised: dict[str, tuple[str, int, str]] | None = PrivateAttr(default=None)

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> Self:
        props = cls.security_aliases(props)
        topic_defaults: dict[str, str] = {}
        for broker_key, topic_key in TOPIC_DEFAULT_KEYS.items():
            if broker_key in props:
                raw = props.pop(broker_key)
                try:
                    LogConfig.from_props({topic_key: raw})
                except InvalidConfigError as e:
                    raise InvalidConfigError(f"broker config {broker_key!r}: {e}") from None
                topic_defaults[topic_key] = str(raw)
        if "log.dir" in props:  # Kafka's single-directory form; log.dirs wins when both are set
            single = props.pop("log.dir")
            props.setdefault("log.dirs", str(single))
        per_listener: dict[str, str] = {}  # Kafka's listener.name.<name>.sasl.enabled.mechanisms
        for k in list(props):
            if m := LISTENER_MECHANISMS.match(k):
                per_listener[m.group(1).upper()] = str(props.pop(k))
        cfg = (
            cls()
            .merged(props)
            .model_copy(update={"topic_defaults": topic_defaults, "listener_mechanisms": per_listener})
        )
        cfg._short_forms_from_listeners()
        cfg.validate()
        return cfg

    def _short_forms_from_listeners(self) -> None:
        """The built-in listeners named in `listeners` / `advertised.listeners` set their short forms (port,
        kafka.port, inter.broker.port and the advertised hosts), which the rest of the broker reads."""
        declared = parse_endpoints("listeners", self.listeners)
        advertised = parse_endpoints("advertised.listeners", self.advertised_listeners)
        if NATIVE in declared:
            self.port = declared[NATIVE][1]
        if KAFKA in declared:
            self.kafka_port = declared[KAFKA][1]
            self.kafka_host = declared[KAFKA][0] or self.kafka_host
        if BROKER in declared:
            self.inter_broker_port = declared[BROKER][1]
        if NATIVE in advertised:
            host, port = advertised[NATIVE]
            if port not in (0, self.port):
                raise InvalidConfigError(
                    "advertised.listeners: NATIVE advertises its own port (peers name it); only its host may differ"
                )
            self.advertised_host = host or self.advertised_host
        if BROKER in advertised:
            raise InvalidConfigError("advertised.listeners: BROKER is not advertised (peers learn its port)")

    @classmethod
    def describe_keys(cls) -> list[KeyDoc]:
        """The broker keys, then the topic-config defaults under their broker names."""
        topic = {r.name: r for r in LogConfig.describe_keys()}
        own = [
            replace(r, type="int" if r.name in KAFKA_INT_KEYS else "short" if r.name in KAFKA_SHORT_KEYS else r.type)
            for r in super().describe_keys()
        ]
        return own + [
            KeyDoc(b, topic[t].type, topic[t].default, topic[t].valid, f"Default {t} of topics: {topic[t].doc}")
            for b, t in TOPIC_DEFAULT_KEYS.items()
        ]

    def validate(self) -> None:  # type: ignore[override]  # not pydantic's deprecated classmethod validate()
        """Rules across keys; each key's own type and bounds are checked by the schema."""
        if not self.log_dirs:
            raise InvalidConfigError("log.dirs is empty")
        LogConfig.from_props(self.topic_defaults)
        if self.coordination == "zookeeper":
            if not self.zookeeper_connect:
                raise InvalidConfigError("coordination=zookeeper needs zookeeper.connect (--zookeeper HOST:PORT)")
            from broker.controller.zk_coordination import parse_connect

            try:
                parse_connect(self.zookeeper_connect)
            except ValueError as e:
                raise InvalidConfigError(f"zookeeper.connect: {e}") from None
        heartbeat_room = min(self.broker_session_timeout_ms, self.controller_election_timeout_ms)
        if self.broker_heartbeat_interval_ms >= heartbeat_room:
            raise InvalidConfigError(
                "broker.heartbeat.interval.ms must be below broker.session.timeout.ms and "
                "controller.quorum.election.timeout.ms (a few heartbeats must fit in each)"
            )
        if self.replica_socket_timeout_ms < self.replica_fetch_wait_max_ms:  # Kafka's rule too
            raise InvalidConfigError("replica.socket.timeout.ms must be at least replica.fetch.wait.max.ms")
        if 0 < self.replica_silence_time_max_ms <= self.replica_fetch_wait_max_ms:
            # A healthy idle follower's fetch arrives only every replica.fetch.wait.max.ms: it would look silent.
            raise InvalidConfigError("replica.silence.time.max.ms must be 0 (off) or above replica.fetch.wait.max.ms")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise InvalidConfigError("group.min.session.timeout.ms must be <= group.max.session.timeout.ms")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise InvalidConfigError(
                "group.consumer.heartbeat.interval.ms must be below group.consumer.session.timeout.ms"
            )
        self.consumer_assignors()  # names an assignor that exists
        # Kafka's GroupCoordinatorConfig and ShareGroupConfig rules: each value within its min and max
        props = self.to_props()
        check_within_bounds(props, "group.consumer", ("session.timeout.ms", "heartbeat.interval.ms"))
        check_within_bounds(props, "group.share", SHARE_BOUNDED)
        if self.offsets_topic_replication_factor == 0:
            raise InvalidConfigError("offsets.topic.replication.factor must be >= 1, or -1 for min(3, brokers)")
        if self.peers:
            from broker.network.peers import parse_peers

            try:
                peers = parse_peers(self.peers)
            except ValueError as e:
                raise InvalidConfigError(f"peers: {e}") from None
            if self.broker_id not in peers:
                raise InvalidConfigError(f"peers must include this broker's id {self.broker_id}")
            if len(peers) > 1 and uses_sasl(self.listener_protocol("BROKER")) and not self.sasl_jaas_config:
                raise InvalidConfigError(
                    "brokers log in to each other on the SASL inter-broker listener: set sasl.jaas.config "
                    '(... required username="broker" password="...";)'
                )
        self.validate_security()
        self.listener_list()  # the whole set: names, protocols, wires, ports

    def voters(self) -> dict[int, tuple[str, int]]:
        """Every broker of the cluster with its address; this broker alone when no peers are given."""
        from broker.network.peers import parse_peers

        if self.peers:
            return parse_peers(self.peers)
        return {self.broker_id: (self.advertised_host or self.host, self.port)}

    def listener_list(self) -> list[Listener]:
        """Every listener of this broker, built-in and named (broker/security/listeners.py)."""
        adv_kafka = self.kafka_advertised_host or self.advertised_host or self.kafka_host or self.host
        return build_listeners(
            parse_endpoints("listeners", self.listeners),
            {
                NATIVE: (self.host, self.port, self.advertised_host or self.host),
                KAFKA: (self.kafka_host or self.host, self.kafka_port, adv_kafka),
                BROKER: (self.host, self.inter_broker_port, self.host),
            },
            parse_endpoints("advertised.listeners", self.advertised_listeners),
            self.listener_protocols(),
            parse_map("listener.wire.map", self.listener_wire_map, WIRES, normalize="lower"),
            self.host,
        )

    def bind_ports(self, bound: dict[str, int]) -> None:
        """The ports the listeners got (port 0: any free one): the short forms record theirs, and what clients
        are told of each client listener is fixed from here on."""
        if NATIVE in bound:
            self.port = bound[NATIVE]
        if KAFKA in bound:
            self.kafka_port = bound[KAFKA]
        self._advertised = self._advertise(bound)

    def _advertise(self, bound: dict[str, int]) -> dict[str, tuple[str, int, str]]:
        return {
            lst.name: (lst.advertised_host, lst.advertised_port or bound.get(lst.name) or lst.port, lst.wire)
            for lst in self.listener_list()
            if not lst.inter_broker
        }

    def advertised_endpoints(self) -> dict[str, tuple[str, int, str]]:
        """Client listener name -> (host, port, wire) as clients are told (advertised.listeners)."""
        return self._advertised if self._advertised is not None else self._advertise({})

    def kafka_endpoint(self) -> tuple[str, int] | None:
        """(host, port) Kafka clients are told to use for this broker; None without a Kafka listener."""
        ep = self.advertised_endpoints().get(KAFKA)
        return None if ep is None else (ep[0], ep[1])

    def endpoint_of(self, b: "BrokerInfo", listener: str) -> tuple[str, int] | None:
        """Where the clients of `listener` reach broker `b`: this one as configured now, the others as registered
        (Kafka's rule: a broker without that listener is left out of the answer)."""
        if listener == NATIVE:
            return b.host, b.port
        if b.id == self.broker_id:
            ep = self.advertised_endpoints().get(listener)
            return None if ep is None else (ep[0], ep[1])
        if listener in b.listeners:
            host, port, _wire = b.listeners[listener]
            return host, port
        if listener == KAFKA and b.kafka_port >= 0 and b.kafka_host is not None:
            return b.kafka_host, b.kafka_port  # registered by a broker from before named listeners
        return None

    def kafka_endpoint_of(self, b: "BrokerInfo") -> tuple[str, int] | None:
        """Where Kafka clients of the KAFKA listener reach broker `b`."""
        return self.endpoint_of(b, KAFKA)

    def consumer_assignors(self) -> tuple[str, ...]:
        from broker.group.assignors import ASSIGNORS, assignor_name

        names = [n for n in self.group_consumer_assignors.split(",") if n.strip()]
        unknown = [n.strip() for n in names if assignor_name(n) is None]
        if unknown or not names:
            raise InvalidConfigError(
                f"group.consumer.assignors: {', '.join(unknown) or 'empty'} is not one of {', '.join(ASSIGNORS)}"
            )
        return tuple(dict.fromkeys(assignor_name(n) or "" for n in names))

    def group_config(self) -> "Any":
        from broker.group.consumer_logic import ConsumerGroupConfig
        from broker.group.logic import GroupConfig

        return GroupConfig(
            min_session_timeout_ms=self.group_min_session_timeout_ms,
            max_session_timeout_ms=self.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=self.group_initial_rebalance_delay_ms,
            offsets_retention_ms=self.offsets_retention_minutes * 60_000,
            offset_metadata_max_bytes=self.offset_metadata_max_bytes,
            consumer=ConsumerGroupConfig(
                session_timeout_ms=self.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=self.group_consumer_heartbeat_interval_ms,
                max_size=self.group_consumer_max_size,
                assignors=self.consumer_assignors(),
            ),
        )

    def rebalance_policy(self) -> RebalancePolicy:
        return RebalancePolicy(
            self.auto_leader_rebalance_enable,
            self.leader_imbalance_per_broker_percentage,
            self.leader_imbalance_check_interval_seconds * 1000,
        )

    def topic_config_defaults(self) -> LogConfig:
        return log_config_for(self.topic_defaults)
