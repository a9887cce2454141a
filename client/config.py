"""The client config families on the one schema (net/config_def.py): producer, consumer and admin, with
Kafka's names, types, defaults, bounds and doc strings. The clients take their defaults and validation from
here (keyword arguments are the Kafka names with underscores: linger.ms -> linger_ms), the CLIs read
`--command-config` files through them, and docs/CONFIGURATION.md is generated from them."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BeforeValidator

from net.config_def import Bool, Choices, ConfigDef, Float, Int, Str, choice, key
from net.errors import InvalidConfigError
from net.security import SASL_MECHANISMS, SECURITY_PROTOCOLS, ClientSecurity

INT_MAX = 2**31 - 1


def _text(v: Any) -> Any:
    return str(v).strip() if isinstance(v, (str, int)) and not isinstance(v, bool) else v


def _names(v: Any) -> Any:
    if isinstance(v, str):
        return [x.strip() for x in v.split(",") if x.strip()]
    return list(v) if isinstance(v, (list, tuple)) else v


ACKS = ("all", "-1", "0", "1")
Acks = Annotated[str, BeforeValidator(_text), AfterValidator(Choices(ACKS)), Choices(ACKS)]
Names = Annotated[list[str], BeforeValidator(_names)]
OptStr = Annotated[str | None, BeforeValidator(lambda v: v.strip() or None if isinstance(v, str) else v)]


class ClientConfigError(InvalidConfigError, ValueError):
    """A bad client config: INVALID_CONFIG to the CLIs, a ValueError to Python code, as constructors raise."""


class ClientConfigDef(ConfigDef):
    """A client family: also built from keyword arguments (attribute names), every error naming the Kafka key."""

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> Self:
        by_attr = {attr: name for name, attr in cls.kafka_names().items()}
        unknown = [k for k in kwargs if k not in by_attr]
        if unknown:
            raise ClientConfigError(
                f"unknown {cls.FAMILY} config {unknown[0]!r} (keyword arguments are Kafka's names with '_' for '.')"
            )
        return cls.from_properties({by_attr[k]: v for k, v in kwargs.items()})

    @classmethod
    def from_properties(cls, props: dict[str, Any]) -> Self:
        """Kafka names (a --command-config file) -> a validated config."""
        try:
            return cls.from_props(props)
        except InvalidConfigError as e:
            raise ClientConfigError(str(e)) from None

    @classmethod
    def kwargs_from_properties(cls, props: dict[str, Any]) -> dict[str, Any]:
        """Keyword arguments of a client of this family for the given Kafka-named properties, validated (a
        --command-config file, Spark's kafka.* options); only the keys given."""
        cfg = cls.from_properties(props)
        names = cls.kafka_names()
        return {names[k]: getattr(cfg, names[k]) for k in props}

    def kwargs(self) -> dict[str, Any]:
        return {attr: getattr(self, attr) for attr in self.kafka_names().values()}


class CommonClientConfig(ClientConfigDef):
    FAMILY: ClassVar[str] = "client"

    client_id: Str = key("client.id", "kafkalite", "The client's name in the brokers' logs and group descriptions.")
    request_timeout_ms: Int = key(
        "request.timeout.ms", 30000, "How long a request may wait for its answer.", ge=1, le=INT_MAX
    )
    retry_backoff_ms: Int = key(
        "retry.backoff.ms", 100, "Wait before the first retry; doubled per consecutive failure.", ge=0, le=INT_MAX
    )
    retry_backoff_max_ms: Int = key(
        "retry.backoff.max.ms", 1000, "Upper bound of the retry wait (each spread by ±20% jitter).", ge=0
    )
    metadata_max_age_ms: Int = key(
        "metadata.max.age.ms", 300000, "Refresh cluster metadata at least this often.", ge=0, le=INT_MAX
    )
    # Security, with librdkafka's key names (net/security.py; docs/SECURITY.md).
    security_protocol: choice(*SECURITY_PROTOCOLS, normalize=str.upper) = key(  # type: ignore[valid-type]
        "security.protocol", "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL: as the broker's listener says."
    )
    sasl_mechanism: choice(*SASL_MECHANISMS, normalize=str.upper) = key(  # type: ignore[valid-type]
        "sasl.mechanism", "SCRAM-SHA-256", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."
    )
    sasl_username: OptStr = key("sasl.username", None, "SASL user name.")
    sasl_password: OptStr = key("sasl.password", None, "SASL password.")
    ssl_ca_location: OptStr = key("ssl.ca.location", None, "PEM file of the CA certificates that verify brokers.")
    ssl_certificate_location: OptStr = key(
        "ssl.certificate.location", None, "PEM certificate this client presents (mutual TLS)."
    )
    ssl_key_location: OptStr = key("ssl.key.location", None, "PEM private key of ssl.certificate.location.")
    ssl_key_password: OptStr = key("ssl.key.password", None, "Password of ssl.key.location, if encrypted.")
    ssl_endpoint_identification_algorithm: choice("https", "none", normalize=str.lower) = key(  # type: ignore[valid-type]
        "ssl.endpoint.identification.algorithm", "https", "https: check the broker's host name against its certificate."
    )

    def security(self) -> ClientSecurity:
        return ClientSecurity(
            protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=self.sasl_password,
            ssl_ca_location=self.ssl_ca_location,
            ssl_certificate_location=self.ssl_certificate_location,
            ssl_key_location=self.ssl_key_location,
            ssl_key_password=self.ssl_key_password,
            ssl_endpoint_identification_algorithm=self.ssl_endpoint_identification_algorithm,
        )


class AdminConfig(CommonClientConfig):
    FAMILY: ClassVar[str] = "admin"

    client_id: Str = key("client.id", "kl-admin", "The client's name in the brokers' logs.")


class ProducerConfig(CommonClientConfig):
    FAMILY: ClassVar[str] = "producer"

    client_id: Str = key("client.id", "kl-producer", "The client's name in the brokers' logs.")
    acks: Acks = key(
        "acks",
        "all",
        "Acknowledgements the leader waits for: all (-1, the full ISR, with min.insync.replicas), 1 (the leader's "
        "own append) or 0 (none: no answer at all).",
    )
    batch_size: Int = key(
        "batch.size",
        131072,
        "Bytes of records per partition gathered into one batch (Kafka's default is 16384; larger batches cost "
        "Python less per record).",
        ge=1,
    )
    linger_ms: Float = key("linger.ms", 5, "How long a batch waits for more records before it is sent.", ge=0)
    compression_type: choice("none", "gzip", "snappy", "lz4", "zstd") = key(  # type: ignore[valid-type]
        "compression.type", "none", "Codec of the batches this producer writes."
    )
    retries: Int = key("retries", INT_MAX, "Retries of a failed batch (bounded by delivery.timeout.ms).", ge=0)
    delivery_timeout_ms: Int = key(
        "delivery.timeout.ms", 120000, "How long a record may take from send() to its outcome.", ge=1
    )
    max_request_size: Int = key("max.request.size", 1048576, "Largest produce request.", ge=1)
    buffer_memory: Int = key(
        "buffer.memory", 33554432, "Bytes of records waiting to be sent before send() blocks.", ge=1
    )
    max_block_ms: Int = key(
        "max.block.ms", 60000, "How long send() and partitions_for() wait for buffer space or metadata.", ge=0
    )
    enable_idempotence: Bool = key(
        "enable.idempotence", True, "Sequence numbers, so retries are never stored twice (with acks=all)."
    )
    max_in_flight_requests_per_connection: Int = key(
        "max.in.flight.requests.per.connection",
        5,
        "Unacknowledged batches per partition (at most 5 with enable.idempotence).",
        ge=1,
    )
    allow_auto_create_topics: Bool = key(
        "allow.auto.create.topics",
        True,
        "Let brokers with auto.create.topics.enable create a topic this producer sends to.",
    )
    transactional_id: OptStr = key(
        "transactional.id",
        None,
        "Makes the producer transactional (init_transactions, begin/commit/abort_transaction): its records of one "
        "transaction are visible to read_committed consumers all together or not at all, and a new producer with "
        "the same id fences the old one. Needs enable.idempotence and acks=all.",
    )
    transaction_timeout_ms: Int = key(
        "transaction.timeout.ms",
        60000,
        "How long a transaction may stay open before its coordinator aborts it (at most the brokers' "
        "transaction.max.timeout.ms).",
        ge=1,
        le=INT_MAX,
    )


class ConsumerConfig(CommonClientConfig):
    FAMILY: ClassVar[str] = "consumer"

    client_id: Str = key("client.id", "kl-consumer", "The client's name in the brokers' logs and group descriptions.")
    group_id: OptStr = key("group.id", None, "The consumer group to join with subscribe() (none: assign() only).")
    auto_offset_reset: choice("earliest", "latest", "none") = key(  # type: ignore[valid-type]
        "auto.offset.reset", "latest", "Where to start without a committed offset, or outside the log."
    )
    enable_auto_commit: Bool = key("enable.auto.commit", True, "Commit positions in the background.")
    auto_commit_interval_ms: Int = key("auto.commit.interval.ms", 5000, "How often positions are committed.", ge=0)
    fetch_min_bytes: Int = key("fetch.min.bytes", 1, "A fetch waits until this much data is there.", ge=0)
    fetch_max_wait_ms: Int = key(
        "fetch.max.wait.ms", 500, "How long a fetch waits for fetch.min.bytes.", ge=0, le=60000
    )
    fetch_max_bytes: Int = key("fetch.max.bytes", 52428800, "Bytes one fetch may return.", ge=1)
    max_partition_fetch_bytes: Int = key(
        "max.partition.fetch.bytes", 1048576, "Bytes one fetch may return of one partition.", ge=1
    )
    max_poll_records: Int = key("max.poll.records", 500, "Records one poll() returns at most.", ge=1)
    isolation_level: choice("read_uncommitted", "read_committed", normalize=str.lower) = key(  # type: ignore[valid-type]
        "isolation.level",
        "read_uncommitted",
        "read_committed: only records of committed transactions (and non-transactional ones), up to the last "
        "stable offset; read_uncommitted: every record, as soon as it is replicated.",
    )
    session_timeout_ms: Int = key(
        "session.timeout.ms", 45000, "Without a heartbeat this long, the coordinator removes the member.", ge=1
    )
    heartbeat_interval_ms: Int = key("heartbeat.interval.ms", 3000, "How often the member heartbeats.", ge=1)
    max_poll_interval_ms: Int = key(
        "max.poll.interval.ms", 300000, "A member that does not poll this long leaves its group.", ge=1
    )
    group_protocol: choice("classic", "consumer", normalize=str.lower) = key(  # type: ignore[valid-type]
        "group.protocol",
        "classic",
        "classic: JoinGroup / SyncGroup, the members assign (partition.assignment.strategy); consumer: the "
        "consumer group protocol (KIP-848), the coordinator assigns and members reconcile one by one.",
    )
    group_instance_id: OptStr = key(
        "group.instance.id",
        None,
        "A static member's id (KIP-345), unique in the group: a consumer restarted with it within its session "
        "timeout takes its partitions back without a rebalance (on close it sends no LeaveGroup; with "
        "group.protocol=consumer it leaves with member epoch -2). A second consumer with the same id: classic, it "
        "fences the first, whose poll() raises FENCED_INSTANCE_ID; consumer, it is refused while the first holds "
        "the id, its own poll() raising UNRELEASED_INSTANCE_ID. Both are fatal: close that consumer.",
    )
    group_remote_assignor: OptStr = key(
        "group.remote.assignor",
        None,
        "With group.protocol=consumer: the coordinator's assignor to ask for (uniform, range); none: its default.",
    )
    partition_assignment_strategy: Names = key(
        "partition.assignment.strategy",
        ["range", "cooperative-sticky"],
        "Assignors in order of preference: range, roundrobin, cooperative-sticky.",
    )
    pause_gc_while_decoding: Bool = key(
        "pause.gc.while.decoding",
        False,
        "Kafka Lite's own: pause Python's cyclic garbage collector while a fetch is decoded (2-3x faster for large "
        "fetches). Process-wide state, so off unless asked for; kl-consume and kl-perf turn it on.",
    )

    def model_post_init(self, _context: Any) -> None:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ClientConfigError("heartbeat.interval.ms must be lower than session.timeout.ms")
        if self.group_instance_id is not None and self.group_id is None:
            raise ClientConfigError("group.instance.id is set without group.id: a static member needs a group")


FAMILIES: list[type[ClientConfigDef]] = [ProducerConfig, ConsumerConfig, AdminConfig]
