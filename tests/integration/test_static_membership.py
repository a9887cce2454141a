"""KIP-345 static membership with real clients: confluent-kafka (librdkafka) consumers with group.instance.id on the
Kafka listener, and Kafka Lite's own consumer (group_instance_id) on the native one, in both group protocols.

A static member that restarts within its session timeout takes its place back: no rebalance (its peer is never
revoked), the same partitions, and DescribeGroups shows the instance id. aiokafka's own suite (test_kip_345_enabled)
found Kafka Lite ignoring group.instance.id; tests/unit/test_static_membership.py drives the coordinator's rules
(fencing, leave by instance, the log) step by step.
"""

from __future__ import annotations

import time

import pytest

from client.subscription import ConsumerRebalanceListener
from client.sync import Admin as KLAdmin
from client.sync import Consumer as KLConsumer
from client.sync import Producer as KLProducer
from net.errors import ErrorCode, KafkaLiteError
from tests.integration.cluster_harness import ClusterHarness
from tests.integration.test_cli import run

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

    def step(self) -> None:
        self.c.poll(0.05)


def poll_all(members: list, until, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.step()
        if until():
            return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def keep_polling(members: list, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in members:
            m.step()


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


# --- Kafka Lite's own consumer (native listener), both group protocols ------------------------------------------


class OwnStatic(ConsumerRebalanceListener):
    """Kafka Lite's own consumer with group_instance_id, counting its rebalance callbacks."""

    def __init__(self, h: ClusterHarness, group: str, instance: str, protocol: str) -> None:
        self.assigned: list[set[int]] = []
        self.revoked = 0
        extra = {"session_timeout_ms": 30000, "heartbeat_interval_ms": 500} if protocol == "classic" else {}
        self.c = KLConsumer(
            h.bootstrap(),
            group_id=group,
            group_instance_id=instance,
            group_protocol=protocol,
            auto_offset_reset="earliest",
            **extra,
        )
        self.c.subscribe([TOPIC], listener=self)

    def on_partitions_assigned(self, assigned: set) -> None:
        self.assigned.append({tp.partition for tp in assigned})

    def on_partitions_revoked(self, revoked: set) -> None:
        self.revoked += 1 if revoked else 0

    def now(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def step(self) -> None:
        self.c.poll(50)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_our_restarted_static_member_gets_its_partitions_back_without_a_rebalance(cluster, protocol):
    """Closing a static member sends no LeaveGroup (classic) or leaves with member epoch -2 (KIP-848): its
    partitions wait for it, and its restart under the same group.instance.id takes them back while its peer
    keeps polling, never revoked."""
    group = f"own-restart-{protocol}"
    a, b = OwnStatic(cluster, group, "inst-a", protocol), OwnStatic(cluster, group, "inst-b", protocol)
    try:
        poll_all([a, b], lambda: len(a.now()) + len(b.now()) == PARTITIONS and a.now() and b.now(), 90, "both")
        keep_polling([a, b], 3)  # settle: a first member may have had a generation of its own
        had_b, revokes_a, assigns_a = b.now(), a.revoked, len(a.assigned)
        b.c.close()
        # Still a member, its partitions kept for it (a dynamic member's close would have removed it at once)
        with KLAdmin(cluster.bootstrap()) as admin:
            kept = {m.group_instance_id: m.assignment for m in admin.describe_group(group).members}
        assert {p for _, p in kept.get("inst-b", ())} == had_b, kept
        b = OwnStatic(cluster, group, "inst-b", protocol)
        poll_all([a, b], lambda: bool(b.now()), 60, "the restarted member's assignment")
        assert b.now() == had_b, "the restarted static member got other partitions"
        keep_polling([a, b], 3)  # a rebalance, had there been one, would reach a within 3 s
        assert (a.revoked, len(a.assigned)) == (revokes_a, assigns_a), "the peer was revoked: a rebalance happened"
        assert a.now() | b.now() == set(range(PARTITIONS)) and not a.now() & b.now()
        # kl-groups shows Kafka's GROUP-INSTANCE-ID column when a member is static
        boot = ["--bootstrap-server", cluster.bootstrap()]
        described = run("groups", *boot, "--describe", "--members", "--group", group)
        assert described.returncode == 0, described.stderr
        header, *lines = [ln.split() for ln in described.stdout.splitlines() if ln.strip()]
        assert header[:4] == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST"], header
        assert sorted(ln[2] for ln in lines) == ["inst-a", "inst-b"], described.stdout
    finally:
        for m in (a, b):
            m.c.close()


def test_our_consumer_fenced_by_a_second_with_its_instance_id_raises_from_every_poll(cluster):
    """Classic protocol: the newer consumer with a taken instance id replaces the older, whose next heartbeat or
    join is answered FENCED_INSTANCE_ID: its poll() raises it, and so does every poll() after (Kafka's
    FencedInstanceIdException is fatal), and its close() does not disturb the newer member."""
    first = OwnStatic(cluster, "own-dup", "inst-dup", "classic")
    second = None
    try:
        poll_all([first], lambda: bool(first.now()), 90, "the first consumer's assignment")
        second = OwnStatic(cluster, "own-dup", "inst-dup", "classic")
        raised: list[KafkaLiteError] = []
        deadline = time.monotonic() + 60
        while not (raised and second.now()) and time.monotonic() < deadline:
            try:
                first.c.poll(50)
            except KafkaLiteError as e:
                raised.append(e)
            second.c.poll(50)
        assert raised and second.now(), (raised, second.now())
        assert raised[0].code == ErrorCode.FENCED_INSTANCE_ID, raised[0]
        with pytest.raises(KafkaLiteError) as again:
            first.c.poll(50)
        assert again.value.code == ErrorCode.FENCED_INSTANCE_ID
        first.c.close()
        poll_all([second], lambda: second.now() == set(range(PARTITIONS)), 30, "the second owning every partition")
    finally:
        for m in (first, second):
            if m is not None:
                m.c.close()


def test_our_consumer_protocol_member_with_a_taken_instance_id_is_refused_unreleased(cluster):
    """KIP-848: while the member holding an instance id has not left, a new member with the same id is refused
    UNRELEASED_INSTANCE_ID, fatal to it (raised from its poll()); the holder keeps consuming undisturbed."""
    holder = OwnStatic(cluster, "own-dup-848", "inst-848", "consumer")
    late = None
    try:
        poll_all([holder], lambda: holder.now() == set(range(PARTITIONS)), 90, "the holder's assignment")
        late = OwnStatic(cluster, "own-dup-848", "inst-848", "consumer")
        with pytest.raises(KafkaLiteError) as refused:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                late.c.poll(100)
                holder.c.poll(50)
        assert refused.value.code == ErrorCode.UNRELEASED_INSTANCE_ID, refused.value
        with pytest.raises(KafkaLiteError):
            late.c.poll(50)  # fatal: every poll raises it
        holder.c.poll(200)
        assert holder.now() == set(range(PARTITIONS)) and holder.revoked == 0
    finally:
        for m in (holder, late):
            if m is not None:
                m.c.close()
