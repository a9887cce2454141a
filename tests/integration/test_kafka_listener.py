"""The Kafka-protocol listener as Kafka clients meet it, on one broker: confluent-kafka (librdkafka) and
kafka-python find it, produce to it idempotently and read back what they wrote and what our own client
wrote; our client reads what they wrote. The full client matrix is tests/integration/test_kafka_clients.py."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from client.sync import Consumer, Producer
from tests.integration.cluster_harness import ROOT, ClusterHarness, free_port_runs, free_ports, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
kafka = pytest.importorskip("kafka", reason="pip install -e '.[test]' (kafka-python)")
AdminClient = pytest.importorskip("confluent_kafka.admin").AdminClient


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    h = ClusterHarness(tmp_path_factory.mktemp("kafka1"), 1)
    try:
        h.start()
        h.create_topic("mixed", 3, rf=1)
        yield h
    finally:
        h.cleanup()


def read_all_confluent(bootstrap: str, topic: str, n: int, partitions: int = 3) -> list:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        out, deadline = [], time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                out.append((m.partition(), m.offset(), m.key(), m.value(), m.headers() or []))
        return out
    finally:
        c.close()


def test_librdkafka_idempotent_producer_and_our_consumer_and_back(broker):
    kb = broker.kafka_bootstrap()
    md = AdminClient({"bootstrap.servers": kb}).list_topics(timeout=10)
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {1: ("127.0.0.1", broker[1].kafka_port)}
    assert len(md.topics["mixed"].partitions) == 3
    p = confluent_kafka.Producer({"bootstrap.servers": kb, "acks": "all", "enable.idempotence": True})
    failed = []
    for i in range(300):
        p.produce(
            "mixed",
            key=f"k{i}".encode(),
            value=f"librdkafka-{i}".encode(),
            partition=i % 3,
            headers=[("n", str(i).encode())],
            on_delivery=lambda err, m: failed.append(err) if err else None,
        )
    assert p.flush(30) == 0 and failed == []
    # our consumer reads librdkafka's batches: keys, values, headers, per-partition order
    with Consumer(broker.bootstrap(), auto_offset_reset="earliest") as c:
        c.assign([("mixed", q) for q in range(3)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 300 and time.monotonic() < deadline:
            got += c.poll(timeout_ms=500)
    assert len(got) == 300
    for q in range(3):
        mine = [r for r in got if r.partition == q]
        assert [r.value for r in mine] == [f"librdkafka-{i}".encode() for i in range(q, 300, 3)]
        assert [r.offset for r in mine] == list(range(100))
        assert all(r.headers == (("n", r.key[1:]),) for r in mine)
    # and our producer's records are read by librdkafka after them
    with Producer(broker.bootstrap(), acks="all") as ours:
        for i in range(30):
            ours.send("mixed", f"native-{i}".encode(), key=b"n", partition=0, headers=[("from", b"kl")])
        ours.flush()
    rows = read_all_confluent(kb, "mixed", 330)
    p0 = [r for r in rows if r[0] == 0]
    assert [r[3] for r in p0[100:]] == [f"native-{i}".encode() for i in range(30)]
    assert [r[1] for r in p0] == list(range(130))
    assert p0[-1][4] == [("from", b"kl")]


def test_kafka_python_round_trip(broker):
    kb = broker.kafka_bootstrap()
    p = kafka.KafkaProducer(bootstrap_servers=kb, acks="all")
    futures = [p.send("mixed", key=b"kp", value=f"kp-{i}".encode(), partition=2) for i in range(50)]
    p.flush()
    offsets = [f.get(timeout=10).offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 50
    p.close()
    c = kafka.KafkaConsumer(bootstrap_servers=kb, enable_auto_commit=False, consumer_timeout_ms=5000)
    c.assign([kafka.TopicPartition("mixed", 2)])
    c.seek(kafka.TopicPartition("mixed", 2), offsets[0])
    values = [m.value for m in c]
    c.close()
    assert values == [f"kp-{i}".encode() for i in range(50)]


@pytest.mark.parametrize("coordination", ["custom", "zookeeper"])
def test_every_broker_names_every_kafka_listener_and_a_moved_one_follows(tmp_path, coordination):
    """Each broker registers its Kafka listener with the controller (BrokerRegistration), so Metadata from
    any broker sends Kafka clients to the right port of every broker; in both coordination modes."""
    h = ClusterHarness(tmp_path / coordination, 3, coordination=coordination)
    try:
        h.start()
        h.create_topic("spread", 3, 3, {"min.insync.replicas": "2"})

        def listed(via: int) -> dict[int, int]:
            md = AdminClient({"bootstrap.servers": h.kafka_bootstrap([via])}).list_topics(timeout=5)
            return {b.id: b.port for b in md.brokers.values()}

        want = {i: b.kafka_port for i, b in h.brokers.items()}
        for via in (1, 2, 3):
            wait_until(lambda v=via: listed(v) == want, 20, f"broker {via} to list every Kafka listener")
        md = AdminClient({"bootstrap.servers": h.kafka_bootstrap()}).list_topics(timeout=5)
        leaders = {p.id: p.leader for p in md.topics["spread"].partitions.values()}
        assert leaders == {p.partition: p.leader for p in h.describe("spread")}
        # a broker restarted on another Kafka port is advertised with the new one
        h.stop(2)
        h[2].kafka_port = free_ports(1)[0]
        h[2].start()
        want[2] = h[2].kafka_port
        wait_until(lambda: listed(1) == want, 30, "the restarted broker's new Kafka port in the metadata")
    finally:
        h.cleanup()


def test_kl_cluster_up_kafka_base_port_prints_both_bootstrap_lists(tmp_path):
    base, kafka_base = free_port_runs(2, 2)
    kl = [sys.executable, "-m", "client.cli.cluster"]
    data = str(tmp_path / "kl")
    flags = f"--brokers 2 --base-port {base} --kafka-base-port {kafka_base} --metrics-base-port -1 --data-dir {data}"
    up = subprocess.run([*kl, "up", *flags.split()], cwd=ROOT, capture_output=True, text=True, timeout=90)
    try:
        assert up.returncode == 0, up.stderr
        native, kafka_list, ports = up.stdout.splitlines()
        assert ports == f"# ports: native {base}-{base + 1}, kafka {kafka_base}-{kafka_base + 1}"
        assert native == f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        assert kafka_list == f"127.0.0.1:{kafka_base},127.0.0.1:{kafka_base + 1}"
        admin = AdminClient({"bootstrap.servers": kafka_list})

        def both_listed() -> bool:
            # A broker's metadata learns the other's Kafka endpoint a moment after both listen: wait for it.
            ports = {b.id: b.port for b in admin.list_topics(timeout=10).brokers.values()}
            return ports == {1: kafka_base, 2: kafka_base + 1}

        wait_until(both_listed, 20, "both brokers' Kafka endpoints in the Metadata response")
        status = subprocess.run(
            [*kl, "status", "--data-dir", str(tmp_path / "kl")], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
        assert f"kafka 127.0.0.1:{kafka_base}" in status.stdout
    finally:
        subprocess.run([*kl, "down", "--data-dir", str(tmp_path / "kl")], cwd=ROOT, capture_output=True, timeout=60)
