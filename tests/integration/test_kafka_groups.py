"""Consumer groups of Kafka clients on the Kafka listener, in the one GroupCoordinator: confluent-kafka
(librdkafka) and kafka-python members sharing partitions, a member leaving and handing over, groups
mixing Kafka clients with our own consumer, committed offsets as `kl-groups --describe` shows them, and
the group admin apis (ListGroups, DescribeGroups, DeleteGroups, OffsetDelete). One 3-broker cluster
(RF=3, min.insync.replicas=2) for the module."""

from __future__ import annotations

import io
import socket
import struct
import subprocess
import sys
import threading

import pytest

from client.sync import Consumer as KLConsumer
from client.sync import Producer as KLProducer
from tests.integration.cluster_harness import ROOT, ClusterHarness, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
kafka = pytest.importorskip("kafka", reason="pip install -e '.[test]' (kafka-python)")
AdminClient = pytest.importorskip("confluent_kafka.admin").AdminClient

PER_PARTITION = 400


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(tmp_path_factory.mktemp("kgroups"), 3).running() as h:
        yield h


def fill(h: ClusterHarness, topic: str, partitions: int) -> set[bytes]:
    h.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})
    values = set()
    with KLProducer(h.bootstrap(), acks="all") as p:
        for part in range(partitions):
            for i in range(PER_PARTITION):
                v = f"{topic}-{part}-{i}".encode()
                p.send(topic, v, key=str(i).encode(), partition=part)
                values.add(v)
        p.flush()
    return values


def committed_by_kl_groups(h: ClusterHarness, group: str) -> dict[int, int]:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "client.cli.groups",
            "--bootstrap-server",
            h.bootstrap(),
            "--describe",
            "--group",
            group,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if f and f[0] == group and f[2].isdigit():
            out[int(f[2])] = int(f[3])
    return out


class Member(threading.Thread):
    """One group member, processing records and committing synchronously after each poll, so a partition
    handed over continues where the last owner committed."""

    def __init__(self, kind: str, h: ClusterHarness, group: str, topic: str, seen: list, lock: threading.Lock):
        super().__init__(daemon=True)
        self.kind, self.h, self.group, self.topic, self.seen, self.lock = kind, h, group, topic, seen, lock
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.assigned: list[int] = []
        self.polls = 0  # poll calls returned, for a timeout's message: a member stuck inside one shows 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            getattr(self, f"_run_{self.kind}")()
        except BaseException as e:  # reported by the test
            self.error = e

    def _take(self, values: list[bytes]) -> None:
        with self.lock:
            self.seen.extend(values)

    def _run_confluent(self) -> None:
        c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.h.kafka_bootstrap(),
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10000,
            }
        )
        c.subscribe([self.topic], on_assign=lambda _c, ps: self.ready.set())
        while not self.stop.is_set():
            msgs = [m for m in c.consume(500, 0.3) if m.error() is None]
            self.polls += 1
            if msgs:
                self._take([m.value() for m in msgs])
                c.commit(asynchronous=False)
            self.assigned = sorted(p.partition for p in c.assignment())
        c.close()  # leaves the group: its partitions go to the others

    def _run_kafka_python(self) -> None:
        c = kafka.KafkaConsumer(
            self.topic,
            bootstrap_servers=self.h.kafka_bootstrap(),
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10000,
        )
        while not self.stop.is_set():
            batches = c.poll(300)
            self.polls += 1
            vals = [m.value for ms in batches.values() for m in ms]
            if vals:
                self._take(vals)
                c.commit()
            self.assigned = sorted(tp.partition for tp in c.assignment())
            if self.assigned:
                self.ready.set()
        c.close()

    def _run_native(self) -> None:
        with KLConsumer(
            self.h.bootstrap(), group_id=self.group, auto_offset_reset="earliest", enable_auto_commit=False
        ) as c:
            c.subscribe([self.topic])
            while not self.stop.is_set():
                recs = c.poll(300)
                self.polls += 1
                if recs:
                    self._take([r.value for r in recs])
                    c.commit()
                self.assigned = sorted(p for _, p in c.assignment())
                if self.assigned:
                    self.ready.set()


def run_group(h: ClusterHarness, group: str, topic: str, kinds: list[str], want: set[bytes], leave: int | None):
    seen: list[bytes] = []
    lock = threading.Lock()
    members = [Member(k, h, group, topic, seen, lock) for k in kinds]
    for m in members:
        m.start()
    try:
        wait_until(
            lambda: all(m.ready.is_set() for m in members),
            60,
            "every member assigned",
            give_up=lambda: next((f"{m.kind} member failed: {m.error!r}" for m in members if m.error), None),
            detail=lambda: "; ".join(
                f"{m.kind}: ready={m.ready.is_set()} assigned={m.assigned} polls={m.polls}" for m in members
            ),
        )
        if leave is not None:
            wait_until(lambda: len(seen) >= len(want) // 3, 60, "a third of the records processed")
            members[leave].stop.set()
            members[leave].join(30)
        wait_until(lambda: set(seen) >= want, 90, "every record processed")
        stayed = [m for i, m in enumerate(members) if i != leave]
        wait_until(
            lambda: sorted(p for m in stayed for p in m.assigned) == sorted(range(6)), 60, "partitions shared out"
        )
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
    for m in members:
        assert m.error is None, f"{m.kind}: {m.error!r}"
    return seen, members


def test_two_confluent_and_one_kafka_python_member_share_six_partitions_and_hand_over(cluster):
    want = fill(cluster, "shared", 6)
    seen, members = run_group(cluster, "shared-g", "shared", ["confluent", "confluent", "kafka_python"], want, leave=0)
    assert set(seen) == want  # every record processed
    # commits before each poll's end and on leaving: a handed-over partition continues where it was committed
    dups = len(seen) - len(set(seen))
    assert dups <= 500 * 3, f"{dups} records processed twice"
    assert committed_by_kl_groups(cluster, "shared-g") == {p: PER_PARTITION for p in range(6)}


def test_a_group_of_a_kafka_client_and_our_consumer(cluster):
    want = fill(cluster, "mixed", 6)
    seen, members = run_group(cluster, "mixed-g", "mixed", ["confluent", "native"], want, leave=None)
    assert set(seen) == want
    owned = [set(m.assigned) for m in members]
    assert owned[0] and owned[1] and not owned[0] & owned[1]  # both took part, no partition owned twice
    assert committed_by_kl_groups(cluster, "mixed-g") == {p: PER_PARTITION for p in range(6)}


def _offset_delete(h: ClusterHarness, group: str, topic: str, partition: int) -> int:
    """OffsetDelete v0 over a raw socket to the group's coordinator (the clients here don't expose it)."""
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
    from kio.schema.request_header.v1.header import RequestHeader
    from kio.serial import entity_reader, entity_writer

    md = AdminClient({"bootstrap.servers": h.kafka_bootstrap()})
    coordinator = md.describe_consumer_groups([group])[group].result(10).coordinator
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out, RequestHeader(request_api_key=47, request_api_version=0, correlation_id=9, client_id="t")
    )
    req = OffsetDeleteRequest(
        group_id=group,
        topics=(
            OffsetDeleteRequestTopic(name=topic, partitions=(OffsetDeleteRequestPartition(partition_index=partition),)),
        ),
    )
    entity_writer(OffsetDeleteRequest)(out, req)
    payload = out.getvalue()
    with socket.create_connection((coordinator.host, coordinator.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        head = s.recv(4, socket.MSG_WAITALL)
        body = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    resp, _ = entity_reader(OffsetDeleteResponse)(body, 4)
    assert resp.error_code == 0
    return int(resp.topics[0].partitions[0].error_code)


def test_group_admin_apis_list_describe_offset_delete_and_delete(cluster):
    want = fill(cluster, "admin-t", 6)
    run_group(cluster, "admin-g", "admin-t", ["confluent"], want, leave=None)
    a = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    listed = {g.group_id: g for g in a.list_consumer_groups().result(10).valid}
    assert "admin-g" in listed and "shared-g" in listed
    d = a.describe_consumer_groups(["admin-g"])["admin-g"].result(10)
    assert d.state == confluent_kafka.ConsumerGroupState.EMPTY and not d.members
    # OffsetDelete: the group has no members left, so its offsets may go
    assert _offset_delete(cluster, "admin-g", "admin-t", 1) == 0
    assert 1 not in committed_by_kl_groups(cluster, "admin-g")
    assert a.delete_consumer_groups(["admin-g"])["admin-g"].result(10) is None
    wait_until(
        lambda: "admin-g" not in {g.group_id for g in a.list_consumer_groups().result(10).valid}, 10, "group deleted"
    )
    # deleting a group that does not exist: Kafka's GROUP_ID_NOT_FOUND
    with pytest.raises(confluent_kafka.KafkaException, match="GROUP_ID_NOT_FOUND"):
        a.delete_consumer_groups(["admin-g"])["admin-g"].result(10)


def test_a_committed_offset_keeps_its_leader_epoch(cluster):
    """KIP-320: librdkafka commits the leader epoch with an offset and reads it back with OffsetFetch (it checks its
    log against it on resuming); the coordinator stored only the offset before (kafka-python's own suite found it)."""
    topic = "epoch-commits"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    c = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "epochs", "enable.auto.commit": False}
    )
    try:
        c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 7, leader_epoch=4)], asynchronous=False)
        (tp,) = c.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
        assert (tp.offset, tp.leader_epoch) == (7, 4)
    finally:
        c.close()
