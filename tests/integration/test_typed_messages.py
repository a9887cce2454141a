"""Typed messages (net/schema/, issue 26): ListOffsets, the first api whose handler takes and answers typed classes,
and the classic group apis, the security apis, Produce and Fetch typed since.

One handler serves three doors and they must agree: the native typed version (v1, a msgpack array checked field by
field), the native map version 0 that clients of the last release still send, and Kafka's binary protocol at
every served version. A value out of its Kafka type is refused with the field's path on both native versions,
before the handler sees it, and the connection goes on; a whole-request error on the Kafka listener is answered
in the client's version with the request's topics and partitions mirrored, as Kafka's getErrorResponse does.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import socket
import time
import uuid
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from client.sync import Producer
from net import batch as batch_fmt
from net.connection import BrokerConnection
from net.errors import ErrorCode
from net.messages import decode, encode
from net.protocol import ApiKey
from net.schema.alter_client_quotas import AlterClientQuotasRequest
from net.schema.alter_client_quotas import EntityData as QuotaEntity
from net.schema.alter_client_quotas import EntryData as QuotaEntry
from net.schema.alter_client_quotas import OpData as QuotaOp
from net.schema.alter_configs import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
from net.schema.create_partitions import CreatePartitionsRequest, CreatePartitionsTopic
from net.schema.create_topics import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from net.schema.delete_groups import DeleteGroupsRequest
from net.schema.delete_topics import DeleteTopicsRequest, DeleteTopicState
from net.schema.describe_acls import DescribeAclsRequest
from net.schema.describe_client_quotas import ComponentData as QuotaComponent
from net.schema.describe_client_quotas import DescribeClientQuotasRequest
from net.schema.describe_cluster import DescribeClusterRequest
from net.schema.describe_configs import DescribeConfigsRequest, DescribeConfigsResource
from net.schema.describe_topic_partitions import DescribeTopicPartitionsRequest
from net.schema.describe_topic_partitions import TopicRequest as DescribeTopicRequest
from net.schema.describe_user_scram_credentials import DescribeUserScramCredentialsRequest, UserName
from net.schema.fetch import FetchPartition, FetchRequest, FetchTopic
from net.schema.find_coordinator import FindCoordinatorRequest
from net.schema.heartbeat import HeartbeatRequest
from net.schema.incremental_alter_configs import AlterableConfig as IncrementalAlterableConfig
from net.schema.incremental_alter_configs import AlterConfigsResource as IncrementalAlterConfigsResource
from net.schema.incremental_alter_configs import IncrementalAlterConfigsRequest
from net.schema.list_groups import ListGroupsRequest
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from net.schema.metadata import MetadataRequest, MetadataRequestTopic
from net.schema.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from net.schema.offset_fetch import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from net.schema.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from tests.integration.cluster_harness import ClusterHarness
from tests.integration.test_kafka_protocol_errors import frame, read_frame

TOPIC = "typed"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    h = ClusterHarness(tmp_path_factory.mktemp("typed"), 1)
    try:
        h.start()
        h.create_topic(TOPIC, 2, 1)
        with Producer(h.bootstrap(), acks="all") as p:
            for i in range(3):
                p.send(TOPIC, f"v{i}".encode(), partition=0, timestamp_ms=1000 * (i + 1))
            p.flush()
        yield h
    finally:
        h.cleanup()


def _request(*partitions: tuple[int, int], epoch: int = -1) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=-1,
        topics=(
            ListOffsetsTopic(
                name=TOPIC,
                partitions=tuple(
                    ListOffsetsPartition(partition_index=p, timestamp=ts, current_leader_epoch=epoch)
                    for p, ts in partitions
                ),
            ),
        ),
    )


def _native(cluster: ClusterHarness, work):  # one connection to the native listener, for one coroutine
    async def run():
        conn = BrokerConnection("127.0.0.1", cluster[1].port, client_id="typed-test")
        await conn.connect()
        try:
            return await work(conn)
        finally:
            conn.close()

    return asyncio.run(run())


def test_typed_and_legacy_native_and_kafka_answer_the_same(cluster):
    async def work(conn):
        typed = await conn.call(_request((0, -2), (0, -1), (0, 2000), (1, -1)))
        legacy = await conn.request(ApiKey.LIST_OFFSETS, {"topics": [[TOPIC, [[0, -2], [0, -1], [0, 2000], [1, -1]]]]})
        return typed, legacy

    typed, legacy = _native(cluster, work)
    rows = [(p.partition_index, int(p.error_code), p.timestamp, p.offset) for p in typed.topics[0].partitions]
    assert rows == [(0, 0, -1, 0), (0, 0, -1, 3), (0, 0, 2000, 1), (1, 0, -1, 0)]
    assert legacy == {"topics": [[TOPIC, [list(r) for r in rows]]]}
    # Kafka's protocol, oldest and newest served version: the same offsets
    for version in (1, 9):
        with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
            body = {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "timestamp": 2000, "current_leader_epoch": -1}]}]}  # fmt: skip
            s.sendall(frame(2, version, 5, body))
            resp, _ = entity_reader(load_response_schema(2, version))(read_frame(s), 5 if version >= 6 else 4)
            (part,) = resp.topics[0].partitions
            assert (part.partition_index, int(part.error_code), part.offset) == (0, 0, 1)
            assert version == 1 or part.timestamp == 2000


def test_max_timestamp_and_the_local_and_tiered_specs_answer_as_kafka(cluster):
    """-3 (KIP-734): the record with the largest timestamp; -4/-5 (KIP-1005) as a Kafka without tiered storage:
    the log start, and none. On both listeners."""

    async def work(conn):
        return await conn.call(_request((0, -3), (0, -4), (0, -5)))

    rows = [(p.offset, p.timestamp, int(p.error_code)) for p in _native(cluster, work).topics[0].partitions]
    assert rows == [(2, 3000, 0), (0, -1, 0), (-1, -1, 0)]
    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        parts = [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1} for ts in (-3, -4, -5)]
        s.sendall(frame(2, 9, 6, {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": parts}]}))
        resp, _ = entity_reader(load_response_schema(2, 9))(read_frame(s), 5)
        assert [(p.offset, p.timestamp) for p in resp.topics[0].partitions] == [r[:2] for r in rows]


@pytest.mark.parametrize(
    ("version", "body", "error"),
    [
        (
            1,
            lambda: _with(encode(_request((0, -1))), [2, 0, 1, 0, 0], 2**31),
            "partition_index 2147483648 is out of range",
        ),
        (1, lambda: _with(encode(_request((0, -1))), [2, 0, 1, 0, 2], 2**63), "out of range for int64"),
        (1, lambda: _with(encode(_request((0, -1))), [2, 0, 0], None), r"topics\[0\]\.name may not be null"),
        (1, lambda: encode(_request((0, -1)))[:2], "has 2 fields, ListOffsetsRequest has 3"),
        (0, lambda: {"topics": [[TOPIC, [[0, -1, 2**31]]]]}, "current_leader_epoch 2147483648 is out of range"),
        (0, lambda: {"topics": [[TOPIC, [[0]]]]}, r"must be \[partition, timestamp\(, leader epoch\)\]"),
        (0, lambda: {"topics": "all"}, "topics must be a list"),
    ],
    ids=["int32", "int64", "null-name", "arity", "v0-epoch", "v0-shape", "v0-topics"],
)
def test_a_field_out_of_its_type_is_refused_with_its_path_and_the_connection_goes_on(cluster, version, body, error):
    async def work(conn):
        refused = await conn.request(ApiKey.LIST_OFFSETS, body(), version)
        after = await conn.call(_request((0, -1)))
        return refused, after

    refused, after = _native(cluster, work)
    assert refused["error_code"] == ErrorCode.INVALID_REQUEST
    assert re.search(error, refused["error_message"]), refused
    assert after.topics[0].partitions[0].offset == 3  # the same connection still answers


def _with(wire: list, path: list[int], value: object) -> list:
    """`wire` with the value at `path` (indexes into the nested arrays) replaced."""
    at = wire
    for i in path[:-1]:
        at = at[i]
    at[path[-1]] = value
    return wire


def test_a_partition_that_cannot_exist_is_answered_not_crashed(cluster):
    async def work(conn):
        return await conn.call(_request((-1, -1), (7, -1)))

    answer = _native(cluster, work)
    codes = [int(p.error_code) for p in answer.topics[0].partitions]
    assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2


def test_an_unserved_kafka_version_is_answered_in_its_own_layout_with_the_request_mirrored(cluster):
    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        body = {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 1, "timestamp": -1, "current_leader_epoch": -1}]}]}  # fmt: skip
        s.sendall(frame(2, 10, 9, body))  # ListOffsets v10: Kafka has it, Kafka Lite serves 1-9
        resp, _ = entity_reader(load_response_schema(2, 10))(read_frame(s), 5)
        (topic,) = resp.topics
        assert topic.name == TOPIC and [(p.partition_index, int(p.error_code)) for p in topic.partitions] == [
            (1, ErrorCode.UNSUPPORTED_VERSION)
        ]


def test_the_group_apis_answer_alike_typed_and_in_their_native_v0_maps(cluster):
    """The classic group apis are typed since native v1 (issue 26 §1); a client of the last release still sends
    the v0 maps, read into the same typed request and answered in the old shapes, for one more release."""
    group = "typed-group"

    async def work(conn):
        deadline = asyncio.get_running_loop().time() + 30
        while (found := await conn.call(FindCoordinatorRequest(key=group))).error_code:
            assert asyncio.get_running_loop().time() < deadline, found
            await asyncio.sleep(0.1)
        legacy_found = await conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0})
        part = OffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_metadata="m")
        commit = OffsetCommitRequest(group_id=group, topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(part,)),))
        while isinstance(committed := await conn.request(ApiKey.OFFSET_COMMIT, encode(commit), 1), dict):
            assert committed["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, committed
            await asyncio.sleep(0.1)
        asked = (OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),)
        fetched = await conn.call(OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id=group, topics=asked),)))
        legacy_fetched = await conn.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": [[TOPIC, [0]]]})
        classic = await conn.call(ListGroupsRequest(types_filter=("CLASSIC",)))
        stable = await conn.call(ListGroupsRequest(states_filter=("Stable",)))
        legacy_listed = await conn.request(ApiKey.LIST_GROUPS, {})
        legacy_deleted = await conn.request(ApiKey.OFFSET_DELETE, {"group_id": group, "topics": [[TOPIC, [0]]]})
        deleted = await conn.call(DeleteGroupsRequest(groups_names=(group,)))
        legacy_gone = await conn.request(ApiKey.DELETE_GROUPS, {"groups": [group]})
        both_shapes = await conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "keys": [group]})
        beat = encode(HeartbeatRequest(group_id=group, generation_id=1, member_id="m"))
        beat[1] = 2**31
        too_big = await conn.request(ApiKey.HEARTBEAT, beat, 1)
        return (found, legacy_found, committed, fetched, legacy_fetched, classic, stable, legacy_listed,
                legacy_deleted, deleted, legacy_gone, both_shapes, too_big)  # fmt: skip

    (found, legacy_found, committed, fetched, legacy_fetched, classic, stable, legacy_listed, legacy_deleted, deleted,
     legacy_gone, both_shapes, too_big) = _native(cluster, work)  # fmt: skip
    assert (found.node_id, found.port) == (legacy_found["node_id"], legacy_found["port"]) == (1, cluster[1].port)
    committed = decode(OffsetCommitResponse, committed)  # the raw answer of a typed request: its msgpack array
    assert [(p.partition_index, p.error_code) for p in committed.topics[0].partitions] == [(0, 0)]
    (g,) = fetched.groups
    assert (g.group_id, g.error_code) == (group, 0)
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in g.topics[0].partitions] == [(0, 5, "m")]
    assert legacy_fetched == {"error_code": 0, "topics": [[TOPIC, [[0, 5, "m", 0]]]]}
    assert [(x.group_id, x.group_state, x.group_type) for x in classic.groups] == [(group, "Empty", "classic")]
    assert group not in [x.group_id for x in stable.groups]
    row = legacy_listed["groups"].index([group, "consumer", "Empty"])
    assert legacy_listed["group_types"][row] == "classic"
    assert legacy_deleted == {"error_code": 0, "topics": [[TOPIC, [[0, 0, None]]]]}
    assert [(r.group_id, r.error_code) for r in deleted.results] == [(group, 0)]
    assert legacy_gone == {"results": [[group, ErrorCode.GROUP_ID_NOT_FOUND, "GROUP_ID_NOT_FOUND"]]}
    assert both_shapes["error_code"] == ErrorCode.INVALID_REQUEST and "not both" in both_shapes["error_message"]
    assert too_big["error_code"] == ErrorCode.INVALID_REQUEST and "generation_id" in too_big["error_message"]


def test_the_quota_scram_and_acl_apis_answer_alike_typed_and_in_their_native_v0_maps(cluster):
    """Typed since native v1 as well (issue 26 §1): a change made typed reads back in the v0 maps and the other way
    round; a v0 map of the wrong shape is INVALID_REQUEST, and the connection goes on."""
    user = (QuotaEntity(entity_type="user", entity_name="typed-user"),)

    async def work(conn):
        op = QuotaOp(key="producer_byte_rate", value=1024.0)
        altered = await conn.call(AlterClientQuotasRequest(entries=(QuotaEntry(entity=user, ops=(op,)),)))
        legacy_described = await conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"entity": [["user", "typed-user"]]})
        exact = QuotaComponent(entity_type="user", match="typed-user")
        described = await conn.call(DescribeClientQuotasRequest(components=(exact,), strict=True))
        removal = {"entries": [[[["user", "typed-user"]], {"producer_byte_rate": None}]]}
        legacy_removed = await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, removal)
        gone = await conn.call(DescribeClientQuotasRequest(components=(exact,)))
        scram = await conn.call(DescribeUserScramCredentialsRequest(users=(UserName(name="nobody"),)))
        legacy_scram = await conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": ["nobody"]})
        acls = await conn.request(ApiKey.DESCRIBE_ACLS, encode(DescribeAclsRequest(resource_type_filter=1)), 1)
        legacy_acls = await conn.request(ApiKey.DESCRIBE_ACLS, {"filter": [1, None, 1, None, None, 1, 1]})
        bad = await conn.request(ApiKey.DESCRIBE_ACLS, {"filter": [1, 2]})
        return altered, legacy_described, described, legacy_removed, gone, scram, legacy_scram, acls, legacy_acls, bad

    altered, legacy_described, described, legacy_removed, gone, scram, legacy_scram, acls, legacy_acls, bad = _native(
        cluster, work
    )
    assert [(e.error_code, e.entity[0].entity_name) for e in altered.entries] == [(0, "typed-user")]
    assert legacy_described == {
        "error_code": 0,
        "entries": [[[["user", "typed-user"]], {"producer_byte_rate": 1024.0}]],
    }
    assert [[(v.key, v.value) for v in e.values] for e in described.entries] == [[("producer_byte_rate", 1024.0)]]
    assert legacy_removed == {"results": [[[["user", "typed-user"]], 0, None]]}
    assert not gone.entries
    assert [(r.user, r.error_code) for r in scram.results] == [("nobody", ErrorCode.RESOURCE_NOT_FOUND)]
    assert legacy_scram["results"] == [["nobody", ErrorCode.RESOURCE_NOT_FOUND, scram.results[0].error_message, []]]
    # no authorizer here: the ACL apis answer SECURITY_DISABLED, as one error for the whole request, either way
    assert acls["error_code"] == legacy_acls["error_code"] == ErrorCode.SECURITY_DISABLED
    assert bad["error_code"] == ErrorCode.INVALID_REQUEST and "ACL row" in bad["error_message"]


def test_describe_cluster_is_typed_on_both_listeners(cluster):
    """DescribeCluster (KIP-700) from its first native version: the brokers of the listener asked, the controller,
    the cluster id; the controllers' endpoints (KIP-919) are not a broker's to give."""

    async def work(conn):
        return await conn.call(DescribeClusterRequest()), await conn.call(DescribeClusterRequest(endpoint_type=2))

    described, controllers = _native(cluster, work)
    assert described.error_code == 0 and described.cluster_id and described.controller_id == 1
    assert [(b.broker_id, b.port) for b in described.brokers] == [(1, cluster[1].port)]
    assert controllers.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE and not controllers.brokers
    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        s.sendall(frame(60, 1, 7, {"include_cluster_authorized_operations": False, "endpoint_type": 1}))
        resp, _ = entity_reader(load_response_schema(60, 1))(read_frame(s), 5)
        assert resp.cluster_id == described.cluster_id and resp.controller_id == 1
        assert [(b.broker_id, b.port) for b in resp.brokers] == [(1, cluster[1].kafka_port)]


def _kafka(cluster: ClusterHarness, api: int, version: int, body: dict, flexible_since: int) -> Any:
    """One request on the Kafka listener, on a connection of its own (a throttled answer mutes its connection)."""
    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        s.sendall(frame(api, version, 3, body))
        resp, _ = entity_reader(load_response_schema(api, version))(
            read_frame(s), 5 if version >= flexible_since else 4
        )
        return resp


def test_the_topic_and_config_apis_answer_alike_typed_and_in_their_native_v0_maps(cluster):
    """CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs and AlterConfigs are typed since native v1,
    IncrementalAlterConfigs since v0 (issue 26 §1); the v0 maps read into the same typed requests."""
    retention = CreatableTopicConfig(name="retention.ms", value="1000")
    ask_retention = DescribeConfigsResource(
        resource_type=2, resource_name="typed-admin", configuration_keys=("retention.ms",)
    )

    async def work(conn):
        created = await conn.call(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(name="typed-admin", num_partitions=3, replication_factor=1, configs=(retention,)),
                )
            )  # fmt: skip
        )
        again = await conn.call(CreateTopicsRequest(topics=(CreatableTopic(name="typed-admin", num_partitions=1,
                                                                           replication_factor=1),)))  # fmt: skip
        legacy_created = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "typed-legacy"}]})
        forged = await conn.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "forged"}], "forwarded": True})
        described = await conn.call(
            DescribeConfigsRequest(
                resources=(ask_retention, DescribeConfigsResource(resource_type=8, resource_name="99")),
                include_synonyms=True,
            )
        )
        legacy_described = await conn.request(ApiKey.DESCRIBE_CONFIGS, {"topics": ["typed-admin"]})
        ops = (
            IncrementalAlterableConfig(name="cleanup.policy", config_operation=2, value="compact"),  # APPEND
            IncrementalAlterableConfig(name="retention.ms", config_operation=1),  # DELETE
        )
        incremental = await conn.call(
            IncrementalAlterConfigsRequest(
                resources=(
                    IncrementalAlterConfigsResource(resource_type=2, resource_name="typed-admin", configs=ops),
                    IncrementalAlterConfigsResource(
                        resource_type=2,
                        resource_name="typed-legacy",
                        configs=(IncrementalAlterableConfig(name="retention.ms", config_operation=7, value="1"),),
                    ),
                )
            )
        )
        after_incremental = await conn.call(DescribeConfigsRequest(resources=(
            DescribeConfigsResource(resource_type=2, resource_name="typed-admin",
                                    configuration_keys=("cleanup.policy", "retention.ms")),)))  # fmt: skip
        replaced = await conn.call(
            AlterConfigsRequest(
                resources=(
                    AlterConfigsResource(
                        resource_type=2,
                        resource_name="typed-admin",
                        configs=(AlterableConfig(name="segment.ms", value="600000"),),
                    ),
                )
            )  # fmt: skip
        )
        legacy_altered = await conn.request(ApiKey.ALTER_CONFIGS, {"topics": [["typed-legacy", {"retention.ms": "5"}]]})
        after_replace = await conn.call(DescribeConfigsRequest(resources=(
            DescribeConfigsResource(resource_type=2, resource_name="typed-admin",
                                    configuration_keys=("cleanup.policy", "segment.ms")),)))  # fmt: skip
        grown = await conn.call(CreatePartitionsRequest(topics=(CreatePartitionsTopic(name="typed-admin", count=4),)))
        legacy_grown = await conn.request(ApiKey.CREATE_PARTITIONS, {"topics": [{"name": "typed-legacy", "count": 2}]})
        return (created, again, legacy_created, forged, described, legacy_described, incremental, after_incremental,
                replaced, legacy_altered, after_replace, grown, legacy_grown)  # fmt: skip

    (created, again, legacy_created, forged, described, legacy_described, incremental, after_incremental, replaced,
     legacy_altered, after_replace, grown, legacy_grown) = _native(cluster, work)  # fmt: skip
    (row,) = created.topics
    assert (row.name, row.error_code, row.num_partitions, row.replication_factor) == ("typed-admin", 0, 3, 1)
    assert [(r.error_code, r.num_partitions) for r in again.topics] == [(ErrorCode.TOPIC_ALREADY_EXISTS, -1)]
    assert legacy_created == {"topics": [["typed-legacy", 0, None]], "throttle_time_ms": 0}
    assert forged["error_code"] == ErrorCode.INVALID_REQUEST and "ENVELOPE" in forged["error_message"]
    topic, logger = described.results
    assert (topic.error_code, [(c.name, c.value, c.config_source) for c in topic.configs]) == (
        0,
        [("retention.ms", "1000", 1)],  # DYNAMIC_TOPIC_CONFIG, and only the key asked
    )
    assert topic.configs[0].synonyms[0].name == "retention.ms" and topic.configs[0].documentation is None
    # BROKER_LOGGER of a broker that is not there
    assert (logger.resource_type, logger.error_code) == (8, ErrorCode.INVALID_REQUEST)
    assert logger.error_message.startswith("Unexpected broker id, expected ") and not logger.configs
    (name, code, _, rows), = legacy_described["results"]  # fmt: skip
    assert (name, code, rows["retention.ms"][0], rows["retention.ms"][1]) == ("typed-admin", 0, "1000", False)
    assert "segment file" in rows["segment.bytes"][2] and legacy_described["brokers"] == []
    assert [(r.resource_name, r.error_code) for r in incremental.responses] == [
        ("typed-admin", 0),
        ("typed-legacy", ErrorCode.INVALID_REQUEST),  # an unknown operation: its resource's INVALID_REQUEST
    ]
    values = {c.name: (c.value, c.config_source) for c in after_incremental.results[0].configs}
    assert values == {"cleanup.policy": ("delete,compact", 1), "retention.ms": ("604800000", 5)}
    assert [(r.resource_name, r.error_code) for r in replaced.responses] == [("typed-admin", 0)]
    assert legacy_altered == {"topics": [["typed-legacy", 0, None]], "brokers": []}
    values = {c.name: (c.value, c.config_source) for c in after_replace.results[0].configs}
    assert values == {"cleanup.policy": ("delete", 5), "segment.ms": ("600000", 1)}  # replaced: the append is gone
    assert [(r.name, r.error_code) for r in grown.results] == [("typed-admin", 0)]
    assert legacy_grown == {"topics": [["typed-legacy", 0, None]], "throttle_time_ms": 0}
    # Kafka's protocol: DescribeConfigs v4 and CreatePartitions v3 read the same state
    resp = _kafka(cluster, 32, 4, {"resources": [{"resource_type": 2, "resource_name": "typed-admin",
                                                  "configuration_keys": ["segment.ms"]}]}, 4)  # fmt: skip
    assert [(c.name, c.value) for c in resp.results[0].configs] == [("segment.ms", "600000")]
    resp = _kafka(cluster, 37, 3, {"topics": [{"name": "typed-admin", "count": 4, "assignments": None}],
                                   "timeout_ms": 5000, "validate_only": False}, 2)  # fmt: skip
    assert [(r.name, int(r.error_code)) for r in resp.results] == [("typed-admin", ErrorCode.INVALID_PARTITIONS)]

    async def delete(conn):
        described = await conn.call(DescribeTopicPartitionsRequest(topics=(DescribeTopicRequest(name="typed-admin"),)))
        by_id = await conn.call(DeleteTopicsRequest(topics=(DeleteTopicState(topic_id=described.topics[0].topic_id),)))
        unknown = await conn.call(DeleteTopicsRequest(topics=(DeleteTopicState(topic_id=uuid.uuid4()),)))
        legacy = await conn.request(ApiKey.DELETE_TOPICS, {"topics": ["typed-legacy"]})
        return by_id, unknown, legacy

    by_id, unknown, legacy_deleted = _native(cluster, delete)
    assert [(r.name, r.error_code) for r in by_id.responses] == [("typed-admin", 0)]
    assert [r.error_code for r in unknown.responses] == [ErrorCode.UNKNOWN_TOPIC_ID]
    assert legacy_deleted == {"topics": [["typed-legacy", 0, None]], "throttle_time_ms": 0}


def test_kafka_clients_too_old_for_throttling_quota_exceeded_are_throttled_instead(cluster):
    """KIP-599 on the Kafka listener: over its controller_mutation_rate, a CreateTopics v5 client is admitted and
    throttled (it does not know THROTTLING_QUOTA_EXCEEDED); a v6 client is refused, topic by topic."""
    quota = QuotaEntry(entity=(QuotaEntity(entity_type="client-id", entity_name="t"),),
                       ops=(QuotaOp(key="controller_mutation_rate", value=1.0),))  # fmt: skip

    async def set_quota(conn):
        return await conn.call(AlterClientQuotasRequest(entries=(quota,)))

    assert _native(cluster, set_quota).entries[0].error_code == 0
    topics = [{"name": f"old-{i}", "num_partitions": 30, "replication_factor": 1, "assignments": [], "configs": []}
              for i in range(2)]  # fmt: skip
    old = _kafka(cluster, 19, 5, {"topics": topics, "timeout_ms": 5000, "validate_only": False}, 5)
    assert [(t.name, int(t.error_code)) for t in old.topics] == [("old-0", 0), ("old-1", 0)]
    assert old.throttle_time.total_seconds() > 0
    topics = [dict(t, name=f"new-{i}") for i, t in enumerate(topics)]
    new = _kafka(cluster, 19, 6, {"topics": topics, "timeout_ms": 5000, "validate_only": False}, 5)
    assert {int(t.error_code) for t in new.topics} == {ErrorCode.THROTTLING_QUOTA_EXCEEDED}

    async def reset(conn):
        removal = QuotaEntry(entity=quota.entity, ops=(QuotaOp(key="controller_mutation_rate", remove=True),))
        return await conn.call(AlterClientQuotasRequest(entries=(removal,)))

    assert _native(cluster, reset).entries[0].error_code == 0


def test_metadata_is_typed_on_both_listeners_and_its_v0_map_answers_alike(cluster):
    """Metadata (issue 26 §1): the native typed v1, the v0 map of the last release and Kafka's v0 (whose empty list
    asks for every topic) and v12 (a topic by its id) agree; an id no topic has is UNKNOWN_TOPIC_ID; a v0 map of the
    wrong shape is INVALID_REQUEST and the connection goes on; v0's map alone names another listener's endpoints and
    the answering broker's own facts (Kafka's message has no field for them)."""
    named = (MetadataRequestTopic(name=TOPIC), MetadataRequestTopic(name="no-such-topic"))
    stranger = uuid.uuid4()

    async def work(conn):
        typed = await conn.call(MetadataRequest(topics=named, allow_auto_topic_creation=False))
        ids = (MetadataRequestTopic(topic_id=typed.topics[0].topic_id), MetadataRequestTopic(topic_id=stranger))
        by_id = await conn.call(MetadataRequest(topics=ids))
        legacy = await conn.request(ApiKey.METADATA, {"topics": [TOPIC, "no-such-topic"]})
        kafka_ports = await conn.request(ApiKey.METADATA, {"topics": [], "listener": "kafka"})
        every = await conn.call(MetadataRequest(topics=None, include_cluster_authorized_operations=True))
        bad = await conn.request(ApiKey.METADATA, {"topics": TOPIC})
        bad_id = await conn.request(ApiKey.METADATA, {"topics": [], "topic_ids": ["not-an-id"]})
        after = await conn.call(MetadataRequest(topics=()))
        return typed, by_id, legacy, kafka_ports, every, bad, bad_id, after

    typed, by_id, legacy, kafka_ports, every, bad, bad_id, after = _native(cluster, work)
    assert typed.cluster_id and typed.controller_id == 1
    assert [(b.node_id, b.port) for b in typed.brokers] == [(1, cluster[1].port)]
    mine, missing = typed.topics
    assert (mine.name, mine.error_code, mine.is_internal) == (TOPIC, 0, False) and mine.topic_id.int
    assert [(p.partition_index, p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes) for p in mine.partitions] == [
        (0, 0, 1, (1,), (1,)),
        (1, 0, 1, (1,), (1,)),
    ]
    assert all(p.leader_epoch >= 0 and p.offline_replicas == () for p in mine.partitions)
    assert (missing.name, missing.error_code) == ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert [(t.name, t.topic_id, t.error_code) for t in by_id.topics] == [
        (TOPIC, mine.topic_id, 0),
        (None, stranger, ErrorCode.UNKNOWN_TOPIC_ID),
    ]
    assert legacy["controller_id"] == 1 and legacy["cluster_id"] == typed.cluster_id
    assert legacy["brokers"] == [[1, typed.brokers[0].host, cluster[1].port]]
    assert legacy["topics"][0]["topic_id"] == mine.topic_id.hex
    assert legacy["topics"][0]["partitions"] == [
        [0, p.partition_index, 1, p.leader_epoch, [1], [1], []] for p in mine.partitions
    ]
    assert legacy["topics"][1]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert legacy["broker_info"]["broker_id"] == 1 and "broker_info" not in repr(typed)
    assert [b[2] for b in kafka_ports["brokers"]] == [cluster[1].kafka_port] and kafka_ports["topics"] == []
    assert TOPIC in [t.name for t in every.topics] and every.cluster_authorized_operations != -(2**31)
    assert bad["error_code"] == bad_id["error_code"] == ErrorCode.INVALID_REQUEST
    assert after.topics == () and after.brokers
    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        s.sendall(frame(3, 0, 8, {"topics": []}))  # v0: an empty list is every topic
        v0, _ = entity_reader(load_response_schema(3, 0))(read_frame(s), 4)
        assert TOPIC in [t.name for t in v0.topics]
        assert [(b.node_id, b.port) for b in v0.brokers] == [(1, cluster[1].kafka_port)]
        ids = [{"topic_id": mine.topic_id, "name": None}, {"topic_id": stranger, "name": None}]
        s.sendall(frame(3, 12, 9, {"topics": ids, "allow_auto_topic_creation": False}))
        v12, _ = entity_reader(load_response_schema(3, 12))(read_frame(s), 5)
        assert [(t.name, t.topic_id, t.error_code) for t in v12.topics] == [
            (TOPIC, mine.topic_id, 0),
            (None, stranger, ErrorCode.UNKNOWN_TOPIC_ID),
        ]
        assert v12.controller_id == 1 and v12.cluster_id == typed.cluster_id
        s.sendall(frame(3, 1, 10, {"topics": []}))  # v1+: an empty list is no topic
        v1, _ = entity_reader(load_response_schema(3, 1))(read_frame(s), 4)
        assert v1.topics == () and v1.controller_id == 1


def _produce(topic: str, *parts: tuple[int, bytes], acks: int = -1) -> ProduceRequest:
    return ProduceRequest(
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=tuple(PartitionProduceData(index=p, records=r) for p, r in parts)
            ),
        ),
    )


def _batch(value: bytes) -> bytes:
    now = int(time.time() * 1000)
    return batch_fmt.build([(0, 0, None, value, None)], now, now)


def test_produce_is_typed_on_both_native_versions_and_the_kafka_listener(cluster):
    """Produce is typed since native v1 (issue 26 §1): the batches stay opaque bytes, the answer's rows are Kafka's
    (base offset, log append time for a LogAppendTime topic, log start offset). A v0 map is read into the same
    request and answered in its old rows; acks=0 is not answered; a field out of its type, or acks Kafka does not
    know, is refused as a whole and the connection goes on."""
    stamped = "typed-append-time"
    cluster.create_topic(stamped, 1, 1, {"message.timestamp.type": "LogAppendTime"})

    async def work(conn):
        typed = await conn.call(_produce(TOPIC, (1, _batch(b"t")), (9, _batch(b"lost"))))
        legacy = await conn.request(ApiKey.PRODUCE, {"acks": 1, "topics": [[TOPIC, [[1, _batch(b"m")]]]]})
        quiet = _produce(TOPIC, (1, _batch(b"q")), acks=0)
        assert conn.send(ApiKey.PRODUCE, encode(quiet), 1, expect_response=False) is None
        appended = await conn.call(_produce(stamped, (0, _batch(b"s"))))
        too_big = encode(_produce(TOPIC, (1, _batch(b"x"))))
        too_big[1] = 2**15  # acks, an int16
        out_of_type = await conn.request(ApiKey.PRODUCE, too_big, 1)
        unknown_acks = await conn.request(ApiKey.PRODUCE, encode(_produce(TOPIC, (1, _batch(b"x")), acks=7)), 1)
        bad_legacy = await conn.request(ApiKey.PRODUCE, {"acks": 1, "topics": [[TOPIC, [[1, "not bytes"]]]]})
        after = await conn.call(_produce(TOPIC, (1, _batch(b"after"))))
        return typed, legacy, appended, out_of_type, unknown_acks, bad_legacy, after

    typed, legacy, appended, out_of_type, unknown_acks, bad_legacy, after = _native(cluster, work)
    rows = {p.index: p for t in typed.responses for p in t.partition_responses}
    assert (rows[1].error_code, rows[1].log_append_time, rows[1].log_start_offset) == (0, None, 0)
    assert rows[9].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    base = rows[1].base_offset
    assert legacy == {"topics": [[TOPIC, [[1, 0, base + 1, -1, 0, None]]]]}
    [[row]] = [t.partition_responses for t in appended.responses]
    assert row.error_code == 0 and row.log_append_time is not None
    assert abs(row.log_append_time.timestamp() - time.time()) < 60  # the broker's clock, not the batch's
    assert out_of_type["error_code"] == ErrorCode.INVALID_REQUEST and "acks" in out_of_type["error_message"]
    assert unknown_acks["error_code"] == ErrorCode.INVALID_REQUIRED_ACKS
    assert bad_legacy["error_code"] == ErrorCode.INVALID_REQUEST
    [[row]] = [t.partition_responses for t in after.responses]
    assert (row.error_code, row.base_offset) == (0, base + 3)  # the acks=0 batch is in the log, between

    # The Kafka listener: the same handler, answered in the client's version (v3: no log_start_offset yet).
    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        for version in (3, 9):
            body = {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": stamped, "partition_data": [{"index": 0, "records": _batch(b"k")}]}]}  # fmt: skip
            s.sendall(frame(0, version, 7, body))
            raw = read_frame(s)
            resp, _ = entity_reader(load_response_schema(0, version))(raw, 4 + (1 if version >= 9 else 0))
            [[p]] = [t.partition_responses for t in resp.responses]
            assert p.error_code == 0 and p.log_append_time is not None


def _fetch(topic: str, *parts: tuple[int, int], replica_id: int = -1, isolation_level: int = 0) -> FetchRequest:
    return FetchRequest(
        replica_id=replica_id,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        isolation_level=isolation_level,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=tuple(
                    FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in parts
                ),
            ),
        ),
    )


def _values(records: bytes | None) -> list[bytes]:
    buf = records or b""
    return [r[3] for pos, h in batch_fmt.iter_batches(buf) for r in batch_fmt.records_of(buf, pos, h)]


def test_fetch_is_typed_on_both_native_versions_and_the_kafka_listener(cluster):
    """Fetch is typed since native v1 (issue 26 §1): the records are the log's bytes, the rows Kafka's. A v0 map is
    read into the same request and answered in its old 11-column rows; a follower's replica_id is refused on this
    (client) listener, a field out of its type or an unknown isolation level refused as a whole, and the connection
    goes on. The Kafka listener serves the same handler in v4-12, the session declined (id 0)."""

    async def work(conn):
        typed = await conn.call(_fetch(TOPIC, (0, 0), (9, 0)))
        legacy = await conn.request(ApiKey.FETCH, {"max_wait_ms": 0, "topics": [[TOPIC, [[0, 1, 1 << 20]]]]})
        follower = await conn.request(ApiKey.FETCH, encode(_fetch(TOPIC, (0, 0), replica_id=1)), 1)
        out_of_type = encode(_fetch(TOPIC, (0, 0)))
        out_of_type[2] = 2**31  # max_wait, an int32 of ms
        refused = await conn.request(ApiKey.FETCH, out_of_type, 1)
        isolation = await conn.request(ApiKey.FETCH, encode(_fetch(TOPIC, (0, 0), isolation_level=3)), 1)
        after = await conn.call(_fetch(TOPIC, (0, 2)))
        return typed, legacy, follower, refused, isolation, after

    typed, legacy, follower, refused, isolation, after = _native(cluster, work)
    assert typed.error_code == 0 and typed.session_id == 0
    rows = {p.partition_index: p for t in typed.responses for p in t.partitions}
    assert (rows[0].error_code, rows[0].high_watermark, rows[0].log_start_offset) == (0, 3, 0)
    assert _values(rows[0].records)[-3:] == [b"v0", b"v1", b"v2"] and rows[0].aborted_transactions is None
    assert rows[9].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    [[topic, [row]]] = legacy["topics"]
    assert topic == TOPIC and len(row) == 11 and row[:5] == [0, 0, 3, 3, 0] and row[6:] == [None, -1, -1, 3, []]
    assert b"v1" in _values(row[5])
    assert follower["error_code"] == ErrorCode.INVALID_REQUEST  # brokers only, on the inter-broker listener
    assert refused["error_code"] == ErrorCode.INVALID_REQUEST and "max_wait" in refused["error_message"]
    assert isolation["error_code"] == ErrorCode.INVALID_REQUEST
    assert _values(after.responses[0].partitions[0].records)[-1:] == [b"v2"]

    with socket.create_connection(("127.0.0.1", cluster[1].kafka_port), timeout=10) as s:
        for version in (4, 11, 12):
            body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                    "session_id": 0, "session_epoch": 0, "forgotten_topics_data": [], "rack_id": "",
                    "topics": [{"topic": TOPIC, "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}  # fmt: skip
            s.sendall(frame(1, version, 8, body))
            raw = read_frame(s)
            resp, _ = entity_reader(load_response_schema(1, version))(raw, 4 + (1 if version >= 12 else 0))
            [[p]] = [t.partitions for t in resp.responses]
            assert (p.error_code, p.high_watermark) == (0, 3) and b"v2" in _values(p.records)
            if version >= 7:
                assert resp.session_id == 0  # declined: the client keeps sending full fetches
