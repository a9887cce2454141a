"""Kafka's answers where Kafka Lite used to give other ones (issue 27 §1), on one shared broker with both
listeners: idempotent sequence gaps refused (and our producer's KIP-360 recovery from one), negative and
past-the-end committed offsets stored and reset by consumers, aiokafka's transactions."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from broker.network.kafka.entities import plain
from client.sync import Consumer, Producer
from net import batch as batch_fmt
from net.errors import ErrorCode
from net.protocol import ApiKey
from tests.integration.cluster_harness import ROOT, ClusterHarness
from tests.integration.test_kafka_protocol_errors import frame, read_frame
from tests.integration.test_protocol_errors import RawClient

pytestmark = pytest.mark.timeout(120)

JS = ROOT / "tests" / "js"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # No initial rebalance delay: kafkajs joins the group three times per test (twice inside its admin).
    with ClusterHarness(
        tmp_path_factory.mktemp("answers"), 1, overrides=["group.initial.rebalance.delay.ms=0"]
    ).running() as h:
        yield h


def idem(pid: int, seq: int, n: int = 1, epoch: int = 0, tag: str = "r") -> bytes:
    records = [[i, 0, None, f"{tag}-{seq + i}".encode(), None] for i in range(n)]
    return batch_fmt.build(records, 1, 1, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def native_produce(h: ClusterHarness, topic: str, blob: bytes) -> tuple[int, int]:
    """(error code, base offset) of a raw produce on the native listener."""
    c = RawClient(h[1].port)
    try:
        row = c.request(ApiKey.PRODUCE, {"acks": -1, "topics": [[topic, [[0, blob]]]]})["topics"][0][1][0]
    finally:
        c.close()
    return row[1], row[2]


def kafka_produce(h: ClusterHarness, topic: str, blob: bytes) -> tuple[int, int]:
    """(error code, base offset) of a raw Produce v9 on the Kafka listener."""
    body = {
        "acks": -1,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": blob}]}],
    }
    with socket.create_connection(("127.0.0.1", h[1].kafka_port), timeout=10) as s:
        s.sendall(frame(0, 9, 7, body))
        resp = plain(entity_reader(load_response_schema(0, 9))(read_frame(s), 5)[0])
    row = resp["responses"][0]["partition_responses"][0]
    return row["error_code"], row["base_offset"]


def log_end(h: ClusterHarness, topic: str) -> int:
    with Consumer(h.bootstrap()) as c:
        return next(iter(c.list_offsets([(topic, 0)], -1).values()))


# --- idempotent sequence rules ----------------------------------------------------------------------------


@pytest.mark.parametrize("listener", ["native", "kafka"])
def test_a_sequence_gap_is_refused_and_nothing_appended(cluster, listener):
    topic = f"gap-{listener}"
    cluster.create_topic(topic, 1, 1)
    produce = native_produce if listener == "native" else kafka_produce
    pid = 7000 if listener == "native" else 7001
    assert produce(cluster, topic, idem(pid, 0)) == (0, 0)
    end = log_end(cluster, topic)
    assert produce(cluster, topic, idem(pid, 5))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # the case
    assert produce(cluster, topic, idem(pid, 3, epoch=1))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log_end(cluster, topic) == end, "a refused batch was appended"
    assert produce(cluster, topic, idem(pid, 0)) == (0, 0)  # a retry is still answered with its offset
    assert produce(cluster, topic, idem(pid, 1)) == (0, 1)  # last + 1 goes in
    assert produce(cluster, topic, idem(pid, 0, epoch=1)) == (0, 2)  # a new epoch at 0 goes in
    assert produce(cluster, topic, idem(pid, 2, epoch=0))[0] == ErrorCode.INVALID_PRODUCER_EPOCH  # fenced
    assert produce(cluster, topic, idem(pid + 100, 41)) == (0, 3)  # an unknown producer starts anywhere
    assert log_end(cluster, topic) == 4


def test_our_producer_bumps_its_epoch_after_a_gap_and_loses_or_duplicates_nothing(cluster):
    """Another writer with the producer's id moves the broker's sequence past what the producer numbered
    next: its next batch is refused as out of order, so it bumps its epoch and sends it again from 0."""
    topic = "bump"
    cluster.create_topic(topic, 1, 1)
    with Producer(cluster.bootstrap(), acks="all", linger_ms=0) as p:
        for i in range(10):
            p.send(topic, f"mine-{i}".encode(), partition=0)
        p.flush()
        sender = p._impl.sender
        pid, epoch = sender.producer_id, sender.producer_epoch
        assert native_produce(cluster, topic, idem(pid, 10, n=3, epoch=epoch, tag="foreign")) == (0, 10)
        for i in range(10, 20):
            p.send(topic, f"mine-{i}".encode(), partition=0)
        p.flush()
        assert sender.producer_epoch == epoch + 1 and sender.producer_id == pid
        assert not sender.failures
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        values: list[str] = []
        deadline = time.monotonic() + 20
        while len(values) < 23 and time.monotonic() < deadline:
            values += [r.value.decode() for r in c.poll(500)]
    mine = [v for v in values if v.startswith("mine-")]
    assert mine == [f"mine-{i}" for i in range(20)], "acknowledged records lost, duplicated or reordered"
    assert sorted(v for v in values if v.startswith("foreign")) == ["foreign-10", "foreign-11", "foreign-12"]
    assert len(values) == 23


# --- transactions through a third Kafka client (issue 28; the others: test_transactions_clients.py) ---


def test_aiokafka_transactions_commit_abort_and_read_committed(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic = "tx-aio"
    cluster.create_topic(topic, 1, 1)

    async def run() -> list[bytes]:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap(), transactional_id="tx-aio")
        await asyncio.wait_for(p.start(), 30)
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"committed", partition=0)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aborted", partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=cluster.kafka_bootstrap(), isolation_level="read_committed", auto_offset_reset="earliest"
        )
        await c.start()
        try:
            c.assign([aiokafka.TopicPartition(topic, 0)])
            got = await c.getmany(timeout_ms=3000)
            return [m.value for ms in got.values() for m in ms]
        finally:
            await c.stop()

    assert asyncio.run(run()) == [b"committed"]


def test_native_find_coordinator_for_a_transaction(cluster):
    c = RawClient(cluster[1].port)
    try:
        deadline = time.monotonic() + 30
        while True:  # __transaction_state is created on first use: COORDINATOR_NOT_AVAILABLE meanwhile
            body = c.request(ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 1})
            if body["error_code"] == 0 or time.monotonic() > deadline:
                break
            assert body["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE, body
            time.sleep(0.2)
        assert body["error_code"] == 0 and body["node_id"] == 1, body
        bad = c.request(ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 2})
        assert bad["error_code"] == ErrorCode.INVALID_REQUEST
    finally:
        c.close()


# --- negative and past-the-end committed offsets ------------------------------------------------------------


def fill(cluster: ClusterHarness, topic: str, n: int) -> None:
    cluster.create_topic(topic, 1, 1)
    with Producer(cluster.bootstrap(), acks="all") as p:
        for i in range(n):
            p.send(topic, f"old-{i}".encode(), partition=0)
        p.flush()


def native_committed(cluster: ClusterHarness, group: str, topic: str) -> int:
    c = RawClient(cluster[1].port)
    try:
        body = c.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": [[topic, [0]]]})
    finally:
        c.close()
    return body["topics"][0][1][0][1]


def read_our_way(cluster: ClusterHarness, group: str, topic: str, reset: str, want: int) -> list[str]:
    """Our consumer in `group`, subscribed: the values it reads until it has `want` of them."""
    out: list[str] = []
    with Consumer(cluster.bootstrap(), group_id=group, auto_offset_reset=reset) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(out) < want and time.monotonic() < deadline:
            out += [r.value.decode() for r in c.poll(300)]
    return out


def test_negative_commits_are_stored_and_a_consumer_applies_its_reset_policy(cluster):
    topic = "neg"
    fill(cluster, topic, 5)
    tp = (topic, 0)
    with Consumer(cluster.bootstrap(), group_id="neg-ours") as c:
        c.commit({tp: 3})
        c.commit({tp: -1})  # INVALID_COMMIT_OFFSET_SIZE before: Kafka validates only the metadata's size
        assert native_committed(cluster, "neg-ours", topic) == -1
        assert c.committed(tp) is None  # below 0: no valid position, as Kafka's consumer reads it
        c.commit({tp: -2})
        assert native_committed(cluster, "neg-ours", topic) == -2
    assert read_our_way(cluster, "neg-ours", topic, "earliest", 5) == [f"old-{i}" for i in range(5)]

    # Through the Kafka listener: kafka-python commits -1 (as kafkajs's resetOffsets does), confluent-kafka
    # then reads the group from the start with auto.offset.reset=earliest.
    kafka = pytest.importorskip("kafka")
    confluent_kafka = pytest.importorskip("confluent_kafka")
    kc = kafka.KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap(), group_id="neg-kafka")
    try:
        ktp = kafka.TopicPartition(topic, 0)
        kc.commit({ktp: kafka.structs.OffsetAndMetadata(4, "", -1)})
        kc.commit({ktp: kafka.structs.OffsetAndMetadata(-1, "", -1)})
        assert native_committed(cluster, "neg-kafka", topic) == -1
    finally:
        kc.close()
    c = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "neg-kafka", "auto.offset.reset": "earliest"}
    )
    try:
        c.subscribe([topic])
        got: list[str] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
        assert got == [f"old-{i}" for i in range(5)]
    finally:
        c.close()


def produce_until_read(cluster: ClusterHarness, topic: str, poll) -> list[str]:
    """Write a new record every 0.3 s while `poll()` reads (a reset to the end happens at some point of it):
    the new records it reads, once it has read one."""
    got: list[str] = []
    with Producer(cluster.bootstrap(), acks="all", linger_ms=0) as p:
        deadline = time.monotonic() + 30
        i = 0
        while not got and time.monotonic() < deadline:
            p.send(topic, f"new-{i}".encode(), partition=0)
            p.flush()
            i += 1
            got += poll()
    return got


def test_a_group_committed_past_the_end_resets_and_consumes_new_records(cluster):
    topic = "past"
    fill(cluster, topic, 5)
    for group in ("past-ours", "past-ck"):
        with Consumer(cluster.bootstrap(), group_id=group) as c:
            c.commit({(topic, 0): 1000})
        assert native_committed(cluster, group, topic) == 1000

    with Consumer(cluster.bootstrap(), group_id="past-ours", auto_offset_reset="latest") as c:
        c.subscribe([topic])
        got = produce_until_read(cluster, topic, lambda: [r.value.decode() for r in c.poll(300)])
        c.commit()
    assert got and all(v.startswith("new-") for v in got), got
    assert 5 < native_committed(cluster, "past-ours", topic) < 1000

    confluent_kafka = pytest.importorskip("confluent_kafka")
    ck = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "past-ck", "auto.offset.reset": "latest"}
    )

    def poll_ck() -> list[str]:
        m = ck.poll(0.3)
        return [m.value().decode()] if m is not None and m.error() is None else []

    try:
        ck.subscribe([topic])
        got = produce_until_read(cluster, topic, poll_ck)
    finally:
        ck.close()
    assert got and all(v.startswith("new-") for v in got), got


def kafkajs(cluster: ClusterHarness, *args: str) -> list[dict]:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "kafkajs").exists():
        pytest.fail("kafkajs needs node and tests/js/node_modules: cd tests/js && npm ci")
    r = subprocess.run(
        [node, str(JS / "kafkajs_offsets.js"), cluster.kafka_bootstrap(), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_kafkajs_reset_offsets_to_earliest_is_stored_and_read_from_the_start(cluster):
    topic = "kjs-reset"
    fill(cluster, topic, 5)
    fetched, read = kafkajs(cluster, topic, "kjs-reset-group", "reset")
    assert fetched == {"fetched": -2}  # kafkajs's EARLIEST, stored as Kafka stores it (was left at 3)
    assert read == {"read": [f"old-{i}" for i in range(5)]}


def test_kafkajs_group_committed_past_the_end_recovers_and_consumes_new_records(cluster):
    topic = "kjs-past"
    fill(cluster, topic, 5)
    [out] = kafkajs(cluster, topic, "kjs-past-group", "past")
    assert out["read"] and all(v.startswith("new-") for v in out["read"]), out
