"""The consumer group protocol (KIP-848) with confluent-kafka (`group.protocol=consumer`) on the Kafka listener, and
Kafka Lite's own consumer (`group_protocol="consumer"`) on the native one in the same group: two
and three members split the partitions (server-side assignment, incremental on_assign / on_revoke) with no record
consumed twice, a member leaving hands its partitions over, committed offsets (OffsetCommit v9, member epochs)
survive the members, the admin apis see a "consumer" group, and a SIGKILL of the group's coordinator keeps the
group: the members carry on at the new coordinator with their epochs and partitions, without rejoining.
One 3-broker cluster (RF=3, min.insync.replicas=2) for the module; heartbeats every 500 ms."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
import threading

import pytest

from broker.group.records import partition_for
from broker.metadata.naming import OFFSETS_TOPIC
from client.subscription import ConsumerRebalanceListener
from client.sync import Consumer as KLConsumer
from client.sync import Producer as KLProducer
from net.connection import BrokerConnection
from net.errors import ErrorCode
from net.schema.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from tests.integration.cluster_harness import ROOT, ClusterHarness, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
admin_mod = pytest.importorskip("confluent_kafka.admin")

OFFSETS_PARTITIONS = 3
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    overrides = [
        "group.consumer.heartbeat.interval.ms=500",
        "group.consumer.min.heartbeat.interval.ms=500",  # Kafka's rule: min <= the broker's value
        "group.consumer.session.timeout.ms=10000",
        "group.consumer.min.session.timeout.ms=10000",
        f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}",
    ]
    with ClusterHarness(tmp_path_factory.mktemp("kip848"), 3, overrides=overrides).running() as h:
        yield h


def fresh_topic(h: ClusterHarness, topic: str, per_partition: int) -> tuple[set[bytes], list[bytes], threading.Lock]:
    """A topic of PARTITIONS partitions with records in each; the list members add what they consume to, and
    its lock."""
    h.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    return produce(h, topic, per_partition, "a"), [], threading.Lock()


def produce(h: ClusterHarness, topic: str, per_partition: int, tag: str) -> set[bytes]:
    values = set()
    with KLProducer(h.bootstrap(), acks="all") as p:
        for part in range(PARTITIONS):
            for i in range(per_partition):
                v = f"{tag}-{part}-{i}".encode()
                p.send(topic, v, partition=part)
                values.add(v)
        p.flush()
    return values


class Member(threading.Thread):
    """A confluent-kafka consumer of the new protocol, committing synchronously after each batch and before it
    gives partitions up (on_revoke), so the next owner starts where it stopped."""

    def __init__(
        self,
        h: ClusterHarness,
        group: str,
        topic: str,
        name: str,
        seen: list,
        lock: threading.Lock,
        protocol: str = "consumer",
    ):
        super().__init__(daemon=True, name=name)
        self.h, self.group, self.topic, self.seen, self.lock = h, group, topic, seen, lock
        self.protocol = protocol  # "classic": a cooperative-sticky member of the classic protocol
        self.stop = threading.Event()
        self.events: list[tuple[str, frozenset[int]]] = []
        self.assigned: frozenset[int] = frozenset()
        self.member_id = ""
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the test
            self.error = e

    def _commit(self, c) -> None:
        try:
            c.commit(asynchronous=False)
        except confluent_kafka.KafkaException as e:
            err = e.args[0]
            # Nothing to commit; or a retriable error (the coordinator moving, as in the failover test): the next
            # commit covers these offsets, as an application's loop would have it.
            if err.code() != confluent_kafka.KafkaError._NO_OFFSET and not err.retriable():
                raise

    def _run(self) -> None:
        c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.h.kafka_bootstrap(),
                "group.id": self.group,
                "group.protocol": self.protocol,
                "client.id": self.name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **({"partition.assignment.strategy": "cooperative-sticky"} if self.protocol == "classic" else {}),
            }
        )

        def on_assign(_c, ps):
            self.events.append(("assign", frozenset(p.partition for p in ps)))

        def on_revoke(_c, ps):
            self.events.append(("revoke", frozenset(p.partition for p in ps)))
            self._commit(c)

        try:
            c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
            while not self.stop.is_set():
                msgs = [m for m in c.consume(500, 0.2) if m.error() is None]
                if msgs:
                    with self.lock:
                        self.seen.extend(m.value() for m in msgs)
                    self._commit(c)
                self.assigned = frozenset(p.partition for p in c.assignment())
                self.member_id = c.memberid() or self.member_id
        finally:
            # Leaves the group (member epoch -1): its partitions go to the others. Also after an error: left to
            # the garbage collector (the callbacks hold it in a cycle), librdkafka's destroy waits for brokers
            # long gone and hung a later test's gc.collect() for good.
            c.close()


def start(h, group, topic, name, seen, lock) -> Member:
    m = Member(h, group, topic, name, seen, lock)
    m.start()
    return m


def stop_all(members: list) -> None:
    for m in members:
        m.stop.set()
    for m in members:
        m.join(30)


def split_evenly(members: list) -> bool:
    """Every partition owned by exactly one member, and the members within one partition of each other."""
    owned = [m.assigned for m in members]
    together = frozenset().union(*owned)
    sizes = [len(o) for o in owned]
    return sum(sizes) == PARTITIONS and len(together) == PARTITIONS and max(sizes) - min(sizes) <= 1


def check_errors(members: list) -> None:
    for m in members:
        assert m.error is None, f"{m.name}: {m.error!r}"


def describe(h: ClusterHarness, group: str):
    admin = admin_mod.AdminClient({"bootstrap.servers": h.kafka_bootstrap()})
    return admin.describe_consumer_groups([group])[group].result(timeout=30)


def test_members_split_hand_over_and_keep_their_offsets(cluster):
    h, topic, group = cluster, "cg-split", "cg-split-group"
    values, seen, lock = fresh_topic(h, topic, 200)
    members = [start(h, group, topic, "m1", seen, lock)]
    try:
        wait_until(lambda: members[0].assigned == frozenset(range(PARTITIONS)), timeout=60, what="m1 assigned")
        for name in ("m2", "m3"):
            members.append(start(h, group, topic, name, seen, lock))
            wait_until(lambda: split_evenly(members) or check_errors(members), timeout=60, what=f"{name} split")
        wait_until(lambda: set(seen) >= values, timeout=60, what="every record consumed")
        check_errors(members)
        # Incremental: m1 gave up only what moved (never everything at once), and each member's callbacks
        # add up to what it owns.
        first_revoke = next(ps for kind, ps in members[0].events if kind == "revoke")
        assert 0 < len(first_revoke) < PARTITIONS
        for m in members:
            owned: frozenset[int] = frozenset()
            for kind, ps in m.events:
                assert (ps <= owned) if kind == "revoke" else not (ps & owned), (m.name, m.events)
                owned = owned - ps if kind == "revoke" else owned | ps
            assert owned == m.assigned, (m.name, m.events)

        d = describe(h, group)
        assert d.type == confluent_kafka.ConsumerGroupType.CONSUMER and d.partition_assignor == "uniform"
        assert d.state == confluent_kafka.ConsumerGroupState.STABLE
        assert sorted(len(x.assignment.topic_partitions) for x in d.members) == [2, 2, 2]
        assert {x.client_id for x in d.members} == {"m1", "m2", "m3"}
        admin = admin_mod.AdminClient({"bootstrap.servers": h.kafka_bootstrap()})
        listed = admin.list_consumer_groups(types={confluent_kafka.ConsumerGroupType.CONSUMER}).result(timeout=30)
        assert group in {g.group_id for g in listed.valid}

        # m3 leaves: its two partitions go to m1 and m2, which consume what comes next.
        members[2].stop.set()
        members[2].join(30)
        wait_until(lambda: split_evenly(members[:2]) or check_errors(members), timeout=60, what="m3's partitions moved")
        more = produce(h, topic, 100, "b")
        wait_until(lambda: set(seen) >= values | more, timeout=60, what="records after m3 left consumed")
        check_errors(members)
    finally:
        stop_all(members)
    with lock:
        assert len(seen) == len(set(seen)), "a record was consumed twice"
    # The group is empty now; its committed offsets are where a new member starts.
    assert describe(h, group).state == confluent_kafka.ConsumerGroupState.EMPTY
    later = produce(h, topic, 10, "c")
    fresh: list[bytes] = []
    m4 = start(h, group, topic, "m4", fresh, lock)
    try:
        wait_until(lambda: set(fresh) >= later or check_errors([m4]), timeout=60, what="m4 consumed the new records")
    finally:
        stop_all([m4])
    assert set(fresh) == later, "a member of the group read records the group had committed past"


def coordinator_of(h: ClusterHarness, group: str) -> int:
    p = partition_for(group, OFFSETS_PARTITIONS)
    return next(x.leader for x in h.describe(OFFSETS_TOPIC) if x.partition == p)


def test_the_group_survives_a_sigkill_of_its_coordinator(cluster):
    h, topic, group = cluster, "cg-failover", "cg-failover-group"
    values, seen, lock = fresh_topic(h, topic, 50)
    members = [start(h, group, topic, name, seen, lock) for name in ("f1", "f2")]
    victim = None
    try:
        wait_until(lambda: split_evenly(members) or check_errors(members), timeout=60, what="two members split")
        wait_until(lambda: set(seen) >= values, timeout=60, what="first records consumed")
        before = describe(h, group)
        callbacks = [list(m.events) for m in members]
        victim = coordinator_of(h, group)
        h.kill(victim)
        wait_until(lambda: coordinator_of(h, group) != victim, timeout=60, what="a new coordinator")
        more = produce(h, topic, 50, "b")
        wait_until(lambda: set(seen) >= values | more or check_errors(members), timeout=90, what="consumed after kill")
        after = describe(h, group)
        # The new coordinator loaded the group: the same members at the same epochs, nobody rejoined.
        assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
        assert {m.member_id for m in after.members} == {m.member_id for m in members}
        assert after.state == confluent_kafka.ConsumerGroupState.STABLE
        assert [m.events for m in members] == callbacks, "a member lost or gave up partitions over the failover"
        assert all(m.assigned for m in members) and split_evenly(members)
        check_errors(members)
    finally:
        stop_all(members)
        if victim is not None:
            h.restart(victim)
    with lock:
        assert len(seen) == len(set(seen)), "a record was consumed twice"


def test_a_regex_subscription_is_matched_on_the_broker(cluster):
    """librdkafka sends a `^...` subscription as ConsumerGroupHeartbeat's subscribed_topic_regex: the coordinator
    matches it against the topics (a topic made later joins the assignment at the next group epoch)."""
    h, group = cluster, "cg-regex-group"
    h.create_topic("cg-rx-one", 2, 3)
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": h.kafka_bootstrap(),
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.subscribe(["^cg-rx-.*"])

        def assigned() -> set[tuple[str, int]]:
            c.consume(10, 0.2)
            return {(p.topic, p.partition) for p in c.assignment()}

        wait_until(lambda: assigned() == {("cg-rx-one", 0), ("cg-rx-one", 1)}, timeout=60, what="regex assignment")
        h.create_topic("cg-rx-two", 1, 3)
        h.create_topic("cg-other", 1, 3)  # matches nothing
        want = {("cg-rx-one", 0), ("cg-rx-one", 1), ("cg-rx-two", 0)}
        wait_until(lambda: assigned() == want, timeout=60, what="a new matching topic assigned")
        d = describe(h, group)
        assert d.members[0].assignment and {tp.topic for tp in d.members[0].assignment.topic_partitions} == {
            "cg-rx-one",
            "cg-rx-two",
        }
    finally:
        c.close()


def kl_groups(h: ClusterHarness, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "client.cli.groups", "--bootstrap-server", h.bootstrap(), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_kl_groups_describes_a_consumer_group_with_kafkas_columns(cluster):
    h, topic, group = cluster, "cg-cli", "cg-cli-group"
    h.create_topic(topic, 2, 3)
    seen: list[bytes] = []
    m = start(h, group, topic, "cli-member", seen, threading.Lock())
    try:
        wait_until(lambda: m.assigned == {0, 1} or check_errors([m]), timeout=60, what="assigned")
        lines = kl_groups(h, "--describe", "--group", group, "--members", "--verbose").split("\n")
        header = lines[1].split()
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                          "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]  # fmt: skip
        row = lines[2].split()
        assert row[0] == group and row[1] == m.member_id and row[3] == "cli-member" and row[4] == "2"
        assert row[6] == row[8] == f"{topic}(0,1)" and row[5] == row[7] and int(row[5]) >= 1
        lines = kl_groups(h, "--describe", "--group", group, "--state", "--verbose").split("\n")
        assert lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                                    "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]  # fmt: skip
        row = lines[2].split()
        assert row[0] == group and row[3:] == ["uniform", "Stable", row[5], row[5], "1"]
        assert any(
            line.split() == [group, "Stable"] for line in kl_groups(h, "--list", "--state", "stable").split("\n")
        )
    finally:
        stop_all([m])


class OwnMember(threading.Thread):
    """Kafka Lite's own consumer with group_protocol="consumer", on the native listener, committing after each
    poll (and before it gives partitions up: auto-commit's commit on revocation is off, so the listener does)."""

    def __init__(self, h: ClusterHarness, group: str, topic: str, name: str, seen: list, lock: threading.Lock):
        super().__init__(daemon=True, name=name)
        self.h, self.group, self.topic, self.seen, self.lock = h, group, topic, seen, lock
        self.stop = threading.Event()
        self.assigned: frozenset[int] = frozenset()
        self.events: list[tuple[str, frozenset[int]]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            c = KLConsumer(
                self.h.bootstrap(),
                group_id=self.group,
                group_protocol="consumer",
                client_id=self.name,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            outer = self

            class Listener(ConsumerRebalanceListener):
                def on_partitions_revoked(self, revoked):
                    outer.events.append(("revoke", frozenset(tp.partition for tp in revoked)))
                    c.commit({tp: c.position(tp) for tp in revoked})

                def on_partitions_assigned(self, assigned):
                    outer.events.append(("assign", frozenset(tp.partition for tp in assigned)))

            c.subscribe([self.topic], listener=Listener())
            while not self.stop.is_set():
                records = c.poll(200)
                if records:
                    with self.lock:
                        self.seen.extend(r.value for r in records)
                    c.commit()
                self.assigned = frozenset(tp.partition for tp in c.assignment())
            c.close()
        except BaseException as e:  # reported by the test
            self.error = e


def test_kafka_lites_own_consumer_speaks_the_consumer_protocol_beside_confluent_kafka(cluster):
    h, topic, group = cluster, "cg-own", "cg-own-group"
    values, seen, lock = fresh_topic(h, topic, 100)
    members: list = [OwnMember(h, group, topic, "own1", seen, lock)]
    members[0].start()
    try:
        wait_until(lambda: members[0].assigned == frozenset(range(PARTITIONS)) or check_errors(members), 60, "own1")
        members.append(OwnMember(h, group, topic, "own2", seen, lock))
        members[1].start()
        members.append(start(h, group, topic, "confluent3", seen, lock))
        wait_until(lambda: split_evenly(members) or check_errors(members), timeout=60, what="three members split")
        wait_until(lambda: set(seen) >= values, timeout=60, what="every record consumed")
        assert members[0].events[0] == ("assign", frozenset(range(PARTITIONS)))
        assert any(kind == "revoke" and 0 < len(ps) < PARTITIONS for kind, ps in members[0].events)
        d = describe(h, group)
        assert {m.client_id for m in d.members} == {"own1", "own2", "confluent3"}
        members[0].stop.set()  # own1 leaves (member epoch -1): its partitions move to the two others
        members[0].join(30)
        wait_until(
            lambda: split_evenly(members[1:]) or check_errors(members), timeout=60, what="own1's partitions moved"
        )
        more = produce(h, topic, 50, "b")
        wait_until(
            lambda: set(seen) >= values | more or check_errors(members), timeout=60, what="consumed after own1 left"
        )
        check_errors(members)
    finally:
        stop_all(members)
    with lock:
        assert len(seen) == len(set(seen)), "a record was consumed twice"


def drain(h: ClusterHarness, group: str, topic: str, protocol: str, want: set[bytes]) -> list[bytes]:
    """One confluent-kafka member of `group` speaking `protocol` reads until it has `want`, commits, leaves."""
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": h.kafka_bootstrap(),
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[bytes] = []
    try:
        c.subscribe([topic])

        def read() -> bool:
            msgs = [m for m in c.consume(500, 0.3) if m.error() is None]
            got.extend(m.value() for m in msgs)
            if msgs:
                c.commit(asynchronous=False)
            return set(got) >= want

        wait_until(read, timeout=60, what=f"a {protocol} member read its records")
    finally:
        c.close()
    return got


def test_a_group_changes_protocol_when_its_members_restart_keeping_its_offsets(cluster):
    """An empty group of either kind becomes the other when a member of the other protocol joins (Kafka's
    offline upgrade and downgrade): the committed offsets stay, so nothing is read twice."""
    h, topic, group = cluster, "cg-upgrade", "cg-upgrade-group"
    values, _, _ = fresh_topic(h, topic, 20)
    first = drain(h, group, topic, "classic", values)
    assert describe(h, group).type == confluent_kafka.ConsumerGroupType.CLASSIC
    more = produce(h, topic, 10, "b")
    second = drain(h, group, topic, "consumer", more)
    assert set(second) == more, "the consumer-protocol member re-read what the classic members committed"
    assert describe(h, group).type == confluent_kafka.ConsumerGroupType.CONSUMER
    last = produce(h, topic, 5, "c")
    third = drain(h, group, topic, "classic", last)
    assert set(third) == last, "the classic member re-read what the consumer-protocol member committed"
    assert len(first) == len(set(first)) == len(values)


def test_bad_heartbeats_are_answered_with_kafkas_errors_and_the_coordinator_goes_on(cluster):
    """ConsumerGroupHeartbeats a broker must refuse, on the native listener (typed), at the group's coordinator:
    each answered with its error, nothing kept, and the same connection then joins the group."""
    h, group = cluster, "cg-bad-input"
    h.create_topic("cg-bad-topic", 2, 3)
    with h.admin() as a:
        a.describe_group(group)  # FindCoordinator: __consumer_offsets exists from here on
    coordinator = h[coordinator_of(h, group)]

    def hb(**kw) -> ConsumerGroupHeartbeatRequest:
        base = dict(group_id=group, member_id="m-1", member_epoch=0, rebalance_timeout=datetime.timedelta(seconds=30),
                    subscribed_topic_names=("cg-bad-topic",), topic_partitions=())  # fmt: skip
        return ConsumerGroupHeartbeatRequest(**{**base, **kw})

    cases = [
        (hb(group_id=""), ErrorCode.INVALID_GROUP_ID),
        (hb(member_epoch=-7), ErrorCode.INVALID_REQUEST),
        (hb(rebalance_timeout=datetime.timedelta(milliseconds=-5)), ErrorCode.INVALID_REQUEST),
        (hb(topic_partitions=None), ErrorCode.INVALID_REQUEST),  # a join owns nothing, and says so
        (hb(subscribed_topic_names=None, subscribed_topic_regex="cg-("), ErrorCode.INVALID_REGULAR_EXPRESSION),
        (hb(server_assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR),
        (hb(member_epoch=3), ErrorCode.UNKNOWN_MEMBER_ID),
        (hb(instance_id=""), ErrorCode.INVALID_REQUEST),
    ]

    async def go() -> list[tuple[int, int]]:
        conn = BrokerConnection(coordinator.host, coordinator.port, "bad-input")
        await conn.connect(5)
        try:
            out = [((await conn.call(req, 10)).error_code, int(want)) for req, want in cases]
            joined = await conn.call(hb(), 10)
            out.append((joined.error_code, 0))
            out.append((joined.member_epoch > 0, True))
            return out
        finally:
            conn.close()

    for got, want in asyncio.run(go()):
        assert got == want
    assert describe(h, group).type == confluent_kafka.ConsumerGroupType.CONSUMER


def test_a_classic_group_is_upgraded_and_downgraded_online(cluster):
    """Kafka 4's online migration: a consumer-protocol member joins a group of classic (cooperative-sticky)
    members without stopping them, the group becomes a consumer group, they split the partitions with no record
    read twice; when it leaves, the classic members have a classic group again and take its partitions."""
    h, topic, group = cluster, "cg-migrate", "cg-migrate-group"
    values, seen, lock = fresh_topic(h, topic, 50)
    classic = Member(h, group, topic, "classic1", seen, lock, protocol="classic")
    classic.start()
    members: list = [classic]
    try:
        wait_until(lambda: classic.assigned == frozenset(range(PARTITIONS)) or check_errors(members), 60, "classic")
        assert describe(h, group).type == confluent_kafka.ConsumerGroupType.CLASSIC
        members.append(start(h, group, topic, "consumer1", seen, lock))
        wait_until(lambda: split_evenly(members) or check_errors(members), timeout=60, what="an online upgrade")
        d = describe(h, group)
        assert d.type == confluent_kafka.ConsumerGroupType.CONSUMER and len(d.members) == 2
        wait_until(lambda: set(seen) >= values, timeout=60, what="every record consumed")
        members[1].stop.set()
        members[1].join(30)
        wait_until(lambda: classic.assigned == frozenset(range(PARTITIONS)) or check_errors(members), 60, "downgrade")
        assert describe(h, group).type == confluent_kafka.ConsumerGroupType.CLASSIC
        more = produce(h, topic, 20, "b")
        wait_until(lambda: set(seen) >= values | more or check_errors(members), timeout=60, what="consumed after")
        check_errors(members)
    finally:
        stop_all(members)
    with lock:
        assert len(seen) == len(set(seen)), "a record was consumed twice"


def test_a_groups_own_heartbeat_interval_and_session_timeout_are_group_configs(cluster):
    """consumer.heartbeat.interval.ms / consumer.session.timeout.ms (Kafka 4's GroupConfig) set on one group by
    IncrementalAlterConfigs: described as the group's own, told to its members in ConsumerGroupHeartbeat, within
    the broker's group.consumer.min/max.* (INVALID_CONFIG outside); another group keeps the broker's 500 ms."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    h, group, other = cluster, "cg-own-configs", "cg-broker-configs"
    h.create_topic("cg-own-topic", 1, 3)
    admin = AdminClient({"bootstrap.servers": h.kafka_bootstrap()})

    def alter(name: str, value: str) -> None:
        entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(15)

    alter("consumer.heartbeat.interval.ms", "1500")
    alter("consumer.session.timeout.ms", "50000")
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG|not in"):
        alter("consumer.session.timeout.ms", "1000")  # below group.consumer.min.session.timeout.ms (10 s here)
    (described,) = [f.result(15) for f in admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()]
    assert described["consumer.session.timeout.ms"].value == "50000"
    assert described["consumer.heartbeat.interval.ms"].value == "1500"
    with h.admin() as a:
        a.describe_group(group)  # FindCoordinator: __consumer_offsets exists from here on

    async def interval_of(group_id: str) -> float:
        c = h[coordinator_of(h, group_id)]
        conn = BrokerConnection(c.host, c.port, "group-configs")
        await conn.connect(5)
        try:
            r = await conn.call(
                ConsumerGroupHeartbeatRequest(
                    group_id=group_id, member_id=f"m-{group_id}", member_epoch=0,
                    rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=("cg-own-topic",),
                    topic_partitions=(),
                ),
                10,
            )  # fmt: skip
            assert r.error_code == 0, r
            return r.heartbeat_interval.total_seconds()
        finally:
            conn.close()

    assert asyncio.run(interval_of(group)) == 1.5
    assert asyncio.run(interval_of(other)) == 0.5

    # kafka-configs.sh --entity-type groups, as kl-configs: Kafka's lines, and a refusal in one line
    from tests.integration.test_cli import assert_one_line_error, run

    boot = ["--bootstrap-server", h.bootstrap(), "--entity-type", "groups"]
    described_cli = run("configs", *boot, "--describe", "--entity-name", group)
    assert described_cli.returncode == 0, described_cli.stderr
    assert described_cli.stdout.splitlines() == [
        f"Dynamic configs for group {group} are:",
        "  consumer.heartbeat.interval.ms=1500 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=1500}",
        "  consumer.session.timeout.ms=50000 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000}",
    ]
    altered = run(
        "configs", *boot, "--alter", "--entity-name", group,
        "--add-config", "consumer.heartbeat.interval.ms=2000", "--delete-config", "consumer.session.timeout.ms",
    )  # fmt: skip
    assert altered.returncode == 0 and altered.stdout.strip() == f"Completed updating config for group {group}."
    assert asyncio.run(interval_of(group)) == 2.0
    assert "consumer.session.timeout.ms" not in run("configs", *boot, "--describe", "--entity-name", group).stdout
    refused = run("configs", *boot, "--alter", "--entity-name", group, "--add-config", "consumer.session.timeout.ms=5")
    assert_one_line_error(refused, "consumer.session.timeout.ms")
