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
    h = ClusterHarness(
        tmp_path_factory.mktemp("kadmin"), 3, overrides=["num.partitions=4", "default.replication.factor=3"]
    )
    try:
        h.start()
        yield h
    finally:
        h.cleanup()


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
    # a broker's configs are described, not altered
    broker = ConfigResource(ConfigResource.Type.BROKER, "2")
    entries = done(admin.describe_configs([broker]))[broker]
    assert entries["num.partitions"].value == "4" and entries["broker.id"].value == "2"
    with pytest.raises(confluent_kafka.KafkaException, match="static"):
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
