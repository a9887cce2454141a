"""Issue 27 §1: requests on one connection take effect in order, on both client listeners.

Each pair goes out pipelined in ONE socket write, the second request asking for what the first changed:
OffsetCommit → OffsetFetch, Produce (acks=all, RF=3) → ListOffsets (latest), CreateTopics → Metadata,
CreateAcls → DescribeAcls. Kafka handles a connection's requests one at a time, so the second answer always
shows the first request's effect; every round must. One 3-broker cluster (the ACL authorizer on, the anonymous
user a super user) serves every test; each pair is sent to the broker that applies the change (the group's
coordinator, the partition's leader, the controller: whether other brokers see a new topic or ACL at once is
another question, issue 27 §1's last bullet)."""

from __future__ import annotations

import datetime
import itertools
import socket
import struct
import time
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from broker.network.kafka.entities import plain
from client.sync import Admin
from net import batch as batch_fmt
from net.messages import decode as decode_message
from net.messages import encode as encode_message
from net.protocol import TYPED_SINCE, ApiKey, encode_request, parse_response
from net.schema.create_acls import AclCreation, CreateAclsRequest
from net.schema.create_topics import CreatableTopic, CreateTopicsRequest
from net.schema.describe_acls import DescribeAclsRequest
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from net.schema.messages import MESSAGES
from net.schema.offset_commit import OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic
from net.schema.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from net.schema.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from tests.integration.cluster_harness import ClusterHarness
from tests.integration.test_kafka_protocol_errors import frame as kafka_frame

ROUNDS = 30
TOPIC, GROUP = "ordered", "ordered-group"
LISTENERS = ["native", "kafka"]
ALLOW, LITERAL, TOPIC_RESOURCE, READ, ANY = 3, 3, 2, 3, 1  # Kafka's ACL codes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    h = ClusterHarness(tmp_path_factory.mktemp("order"), 3, overrides=["authorizer=acl", "super.users=User:ANONYMOUS"])
    try:
        h.start()
        h.create_topic(TOPIC, 1, 3)
        h.wait_full_isr(TOPIC, 1)
        yield h
    finally:
        h.cleanup()


class Wire:
    """A raw connection to one listener of one broker: `pipeline` writes every request in one sendall and
    returns the answers in request order."""

    def __init__(self, h: ClusterHarness, broker_id: int, listener: str) -> None:
        b = h[broker_id]
        self.kafka = listener == "kafka"
        self.s = socket.create_connection(("127.0.0.1", b.kafka_port if self.kafka else b.port), timeout=20)
        self.corr = itertools.count(1)

    def pipeline(self, *requests: tuple[int, int, Any]) -> list[Any]:
        """Requests as (api key, version, body): kio field names on the Kafka listener, the native body (a
        typed message for a typed api, or its v0 map) on the native one."""
        frames, sent = [], []
        for api, version, body in requests:
            corr = next(self.corr)
            if self.kafka:
                frames.append(kafka_frame(api, version, corr, body))
            elif api in TYPED_SINCE and not isinstance(body, dict):  # a map: the api's native v0
                frames.append(encode_request(api, TYPED_SINCE[api], corr, "order", encode_message(body)))
            else:
                frames.append(encode_request(api, version, corr, "order", body))
            sent.append((corr, api, version))
        self.s.sendall(b"".join(frames))
        answers: dict[int, Any] = {}
        for _ in sent:
            head = self.s.recv(4, socket.MSG_WAITALL)
            assert len(head) == 4, "connection closed"
            raw = self.s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
            if self.kafka:
                corr = struct.unpack_from(">i", raw)[0]
                api, version = next((a, v) for c, a, v in sent if c == corr)
                flexible = load_request_schema(api, version).__flexible__
                answers[corr] = plain(entity_reader(load_response_schema(api, version))(raw, 5 if flexible else 4)[0])
            else:
                corr, body = parse_response(raw)
                api = next(a for c, a, _ in sent if c == corr)
                typed = api in TYPED_SINCE and not isinstance(body, dict)
                answers[corr] = decode_message(MESSAGES[api][1], body) if typed else body
        return [answers[c] for c, _, _ in sent]

    def close(self) -> None:
        self.s.close()


def rounds(h: ClusterHarness, broker_id: int, listener: str, pair, check) -> None:
    """ROUNDS pipelined pairs on one connection; every round's second answer must show the first's effect."""
    wire = Wire(h, broker_id, listener)
    try:
        for i in range(ROUNDS):
            first, second = wire.pipeline(*pair(i))
            check(i, first, second)
    finally:
        wire.close()


def leader_of(h: ClusterHarness, topic: str) -> int:
    return h.describe(topic)[0].leader


@pytest.mark.parametrize("listener", LISTENERS)
def test_offset_commit_then_fetch(cluster, listener):
    with Admin(cluster.bootstrap()) as admin:
        admin.alter_group_offsets(f"{GROUP}-{listener}", {(TOPIC, 0): 0})  # the group's coordinator is ready
        coordinator = admin.describe_group(f"{GROUP}-{listener}").coordinator[0]
    group = f"{GROUP}-{listener}"

    def pair(i: int) -> tuple:
        offset = 1000 + i
        if listener == "kafka":
            part = {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1}
            commit = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                      "topics": [{"name": TOPIC, "partitions": [part]}]}  # fmt: skip
            fetch = {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
            return (ApiKey.OFFSET_COMMIT, 7, commit), (ApiKey.OFFSET_FETCH, 7, fetch)
        part = OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
        commit = OffsetCommitRequest(group_id=group, topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(part,)),))
        fetch = OffsetFetchRequest(
            group_id=group, topics=(OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0,)),)
        )
        return (ApiKey.OFFSET_COMMIT, 1, commit), (ApiKey.OFFSET_FETCH, 1, fetch)

    def check(i: int, committed: Any, fetched: Any) -> None:
        if listener == "kafka":
            assert committed["topics"][0]["partitions"][0]["error_code"] == 0, committed
            row = fetched["topics"][0]["partitions"][0]
            got = (row["error_code"], row["committed_offset"])
        else:
            assert committed.topics[0].partitions[0].error_code == 0, committed
            p = fetched.topics[0].partitions[0]
            got = (p.error_code, p.committed_offset)
        assert got == (0, 1000 + i), f"round {i}: the fetch answered {got}, not the offset committed just before"

    rounds(cluster, coordinator, listener, pair, check)


@pytest.mark.parametrize("listener", LISTENERS)
def test_produce_then_list_offsets(cluster, listener):
    leader = leader_of(cluster, TOPIC)

    def pair(i: int) -> tuple:
        now = int(time.time() * 1000)
        records = batch_fmt.build([(0, 0, None, f"{listener}-{i}".encode(), None)], now, now)
        if listener == "kafka":
            data = [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]
            produce = {"acks": -1, "timeout": 10000, "topic_data": data}
            latest = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
            listed = {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [latest]}]}
            return (ApiKey.PRODUCE, 7, produce), (ApiKey.LIST_OFFSETS, 5, listed)
        produce = ProduceRequest(
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                TopicProduceData(name=TOPIC, partition_data=(PartitionProduceData(index=0, records=records),)),
            ),
        )
        latest_native = ListOffsetsPartition(partition_index=0, timestamp=-1)
        request = ListOffsetsRequest(replica_id=-1, topics=(ListOffsetsTopic(name=TOPIC, partitions=(latest_native,)),))
        return (ApiKey.PRODUCE, 1, produce), (ApiKey.LIST_OFFSETS, 1, request)

    def check(i: int, produced: Any, listed: Any) -> None:
        if listener == "kafka":
            row = produced["responses"][0]["partition_responses"][0]
            assert row["error_code"] == 0, produced
            base = row["base_offset"]
            part = listed["topics"][0]["partitions"][0]
            got = (part["error_code"], part["offset"])
        else:
            [[row]] = [t.partition_responses for t in produced.responses]
            assert row.error_code == 0, produced
            base = row.base_offset
            part = listed.topics[0].partitions[0]
            got = (part.error_code, part.offset)
        assert got == (0, base + 1), f"round {i}: latest offset {got} right after a produce acknowledged at {base}"

    rounds(cluster, leader, listener, pair, check)


@pytest.mark.parametrize("listener", LISTENERS)
def test_create_topics_then_metadata(cluster, listener):
    controller = cluster.controller_id()

    def pair(i: int) -> tuple:
        name = f"made-{listener}-{i}"
        if listener == "kafka":
            create = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout": 10000}
            return (ApiKey.CREATE_TOPICS, 5, create), (ApiKey.METADATA, 9, {"topics": [{"name": name}]})
        topic = CreatableTopic(name=name, num_partitions=1, replication_factor=1)
        return (ApiKey.CREATE_TOPICS, 1, CreateTopicsRequest(topics=(topic,))), (ApiKey.METADATA, 0, {"topics": [name]})

    def check(i: int, created: Any, described: Any) -> None:
        if listener == "kafka":
            assert created["topics"][0]["error_code"] == 0, created
        else:
            assert created.topics[0].error_code == 0, created
        topic = described["topics"][0]
        got = (topic["error_code"], len(topic["partitions"]))
        assert got == (0, 1), f"round {i}: Metadata right after CreateTopics answered {got}"

    rounds(cluster, controller, listener, pair, check)


@pytest.mark.parametrize("listener", LISTENERS)
def test_create_acls_then_describe_acls(cluster, listener):
    controller = cluster.controller_id()

    def pair(i: int) -> tuple:
        name = f"acl-{listener}-{i}"
        if listener == "kafka":
            creation = {"resource_type": TOPIC_RESOURCE, "resource_name": name, "resource_pattern_type": LITERAL,
                        "principal": "User:reader", "host": "*", "operation": READ,
                        "permission_type": ALLOW}  # fmt: skip
            described = {"resource_type_filter": TOPIC_RESOURCE, "resource_name_filter": name,
                         "pattern_type_filter": LITERAL, "operation": ANY, "permission_type": ANY}  # fmt: skip
            return (ApiKey.CREATE_ACLS, 2, {"creations": [creation]}), (ApiKey.DESCRIBE_ACLS, 2, described)
        creation = AclCreation(resource_type=TOPIC_RESOURCE, resource_name=name, resource_pattern_type=LITERAL,
                               principal="User:reader", host="*", operation=READ, permission_type=ALLOW)  # fmt: skip
        described = DescribeAclsRequest(resource_type_filter=TOPIC_RESOURCE, resource_name_filter=name,
                                        pattern_type_filter=LITERAL, operation=ANY, permission_type=ANY)  # fmt: skip
        return (ApiKey.CREATE_ACLS, 1, CreateAclsRequest(creations=(creation,))), (ApiKey.DESCRIBE_ACLS, 1, described)

    def check(i: int, created: Any, described: Any) -> None:
        if listener == "kafka":
            assert described["error_code"] == 0, described
            assert created["results"][0]["error_code"] == 0, created
            found = [r["resource_name"] for r in described["resources"]]
        else:
            assert described.error_code == 0, described
            assert created.results[0].error_code == 0, created
            found = [r.resource_name for r in described.resources]
        assert found == [f"acl-{listener}-{i}"], f"round {i}: DescribeAcls right after CreateAcls found {found}"

    rounds(cluster, controller, listener, pair, check)


def test_a_fetch_long_poll_holds_no_later_request(cluster):
    """The overlap the order allows (broker/network/request_order.py): a fetch waiting at the log end for its
    max_wait_ms does not hold the metadata request pipelined behind it (the native listener answers by
    correlation id, so the metadata answer comes first)."""
    leader = leader_of(cluster, TOPIC)
    with Admin(cluster.bootstrap()) as admin:
        end = admin.list_offsets([(TOPIC, 0)], -1)[(TOPIC, 0)]
    wait_ms = 5000
    wire = Wire(cluster, leader, "native")
    try:
        fetch = {"max_wait_ms": wait_ms, "min_bytes": 1, "topics": [[TOPIC, [[0, end, 1 << 20]]]]}
        wire.s.sendall(
            encode_request(ApiKey.FETCH, 0, 1, "order", fetch)
            + encode_request(ApiKey.METADATA, 0, 2, "order", {"topics": [TOPIC]})
        )
        t0 = time.monotonic()
        head = wire.s.recv(4, socket.MSG_WAITALL)
        corr, _ = parse_response(wire.s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL))
        first = time.monotonic() - t0
        assert corr == 2 and first < wait_ms / 1000 / 2, f"answer {corr} came first, after {first:.1f}s"
    finally:
        wire.close()
