"""Issue 27 §2: DeleteRecords (21) and kl-delete-records, OffsetForLeaderEpoch (23) for clients (KIP-320),
DescribeProducers (61), DescribeLogDirs (35), DescribeQuorum (55) and ListConfigResources (74), on one 3-broker
cluster.

DeleteRecords is sent by a real client (confluent-kafka's AdminClient), by kafka-delete-records.sh's
counterpart and raw on both listeners; the log start offset it moves is kept by every replica (followers learn
it from the leader's fetch answers), across a failover and a SIGKILL restart, and the Spark source's segment
reader sees it; a Kafka consumer (librdkafka) resets to it, and after the failover checks its position with
OffsetForLeaderEpoch (KIP-320) and goes on. Bad requests get Kafka's codes: OFFSET_OUT_OF_RANGE above the high
watermark or below -1, UNKNOWN_TOPIC_OR_PARTITION for a partition that cannot exist, NOT_LEADER_OR_FOLLOWER from a
follower.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient
from kio.index import load_response_schema
from kio.serial import entity_reader

from client.cli.delete_records import main as delete_records_main
from client.sync import Producer
from client.topic_partition import TopicPartition
from net.connection import BrokerConnection
from net.errors import ErrorCode
from net.protocol import ApiKey, ElectionType
from net.schema.delete_records import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from net.schema.describe_log_dirs import DescribableLogDirTopic, DescribeLogDirsRequest
from net.schema.describe_producers import DescribeProducersRequest, TopicRequest
from net.schema.describe_quorum import DescribeQuorumRequest, PartitionData, TopicData
from net.schema.fetch import FetchPartition, FetchRequest, FetchTopic
from net.schema.list_config_resources import ListConfigResourcesRequest
from net.schema.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from pipeline.segments import find_replicas, summarize
from tests.integration.cluster_harness import ClusterHarness, wait_until
from tests.integration.test_kafka_protocol_errors import frame, read_frame

ROOT = Path(__file__).resolve().parents[2]
TOPIC, OTHER = "dr", "dr-other"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    h = ClusterHarness(tmp_path_factory.mktemp("delete-records"), 3)
    try:
        h.start()
        h.create_topic(TOPIC, 2, 3)
        h.create_topic(OTHER, 1, 3)
        with Producer(h.bootstrap(), acks="all", enable_idempotence=True) as p:
            for i in range(10):
                p.send(TOPIC, f"v{i}".encode(), partition=0)
            for i in range(3):
                p.send(TOPIC, f"w{i}".encode(), partition=1)
            for i in range(6):
                p.send(OTHER, f"o{i}".encode(), partition=0)
            p.flush()
        yield h
    finally:
        h.cleanup()


def leader_of(h: ClusterHarness, topic: str, partition: int) -> int:
    return next(p.leader for p in h.describe(topic) if p.partition == partition)


def earliest(h: ClusterHarness, topic: str, partition: int) -> int:
    with h.admin() as a:
        return a.list_offsets([(topic, partition)], -2)[(topic, partition)]


def kafka_call(h: ClusterHarness, broker: int, api: int, version: int, body: dict, corr: int = 7):
    """One raw Kafka-protocol request (kio-encoded) to one broker's Kafka listener, its decoded answer."""
    with socket.create_connection(("127.0.0.1", h[broker].kafka_port), timeout=15) as s:
        s.sendall(frame(api, version, corr, body))
        flexible = load_response_schema(api, version).__flexible__
        answer, _ = entity_reader(load_response_schema(api, version))(read_frame(s), 5 if flexible else 4)
        return answer


def native_call(h: ClusterHarness, broker: int, request):
    async def run():
        conn = BrokerConnection("127.0.0.1", h[broker].port, client_id="dr-test")
        await conn.connect()
        try:
            return await conn.call(request)
        finally:
            conn.close()

    return asyncio.run(run())


def log_starts_on_disk(h: ClusterHarness, topic: str, partition: int) -> dict[int, int]:
    """Each broker's log start of the partition as the Spark source's segment reader sees its data dir."""
    out = {}
    for i, b in h.brokers.items():
        (replica,) = find_replicas([b.data_dir])[(topic, partition)]
        out[i] = summarize(replica).log_start
    return out


def test_a_kafka_client_deletes_records_on_every_replica_kept_across_failover_and_restart(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    futures = admin.delete_records([CKTopicPartition(TOPIC, 0, 4), CKTopicPartition(TOPIC, 1, -1)])
    lows = {tp.partition: f.result(30).low_watermark for tp, f in futures.items()}
    assert lows == {0: 4, 1: 3}  # -1: up to the high watermark
    assert earliest(cluster, TOPIC, 0) == 4
    # every replica's data dir says so (checkpointed), as the Spark source reads it
    wait_until(lambda: set(log_starts_on_disk(cluster, TOPIC, 0).values()) == {4}, 20, "log start 4 on every disk")
    # a consumer asking below it is told where the log starts now, and a Kafka consumer resets to it
    assert native_fetch_below_start(cluster) == (ErrorCode.OFFSET_OUT_OF_RANGE, 4)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap(),
            "group.id": "dr-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    try:
        consumer.assign([CKTopicPartition(TOPIC, 0, 0)])
        assert consume(consumer, 6) == list(range(4, 10))
        # failover: the new leader starts at 4 too
        old = leader_of(cluster, TOPIC, 0)
        cluster.kill(old)
        new = wait_until(lambda: (lead := leader_of(cluster, TOPIC, 0)) not in (old, -1) and lead, 40, "a new leader")
        assert earliest(cluster, TOPIC, 0) == 4, f"new leader {new}"
        # KIP-320: the consumer checks its position against the new leader's log (OffsetForLeaderEpoch) and goes on
        with Producer(cluster.bootstrap(), acks="all") as p:
            p.send(TOPIC, b"after", partition=0)
            p.flush()
        assert consume(consumer, 1) == [10]
        asked = re.search(
            r'kafkalite_request_seconds_count\{api="OFFSET_FOR_LEADER_EPOCH"[^}]*\} (\S+)', cluster[new].metrics()
        )
        assert asked is not None and float(asked.group(1)) >= 1
    finally:
        consumer.close()
    # restart after SIGKILL, and lead again: its log still starts at 4
    cluster.restart(old)
    cluster.wait_isr_contains(TOPIC, old)
    assert next(p.replicas[0] for p in cluster.describe(TOPIC) if p.partition == 0) == old  # the preferred one
    with cluster.admin() as a:
        a.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)])
    wait_until(lambda: leader_of(cluster, TOPIC, 0) == old, 30, "the restarted broker leads again")
    assert earliest(cluster, TOPIC, 0) == 4
    cluster.wait_full_isr(TOPIC, 2)


def consume(consumer: Consumer, n: int, timeout: float = 30) -> list[int]:
    """The offsets of the next `n` records the consumer gets."""
    offsets: list[int] = []
    deadline = time.monotonic() + timeout
    while len(offsets) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            offsets.append(m.offset())
    return offsets


def native_fetch_below_start(h: ClusterHarness) -> tuple[int, int]:
    """A consumer's fetch at offset 2 of partition 0 on its leader: (error code, the log start it is told)."""

    async def run() -> tuple[int, int]:
        conn = BrokerConnection("127.0.0.1", h[leader_of(h, TOPIC, 0)].port, client_id="dr-test")
        await conn.connect()
        try:
            part = FetchPartition(partition=0, fetch_offset=2, partition_max_bytes=1 << 20)
            fetch = FetchRequest(max_wait=datetime.timedelta(0), topics=(FetchTopic(topic=TOPIC, partitions=(part,)),))
            answer = await conn.call(fetch)
        finally:
            conn.close()
        [row] = answer.responses[0].partitions
        return row.error_code, row.log_start_offset

    return asyncio.run(run())


def test_bad_offsets_and_partitions_get_kafkas_codes_on_the_kafka_listener(cluster):
    leader = leader_of(cluster, OTHER, 0)
    follower = next(i for i in cluster.brokers if i != leader)
    body = {
        "timeout": 10000,
        "topics": [
            {"name": OTHER, "partitions": [{"partition_index": 0, "offset": 99}, {"partition_index": -1, "offset": 1}]},
            {"name": "no-such-topic", "partitions": [{"partition_index": 0, "offset": 1}]},
        ],
    }
    for version in (0, 2):
        answer = kafka_call(cluster, leader, 21, version, body)
        rows = {
            (t.name, p.partition_index): (int(p.error_code), p.low_watermark)
            for t in answer.topics
            for p in t.partitions
        }
        assert rows == {
            (OTHER, 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),  # above the high watermark (6)
            (OTHER, -1): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("no-such-topic", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        }, version
    below = {"timeout": 1000, "topics": [{"name": OTHER, "partitions": [{"partition_index": 0, "offset": -2}]}]}
    (part,) = kafka_call(cluster, leader, 21, 2, below).topics[0].partitions
    assert int(part.error_code) == ErrorCode.OFFSET_OUT_OF_RANGE
    good = {"timeout": 10000, "topics": [{"name": OTHER, "partitions": [{"partition_index": 0, "offset": 2}]}]}
    (part,) = kafka_call(cluster, follower, 21, 1, good).topics[0].partitions
    assert int(part.error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER  # only the leader deletes
    assert earliest(cluster, OTHER, 0) == 0  # nothing was deleted by any of these


def test_native_listener_delete_records_and_offset_for_leader_epoch(cluster):
    leader = leader_of(cluster, OTHER, 0)
    request = DeleteRecordsRequest(
        topics=(DeleteRecordsTopic(name=OTHER, partitions=(DeleteRecordsPartition(partition_index=0, offset=1),)),),
        timeout=datetime.timedelta(seconds=20),
    )
    answer = native_call(cluster, leader, request)
    (part,) = answer.topics[0].partitions
    assert (part.error_code, part.low_watermark) == (0, 1)
    epoch = next(p.leader_epoch for p in cluster.describe(OTHER) if p.partition == 0)
    ofle = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=(
            OffsetForLeaderTopic(
                topic=OTHER,
                partitions=(OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch, leader_epoch=epoch),),
            ),
        ),
    )
    (row,) = native_call(cluster, leader, ofle).topics[0].partitions
    assert (row.error_code, row.leader_epoch, row.end_offset) == (0, epoch, 6)  # the current epoch ends at the LEO


def test_offset_for_leader_epoch_answers_per_kafka_for_consumers(cluster):
    """KIP-320 as a consumer asks it (replica_id -1, the Kafka listener's v4): the end offset of an epoch, its
    fencing by current_leader_epoch, and NOT_LEADER_OR_FOLLOWER from a follower."""
    leader = leader_of(cluster, TOPIC, 0)
    epoch = next(p.leader_epoch for p in cluster.describe(TOPIC) if p.partition == 0)
    assert epoch >= 1  # the failover of the first test gave the partition newer epochs

    def ask(broker: int, current: int, wanted: int):
        body = {
            "replica_id": -1,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [{"partition": 0, "current_leader_epoch": current, "leader_epoch": wanted}],
                }
            ],
        }
        (p,) = kafka_call(cluster, broker, 23, 4, body).topics[0].partitions
        return int(p.error_code), p.leader_epoch, p.end_offset

    hw = cluster.high_watermarks(TOPIC, 1)[0]
    assert ask(leader, epoch, epoch) == (0, epoch, hw)
    code, found_epoch, end = ask(leader, epoch, 0)  # the records of epoch 0 end where a later epoch began
    assert code == 0 and found_epoch == 0 and end == 10
    assert ask(leader, epoch - 1, epoch)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert ask(leader, epoch + 1, epoch)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert ask(leader, epoch, -1)[1:] == (-1, -1)
    follower = next(i for i in cluster.brokers if i != leader)
    assert ask(follower, epoch, epoch)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_describe_producers_lists_the_idempotent_producer_on_the_leader(cluster):
    leader = leader_of(cluster, OTHER, 0)
    body = {"topics": [{"name": OTHER, "partition_indexes": [0, 5]}]}
    answer = kafka_call(cluster, leader, 61, 0, body)
    rows = {p.partition_index: p for p in answer.topics[0].partitions}
    assert int(rows[5].error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (producer,) = rows[0].active_producers
    assert producer.producer_id >= 0 and producer.last_sequence == 5 and producer.last_timestamp > 0
    follower = next(i for i in cluster.brokers if i != leader)
    request = DescribeProducersRequest(topics=(TopicRequest(name=OTHER, partition_indexes=(0,)),))
    (row,) = native_call(cluster, follower, request).topics[0].partitions
    assert row.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_describe_log_dirs_with_kafka_python(cluster):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cluster[1].kafka_port}", client_id="dr-test")
    try:
        answer = admin.describe_log_dirs()
    finally:
        admin.close()
    assert sorted(b["broker"] for b in answer) == [1, 2, 3]  # every broker answers for its own dirs
    for b in answer:
        (result,) = b["log_dirs"]
        assert result["error_code"] == 0 and result["log_dir"] == str(cluster[b["broker"]].data_dir)
        assert 0 < result["usable_bytes"] <= result["total_bytes"]
        sizes = {
            (t["name"], p["partition_index"]): p["partition_size"] for t in result["topics"] for p in t["partitions"]
        }
        assert sizes[(OTHER, 0)] > 0 and set(sizes) >= {(TOPIC, 0), (TOPIC, 1), (OTHER, 0)}


def test_describe_log_dirs_on_the_native_listener_for_the_topics_asked(cluster):
    request = DescribeLogDirsRequest(topics=(DescribableLogDirTopic(topic=OTHER, partitions=(0, 9)),))
    answer = native_call(cluster, 2, request)
    (result,) = answer.results
    assert result.error_code == 0 and result.log_dir == str(cluster[2].data_dir)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [(OTHER, [0])]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "client.cli.delete_records", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_kl_delete_records_takes_kafkas_json_and_prints_kafkas_lines(cluster, tmp_path):
    spec = tmp_path / "offsets.json"
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": OTHER, "partition": 0, "offset": 3},
                    {"topic": OTHER, "partition": 0 + 7, "offset": 1},
                ],
                "version": 1,
            }
        )
    )
    r = run_cli("--bootstrap-server", cluster.bootstrap(), "--offset-json-file", str(spec))
    lines = r.stdout.splitlines()
    assert lines[:3] == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {OTHER}-0\tlow_watermark: 3",
    ], r.stdout + r.stderr
    assert lines[3].startswith(f"partition: {OTHER}-7\terror: UNKNOWN_TOPIC_OR_PARTITION")
    assert r.returncode == 1  # a partition failed
    assert earliest(cluster, OTHER, 0) == 3
    for content, message in [
        ("{not json", "not JSON"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 2}', "Not supported version"),
        ('{"version": 1}', "Missing partitions field"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}]}',
         "duplicate topic partitions: t-0"),
    ]:  # fmt: skip
        spec.write_text(content)  # refused before any connection: in-process, as the subprocess above runs it
        bad = CliRunner().invoke(
            delete_records_main, ["--bootstrap-server", cluster.bootstrap(), "--offset-json-file", str(spec)]
        )
        assert bad.exit_code == 1 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert bad.exception is None or isinstance(bad.exception, SystemExit)


def quorum_of(answer) -> tuple:
    (topic,) = answer.topics
    (p,) = topic.partitions
    return topic.topic_name, p


def test_describe_quorum_answers_as_kraft_from_every_broker(cluster):
    """The quorum leader answers; the others forward to it (a client may ask any broker, as with KRaft)."""
    body = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    controller = cluster.controller_id()
    seen = []
    for broker in cluster.brokers:
        for version in (0, 2):
            name, p = quorum_of(kafka_call(cluster, broker, 55, version, body))
            assert (name, p.partition_index, int(p.error_code)) == ("__cluster_metadata", 0, 0)
            assert p.leader_id == controller and p.leader_epoch >= 1 and p.high_watermark > 0
            voters = {v.replica_id: v for v in p.current_voters}
            assert set(voters) == {1, 2, 3} and p.observers == ()
            # the leader's own log is at least the committed end; a voter's known end is never past it
            assert voters[controller].log_end_offset >= p.high_watermark
            assert all(0 <= v.log_end_offset <= voters[controller].log_end_offset for v in voters.values())
            seen.append((p.leader_id, p.leader_epoch))
            if version == 2:
                now = time.time() * 1000
                assert all(now - 60_000 < v.last_fetch_timestamp <= now + 1000 for v in voters.values())
    assert len(set(seen)) == 1  # one leader and epoch, whoever was asked
    other = {"topics": [{"topic_name": TOPIC, "partitions": [{"partition_index": 0}]}]}
    _, p = quorum_of(kafka_call(cluster, controller, 55, 2, other))
    assert int(p.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # the native listener, on a broker that is not the leader: forwarded too
    follower = next(i for i in cluster.brokers if i != controller)
    request = DescribeQuorumRequest(topics=(TopicData(topic_name="__cluster_metadata", partitions=(PartitionData(),)),))
    _, p = quorum_of(native_call(cluster, follower, request))
    assert p.error_code == 0 and p.leader_id == controller and len(p.current_voters) == 3


def test_list_config_resources_lists_topics_and_brokers(cluster):
    def listed(answer) -> set:
        return {(r.resource_type, r.resource_name) for r in answer.config_resources}

    everything = kafka_call(cluster, 1, 74, 1, {"resource_types": []})
    assert int(everything.error_code) == 0
    assert listed(everything) >= {(4, "1"), (4, "2"), (4, "3"), (2, TOPIC), (2, OTHER)}
    topics = kafka_call(cluster, 2, 74, 1, {"resource_types": [2]})
    assert {t for t, _ in listed(topics)} == {2} and (2, TOPIC) in listed(topics)
    assert int(kafka_call(cluster, 1, 74, 1, {"resource_types": [8]}).error_code) == ErrorCode.UNSUPPORTED_VERSION
    answer = native_call(cluster, 3, ListConfigResourcesRequest(resource_types=(4,)))
    assert listed(answer) == {(4, "1"), (4, "2"), (4, "3")}


# --- DescribeTopicPartitions (75, KIP-966) ----------------------------------------------------------------------

TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # READ..ALTER_CONFIGS: all of them, no ACLs


def _page(admin, topics: list[str], limit: int, cursor: dict | None = None) -> tuple[list, dict | None]:
    answer = admin.describe_topic_partitions(topics, response_partition_limit=limit, cursor=cursor)
    rows = [(t["name"], p["partition_index"]) for t in answer["topics"] for p in t["partitions"]]
    return rows, answer["next_cursor"]


def test_describe_topic_partitions_pages_through_topics_with_kafka_python(cluster):
    """kafka-python's describe_topic_partitions (the api Kafka's AdminClient 3.7+ describes topics with): the pages
    hold at most the limit, in topic then partition order, and the cursors walk every partition exactly once."""
    from kafka.admin import KafkaAdminClient

    cluster.create_topic("dtp-a", 3, 2)
    cluster.create_topic("dtp-b", 2, 3)
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cluster[2].kafka_port}", client_id="dtp-test")
    try:
        first = admin.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-a"], response_partition_limit=2000)
        assert first["next_cursor"] is None and [t["name"] for t in first["topics"]] == ["dtp-a", "dtp-b"]
        with cluster.admin() as ours:
            described = {t.name: t for t in ours.describe_topics(["dtp-a", "dtp-b"])}
        for t in first["topics"]:
            mine = described[t["name"]]
            assert t["error_code"] == 0 and not t["is_internal"]
            assert str(t["topic_id"]).replace("-", "") == mine.topic_id.replace("-", "")
            assert t["topic_authorized_operations"] == TOPIC_OPERATIONS
            got = [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"]) for p in t["partitions"]]
            assert got == [(p.partition, p.leader, p.replicas, p.isr) for p in mine.partitions], t
        # pages of 2: a0 a1 | a2 b0 | b1
        rows, cursor = _page(admin, ["dtp-a", "dtp-b"], 2)
        assert rows == [("dtp-a", 0), ("dtp-a", 1)] and cursor == {"topic_name": "dtp-a", "partition_index": 2}
        rows, cursor = _page(admin, ["dtp-a", "dtp-b"], 2, cursor)
        assert rows == [("dtp-a", 2), ("dtp-b", 0)] and cursor == {"topic_name": "dtp-b", "partition_index": 1}
        rows, cursor = _page(admin, ["dtp-a", "dtp-b"], 2, cursor)
        assert rows == [("dtp-b", 1)] and cursor is None
        # a page full at the end of a topic: the cursor names the next topic's start
        rows, cursor = _page(admin, ["dtp-a", "dtp-b"], 3)
        assert rows == [("dtp-a", 0), ("dtp-a", 1), ("dtp-a", 2)]
        assert cursor == {"topic_name": "dtp-b", "partition_index": 0}
        # every topic (none named): this cluster's, in name order, from the cursor on
        everything = admin.describe_topic_partitions([], cursor={"topic_name": "dtp-a", "partition_index": 1})
        names = [t["name"] for t in everything["topics"]]
        with cluster.admin() as ours:
            every = ours.list_topics(include_internal=True)
        assert names == sorted(n for n in every if n >= "dtp-a") and names[:2] == ["dtp-a", "dtp-b"]
        assert [p["partition_index"] for p in everything["topics"][0]["partitions"]] == [1, 2]
        # a topic that does not exist, a name no topic could have
        missing = admin.describe_topic_partitions(["no-such-topic", "bad/name"])
        codes = {t["name"]: (t["error_code"], t["partitions"]) for t in missing["topics"]}
        assert codes == {"no-such-topic": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
                         "bad/name": (ErrorCode.INVALID_TOPIC_EXCEPTION, [])}  # fmt: skip
    finally:
        admin.close()


def test_describe_topic_partitions_refuses_a_cursor_outside_the_request(cluster):
    """The cursor must name a topic asked and a partition >= 0 (Kafka's INVALID_REQUEST, on every topic row); a limit
    of 0 or below is one partition, as Kafka's max(min(limit, config), 1)."""
    cluster.create_topic("dtp-c", 2, 1)
    body = {"topics": [{"name": "dtp-c"}], "response_partition_limit": 10}
    for cursor in ({"topic_name": "dr", "partition_index": 0}, {"topic_name": "dtp-c", "partition_index": -1}):
        answer = kafka_call(cluster, 1, 75, 0, dict(body, cursor=cursor))
        assert [(t.name, int(t.error_code), t.partitions) for t in answer.topics] == [
            ("dtp-c", ErrorCode.INVALID_REQUEST, ())
        ]
    for limit in (0, -5):
        answer = kafka_call(cluster, 1, 75, 0, dict(body, response_partition_limit=limit))
        assert [len(t.partitions) for t in answer.topics] == [1]
        assert (answer.next_cursor.topic_name, answer.next_cursor.partition_index) == ("dtp-c", 1)


def test_describe_topic_partitions_on_the_native_listener_typed_and_in_its_old_form(cluster):
    """Native v1 carries the typed message; native v0 (a Metadata request under key 75 before) still answers in
    Metadata's map for one more release."""
    from net.schema.describe_topic_partitions import DescribeTopicPartitionsRequest
    from net.schema.describe_topic_partitions import TopicRequest as DescribeTopic

    answer = native_call(cluster, 3, DescribeTopicPartitionsRequest(topics=(DescribeTopic(name=OTHER),)))
    (topic,) = answer.topics
    assert topic.error_code == 0 and [p.partition_index for p in topic.partitions] == [0]
    assert sorted(topic.partitions[0].replica_nodes) == [1, 2, 3]

    async def old_form():
        conn = BrokerConnection("127.0.0.1", cluster[3].port, client_id="dtp-test")
        await conn.connect()
        try:
            return await conn.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, {"topics": [OTHER]}, version=0)
        finally:
            conn.close()

    old = asyncio.run(old_form())
    assert [t["name"] for t in old["topics"]] == [OTHER] and len(old["brokers"]) == 3
    assert old["topics"][0]["partitions"][0][1] == 0  # [error, partition, leader, epoch, replicas, isr, offline]
