"""KIP-345 static membership with a real client: confluent-kafka (librdkafka) consumers with group.instance.id.

A static member that restarts within its session timeout takes its place back: no rebalance (its peer is never
revoked), the same partitions, and DescribeGroups shows the instance id. aiokafka's own suite (test_kip_345_enabled)
found Kafka Lite ignoring group.instance.id; tests/unit/test_static_membership.py drives the coordinator's rules
(fencing, leave by instance, the log) step by step.
"""

from __future__ import annotations

import time

import pytest

from client.sync import Producer as KLProducer
from tests.integration.cluster_harness import ClusterHarness

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
admin_mod = pytest.importorskip("confluent_kafka.admin")

TOPIC, PARTITIONS = "static-members", 4
FATAL = confluent_kafka.KafkaError._FATAL


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(tmp_path_factory.mktemp("static"), 1).running() as h:
        h.create_topic(TOPIC, PARTITIONS, 1)
        with KLProducer(h.bootstrap(), acks="all") as p:
            for part in range(PARTITIONS):
                for i in range(50):
                    p.send(TOPIC, f"{part}-{i}".encode(), partition=part)
            p.flush()
        yield h


class Static:
    """A consumer with group.instance.id, counting its rebalance callbacks."""

    def __init__(self, h: ClusterHarness, group: str, instance: str) -> None:
        self.assigned: list[set[int]] = []
        self.revoked = 0
        self.c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": h.kafka_bootstrap(),
                "group.id": group,
                "group.instance.id": instance,
                "session.timeout.ms": 30000,
                "heartbeat.interval.ms": 500,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "range",
            }
        )
        self.c.subscribe(
            [TOPIC],
            on_assign=lambda _c, ps: self.assigned.append({p.partition for p in ps}),
            on_revoke=lambda _c, ps: setattr(self, "revoked", self.revoked + 1),
        )

    def now(self) -> set[int]:
        return {p.partition for p in self.c.assignment()}


def poll_all(members: list[Static], until, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.c.poll(0.05)
        if until():
            return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def keep_polling(members: list[Static], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in members:
            m.c.poll(0.05)


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(cluster):
    a, b = Static(cluster, "restart", "inst-a"), Static(cluster, "restart", "inst-b")
    try:
        poll_all([a, b], lambda: len(a.now()) + len(b.now()) == PARTITIONS and a.now() and b.now(), 90, "both assigned")
        # let the group settle: a first member may have had a generation of its own before the second joined
        keep_polling([a, b], 3)
        had_b, revokes_a, assigns_a = b.now(), a.revoked, len(a.assigned)
        b.c.close()  # librdkafka sends no LeaveGroup for a static member: the group keeps its place
        b = Static(cluster, "restart", "inst-b")
        poll_all([a, b], lambda: bool(b.now()), 60, "the restarted member's assignment")
        assert b.now() == had_b, "the restarted static member got other partitions"
        keep_polling([a, b], 3)  # a rebalance, had there been one, would reach a within 3 s
        assert (a.revoked, len(a.assigned)) == (revokes_a, assigns_a), "the peer was revoked: a rebalance happened"
        admin = admin_mod.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
        (described,) = admin.describe_consumer_groups(["restart"]).values()
        instances = sorted(m.group_instance_id for m in described.result(timeout=30).members)
        assert instances == ["inst-a", "inst-b"]
    finally:
        for m in (a, b):
            m.c.close()


def test_a_second_consumer_with_a_taken_instance_id_fences_the_first(cluster):
    """Two live consumers claiming one instance id: the newer takes it, the older is fenced (FENCED_INSTANCE_ID,
    which librdkafka makes a fatal error), as with Kafka."""
    first = Static(cluster, "dup", "inst-dup")
    try:
        poll_all([first], lambda: bool(first.now()), 90, "the first consumer's assignment")
        second = Static(cluster, "dup", "inst-dup")
        try:
            errors: list[confluent_kafka.KafkaError] = []

            def step() -> bool:
                msg = first.c.poll(0.05)
                if msg is not None and msg.error() is not None:
                    errors.append(msg.error())
                second.c.poll(0.05)
                return any(e.code() == FATAL for e in errors) and bool(second.now())

            poll_all([], step, 60, "the first consumer fenced and the second assigned")
            # librdkafka's fatal error (_FATAL; its KafkaError.fatal() is False here) names the broker's code
            fatal = next(e for e in errors if e.code() == FATAL)
            assert "Static consumer fenced by other consumer with same group.instance.id" in fatal.str(), fatal.str()
        finally:
            second.c.close()
    finally:
        first.c.close()
