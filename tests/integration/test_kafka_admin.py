"""The admin apis on the Kafka listener, as Kafka's admin clients use them, on one 3-broker cluster:
create (with configs, validate_only), grow, describe and alter configs (whole and incremental), delete, and
automatic topic creation; cross-checked with our own Admin and kl-topics."""

from __future__ import annotations

import pytest

from tests.integration.cluster_harness import ClusterHarness, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
kafka = pytest.importorskip("kafka", reason="pip install -e '.[test]' (kafka-python)")
admin_mod = pytest.importorskip("confluent_kafka.admin")
AdminClient, NewTopic, NewPartitions = admin_mod.AdminClient, admin_mod.NewTopic, admin_mod.NewPartitions
ConfigResource, ConfigEntry, AlterConfigOpType = (
    admin_mod.ConfigResource,
    admin_mod.ConfigEntry,
    admin_mod.AlterConfigOpType,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(
        tmp_path_factory.mktemp("kadmin"), 3, overrides=["num.partitions=4", "default.replication.factor=3"]
    ).running() as h:
        yield h


@pytest.fixture(scope="module")
def admin(cluster):
    # one broker only in the bootstrap list: requests reach the controller by forwarding when it is not it
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap([2])})


def done(futures: dict, timeout: float = 30) -> dict:
    return {k: f.result(timeout) for k, f in futures.items()}


def test_create_with_configs_validate_only_and_grow(cluster, admin):
    # validate_only creates nothing
    done(admin.create_topics([NewTopic("vo", 3, 3)], validate_only=True))
    assert "vo" not in cluster.admin().list_topics()
    done(
        admin.create_topics([NewTopic("orders", 3, 3, config={"retention.ms": "3600000", "min.insync.replicas": "2"})])
    )
    # CreateTopics answers once the controller committed; the broker a describe reaches may learn it a moment later
    desc = wait_until(lambda: {p.partition: p for p in cluster.describe("orders")}, 10, "orders known everywhere")
    assert sorted(desc) == [0, 1, 2] and all(len(p.replicas) == 3 for p in desc.values())
    wait_until(
        lambda: cluster.admin().describe_configs("orders")["retention.ms"] == ("3600000", False), 10, "orders' config"
    )
    # an existing topic and a bad config: Kafka's codes, per topic
    with pytest.raises(confluent_kafka.KafkaException, match="TOPIC_ALREADY_EXISTS"):
        done(admin.create_topics([NewTopic("orders", 1, 1)]))
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG"):
        done(admin.create_topics([NewTopic("badcfg", 1, 1, config={"retention.ms": "soon"})]))
    done(admin.create_partitions([NewPartitions("orders", 6)]))
    wait_until(lambda: len(cluster.describe("orders")) == 6, 20, "six partitions")
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_PARTITIONS"):
        done(admin.create_partitions([NewPartitions("orders", 2)]))
    md = admin.list_topics(timeout=10)
    assert len(md.topics["orders"].partitions) == 6


def test_describe_and_alter_configs_whole_and_incremental(cluster, admin):
    done(admin.create_topics([NewTopic("cfg", 1, 3, config={"cleanup.policy": "delete", "retention.ms": "1000000"})]))
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    entries = done(admin.describe_configs([res]))[res]
    assert entries["retention.ms"].value == "1000000" and not entries["retention.ms"].is_default
    assert entries["segment.bytes"].is_default
    # AlterConfigs replaces the whole set: retention.ms returns to its default
    done(admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, "cfg", set_config={"segment.ms": "600000"})]))
    wait_until(
        lambda: (lambda cfg: cfg["segment.ms"] == ("600000", False) and cfg["retention.ms"][1] is True)(
            cluster.admin().describe_configs("cfg")
        ),
        10,
        "segment.ms set and retention.ms back to its default",
    )
    # IncrementalAlterConfigs: SET one key, APPEND to a list, DELETE another
    inc = ConfigResource(
        ConfigResource.Type.TOPIC,
        "cfg",
        incremental_configs=[
            ConfigEntry("retention.ms", "2000000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    done(admin.incremental_alter_configs([inc]))

    def now() -> dict:
        return cluster.admin().describe_configs("cfg")

    def applied(cfg: dict) -> bool:
        return (
            cfg["retention.ms"] == ("2000000", False)
            and set(cfg["cleanup.policy"][0].split(",")) == {"delete", "compact"}
            and cfg["segment.ms"][1] is True
        )

    # each describe may reach a different broker, and a follower learns the change a moment later: judge one answer
    wait_until(lambda: applied(now()), 10, "the incremental change on the broker answering")
    # a broker's configs are described; its static ones are not altered (Kafka's INVALID_REQUEST)
    broker = ConfigResource(ConfigResource.Type.BROKER, "2")
    entries = done(admin.describe_configs([broker]))[broker]
    assert entries["num.partitions"].value == "4" and entries["broker.id"].value == "2"
    with pytest.raises(confluent_kafka.KafkaException, match="Cannot update these configs dynamically"):
        done(admin.alter_configs([ConfigResource(ConfigResource.Type.BROKER, "2", set_config={"num.partitions": "9"})]))


def test_delete_topics_and_kafka_python_admin(cluster, admin):
    kp = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
    try:
        kp.create_topics([kafka.admin.NewTopic("kp-made", 2, 3)])
        # list and describe may reach different brokers: wait until the one describing has learnt the topic too
        parts = wait_until(lambda: cluster.describe("kp-made"), 10, "kp-made known everywhere")
        assert len(parts) == 2
        kp.delete_topics(["kp-made"])
        wait_until(lambda: "kp-made" not in cluster.admin().list_topics(), 10, "kp-made deleted")
    finally:
        kp.close()
    done(admin.create_topics([NewTopic("gone", 1, 1)]))
    done(admin.delete_topics(["gone"]))
    wait_until(lambda: "gone" not in cluster.admin().list_topics(), 10, "gone deleted")
    with pytest.raises(confluent_kafka.KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        done(admin.delete_topics(["gone"]))


def test_a_kafka_producer_creates_its_topic_as_on_kafka(cluster):
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    errors = []
    p.produce("auto-made", b"first", on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(30) == 0 and errors == []
    parts = cluster.describe("auto-made")
    assert len(parts) == 4 and all(len(x.replicas) == 3 for x in parts)  # num.partitions, default.replication.factor


def test_auto_create_off_answers_unknown_topic(tmp_path):
    h = ClusterHarness(tmp_path / "noauto", 1, overrides=["auto.create.topics.enable=false"])
    try:
        h.start()
        md = AdminClient({"bootstrap.servers": h.kafka_bootstrap()}).list_topics("never-made", timeout=10)
        assert md.topics["never-made"].error.code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
        assert "never-made" not in h.admin().list_topics()
    finally:
        h.cleanup()


def test_manual_replica_assignments_from_kafka_admin_clients(cluster, admin):
    """Kafka's replica_assignment (CreateTopics and CreatePartitions): replicas and leaders as asked, and
    INVALID_REPLICA_ASSIGNMENT for what Kafka refuses, nothing created then."""
    done(admin.create_topics([NewTopic("placed", 3, replica_assignment=[[3, 1], [1, 2], [2, 3]])]))
    parts = {p.partition: p for p in cluster.describe("placed")}
    assert [(parts[p].replicas, parts[p].leader) for p in range(3)] == [([3, 1], 3), ([1, 2], 1), ([2, 3], 2)]
    for bad in ([[1, 9]], [[1, 1]], [[1, 2], [3]]):
        with pytest.raises(confluent_kafka.KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
            done(admin.create_topics([NewTopic("misplaced", len(bad), replica_assignment=bad)]))
    assert "misplaced" not in cluster.admin().list_topics()
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
        done(admin.create_partitions([NewPartitions("placed", 5, replica_assignment=[[1, 3]])]))
    done(admin.create_partitions([NewPartitions("placed", 4, replica_assignment=[[2, 1]])]))
    parts = {p.partition: p for p in cluster.describe("placed")}
    assert len(parts) == 4 and (parts[3].replicas, parts[3].leader) == ([2, 1], 2)
    # kafka-python's admin sends the same fields
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    kp = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
    try:
        kp.create_topics([KpNewTopic("placed-kp", -1, -1, replica_assignments={0: [2, 3], 1: [3, 2]})])
    finally:
        kp.close()
    parts = {p.partition: p for p in cluster.describe("placed-kp")}
    assert [(parts[p].replicas, parts[p].leader) for p in range(2)] == [([2, 3], 2), ([3, 2], 3)]


def test_describe_configs_types_sources_and_synonyms(cluster, admin):
    """DescribeConfigs as Kafka fills it: ConfigType, ConfigSource, the broker synonym of each topic config,
    documentation; broker configs under Kafka's names."""
    done(admin.create_topics([NewTopic("typed", 1, 3, config={"retention.ms": "5000000", "compression.type": "zstd"})]))
    wait_until(lambda: cluster.admin().describe_configs("typed")["compression.type"] == ("zstd", False), 10, "typed")
    res = ConfigResource(ConfigResource.Type.TOPIC, "typed")
    # librdkafka asks with include_synonyms
    entries = done(admin.describe_configs([res]))[res]
    retention = entries["retention.ms"]
    assert retention.source == confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Kafka's log.retention.ms has no default of its own (log.retention.hours gives it): no DEFAULT_CONFIG synonym
    assert [(s.name, s.source) for s in retention.synonyms.values()] == [
        ("retention.ms", confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
    ]
    roll = entries["segment.ms"]  # log.roll.ms likewise (log.roll.hours)
    assert roll.source == confluent_kafka.admin.ConfigSource.DEFAULT_CONFIG.value and not roll.synonyms
    assert entries["compression.type"].value == "zstd"
    segment = entries["segment.bytes"]
    assert segment.source == confluent_kafka.admin.ConfigSource.DEFAULT_CONFIG.value and segment.is_default
    assert list(segment.synonyms) == ["log.segment.bytes"]

    # config_type: kafka-python asks a version that carries it (v3+)
    kp = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap([1]))
    try:
        from kafka.admin import ConfigResource as KpResource
        from kafka.admin import ConfigResourceType

        answers = kp.describe_configs(
            [KpResource(ConfigResourceType.TOPIC, "typed")], include_synonyms=True, config_filter="all"
        )
    finally:
        kp.close()
    rows = answers["topic"]["typed"]
    types = {name: row.get("config_type") for name, row in rows.items()}
    # Kafka's ConfigType (BOOLEAN, STRING, INT, LONG, DOUBLE, LIST), none UNKNOWN
    assert types["cleanup.policy"] == "LIST" and types["retention.ms"] == "LONG" and types["segment.bytes"] == "INT"
    assert types["unclean.leader.election.enable"] == "BOOLEAN" and types["compression.type"] == "STRING"
    assert types["min.cleanable.dirty.ratio"] == "DOUBLE"
    assert len(types) == 33 and "UNKNOWN" not in types.values(), types

    # a broker under Kafka's names: listeners, advertised.listeners, log.dirs, the log.* topic defaults
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    # broker 1's own configs: ask broker 1 (an admin client kept until its answer, not collected before)
    admin1 = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap([1])})
    b = done(admin1.describe_configs([broker]))[broker]
    assert "KAFKA://" in b["listeners"].value and "KAFKA://" in b["advertised.listeners"].value
    assert "port" not in b and "kafka.port" not in b
    assert b["num.partitions"].source == confluent_kafka.admin.ConfigSource.STATIC_BROKER_CONFIG.value
    assert b["default.replication.factor"].value == "3" and b["log.dirs"].value
    assert b["log.retention.ms"].value == "604800000" and b["log.retention.ms"].is_default


def test_incremental_append_and_subtract_keep_kafkas_order(cluster, admin):
    done(admin.create_topics([NewTopic("order-cfg", 1, 3)]))

    def incremental(op, key: str, value: str) -> None:
        entry = ConfigEntry(key, value, incremental_operation=op)
        done(
            admin.incremental_alter_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, "order-cfg", incremental_configs=[entry])]
            )
        )

    def policy() -> str:
        return cluster.admin().describe_configs("order-cfg")["cleanup.policy"][0]

    incremental(AlterConfigOpType.APPEND, "cleanup.policy", "compact")
    # the existing item first, then the appended one, as Kafka does
    wait_until(lambda: policy() == "delete,compact", 10, "delete,compact")
    incremental(AlterConfigOpType.APPEND, "cleanup.policy", "delete")  # already there: no duplicate
    incremental(AlterConfigOpType.SUBTRACT, "cleanup.policy", "delete")
    wait_until(lambda: policy() == "compact", 10, "compact")
    incremental(AlterConfigOpType.SUBTRACT, "cleanup.policy", "compact")  # to an empty list: allowed
    wait_until(lambda: policy() == "", 10, "empty cleanup.policy")
    # APPEND to a key that is not a list: INVALID_CONFIG
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG"):
        incremental(AlterConfigOpType.APPEND, "retention.ms", "5")


@pytest.mark.parametrize(
    "key, value",
    [
        ("compression.zstd.level", "23"),
        ("compression.gzip.level", "0"),
        ("message.timestamp.after.max.ms", "-1"),
        ("local.retention.ms", "-3"),
        ("cleanup.policy", "compact,forever"),
        ("leader.replication.throttled.replicas", "0-1"),
        ("message.downconversion.enable", "true"),  # removed in Kafka 4.0
    ],
)
def test_out_of_range_topic_configs_are_refused_naming_the_key(admin, key, value):
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG") as e:
        done(admin.create_topics([NewTopic("refused", 1, 1, config={key: value})]))
    assert key in str(e.value)


def test_every_kafka_topic_config_is_accepted_on_create(cluster, admin):
    every = {
        "cleanup.policy": "delete,compact",
        "compression.type": "lz4",
        "compression.gzip.level": "9",
        "compression.lz4.level": "17",
        "compression.zstd.level": "-5",
        "delete.retention.ms": "1000",
        "file.delete.delay.ms": "0",
        "flush.messages": "100000",
        "flush.ms": "100000",
        "follower.replication.throttled.replicas": "0:1,0:2",
        "index.interval.bytes": "100",
        "leader.replication.throttled.replicas": "*",
        "local.retention.bytes": "-2",
        "local.retention.ms": "1000",
        "max.compaction.lag.ms": "100000",
        "max.message.bytes": "100000",
        "message.timestamp.after.max.ms": "0",
        "message.timestamp.before.max.ms": "100000",
        "message.timestamp.type": "LogAppendTime",
        "min.cleanable.dirty.ratio": "0.1",
        "min.compaction.lag.ms": "1",
        "min.insync.replicas": "1",
        "preallocate": "true",
        "remote.storage.enable": "false",
        "remote.log.copy.disable": "true",
        "remote.log.delete.on.disable": "true",
        "retention.bytes": "100000",
        "retention.ms": "100000",
        "segment.bytes": "100000",
        "segment.index.bytes": "100000",
        "segment.jitter.ms": "10",
        "segment.ms": "100000",
        "unclean.leader.election.enable": "true",
    }
    done(admin.create_topics([NewTopic("every-config", 1, 1, config=every)]))
    described = wait_until(lambda: cluster.admin().describe_configs("every-config"), 10, "every-config")
    assert {k: described[k][0] for k in every} == every


def test_log_append_time_and_timestamp_bounds_act(cluster, admin):
    """message.timestamp.type=LogAppendTime: records carry the broker's time; message.timestamp.after.max.ms
    (Kafka 4's default: 1 h) refuses a record from the future with INVALID_TIMESTAMP."""
    import time

    done(admin.create_topics([NewTopic("appended", 1, 3, config={"message.timestamp.type": "LogAppendTime"})]))
    done(admin.create_topics([NewTopic("bounded", 1, 3, config={"message.timestamp.before.max.ms": "60000"})]))
    wait_until(lambda: len(cluster.describe("appended")) == 1 and len(cluster.describe("bounded")) == 1, 10, "topics")
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all"})
    outcomes: dict[str, object] = {}

    def report(name: str):
        return lambda err, msg: outcomes.__setitem__(name, err or msg)

    before = int(time.time() * 1000)
    producer.produce("appended", b"v", timestamp=1000, on_delivery=report("appended"))
    # one batch each (a batch is refused whole, as Kafka refuses it)
    producer.produce("bounded", b"future", timestamp=before + 2 * 3600_000, on_delivery=report("future"))
    producer.flush(30)
    producer.produce("bounded", b"past", timestamp=before - 3600_000, on_delivery=report("past"))
    producer.flush(30)
    producer.produce("bounded", b"now", timestamp=before, on_delivery=report("now"))
    producer.flush(30)
    after = int(time.time() * 1000)
    stored = outcomes["appended"]
    assert isinstance(stored, confluent_kafka.Message), stored
    kind, ts = stored.timestamp()
    assert kind == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
    for name in ("future", "past"):
        err = outcomes[name]
        assert (
            isinstance(err, confluent_kafka.KafkaError) and err.code() == confluent_kafka.KafkaError.INVALID_TIMESTAMP
        )
    assert isinstance(outcomes["now"], confluent_kafka.Message)
    # a consumer reads the broker's time too
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "lat", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe(["appended"])
        msg = wait_until(lambda: consumer.poll(1), 30, "the LogAppendTime record")
        assert msg.timestamp() == (confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, ts)
    finally:
        consumer.close()


def test_compression_type_zstd_topic_recompresses_what_producers_send(cluster, admin):
    """Created with compression.type=zstd (INVALID_CONFIG before), described so, and an lz4 producer's batches
    are stored as zstd on every replica; consumers read them back unchanged."""
    from net.batch import iter_batches
    from net.compression import CODEC_ZSTD

    done(admin.create_topics([NewTopic("zstd-topic", 1, 3, config={"compression.type": "zstd"})]))
    wait_until(lambda: len(cluster.describe("zstd-topic")) == 1, 10, "zstd-topic")
    res = ConfigResource(ConfigResource.Type.TOPIC, "zstd-topic")
    assert done(admin.describe_configs([res]))[res]["compression.type"].value == "zstd"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all", "compression.type": "lz4", "linger.ms": 50}
    )
    values = [b"record-%d-" % i + b"x" * 200 for i in range(50)]
    for v in values:
        producer.produce("zstd-topic", v)
    assert producer.flush(30) == 0

    def codecs_per_replica() -> list[set[int]]:
        return [
            {h.codec for seg in (b.data_dir / "zstd-topic-0").glob("*.log") for _, h in iter_batches(seg.read_bytes())}
            for b in cluster.brokers.values()
        ]

    wait_until(lambda: codecs_per_replica() == [{CODEC_ZSTD}] * 3, 10, "zstd batches on every replica")
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "zstd-reader", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe(["zstd-topic"])
        got: list[bytes] = []
        wait_until(
            lambda: got.extend(m.value() for m in consumer.consume(50, 1) if not m.error()) or len(got) >= 50, 30, ""
        )
        assert got == values
    finally:
        consumer.close()


def test_broker_loggers_are_each_brokers_own_and_kafkas_rules_hold(cluster, admin):
    """BROKER_LOGGER (broker/server/broker_loggers.py), as kafka-python's admin uses it (confluent-kafka's Python
    binding has no such resource type): a broker's log levels (its loggers, Kafka's level names,
    DYNAMIC_BROKER_LOGGER_CONFIG), changed in that broker alone, mixed with a topic's change in one request;
    Kafka's refusals for an unknown logger or level, the root logger's removal, APPEND, and AlterConfigs."""
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap([2]))

    def levels(broker: str) -> dict:
        got = kp.describe_configs([KConfigResource(ConfigResourceType.BROKER_LOGGER, broker)], config_filter="all")
        return {k: (e["value"], e["config_source"]) for k, e in got["broker_logger"][broker].items()}

    def alter(broker: str, configs: dict, **kw) -> str:  # type: ignore[no-untyped-def]
        res = kp.alter_configs([KConfigResource(ConfigResourceType.BROKER_LOGGER, broker, configs=configs)], **kw)
        return str(res["broker_logger"][broker])

    try:
        before = levels("3")
        assert before["root"][1] == "DYNAMIC_BROKER_LOGGER_CONFIG"
        inherited = before["kafkalite.api"][0]
        assert inherited in ("INFO", "WARN") and levels("1")["kafkalite.api"][0] == inherited
        done(admin.create_topics([NewTopic("logged", 1, 3)]))
        both = [
            KConfigResource(ConfigResourceType.BROKER_LOGGER, "3", configs={"kafkalite.api": ("SET", "DEBUG")}),
            KConfigResource(ConfigResourceType.TOPIC, "logged", configs={"retention.ms": ("SET", "5000000")}),
        ]
        answers = kp.alter_configs(both)
        assert (str(answers["broker_logger"]["3"]), str(answers["topic"]["logged"])) == ("OK", "OK"), answers
        assert levels("3")["kafkalite.api"][0] == "DEBUG"
        assert levels("1")["kafkalite.api"][0] == inherited, "the other brokers' levels are theirs"
        wait_until(lambda: cluster.admin().describe_configs("logged")["retention.ms"][0] == "5000000", 10, "the topic")
        assert alter("3", {"kafkalite.api": ("DELETE", None)}) == "OK"  # the logger inherits its parent's again
        assert levels("3")["kafkalite.api"][0] == inherited
        for configs, message in [
            ({"no.such.logger": ("SET", "DEBUG")}, "Logger no.such.logger does not exist!"),
            ({"kafkalite.api": ("SET", "LOUD")}, "not a supported log level"),
            ({"root": ("DELETE", None)}, "Removing the log level of the root logger is not allowed"),
            ({"kafkalite.api": ("APPEND", "DEBUG")}, "APPEND operation is not allowed"),
        ]:
            answer = alter("3", configs, raise_on_unknown=False)
            assert "InvalidRequestError" in answer and message in answer, answer
        answer = alter("3", {"root": "DEBUG"}, raise_on_unknown=False, incremental=False)  # AlterConfigs
        assert "only supported for topics and brokers" in answer, answer
        after = levels("3")
        assert {k: after[k] for k in before} == before, "nothing refused was applied"
    finally:
        kp.close()
