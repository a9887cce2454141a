"""Broker configuration: Kafka's server.properties keys, a properties file, CLI overrides."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from net.errors import InvalidConfigError

# Broker-level defaults for topic configs use Kafka's `log.` prefixed names.
TOPIC_DEFAULT_KEYS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "message.max.bytes": "max.message.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


@dataclass
class BrokerConfig:
    broker_id: int = 1
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    log_dirs: list[Path] = field(default_factory=lambda: [Path("data")])
    num_partitions: int = 1
    default_replication_factor: int = 1
    socket_request_max_bytes: int = 104857600
    log_retention_check_interval_ms: int = 300000
    log_flush_offset_checkpoint_interval_ms: int = 60000
    # How often each partition's high watermark is written to replication-offset-checkpoint (Kafka's 5 s).
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    # How often the log cleaner looks for compacted logs to clean (it cleans all that are dirty enough).
    log_cleaner_backoff_ms: int = 15000
    # Cluster: "1@host:port,2@host:port,..." (empty: a cluster of this broker alone).
    peers: str = ""
    # The proposal's failure detector: 2 s without a metadata fetch fences a broker.
    broker_session_timeout_ms: int = 2000
    controller_election_timeout_ms: int = 2000
    # How the brokers agree on the controller and the metadata (election/coordination.py): "custom" (their
    # own quorum, the default) or "zookeeper" (Kafka's classic design, for comparison).
    coordination: str = "custom"
    # Kafka's zookeeper.connect: "host:port[,host:port...][/chroot]" (chroot default /kafkalite).
    zookeeper_connect: str = ""
    # Kafka's default is 18 s; 2 s here, the same as broker.session.timeout.ms, so that the two modes detect
    # a dead broker equally fast and the failover comparison (docs/BENCHMARKS.md) measures the mechanisms.
    zookeeper_session_timeout_ms: int = 2000
    replica_lag_time_max_ms: int = 30000
    # Idempotent producers are forgotten (their producer-state entry dropped) this long after their last
    # batch (Kafka's producer.id.expiration.ms, checked every producer.id.expiration.check.interval.ms).
    producer_id_expiration_ms: int = 86400000
    producer_id_expiration_check_interval_ms: int = 600000
    # Accepted for Kafka configs' sake; there are no transactions, so nothing uses it.
    transactional_id_expiration_ms: int = 604800000
    # Kafka's default; ReplicaFetcher.add cuts a pending long poll short, so a newly followed partition
    # (after a leader change) does not wait it out.
    replica_fetch_wait_max_ms: int = 500
    # Consumer groups (Kafka's names and defaults; offsets.topic.replication.factor -1: min(3, brokers)).
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = -1
    offsets_topic_segment_bytes: int = 104857600
    offsets_retention_minutes: int = 10080
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    # Topic-config defaults (Kafka's log.* keys), validated by LogConfig.
    topic_defaults: dict[str, str] = field(default_factory=dict)

    KEYS = {
        "broker.id": ("broker_id", int),
        "host": ("host", str),
        "port": ("port", int),
        "advertised.host": ("advertised_host", str),
        "log.dirs": ("log_dirs", lambda v: [Path(p) for p in str(v).split(",") if p]),
        "log.dir": ("log_dirs", lambda v: [Path(str(v))]),
        "num.partitions": ("num_partitions", int),
        "default.replication.factor": ("default_replication_factor", int),
        "socket.request.max.bytes": ("socket_request_max_bytes", int),
        "log.retention.check.interval.ms": ("log_retention_check_interval_ms", int),
        "log.flush.offset.checkpoint.interval.ms": ("log_flush_offset_checkpoint_interval_ms", int),
        "replica.high.watermark.checkpoint.interval.ms": ("replica_high_watermark_checkpoint_interval_ms", int),
        "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", int),
        "peers": ("peers", str),
        "broker.session.timeout.ms": ("broker_session_timeout_ms", int),
        "controller.quorum.election.timeout.ms": ("controller_election_timeout_ms", int),
        "coordination": ("coordination", lambda v: str(v).strip().lower()),
        "zookeeper.connect": ("zookeeper_connect", str),
        "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", int),
        "replica.lag.time.max.ms": ("replica_lag_time_max_ms", int),
        "producer.id.expiration.ms": ("producer_id_expiration_ms", int),
        "producer.id.expiration.check.interval.ms": ("producer_id_expiration_check_interval_ms", int),
        "transactional.id.expiration.ms": ("transactional_id_expiration_ms", int),
        "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", int),
        "group.min.session.timeout.ms": ("group_min_session_timeout_ms", int),
        "group.max.session.timeout.ms": ("group_max_session_timeout_ms", int),
        "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", int),
        "offsets.topic.num.partitions": ("offsets_topic_num_partitions", int),
        "offsets.topic.replication.factor": ("offsets_topic_replication_factor", int),
        "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", int),
        "offsets.retention.minutes": ("offsets_retention_minutes", int),
        "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", int),
        "offset.metadata.max.bytes": ("offset_metadata_max_bytes", int),
    }

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> "BrokerConfig":
        cfg = cls()
        for key, raw in props.items():
            if key in TOPIC_DEFAULT_KEYS:
                from broker.log.config import LogConfig

                try:
                    LogConfig.from_props({TOPIC_DEFAULT_KEYS[key]: raw})
                except InvalidConfigError as e:
                    raise InvalidConfigError(f"broker config {key!r}: {e}") from None
                cfg.topic_defaults[TOPIC_DEFAULT_KEYS[key]] = str(raw)
                continue
            if key not in cls.KEYS:
                raise InvalidConfigError(f"unknown broker config {key!r}")
            attr, conv = cls.KEYS[key]
            try:
                setattr(cfg, attr, conv(raw))
            except (TypeError, ValueError):
                raise InvalidConfigError(f"invalid value {raw!r} for broker config {key!r}") from None
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.broker_id < 0:
            raise InvalidConfigError("broker.id must be >= 0")
        if not 0 <= self.port <= 65535:
            raise InvalidConfigError(f"port {self.port} out of range")
        if not self.log_dirs:
            raise InvalidConfigError("log.dirs is empty")
        for name in (
            "num_partitions",
            "default_replication_factor",
            "socket_request_max_bytes",
            "offsets_topic_num_partitions",
            "offsets_topic_segment_bytes",
            "offsets_retention_minutes",
            "offsets_commit_timeout_ms",
            "log_cleaner_backoff_ms",
            "replica_high_watermark_checkpoint_interval_ms",
        ):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"{name.replace('_', '.')} must be >= 1")
        from broker.log.config import LogConfig

        LogConfig.from_props(self.topic_defaults)
        for name in ("broker_session_timeout_ms", "controller_election_timeout_ms", "replica_lag_time_max_ms"):
            if getattr(self, name) < 100:
                raise InvalidConfigError(f"{name.replace('_', '.')} must be >= 100")
        from election.coordination import MODES

        if self.coordination not in MODES:
            raise InvalidConfigError(f"coordination must be one of {', '.join(MODES)}, not {self.coordination!r}")
        if self.coordination == "zookeeper":
            if not self.zookeeper_connect:
                raise InvalidConfigError("coordination=zookeeper needs zookeeper.connect (--zookeeper HOST:PORT)")
            from net.zk_coordination import parse_connect

            try:
                parse_connect(self.zookeeper_connect)
            except ValueError as e:
                raise InvalidConfigError(f"zookeeper.connect: {e}") from None
            if self.zookeeper_session_timeout_ms < 1000:
                raise InvalidConfigError("zookeeper.session.timeout.ms must be >= 1000")
        if self.group_initial_rebalance_delay_ms < 0:
            raise InvalidConfigError("group.initial.rebalance.delay.ms must be >= 0")
        if not 1 <= self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise InvalidConfigError("group.min.session.timeout.ms must be >= 1 and <= group.max.session.timeout.ms")
        if self.offsets_topic_replication_factor == 0 or self.offsets_topic_replication_factor < -1:
            raise InvalidConfigError("offsets.topic.replication.factor must be >= 1, or -1 for min(3, brokers)")
        if self.peers:
            from net.peers import parse_peers

            try:
                peers = parse_peers(self.peers)
            except ValueError as e:
                raise InvalidConfigError(f"peers: {e}") from None
            if self.broker_id not in peers:
                raise InvalidConfigError(f"peers must include this broker's id {self.broker_id}")

    def voters(self) -> dict[int, tuple[str, int]]:
        """Every broker of the cluster with its address; this broker alone when no peers are given."""
        from net.peers import parse_peers

        if self.peers:
            return parse_peers(self.peers)
        return {self.broker_id: (self.advertised_host or self.host, self.port)}

    def group_config(self) -> "Any":
        from broker.group.logic import GroupConfig

        return GroupConfig(
            min_session_timeout_ms=self.group_min_session_timeout_ms,
            max_session_timeout_ms=self.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=self.group_initial_rebalance_delay_ms,
            offsets_retention_ms=self.offsets_retention_minutes * 60_000,
            offset_metadata_max_bytes=self.offset_metadata_max_bytes,
        )

    def topic_config_defaults(self) -> "Any":
        from broker.log.config import LogConfig

        return LogConfig.from_props(self.topic_defaults)

    def describe(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _bool(v: Any) -> bool:
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(v)


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style .properties file: key=value lines, '#' comments."""
    try:
        text = path.read_text()
    except OSError as e:
        raise InvalidConfigError(f"cannot read config file {path}: {e.strerror}") from None
    props: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise InvalidConfigError(f"{path}:{n}: expected key=value, got {line!r}")
        props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props
