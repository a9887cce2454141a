"""The ZooKeeper mode's own experiments (the tutorial seed's): ZooKeeper stopped while the brokers run,
RF=2 with both replicas of one partition down, and a session expiry of the controller. The shared fault
matrix runs in both modes in test_cluster_faults.py."""

from __future__ import annotations

import time

import pytest

from client.admin import NewTopic
from client.producer import ProduceError
from client.sync import Producer
from net.errors import ErrorCode, KafkaLiteError
from tests.integration.cluster_harness import LoadProducer, full_check, read_back, wait_until
from tests.integration.test_log_and_quorum_apis import kafka_call

pytestmark = pytest.mark.timeout(150)
TOPIC = "events"


@pytest.fixture
def coordination() -> str:
    return "zookeeper"


def _quick_producer(bs: str) -> Producer:
    return Producer(bs, acks="all", delivery_timeout_ms=3000, request_timeout_ms=1500, retry_backoff_ms=100)


def test_zookeeper_stopped_brokers_keep_serving_admin_fails_fast_then_recovers(cluster):
    cluster.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
    # No controller quorum in this mode: DescribeQuorum is UNSUPPORTED_VERSION, as a ZooKeeper-mode Kafka answers.
    body = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    answer = kafka_call(cluster, 1, 55, 2, body)
    assert int(answer.error_code) == ErrorCode.UNSUPPORTED_VERSION, answer
    load = LoadProducer(cluster.bootstrap(), TOPIC, "P0").start()
    load.wait_acked(200, 20)
    cluster.zk_kill()
    try:
        # Produce (acks=all) continues on the last metadata: the ISR is full and nothing needs deciding.
        n = load.acked_count()
        load.wait_acked(n + 300, 15)
        # Admin requests fail with an error naming ZooKeeper, within the admin timeout, not after a hang.
        t0 = time.monotonic()
        with pytest.raises(KafkaLiteError) as exc:
            with cluster.admin(timeout_ms=3000) as a:
                a.create_topics([NewTopic("during-outage", 1, 3)])
        took = time.monotonic() - t0
        assert took < 8, f"admin request took {took:.1f}s with ZooKeeper down"
        assert "ZooKeeper" in str(exc.value), str(exc.value)
        # Consumers read everything acknowledged so far.
        logged = read_back(cluster.bootstrap(), TOPIC, 3)
        assert sum(len(v) for v in logged.values()) >= n + 300
    finally:
        cluster.zk_start()
    # Back: metadata changes work again, and production never stopped.
    cluster.create_topic("after-outage", 2, 3)
    n = load.acked_count()
    load.wait_acked(n + 200, 20)
    stats = load.stop()
    assert stats.flush_error is None and not stats.failed, (stats.flush_error, stats.failed[:3])
    full_check(cluster, TOPIC, 3, [stats], min_acked=700)


def test_rf2_both_replicas_down_only_that_partition_fails_until_one_returns(cluster):
    cluster.create_topic(TOPIC, 6, 2, {"min.insync.replicas": "1"})
    parts = cluster.describe(TOPIC)
    victim_part = parts[0]
    a, b = victim_part.replicas
    survivor = ({1, 2, 3} - {a, b}).pop()
    healthy = [p.partition for p in parts if survivor in p.replicas]
    assert healthy, parts
    cluster.kill(a)
    # Let the controller move partition 0 to `b` before `b` dies too: `b` is then its last ISR member.
    wait_until(lambda: [p for p in cluster.describe(TOPIC) if p.partition == 0][0].isr == [b], 15, "ISR of p0 = [b]")
    cluster.kill(b)
    wait_until(
        lambda: all(p.leader == survivor for p in cluster.describe(TOPIC) if p.partition in healthy),
        15,
        f"broker {survivor} leading every partition it holds",
    )
    bs = cluster.bootstrap([survivor])
    with _quick_producer(bs) as p:
        with pytest.raises(ProduceError) as exc:
            for i in range(5):
                p.send(TOPIC, f"lost-{i}".encode(), partition=0)
            p.flush(15)
        assert any(s in str(exc.value) for s in ("LEADER", "leader", "expired", "timed out")), str(exc.value)
    acked = []
    with _quick_producer(bs) as p:
        for part in healthy:
            p.send(TOPIC, b"ok", partition=part, on_delivery=lambda e, md: e or acked.append(md.partition))
        p.flush(15)
    assert sorted(acked) == sorted(healthy), "partitions with a live replica stopped accepting writes"
    # The last ISR member returns: partition 0 is writable again.
    last_isr = [p for p in cluster.describe(TOPIC, [survivor]) if p.partition == 0][0].isr
    assert last_isr == [b], last_isr
    cluster[b].start()
    wait_until(lambda: [p for p in cluster.describe(TOPIC) if p.partition == 0][0].leader == b, 20, "p0 led by b")
    with _quick_producer(cluster.bootstrap()) as p:
        got = []
        p.send(TOPIC, b"back", partition=0, on_delivery=lambda e, md: got.append(e))
        p.flush(15)
    assert got == [None]


def test_controller_session_expiry_another_broker_takes_over(cluster):
    cluster.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
    old = cluster.controller_id()
    others = [i for i in cluster.brokers if i != old]
    load = LoadProducer(cluster.bootstrap(others), TOPIC, "P0").start()
    load.wait_acked(100, 20)
    cluster[old].pause()  # silent past zookeeper.session.timeout.ms (9 s): ZooKeeper expires its session
    try:

        def new_controller() -> int | None:
            with cluster.admin(others) as a:
                a._lt.run(a._impl.client.refresh_metadata([]))
                c = a._impl.client.metadata.controller_id
            return c if c in others else None

        took0 = time.monotonic()
        new = wait_until(new_controller, 20, "another broker elected controller")
        assert time.monotonic() - took0 < 15
        # The new controller acts: it moves leaderships off the silent broker, and production goes on.
        wait_until(lambda: all(p.leader in others for p in cluster.describe(TOPIC, others)), 15, "leaders moved")
        n = load.acked_count()
        load.wait_acked(n + 200, 20)
    finally:
        cluster[old].resume()
    # The old controller finds its session expired, steps down, registers again and rejoins the ISRs.
    wait_until(lambda: "ZooKeeper session lost" in cluster[old].logs(), 20, "old controller saw its session expire")
    cluster.wait_isr_contains(TOPIC, old, 40, ids=others)
    assert cluster.controller_id() == new
    stats = load.stop()
    assert stats.flush_error is None and not stats.failed, (stats.flush_error, stats.failed[:3])
    full_check(cluster, TOPIC, 3, [stats], min_acked=300)
