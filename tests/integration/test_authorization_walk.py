"""Issue 25 §2: every api of both listeners, sent by a user who may only READ her own group and topic, with
bodies built to reach other principals' groups, topics and the cluster (extra and unknown keys, single and
batched shapes), is refused with the right *_AUTHORIZATION_FAILED code, and nothing changed: checked as the
admin afterwards (the victim group's offsets, the secret topic's records, configs and partitions, the topics,
ACLs, quotas, credentials, the controller and the brokers' registrations).

One SASL_PLAINTEXT broker with authorizer=acl (the login and ACLs are the same code on SASL_SSL; TLS is
test_security.py's). The walk fails if an api is served that it does not cover."""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import time
import uuid
from typing import Any, Callable

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from broker.network.kafka.entities import plain
from client.sync import Producer
from net.acl import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from net.connection import BrokerConnection
from net.errors import ErrorCode
from net.messages import decode, encode
from net.protocol import TYPED_SINCE, ApiKey
from net.schema.add_offsets_to_txn import AddOffsetsToTxnRequest
from net.schema.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from net.schema.alter_client_quotas import AlterClientQuotasRequest
from net.schema.alter_client_quotas import EntityData as QuotaEntity
from net.schema.alter_client_quotas import EntryData as QuotaEntry
from net.schema.alter_client_quotas import OpData as QuotaOp
from net.schema.alter_configs import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
from net.schema.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from net.schema.alter_share_group_offsets import AlterShareGroupOffsetsRequest
from net.schema.alter_share_group_offsets import AlterShareGroupOffsetsRequestPartition as AlterPartition
from net.schema.alter_share_group_offsets import AlterShareGroupOffsetsRequestTopic as AlterTopic
from net.schema.alter_user_scram_credentials import AlterUserScramCredentialsRequest, ScramCredentialDeletion
from net.schema.consumer_group_describe import ConsumerGroupDescribeRequest
from net.schema.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from net.schema.create_acls import AclCreation, CreateAclsRequest
from net.schema.create_partitions import CreatePartitionsRequest, CreatePartitionsTopic
from net.schema.create_topics import CreatableTopic, CreateTopicsRequest
from net.schema.delete_acls import DeleteAclsFilter, DeleteAclsRequest
from net.schema.delete_groups import DeleteGroupsRequest
from net.schema.delete_records import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from net.schema.delete_share_group_offsets import DeleteShareGroupOffsetsRequest
from net.schema.delete_share_group_offsets import DeleteShareGroupOffsetsRequestTopic as DeleteShareTopic
from net.schema.delete_share_group_state import DeleteShareGroupStateRequest, DeleteStateData
from net.schema.delete_share_group_state import PartitionData as DeleteStatePartition
from net.schema.delete_topics import DeleteTopicsRequest, DeleteTopicState
from net.schema.describe_acls import DescribeAclsRequest
from net.schema.describe_client_quotas import DescribeClientQuotasRequest
from net.schema.describe_cluster import DescribeClusterRequest
from net.schema.describe_configs import DescribeConfigsRequest, DescribeConfigsResource
from net.schema.describe_groups import DescribeGroupsRequest
from net.schema.describe_log_dirs import DescribeLogDirsRequest
from net.schema.describe_producers import DescribeProducersRequest, TopicRequest
from net.schema.describe_quorum import DescribeQuorumRequest, PartitionData, TopicData
from net.schema.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from net.schema.describe_topic_partitions import Cursor, DescribeTopicPartitionsRequest
from net.schema.describe_topic_partitions import TopicRequest as DescribeTopic
from net.schema.describe_transactions import DescribeTransactionsRequest
from net.schema.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from net.schema.end_txn import EndTxnRequest
from net.schema.fetch import FetchPartition, FetchRequest, FetchTopic
from net.schema.find_coordinator import FindCoordinatorRequest
from net.schema.heartbeat import HeartbeatRequest
from net.schema.incremental_alter_configs import AlterableConfig as IncrementalAlterableConfig
from net.schema.incremental_alter_configs import AlterConfigsResource as IncrementalAlterConfigsResource
from net.schema.incremental_alter_configs import IncrementalAlterConfigsRequest
from net.schema.initialize_share_group_state import InitializeShareGroupStateRequest, InitializeStateData
from net.schema.initialize_share_group_state import PartitionData as InitializePartition
from net.schema.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from net.schema.leave_group import LeaveGroupRequest, MemberIdentity
from net.schema.list_config_resources import ListConfigResourcesRequest
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from net.schema.list_partition_reassignments import ListPartitionReassignmentsRequest
from net.schema.list_transactions import ListTransactionsRequest
from net.schema.messages import MESSAGES
from net.schema.metadata import MetadataRequest, MetadataRequestTopic
from net.schema.offset_commit import OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic
from net.schema.offset_delete import OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic
from net.schema.offset_fetch import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from net.schema.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from net.schema.read_share_group_state import PartitionData as ReadPartition
from net.schema.read_share_group_state import ReadShareGroupStateRequest, ReadStateData
from net.schema.read_share_group_state_summary import PartitionData as SummaryPartition
from net.schema.read_share_group_state_summary import ReadShareGroupStateSummaryRequest, ReadStateSummaryData
from net.schema.share_acknowledge import ShareAcknowledgeRequest
from net.schema.share_fetch import ShareFetchRequest
from net.schema.share_group_describe import ShareGroupDescribeRequest
from net.schema.share_group_heartbeat import ShareGroupHeartbeatRequest
from net.schema.sync_group import SyncGroupRequest
from net.schema.txn_offset_commit import TxnOffsetCommitRequest
from net.schema.write_share_group_state import PartitionData as WritePartition
from net.schema.write_share_group_state import WriteShareGroupStateRequest, WriteStateData
from net.schema.write_txn_markers import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from net.security import ClientSecurity, SaslClient
from tests.integration.cluster_harness import ClusterHarness, wait_until
from tests.integration.test_kafka_protocol_errors import frame

MECH = "SCRAM-SHA-256"
SECRET, VICTIM, MINE, MY_TOPIC = "secret-topic", "victim-group", "alice-group", "alice-topic"
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
TXN_DENIED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
INVALID = int(ErrorCode.INVALID_REQUEST)
NOISE = {"groups": [], "keys": [], "x-unknown": {"group_id": MINE, "topics": [[MY_TOPIC, [0]]]}}
ANY_ERROR = -1  # broker-only apis: refused, whichever code the listener gives them
THROTTLE = "leader.replication.throttled.rate"
ANY_ID = uuid.UUID(int=1)  # a topic id for the share coordinator's apis, refused before any lookup


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    admin = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": MECH}
    h = ClusterHarness(
        tmp_path_factory.mktemp("walk"),
        1,
        overrides=[
            "security.protocol=SASL_PLAINTEXT",
            f"sasl.enabled.mechanisms={MECH}",
            f"sasl.mechanism.inter.broker.protocol={MECH}",
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="admin" password="a-secret";',
            "authorizer=acl",
            "super.users=User:admin",
            "auto.create.topics.enable=true",
        ],
        extra_args=["--add-scram", f"{MECH}=[name=admin,password=a-secret]"],
        client_config={**admin, "sasl_username": "admin", "sasl_password": "a-secret"},
    )
    try:
        h.start()
        setup(h)
        yield h
    finally:
        h.cleanup()


def setup(h: ClusterHarness) -> None:
    """alice: READ and DELETE on her group, READ on her topic. The victim's group has offsets on both topics,
    alice's group one on the secret topic (set by the admin), the secret topic has records, a quota is set."""
    h.create_topic(SECRET, 2, 1)
    h.create_topic(MY_TOPIC, 1, 1)
    with Producer(h.bootstrap(), acks="all", **h.client_config) as p:
        for i in range(5):
            p.send(SECRET, f"secret-{i}".encode(), partition=0)
        p.flush()
    with h.admin() as a:
        a.alter_user_scram_credentials([("alice", MECH, "alice-secret", 4096)])
        a.create_acls(
            [
                AclBinding(rt, name, PatternType.LITERAL, "User:alice", "*", op, AclPermission.ALLOW)
                for rt, name, op in [
                    (ResourceType.GROUP, MINE, AclOperation.READ),
                    (ResourceType.GROUP, MINE, AclOperation.DELETE),
                    (ResourceType.TOPIC, MY_TOPIC, AclOperation.READ),
                ]
            ]
        )
        a.alter_group_offsets(VICTIM, {(SECRET, 0): 3, (MY_TOPIC, 0): 0})
        a.alter_group_offsets(MINE, {(SECRET, 0): 2})
        a.alter_client_quotas([("user", "victim")], {"producer_byte_rate": 1024.0})
    # alice logs in and may do what she was granted (so the refusals below are the ACLs', not a broken login)
    wait_until(lambda: native(h, ApiKey.METADATA, {"topics": [MY_TOPIC]})["topics"][0]["error_code"] == 0, 20, "alice")
    answer = native(h, ApiKey.OFFSET_COMMIT, {"group_id": MINE, "topics": [[MY_TOPIC, [[0, 1]]]]})
    assert answer["topics"][0][1][0][1] == 0, answer
    # her group is a share group too, empty: its offsets may be altered and deleted (by her, on her topic only)
    for epoch in (0, -1):
        hb = ShareGroupHeartbeatRequest(
            group_id=MINE, member_id="m", member_epoch=epoch, subscribed_topic_names=(MY_TOPIC,)
        )
        joined = decode(MESSAGES[ApiKey.SHARE_GROUP_HEARTBEAT][1], native(h, ApiKey.SHARE_GROUP_HEARTBEAT, encode(hb)))
        assert joined.error_code == 0, joined


def snapshot(h: ClusterHarness) -> dict:
    """What the walk must leave as it was, read as the admin."""
    with h.admin() as a:
        parts = [(SECRET, p) for p in (0, 1)]
        meta = a._lt.run(a._impl.client.request(None, ApiKey.METADATA, {"topics": None, "listener": "kafka"}))
        return {
            "victim offsets": a.list_group_offsets(VICTIM),
            "alice-group offsets": a.list_group_offsets(MINE),
            "victim group": a.describe_group(VICTIM).state,
            "alice-group share offsets": a.list_share_group_offsets(MINE),  # a topic altered would be listed here
            "groups": sorted(g[0] for g in a.list_groups()),
            "topics": sorted(a.list_topics(include_internal=True)),
            "secret start": a.list_offsets(parts, -2),
            "alice-topic start": a.list_offsets([(MY_TOPIC, 0)], -2),
            "secret end": a.list_offsets(parts, -1),
            "secret configs": a.describe_configs(SECRET),
            "broker configs": a.describe_broker_configs(1),
            "default broker configs": a.describe_broker_configs(None),
            "secret partitions": [len(t.partitions) for t in a.describe_topics([SECRET])],
            "acls": sorted(map(repr, a.describe_acls())),
            "credentials": a.describe_user_scram_credentials(),
            "quotas": a.describe_client_quotas(),
            "controller": (meta["controller_id"], meta["broker_info"]["controller_epoch"]),
            "brokers": meta["brokers"],
        }


# --- the native listener ---------------------------------------------------------------------------------------


def alice() -> ClientSecurity:
    return ClientSecurity("SASL_PLAINTEXT", MECH, "alice", "alice-secret")


def native(h: ClusterHarness, api: int, body: dict, answer: bool = True) -> dict | None:
    """One request as alice on a connection of its own (a refused login api closes it)."""

    async def ask() -> dict | None:
        conn = BrokerConnection("127.0.0.1", h[1].port, "walker", alice())
        try:
            await conn.connect(timeout=10)
            if not answer:
                conn.send(api, body, expect_response=False)
                await asyncio.sleep(0.2)
                return None
            # a typed body (a message's array) goes in the api's typed version
            version = TYPED_SINCE.get(api, 0) if isinstance(body, list) else 0
            return await conn.request(api, body, version, timeout=15)
        finally:
            conn.close()

    return asyncio.run(ask())


def top(r: dict) -> list:
    return [r.get("error_code")]  # None (an answer served, not refused) fails the check with the answer shown


def rows(key: str = "topics", at: int = 1) -> Callable[[dict], list]:
    return lambda r: [row[at] for _, rs in r[key] for row in rs]


def items(key: str, at: Any) -> Callable[[dict], list]:
    return lambda r: [x[at] for x in r[key]]


def records() -> bytes:
    from net import batch as batch_fmt

    now = int(time.time() * 1000)
    return batch_fmt.build([(0, 0, None, b"forged", None)], now, now)


def state_rows(api: ApiKey) -> Callable[[Any], list]:
    """The partition codes of a Read/WriteShareGroupState answer (its rows are `results`)."""
    return lambda a: [p.error_code for r in decode(MESSAGES[api][1], a).results for p in r.partitions]


def typed_rows(api: ApiKey) -> Callable[[Any], list]:
    """The partition rows' codes of a typed answer (a msgpack array); a refused request is a map with its code."""

    def codes(answer: Any) -> list:
        if isinstance(answer, dict):
            return top(answer)
        return [p.error_code for t in decode(MESSAGES[api][1], answer).topics for p in t.partitions]

    return codes


def share_offsets_rows(api: ApiKey) -> Callable[[Any], list]:
    """Alter/DeleteShareGroupOffsets: the request's code, then each topic's (Delete) or partition's (Alter)."""

    def codes(answer: Any) -> list:
        if isinstance(answer, dict):
            return top(answer)
        a = decode(MESSAGES[api][1], answer)
        return [a.error_code] + [
            c
            for t in a.responses
            for c in ([p.error_code for p in t.partitions] if hasattr(t, "partitions") else [t.error_code])
        ]

    return codes


def typed_cases() -> list[tuple[ApiKey, Any, Callable[[Any], list], list]]:
    """The typed apis (net/schema/): their native body is the message's array."""
    mine_and_secret = (
        DeleteRecordsTopic(name=MY_TOPIC, partitions=(DeleteRecordsPartition(partition_index=0, offset=-1),)),
        DeleteRecordsTopic(name=SECRET, partitions=(DeleteRecordsPartition(partition_index=0, offset=-1),)),
    )
    epochs = (OffsetForLeaderTopic(topic=SECRET, partitions=(OffsetForLeaderPartition(partition=0),)),)
    producers = (TopicRequest(name=SECRET, partition_indexes=(0, 1)),)
    quorum = (TopicData(topic_name="__cluster_metadata", partitions=(PartitionData(),)),)
    moves = (ReassignableTopic(name=SECRET, partitions=(ReassignablePartition(partition_index=0, replicas=(1, 2)),)),)
    fetched = (FetchTopic(topic=SECRET, partitions=(FetchPartition(partition_max_bytes=1 << 20),)),)
    listed = (ListOffsetsTopic(name=SECRET, partitions=(ListOffsetsPartition(timestamp=-1),)),)
    return [
        # Fetch is typed (native v1): a consumer's READ per topic; a follower's (replica_id >= 0) is brokers' only.
        # ListOffsets with a replica id is a client's too, as in Kafka: DESCRIBE per topic
        (ApiKey.FETCH, encode(FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), topics=fetched)),
         lambda a: top(a) if isinstance(a, dict) else [p.error_code for t in decode(MESSAGES[ApiKey.FETCH][1], a)
                                                        .responses for p in t.partitions], [TOPIC_DENIED]),
        (ApiKey.FETCH, encode(FetchRequest(replica_id=1, max_wait=datetime.timedelta(0), topics=fetched)), top,
         [ANY_ERROR]),
        (ApiKey.LIST_OFFSETS, encode(ListOffsetsRequest(replica_id=1, topics=listed)), typed_rows(ApiKey.LIST_OFFSETS),
         [TOPIC_DENIED]),
        # READ on her own topic is not DELETE
        (ApiKey.DELETE_RECORDS, encode(DeleteRecordsRequest(topics=mine_and_secret)), typed_rows(ApiKey.DELETE_RECORDS),
         [TOPIC_DENIED] * 2),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, encode(OffsetForLeaderEpochRequest(replica_id=-1, topics=epochs)),
         typed_rows(ApiKey.OFFSET_FOR_LEADER_EPOCH), [TOPIC_DENIED]),
        (ApiKey.DESCRIBE_PRODUCERS, encode(DescribeProducersRequest(topics=producers)),
         typed_rows(ApiKey.DESCRIBE_PRODUCERS), [TOPIC_DENIED] * 2),
        (ApiKey.DESCRIBE_LOG_DIRS, encode(DescribeLogDirsRequest(topics=None)), top, [CLUSTER_DENIED]),
        (ApiKey.DESCRIBE_QUORUM, encode(DescribeQuorumRequest(topics=quorum)), top, [CLUSTER_DENIED]),
        (ApiKey.LIST_CONFIG_RESOURCES, encode(ListConfigResourcesRequest()), top, [CLUSTER_DENIED]),
        # a cursor on her own topic does not let the secret one through
        (ApiKey.DESCRIBE_TOPIC_PARTITIONS, encode(DescribeTopicPartitionsRequest(
            topics=(DescribeTopic(name=SECRET), DescribeTopic(name="no-such-topic")),
            cursor=Cursor(topic_name=SECRET, partition_index=0))),
         lambda a: [t.error_code for t in decode(MESSAGES[ApiKey.DESCRIBE_TOPIC_PARTITIONS][1], a).topics
                    if t.name == SECRET or t.partitions], [TOPIC_DENIED]),
        # transactions: another principal's transactional id, a broker's api
        (ApiKey.ADD_PARTITIONS_TO_TXN, encode(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="victim-txn",
            v3_and_below_topics=(AddPartitionsToTxnTopic(name=MY_TOPIC, partitions=(0,)),))),
         lambda a: [p.partition_error_code for t in decode(MESSAGES[ApiKey.ADD_PARTITIONS_TO_TXN][1], a)
                    .results_by_topic_v3_and_below for p in t.results_by_partition], [TXN_DENIED]),
        (ApiKey.ADD_OFFSETS_TO_TXN, encode(AddOffsetsToTxnRequest(transactional_id="victim-txn", group_id=MINE)),
         top, [TXN_DENIED]),
        (ApiKey.END_TXN, encode(EndTxnRequest(transactional_id="victim-txn", committed=True)), top, [TXN_DENIED]),
        (ApiKey.TXN_OFFSET_COMMIT, encode(TxnOffsetCommitRequest(transactional_id="victim-txn", group_id=MINE)),
         top, [TXN_DENIED]),
        (ApiKey.DESCRIBE_TRANSACTIONS, encode(DescribeTransactionsRequest(transactional_ids=("victim-txn",))),
         lambda a: [st.error_code for st in decode(MESSAGES[ApiKey.DESCRIBE_TRANSACTIONS][1], a).transaction_states],
         [TXN_DENIED]),
        (ApiKey.LIST_TRANSACTIONS, encode(ListTransactionsRequest()),  # answered, with nothing she may not see
         lambda a: [len(decode(MESSAGES[ApiKey.LIST_TRANSACTIONS][1], a).transaction_states)], [0]),
        (ApiKey.CONSUMER_GROUP_HEARTBEAT, encode(ConsumerGroupHeartbeatRequest(
            group_id=VICTIM, member_id="m", member_epoch=0, subscribed_topic_names=(SECRET,), topic_partitions=(),
            rebalance_timeout=datetime.timedelta(seconds=30))), top, [GROUP_DENIED]),
        (ApiKey.CONSUMER_GROUP_DESCRIBE, encode(ConsumerGroupDescribeRequest(group_ids=(VICTIM,))),
         lambda a: [g.error_code for g in decode(MESSAGES[ApiKey.CONSUMER_GROUP_DESCRIBE][1], a).groups],
         [GROUP_DENIED]),
        (ApiKey.WRITE_TXN_MARKERS, encode(WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=1, topics=(WritableTxnMarkerTopic(name=SECRET, partition_indexes=(0,)),)),))),
         lambda a: [p.error_code for m in decode(MESSAGES[ApiKey.WRITE_TXN_MARKERS][1], a).markers
                    for t in m.topics for p in t.partitions], [CLUSTER_DENIED]),
        # [throttle, allow_rf_change, error_code, message, [[topic, [[partition, code, message]]]]]
        (ApiKey.ALTER_PARTITION_REASSIGNMENTS, encode(AlterPartitionReassignmentsRequest(topics=moves)),
         lambda r: [r[2]] + [p[1] for t in r[4] for p in t[1]], [CLUSTER_DENIED] * 2),
        (ApiKey.LIST_PARTITION_REASSIGNMENTS, encode(ListPartitionReassignmentsRequest()), top, [CLUSTER_DENIED]),
        # share groups (KIP-932): another principal's group; the share coordinator's apis are brokers'
        (ApiKey.SHARE_GROUP_HEARTBEAT, encode(ShareGroupHeartbeatRequest(group_id=VICTIM, member_id="m",
         subscribed_topic_names=(MY_TOPIC,))), top, [GROUP_DENIED]),
        (ApiKey.SHARE_GROUP_DESCRIBE, encode(ShareGroupDescribeRequest(group_ids=(VICTIM,))),
         lambda a: [g.error_code for g in decode(MESSAGES[ApiKey.SHARE_GROUP_DESCRIBE][1], a).groups], [GROUP_DENIED]),
        (ApiKey.SHARE_FETCH, encode(ShareFetchRequest(group_id=VICTIM, member_id="m")), top, [GROUP_DENIED]),
        (ApiKey.SHARE_ACKNOWLEDGE,
         encode(ShareAcknowledgeRequest(group_id=VICTIM, member_id="m", share_session_epoch=1)), top, [GROUP_DENIED]),
        (ApiKey.READ_SHARE_GROUP_STATE, encode(ReadShareGroupStateRequest(group_id=MINE, topics=(ReadStateData(
            topic_id=ANY_ID, partitions=(ReadPartition(),)),))), state_rows(ApiKey.READ_SHARE_GROUP_STATE),
         [CLUSTER_DENIED]),
        (ApiKey.WRITE_SHARE_GROUP_STATE, encode(WriteShareGroupStateRequest(group_id=MINE, topics=(WriteStateData(
            topic_id=ANY_ID, partitions=(WritePartition(),)),))), state_rows(ApiKey.WRITE_SHARE_GROUP_STATE),
         [CLUSTER_DENIED]),
        (ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, encode(DescribeShareGroupOffsetsRequest(
            groups=(DescribeShareGroupOffsetsRequestGroup(group_id=VICTIM),))),
         lambda a: [g.error_code for g in decode(MESSAGES[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS][1], a).groups],
         [GROUP_DENIED]),
        # altering needs READ on the group, deleting DELETE; both READ on each topic (her empty share group: the
        # secret topic's rows refused, nothing else asked)
        (ApiKey.ALTER_SHARE_GROUP_OFFSETS, encode(AlterShareGroupOffsetsRequest(group_id=VICTIM, topics=(AlterTopic(
            topic_name=MY_TOPIC, partitions=(AlterPartition(partition_index=0, start_offset=0),)),))),
         share_offsets_rows(ApiKey.ALTER_SHARE_GROUP_OFFSETS), [GROUP_DENIED]),
        (ApiKey.ALTER_SHARE_GROUP_OFFSETS, encode(AlterShareGroupOffsetsRequest(group_id=MINE, topics=(AlterTopic(
            topic_name=SECRET, partitions=(AlterPartition(partition_index=0, start_offset=0),
                                           AlterPartition(partition_index=1, start_offset=4))),))),
         share_offsets_rows(ApiKey.ALTER_SHARE_GROUP_OFFSETS), [0, TOPIC_DENIED, TOPIC_DENIED]),
        (ApiKey.DELETE_SHARE_GROUP_OFFSETS, encode(DeleteShareGroupOffsetsRequest(group_id=VICTIM, topics=(
            DeleteShareTopic(topic_name=MY_TOPIC),))),
         share_offsets_rows(ApiKey.DELETE_SHARE_GROUP_OFFSETS), [GROUP_DENIED]),
        (ApiKey.DELETE_SHARE_GROUP_OFFSETS, encode(DeleteShareGroupOffsetsRequest(group_id=MINE, topics=(
            DeleteShareTopic(topic_name=SECRET),))),
         share_offsets_rows(ApiKey.DELETE_SHARE_GROUP_OFFSETS), [0, TOPIC_DENIED]),
        (ApiKey.INITIALIZE_SHARE_GROUP_STATE, encode(InitializeShareGroupStateRequest(group_id=MINE, topics=(
            InitializeStateData(topic_id=ANY_ID, partitions=(InitializePartition(start_offset=0),)),))),
         state_rows(ApiKey.INITIALIZE_SHARE_GROUP_STATE), [CLUSTER_DENIED]),
        (ApiKey.DELETE_SHARE_GROUP_STATE, encode(DeleteShareGroupStateRequest(group_id=MINE, topics=(
            DeleteStateData(topic_id=ANY_ID, partitions=(DeleteStatePartition(),)),))),
         state_rows(ApiKey.DELETE_SHARE_GROUP_STATE), [CLUSTER_DENIED]),
        (ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, encode(ReadShareGroupStateSummaryRequest(group_id=MINE, topics=(
            ReadStateSummaryData(topic_id=ANY_ID, partitions=(SummaryPartition(),)),))),
         state_rows(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY), [CLUSTER_DENIED]),
        # the classic group apis, typed (native v1): another principal's group, a topic she may not read
        (ApiKey.FIND_COORDINATOR, encode(FindCoordinatorRequest(key=VICTIM)), top, [GROUP_DENIED]),
        (ApiKey.FIND_COORDINATOR, encode(FindCoordinatorRequest(coordinator_keys=(VICTIM,))),
         lambda a: [c.error_code for c in typed(ApiKey.FIND_COORDINATOR, a).coordinators], [GROUP_DENIED]),
        (ApiKey.FIND_COORDINATOR, encode(FindCoordinatorRequest(key="victim-txn", key_type=1)), top, [TXN_DENIED]),
        (ApiKey.JOIN_GROUP, encode(JoinGroupRequest(group_id=VICTIM, session_timeout=datetime.timedelta(seconds=10),
         protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range"),))), top, [GROUP_DENIED]),
        (ApiKey.SYNC_GROUP, encode(SyncGroupRequest(group_id=VICTIM, generation_id=1, member_id="m")), top,
         [GROUP_DENIED]),
        (ApiKey.HEARTBEAT, encode(HeartbeatRequest(group_id=VICTIM, generation_id=1, member_id="m")), top,
         [GROUP_DENIED]),
        (ApiKey.LEAVE_GROUP, encode(LeaveGroupRequest(group_id=VICTIM, members=(MemberIdentity(member_id="m"),))),
         top, [GROUP_DENIED]),
        (ApiKey.OFFSET_COMMIT, encode(OffsetCommitRequest(group_id=VICTIM, topics=(OffsetCommitRequestTopic(
            name=MY_TOPIC, partitions=(OffsetCommitRequestPartition(committed_offset=999),)),))), top, [GROUP_DENIED]),
        (ApiKey.OFFSET_COMMIT, encode(OffsetCommitRequest(group_id=MINE, topics=(OffsetCommitRequestTopic(
            name=SECRET, partitions=(OffsetCommitRequestPartition(committed_offset=999),)),))),
         lambda a: [p.error_code for t in typed(ApiKey.OFFSET_COMMIT, a).topics for p in t.partitions],
         [TOPIC_DENIED]),
        (ApiKey.OFFSET_FETCH, encode(OffsetFetchRequest(group_id=VICTIM, topics=None)), top, [GROUP_DENIED]),
        (ApiKey.OFFSET_FETCH, encode(OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id=VICTIM),
                                                                OffsetFetchRequestGroup(group_id=MINE, topics=(
            OffsetFetchRequestTopics(name=SECRET, partition_indexes=(0,)),))))),
         lambda a: [g.error_code for g in typed(ApiKey.OFFSET_FETCH, a).groups]
         + [p.error_code for g in typed(ApiKey.OFFSET_FETCH, a).groups for t in g.topics for p in t.partitions],
         [0, GROUP_DENIED, TOPIC_DENIED]),
        (ApiKey.DESCRIBE_GROUPS, encode(DescribeGroupsRequest(groups=(VICTIM,), include_authorized_operations=True)),
         lambda a: [g.error_code for g in typed(ApiKey.DESCRIBE_GROUPS, a).groups], [GROUP_DENIED]),
        (ApiKey.DELETE_GROUPS, encode(DeleteGroupsRequest(groups_names=(VICTIM,))),
         lambda a: [r.error_code for r in typed(ApiKey.DELETE_GROUPS, a).results], [GROUP_DENIED]),
        (ApiKey.OFFSET_DELETE, encode(OffsetDeleteRequest(group_id=VICTIM, topics=(OffsetDeleteRequestTopic(
            name=MY_TOPIC, partitions=(OffsetDeleteRequestPartition(),)),))), top, [GROUP_DENIED]),
        (ApiKey.OFFSET_DELETE, encode(OffsetDeleteRequest(group_id=MINE, topics=(OffsetDeleteRequestTopic(
            name=SECRET, partitions=(OffsetDeleteRequestPartition(),)),))),
         lambda a: [p.error_code for t in typed(ApiKey.OFFSET_DELETE, a).topics for p in t.partitions],
         [TOPIC_DENIED]),
        # ACLs, SCRAM credentials, client quotas, typed (native v1): the cluster's, refused as a whole
        (ApiKey.DESCRIBE_ACLS, encode(DescribeAclsRequest(resource_type_filter=1, operation=1, permission_type=1)),
         top, [CLUSTER_DENIED]),
        (ApiKey.CREATE_ACLS, encode(CreateAclsRequest(creations=(AclCreation(
            resource_type=4, resource_name="kafka-cluster", principal="User:alice", host="*", operation=1,
            permission_type=3),))), top, [CLUSTER_DENIED]),
        (ApiKey.DELETE_ACLS, encode(DeleteAclsRequest(filters=(DeleteAclsFilter(resource_type_filter=1, operation=1,
                                                                                permission_type=1),))),
         top, [CLUSTER_DENIED]),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, encode(DescribeUserScramCredentialsRequest()), top, [CLUSTER_DENIED]),
        (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, encode(AlterUserScramCredentialsRequest(deletions=(
            ScramCredentialDeletion(name="admin", mechanism=1),))), top, [CLUSTER_DENIED]),
        (ApiKey.DESCRIBE_CLIENT_QUOTAS, encode(DescribeClientQuotasRequest()), top, [CLUSTER_DENIED]),
        (ApiKey.ALTER_CLIENT_QUOTAS, encode(AlterClientQuotasRequest(entries=(QuotaEntry(
            entity=(QuotaEntity(entity_type="user", entity_name="alice"),),
            ops=(QuotaOp(key="producer_byte_rate", value=1e12),)),))), top, [CLUSTER_DENIED]),
        # topics and configs, typed (native v1; IncrementalAlterConfigs v0): refused topic by topic, resource by
        # resource (a broker's configs: the cluster's)
        (ApiKey.CREATE_TOPICS, encode(CreateTopicsRequest(topics=(CreatableTopic(
            name="evil-topic", num_partitions=1, replication_factor=1),))),
         lambda a: [t.error_code for t in typed(ApiKey.CREATE_TOPICS, a).topics], [TOPIC_DENIED]),
        (ApiKey.DELETE_TOPICS, encode(DeleteTopicsRequest(topics=(DeleteTopicState(name=SECRET),))),
         lambda a: [t.error_code for t in typed(ApiKey.DELETE_TOPICS, a).responses], [TOPIC_DENIED]),
        (ApiKey.CREATE_PARTITIONS,
         encode(CreatePartitionsRequest(topics=(CreatePartitionsTopic(name=SECRET, count=5),))),
         lambda a: [t.error_code for t in typed(ApiKey.CREATE_PARTITIONS, a).results], [TOPIC_DENIED]),
        (ApiKey.DESCRIBE_CONFIGS, encode(DescribeConfigsRequest(resources=(
            DescribeConfigsResource(resource_type=2, resource_name=SECRET),
            DescribeConfigsResource(resource_type=4, resource_name="1"),
            DescribeConfigsResource(resource_type=32, resource_name=VICTIM)))),
         lambda a: [r.error_code for r in typed(ApiKey.DESCRIBE_CONFIGS, a).results],
         [TOPIC_DENIED, CLUSTER_DENIED, GROUP_DENIED]),
        (ApiKey.ALTER_CONFIGS, encode(AlterConfigsRequest(resources=(
            AlterConfigsResource(resource_type=2, resource_name=SECRET, configs=(
                AlterableConfig(name="retention.ms", value="1"),)),
            AlterConfigsResource(resource_type=4, resource_name="", configs=(
                AlterableConfig(name=THROTTLE, value="1"),))))),
         lambda a: [r.error_code for r in typed(ApiKey.ALTER_CONFIGS, a).responses], [TOPIC_DENIED, CLUSTER_DENIED]),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, encode(IncrementalAlterConfigsRequest(resources=(
            IncrementalAlterConfigsResource(resource_type=2, resource_name=SECRET, configs=(
                IncrementalAlterableConfig(name="retention.ms", config_operation=0, value="1"),)),
            IncrementalAlterConfigsResource(resource_type=4, resource_name="1", configs=(
                IncrementalAlterableConfig(name=THROTTLE, config_operation=0, value="1"),)),
            IncrementalAlterConfigsResource(resource_type=32, resource_name=VICTIM, configs=(
                IncrementalAlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest"),))))),
         lambda a: [r.error_code for r in typed(ApiKey.INCREMENTAL_ALTER_CONFIGS, a).responses],
         [TOPIC_DENIED, CLUSTER_DENIED, GROUP_DENIED]),
        # open to her, as Kafka's; she may do nothing on the cluster, and is told so when she asks
        (ApiKey.DESCRIBE_CLUSTER, encode(DescribeClusterRequest(include_cluster_authorized_operations=True)),
         lambda a: [typed(ApiKey.DESCRIBE_CLUSTER, a).error_code,
                    typed(ApiKey.DESCRIBE_CLUSTER, a).cluster_authorized_operations], [0, 0]),
        # typed Metadata: the secret topic, a topic her request would create (no CREATE) and an id no topic has;
        # asked for, what she may do on the cluster (nothing) and on each topic answered (none denied gets any)
        (ApiKey.METADATA, encode(MetadataRequest(
            topics=(MetadataRequestTopic(name=SECRET), MetadataRequestTopic(name="evil-auto"),
                    MetadataRequestTopic(topic_id=uuid.uuid4())),
            allow_auto_topic_creation=True, include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True)),
         lambda a: [*(t.error_code for t in typed(ApiKey.METADATA, a).topics),
                    *(t.topic_authorized_operations for t in typed(ApiKey.METADATA, a).topics),
                    typed(ApiKey.METADATA, a).cluster_authorized_operations],
         [ErrorCode.UNKNOWN_TOPIC_ID, TOPIC_DENIED, TOPIC_DENIED, *[-(2**31)] * 3, 0]),
    ]  # fmt: skip


def typed(api: ApiKey, answer: Any) -> Any:
    """A typed answer (its msgpack array) read into the api's response class."""
    return decode(MESSAGES[api][1], answer)


def native_cases() -> list[tuple[ApiKey, dict, Callable[[dict], list], list]]:
    """(api, body, the codes in the answer, the codes expected)."""
    group_body = {"generation_id": 1, "member_id": "m", **NOISE}
    commit = {
        "group_id": VICTIM,
        "groups": [],
        "generation_id": -1,
        "member_id": "",
        "topics": [[MY_TOPIC, [[0, 999]]]],
    }
    acl_filter = [1, None, 1, None, None, 1, 1]
    return [
        (ApiKey.PRODUCE, {"acks": 1, "topics": [[SECRET, [[0, records()]]]], **NOISE}, rows(), [TOPIC_DENIED]),
        (ApiKey.FETCH, {"max_wait_ms": 0, "topics": [[SECRET, [[0, 0, 1 << 20]]]], **NOISE}, rows(), [TOPIC_DENIED]),
        (ApiKey.FETCH, {"replica_id": 1, "max_wait_ms": 0, "topics": [[SECRET, [[0, 0, 1 << 20]]]]}, top, [ANY_ERROR]),
        (ApiKey.LIST_OFFSETS, {"topics": [[SECRET, [[0, -1], [1, -2]]]], **NOISE}, rows(), [TOPIC_DENIED] * 2),
        (
            ApiKey.METADATA,
            {"topics": [SECRET, "evil-auto"], "allow_auto_topic_creation": True, **NOISE},
            items("topics", "error_code"),
            [TOPIC_DENIED, TOPIC_DENIED],
        ),
        # native v0 of DescribeTopicPartitions is a Metadata request (its typed v1 is in typed_cases)
        (
            ApiKey.DESCRIBE_TOPIC_PARTITIONS,
            {"topics": [SECRET], **NOISE},
            items("topics", "error_code"),
            [TOPIC_DENIED],
        ),  # fmt: skip
        (ApiKey.OFFSET_COMMIT, commit, top, [GROUP_DENIED]),  # the frame of the issue
        (ApiKey.OFFSET_COMMIT, dict(commit, groups=None, keys=[VICTIM]), top, [GROUP_DENIED]),
        (ApiKey.OFFSET_COMMIT, {"group_id": MINE, "topics": [[SECRET, [[0, 999]]]], **NOISE}, rows(), [TOPIC_DENIED]),
        (ApiKey.OFFSET_FETCH, {"group_id": VICTIM, "topics": None, "keys": []}, top, [GROUP_DENIED]),
        (
            ApiKey.OFFSET_FETCH,
            {"groups": [{"group_id": VICTIM, "topics": None}]},
            items("groups", "error_code"),
            [GROUP_DENIED],
        ),
        (ApiKey.OFFSET_FETCH, {"group_id": MINE, "groups": [{"group_id": VICTIM}]}, top, [INVALID]),
        (ApiKey.OFFSET_FETCH, {"group_id": MINE, "topics": [[SECRET, [0]]]}, rows(at=3), [TOPIC_DENIED]),
        (ApiKey.FIND_COORDINATOR, {"key": VICTIM, "groups": []}, top, [GROUP_DENIED]),
        (ApiKey.FIND_COORDINATOR, {"keys": [VICTIM]}, items("coordinators", "error_code"), [GROUP_DENIED]),
        (ApiKey.FIND_COORDINATOR, {"key": MINE, "keys": [VICTIM]}, top, [INVALID]),
        (ApiKey.FIND_COORDINATOR, {"key": "victim-txn", "key_type": 1}, top, [TXN_DENIED]),
        (
            ApiKey.JOIN_GROUP,
            {"group_id": VICTIM, "member_id": "", "session_timeout_ms": 10000, "protocols": [["range", b""]], **NOISE},
            top,
            [GROUP_DENIED],
        ),
        (ApiKey.HEARTBEAT, {"group_id": VICTIM, **group_body}, top, [GROUP_DENIED]),
        (ApiKey.LEAVE_GROUP, {"group_id": VICTIM, "members": ["m"], **NOISE}, top, [GROUP_DENIED]),
        (ApiKey.SYNC_GROUP, {"group_id": VICTIM, "assignments": [], **group_body}, top, [GROUP_DENIED]),
        (ApiKey.DESCRIBE_GROUPS, {"groups": [VICTIM], "keys": []}, items("groups", "error_code"), [GROUP_DENIED]),
        (ApiKey.DELETE_GROUPS, {"groups": [VICTIM], "keys": []}, items("results", 1), [GROUP_DENIED]),
        (ApiKey.OFFSET_DELETE, {"group_id": VICTIM, "topics": [[SECRET, [0]]], **NOISE}, top, [GROUP_DENIED]),
        (ApiKey.OFFSET_DELETE, {"group_id": MINE, "topics": [[SECRET, [0]]], **NOISE}, rows(), [TOPIC_DENIED]),
        (
            ApiKey.CREATE_TOPICS,
            {"topics": [{"name": "evil-topic", "num_partitions": 1, "replication_factor": 1}], **NOISE},
            items("topics", 1),
            [TOPIC_DENIED],
        ),
        # a map marked forwarded was a broker's; forwarded requests travel in an ENVELOPE now (CLUSTER_ACTION)
        (ApiKey.CREATE_TOPICS, {"topics": [{"name": "evil-topic"}], "forwarded": True}, top, [INVALID]),
        (ApiKey.DELETE_TOPICS, {"topics": [SECRET], **NOISE}, items("topics", 1), [TOPIC_DENIED]),
        (ApiKey.CREATE_PARTITIONS, {"topics": [{"name": SECRET, "count": 5}]}, items("topics", 1), [TOPIC_DENIED]),
        (ApiKey.INIT_PRODUCER_ID, dict(NOISE), top, [CLUSTER_DENIED]),
        (ApiKey.DESCRIBE_ACLS, {"filter": acl_filter, **NOISE}, top, [CLUSTER_DENIED]),
        (ApiKey.CREATE_ACLS, {"creations": [[4, "kafka-cluster", 3, "User:alice", "*", 1, 3]]}, top, [CLUSTER_DENIED]),
        (ApiKey.DELETE_ACLS, {"filters": [acl_filter]}, top, [CLUSTER_DENIED]),
        (
            ApiKey.DESCRIBE_CONFIGS,
            {"topics": [SECRET], "brokers": ["1"]},
            lambda r: [x[1] for x in r["results"] + r["brokers"]],
            [TOPIC_DENIED, CLUSTER_DENIED],
        ),
        (
            ApiKey.ALTER_CONFIGS,
            {"topics": [[SECRET, {"retention.ms": "1"}]], "replace": True},
            items("topics", 1),
            [TOPIC_DENIED],
        ),
        (  # brokers' dynamic configs (a replication throttle), one broker's and the cluster default's
            ApiKey.ALTER_CONFIGS,
            {"topics": [[SECRET, {"retention.ms": "1"}]], "brokers": [["1", {THROTTLE: "1"}], ["", {THROTTLE: "1"}]]},
            lambda r: [x[1] for x in r["topics"] + r["brokers"]],
            [TOPIC_DENIED, CLUSTER_DENIED, CLUSTER_DENIED],
        ),
        (ApiKey.ELECT_LEADERS, {"election_type": 1, "topics": None}, top, [CLUSTER_DENIED]),
        (ApiKey.DESCRIBE_CLIENT_QUOTAS, {}, top, [CLUSTER_DENIED]),
        (
            ApiKey.ALTER_CLIENT_QUOTAS,
            {"entries": [[[["user", "victim"]], {"producer_byte_rate": None}]]},
            top,
            [CLUSTER_DENIED],
        ),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None}, top, [CLUSTER_DENIED]),
        (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [["admin", MECH]]}, top, [CLUSTER_DENIED]),
        (
            ApiKey.ALTER_PARTITION,
            {"topic": SECRET, "partition": 0, "leader": 1, "leader_epoch": 99, "partition_epoch": 99, "isr": [1]},
            top,
            [ANY_ERROR],
        ),
        (ApiKey.BROKER_REGISTRATION, {"broker_id": 1, "kafka_host": "evil.example", "kafka_port": 1}, top, [ANY_ERROR]),
        (ApiKey.BROKER_HEARTBEAT, {"broker_id": 1}, top, [ANY_ERROR]),
        (ApiKey.UPDATE_METADATA, {"applied": 2**40, "timeout_ms": 60_000}, top, [ANY_ERROR]),
        # an envelope would run a request as anyone it names: brokers only
        (ApiKey.ENVELOPE, {"api_key": 43, "request": [1, None, 60000], "principal": "User:admin"}, top, [ANY_ERROR]),
        # a second login on a logged-in connection is refused (the principal stays alice)
        (ApiKey.SASL_HANDSHAKE, {"mechanism": MECH}, top, [ANY_ERROR]),
        (ApiKey.SASL_AUTHENTICATE, {"auth_bytes": b"n,,n=admin,r=abc"}, top, [ANY_ERROR]),
    ]


def check(codes: list, expected: list, what: str) -> None:
    if expected == [ANY_ERROR]:
        assert codes and all(c != 0 for c in codes), what
    else:
        assert sorted(codes) == sorted(expected), what


def test_every_native_api_is_refused_and_changes_nothing(cluster):
    before = snapshot(cluster)
    served = {k for k, _lo, _hi in native(cluster, ApiKey.API_VERSIONS, {})["api_keys"]}
    walked = {ApiKey.API_VERSIONS, ApiKey.LIST_GROUPS, ApiKey.QUORUM}  # checked below, not by their codes
    for api, body, codes_of, expected in native_cases() + typed_cases():
        answer = native(cluster, api, body)
        check(codes_of(answer), expected, f"{api.name} {body}: {answer}")
        walked.add(api)
    # filtered rather than refused: every topic, every group, her group's offsets on every topic
    assert VICTIM not in [g[0] for g in native(cluster, ApiKey.LIST_GROUPS, NOISE)["groups"]]
    assert SECRET not in [t["name"] for t in native(cluster, ApiKey.METADATA, {"topics": None})["topics"]]
    every = typed(ApiKey.METADATA, native(cluster, ApiKey.METADATA, encode(MetadataRequest(topics=None))))
    assert MY_TOPIC in [t.name for t in every.topics] and SECRET not in [t.name for t in every.topics]
    # every topic, a page at a time: hers only, with what she may do on it (READ, and DESCRIBE that READ implies)
    listed = decode(
        MESSAGES[ApiKey.DESCRIBE_TOPIC_PARTITIONS][1],
        native(
            cluster,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS,
            encode(DescribeTopicPartitionsRequest(response_partition_limit=1)),
        ),
    )
    assert [(t.name, t.topic_authorized_operations) for t in listed.topics] == [
        (MY_TOPIC, 1 << AclOperation.READ | 1 << AclOperation.DESCRIBE)] and listed.next_cursor is None  # fmt: skip
    fetched = native(cluster, ApiKey.OFFSET_FETCH, {"group_id": MINE, "topics": None})
    assert fetched["error_code"] == 0 and [t for t, _ in fetched["topics"]] == [MY_TOPIC]
    native(cluster, ApiKey.QUORUM, {"m": ["be", 2**31 - 1, 1]}, answer=False)  # one-way: no answer either way
    assert walked == served, f"apis served but not walked: {sorted(served - walked)}"
    assert snapshot(cluster) == before


# --- the Kafka listener ----------------------------------------------------------------------------------------


class KafkaWire:
    """A raw Kafka-protocol connection logged in as alice (SaslHandshake v1, SaslAuthenticate v2)."""

    def __init__(self, h: ClusterHarness) -> None:
        self.s = socket.create_connection(("127.0.0.1", h[1].kafka_port), timeout=15)
        self.corr = 0
        assert self.call(17, 1, {"mechanism": MECH})["error_code"] == 0
        client = SaslClient(MECH, "alice", "alice-secret")
        token = client.first()
        while token is not None:
            answer = self.call(36, 2, {"auth_bytes": token})
            assert answer["error_code"] == 0, answer
            token = client.step(answer["auth_bytes"])

    def call(self, api: int, version: int, body: dict) -> dict:
        self.corr += 1
        self.s.sendall(frame(api, version, self.corr, body))
        head = self.s.recv(4, socket.MSG_WAITALL)
        assert len(head) == 4, f"api {api} v{version}: connection closed"
        raw = self.s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
        assert struct.unpack_from(">i", raw)[0] == self.corr
        flexible = load_request_schema(api, version).__flexible__ and api != 18
        entity, _ = entity_reader(load_response_schema(api, version))(raw, 5 if flexible else 4)
        return plain(entity)

    def close(self) -> None:
        self.s.close()


def leaf_codes(x: Any) -> list[int]:
    """The error codes of the answer's innermost rows (a partition's, a group's, the request's if it has none)."""
    if isinstance(x, list):
        return [c for v in x for c in leaf_codes(v)]
    if not isinstance(x, dict):
        return []
    inner = [c for v in x.values() if isinstance(v, list) for c in leaf_codes(v)]
    if inner:
        return inner
    for key in ("error_code", "partition_error_code"):  # AddPartitionsToTxn's rows name it so
        if key in x:
            return [x[key]]
    return []


def kafka_cases() -> list[tuple[int, int, dict, list]]:
    """(api, version, body, the innermost codes expected)."""
    acl_filter = {
        "resource_type_filter": 1,
        "pattern_type_filter": 1,
        "operation": 1,
        "permission_type": 1,
    }
    offset_topics = [{"name": MY_TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 999}]}]
    configs = [{"name": "retention.ms", "value": "1", "config_operation": 0}]
    throttle = [{"name": THROTTLE, "value": "1", "config_operation": 0}]
    return [
        (
            0,
            8,
            {
                "acks": 1,
                "timeout": 5000,
                "topic_data": [{"name": SECRET, "partition_data": [{"index": 0, "records": records()}]}],
            },
            [TOPIC_DENIED],
        ),
        (
            1,
            12,
            {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": SECRET,
                        "partitions": [
                            {
                                "partition": 0,
                                "fetch_offset": 0,
                                "partition_max_bytes": 1 << 20,
                                "current_leader_epoch": -1,
                                "log_start_offset": -1,
                            }
                        ],
                    }
                ],
            },
            [TOPIC_DENIED],
        ),
        (
            2,
            7,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "name": SECRET,
                        "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}],
                    }
                ],
            },
            [TOPIC_DENIED],
        ),
        (
            3,
            12,
            {"topics": [{"name": SECRET}, {"name": "evil-auto"}], "allow_auto_topic_creation": True},
            [TOPIC_DENIED] * 2,
        ),
        (
            8,
            8,
            {"group_id": VICTIM, "generation_id_or_member_epoch": -1, "member_id": "", "topics": offset_topics},
            [GROUP_DENIED],
        ),
        (
            8,
            2,
            {
                "group_id": MINE,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [{"name": SECRET, "partitions": [{"partition_index": 0, "committed_offset": 999}]}],
            },
            [TOPIC_DENIED],
        ),
        (9, 8, {"groups": [{"group_id": VICTIM, "topics": None}]}, [GROUP_DENIED]),
        (9, 7, {"group_id": VICTIM, "topics": None}, [GROUP_DENIED]),
        (10, 4, {"key_type": 0, "coordinator_keys": [VICTIM]}, [GROUP_DENIED]),
        (10, 3, {"key": VICTIM, "key_type": 0}, [GROUP_DENIED]),
        (
            11,
            9,
            {
                "group_id": VICTIM,
                "session_timeout": 10000,
                "rebalance_timeout": 10000,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
            [GROUP_DENIED],
        ),
        (12, 4, {"group_id": VICTIM, "generation_id": 1, "member_id": "m"}, [GROUP_DENIED]),
        (13, 5, {"group_id": VICTIM, "members": [{"member_id": "m"}]}, [GROUP_DENIED]),
        (
            14,
            5,
            {
                "group_id": VICTIM,
                "generation_id": 1,
                "member_id": "m",
                "protocol_type": "consumer",
                "protocol_name": "range",
            },
            [GROUP_DENIED],
        ),
        (15, 5, {"groups": [VICTIM]}, [GROUP_DENIED]),
        (
            19,
            7,
            {"topics": [{"name": "evil-topic", "num_partitions": 1, "replication_factor": 1}], "timeout": 5000},
            [TOPIC_DENIED],
        ),
        (20, 6, {"topics": [{"name": SECRET}], "timeout": 5000}, [TOPIC_DENIED]),
        (
            22,
            4,
            {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
            [CLUSTER_DENIED],
        ),
        (29, 3, acl_filter, [CLUSTER_DENIED]),
        (
            30,
            3,
            {
                "creations": [
                    {
                        "resource_type": 4,
                        "resource_name": "kafka-cluster",
                        "resource_pattern_type": 3,
                        "principal": "User:alice",
                        "host": "*",
                        "operation": 1,
                        "permission_type": 3,
                    }
                ]
            },
            [CLUSTER_DENIED],
        ),
        (31, 3, {"filters": [acl_filter]}, [CLUSTER_DENIED]),
        (
            32,
            4,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": SECRET, "configuration_keys": None},
                    {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
                ]
            },
            [TOPIC_DENIED, CLUSTER_DENIED],
        ),
        (33, 2, {"resources": [{"resource_type": 2, "resource_name": SECRET, "configs": configs}]}, [TOPIC_DENIED]),
        (33, 2, {"resources": [{"resource_type": 4, "resource_name": "1", "configs": throttle}]}, [CLUSTER_DENIED]),
        (37, 3, {"topics": [{"name": SECRET, "count": 5, "assignments": None}], "timeout": 5000}, [TOPIC_DENIED]),
        (42, 2, {"groups_names": [VICTIM]}, [GROUP_DENIED]),
        (43, 2, {"election_type": 1, "topic_partitions": None, "timeout": 5000}, [CLUSTER_DENIED]),
        (22, 4, {"transactional_id": "victim-txn", "transaction_timeout": 60000}, [TXN_DENIED]),
        (
            24,
            3,
            {
                "v3_and_below_transactional_id": "victim-txn",
                "v3_and_below_topics": [{"name": MY_TOPIC, "partitions": [0]}],
            },
            [TXN_DENIED],
        ),
        (25, 3, {"transactional_id": "victim-txn", "group_id": MINE}, [TXN_DENIED]),
        (26, 3, {"transactional_id": "victim-txn", "committed": True}, [TXN_DENIED]),
        (
            27,
            1,
            {
                "markers": [
                    {
                        "producer_id": 1,
                        "producer_epoch": 0,
                        "transaction_result": True,
                        "topics": [{"name": SECRET, "partition_indexes": [0]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
            [ANY_ERROR],
        ),
        (
            28,
            3,
            {
                "transactional_id": "victim-txn",
                "group_id": MINE,
                "topics": [{"name": MY_TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
            },
            [TXN_DENIED],
        ),
        (65, 0, {"transactional_ids": ["victim-txn"]}, [TXN_DENIED]),
        (
            68,
            1,
            {
                "group_id": VICTIM,
                "member_id": "m",
                "member_epoch": 0,
                "rebalance_timeout": 30000,
                "subscribed_topic_names": [SECRET],
                "topic_partitions": [],
            },
            [GROUP_DENIED],
        ),
        (69, 1, {"group_ids": [VICTIM], "include_authorized_operations": True}, [GROUP_DENIED]),
        (44, 1, {"resources": [{"resource_type": 2, "resource_name": SECRET, "configs": configs}]}, [TOPIC_DENIED]),
        (
            44,
            1,
            {"resources": [{"resource_type": 4, "resource_name": name, "configs": throttle} for name in ("1", "")]},
            [CLUSTER_DENIED, CLUSTER_DENIED],
        ),
        (
            47,
            0,
            {"group_id": VICTIM, "topics": [{"name": SECRET, "partitions": [{"partition_index": 0}]}]},
            [GROUP_DENIED],
        ),
        (48, 1, {"components": [], "strict": False}, [CLUSTER_DENIED]),
        (
            49,
            1,
            {
                "entries": [
                    {
                        "entity": [{"entity_type": "user", "entity_name": "victim"}],
                        "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}],
                    }
                ]
            },
            [CLUSTER_DENIED],
        ),
        (50, 0, {"users": None}, [CLUSTER_DENIED]),
        (
            21,
            2,
            {"timeout": 5000, "topics": [{"name": SECRET, "partitions": [{"partition_index": 0, "offset": -1}]}]},
            [TOPIC_DENIED],
        ),
        (
            23,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {"topic": SECRET, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}
                ],
            },
            [TOPIC_DENIED],
        ),
        (35, 4, {"topics": None}, [CLUSTER_DENIED]),
        (61, 0, {"topics": [{"name": SECRET, "partition_indexes": [0]}]}, [TOPIC_DENIED]),
        (
            55,
            2,
            {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
            [CLUSTER_DENIED],
        ),
        (74, 1, {"resource_types": []}, [CLUSTER_DENIED]),
        # share groups (KIP-932)
        (76, 1, {"group_id": VICTIM, "member_id": "m", "subscribed_topic_names": [MY_TOPIC]}, [GROUP_DENIED]),
        (77, 1, {"group_ids": [VICTIM]}, [GROUP_DENIED]),
        (78, 1, {"group_id": VICTIM, "member_id": "m", "max_records": 1, "batch_size": 1}, [GROUP_DENIED]),
        (79, 1, {"group_id": VICTIM, "member_id": "m", "share_session_epoch": 1}, [GROUP_DENIED]),
        (
            84,
            0,
            {"group_id": MINE, "topics": [{"topic_id": ANY_ID, "partitions": [{"partition": 0}]}]},
            [CLUSTER_DENIED],
        ),
        (
            85,
            0,
            {"group_id": MINE, "topics": [{"topic_id": ANY_ID, "partitions": [{"partition": 0}]}]},
            [CLUSTER_DENIED],
        ),
        (90, 1, {"groups": [{"group_id": VICTIM, "topics": None}]}, [GROUP_DENIED]),
        (
            91,
            0,
            {"group_id": VICTIM, "topics": [{"topic_name": MY_TOPIC, "partitions": [{"partition_index": 0}]}]},
            [GROUP_DENIED],
        ),
        (
            91,
            0,
            {"group_id": MINE, "topics": [{"topic_name": SECRET, "partitions": [{"partition_index": 1}]}]},
            [TOPIC_DENIED],
        ),
        (92, 0, {"group_id": VICTIM, "topics": [{"topic_name": MY_TOPIC}]}, [GROUP_DENIED]),
        (92, 0, {"group_id": MINE, "topics": [{"topic_name": SECRET}]}, [TOPIC_DENIED]),
        (
            83,
            0,
            {"group_id": MINE, "topics": [{"topic_id": ANY_ID, "partitions": [{"partition": 0}]}]},
            [CLUSTER_DENIED],
        ),
        (
            86,
            0,
            {"group_id": MINE, "topics": [{"topic_id": ANY_ID, "partitions": [{"partition": 0}]}]},
            [CLUSTER_DENIED],
        ),
        (
            87,
            0,
            {"group_id": MINE, "topics": [{"topic_id": ANY_ID, "partitions": [{"partition": 0}]}]},
            [CLUSTER_DENIED],
        ),
        (
            32,
            4,
            {"resources": [{"resource_type": 32, "resource_name": VICTIM, "configuration_keys": None}]},
            [GROUP_DENIED],
        ),
        (
            44,
            1,
            {
                "resources": [
                    {
                        "resource_type": 32,
                        "resource_name": VICTIM,
                        "configs": [{"name": "share.auto.offset.reset", "value": "earliest", "config_operation": 0}],
                    }
                ]
            },
            [GROUP_DENIED],
        ),
        (
            75,
            0,
            {"topics": [{"name": SECRET}], "response_partition_limit": 10, "cursor": None},
            [TOPIC_DENIED],
        ),
        (
            45,
            1,
            {"timeout": 5000, "topics": [{"name": SECRET, "partitions": [{"partition_index": 0, "replicas": [1, 2]}]}]},
            [CLUSTER_DENIED],
        ),
        (46, 0, {"timeout": 5000, "topics": None}, [CLUSTER_DENIED]),
        (51, 0, {"deletions": [{"name": "admin", "mechanism": 1}], "upsertions": []}, [CLUSTER_DENIED]),
    ]


def test_every_kafka_api_is_refused_and_changes_nothing(cluster):
    before = snapshot(cluster)
    wire = KafkaWire(cluster)
    try:
        served = {row["api_key"] for row in wire.call(18, 3, {"client_software_name": "t"})["api_keys"]}
        walked = {18}
        for api, version, body, expected in kafka_cases():
            answer = wire.call(api, version, body)
            check(leaf_codes(answer), expected, f"api {api} v{version}: {answer}")
            walked.add(api)
        # filtered rather than refused
        assert VICTIM not in [g["group_id"] for g in wire.call(16, 4, {})["groups"]]
        assert SECRET not in [t["name"] for t in wire.call(3, 12, {"topics": None})["topics"]]
        # open to every client in Kafka: the cluster's brokers (no ACL names them)
        assert wire.call(60, 1, {})["error_code"] == 0
        # a listing: answered, without what she may not describe
        assert wire.call(66, 1, {})["error_code"] == 0
        walked |= {16, 60, 66}
    finally:
        wire.close()
    # a second login on a logged-in connection is refused (and the connection closed)
    for api, version, body in [(17, 1, {"mechanism": MECH}), (36, 2, {"auth_bytes": b"n,,n=admin,r=abc"})]:
        again = KafkaWire(cluster)
        try:
            assert again.call(api, version, body)["error_code"] != 0
        finally:
            again.close()
        walked.add(api)
    assert walked == served, f"apis served but not walked: {sorted(served - walked)}"
    assert snapshot(cluster) == before


def test_described_acls_are_refused_not_empty_on_both_listeners(cluster):
    """A DescribeAcls without DESCRIBE on the cluster says CLUSTER_AUTHORIZATION_FAILED (issue 25 §2), also with
    a client quota throttling alice's answers (a throttled error answer kept its error layout)."""
    with cluster.admin() as a:
        a.alter_client_quotas([("user", "alice")], {"request_percentage": 0.001})
    try:
        for _ in range(3):
            wire = KafkaWire(cluster)
            try:
                answer = wire.call(29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1})
            finally:
                wire.close()
            assert answer["error_code"] == CLUSTER_DENIED and answer["resources"] == [], answer
            assert native(cluster, ApiKey.DESCRIBE_ACLS, {"filter": [1, None, 1, None, None, 1, 1]})["error_code"] == (
                CLUSTER_DENIED
            )
    finally:
        with cluster.admin() as a:
            a.alter_client_quotas([("user", "alice")], {"request_percentage": None})


def test_kl_transactions_abort_needs_cluster_action(cluster, tmp_path):
    """WriteTxnMarkers on a client listener (Kafka's Admin.abortTransaction): alice, without CLUSTER_ACTION, gets one
    clear line and no marker is written; the admin (a super user) aborts."""
    from tests.integration.test_cli import assert_one_line_error, run

    def login(user: str, password: str) -> str:
        path = tmp_path / f"{user}.properties"
        lines = ["security.protocol=SASL_PLAINTEXT", f"sasl.mechanism={MECH}"]
        path.write_text("\n".join([*lines, f"sasl.username={user}", f"sasl.password={password}"]) + "\n")
        return str(path)

    def abort(user: str, password: str) -> Any:
        return run("transactions", "--bootstrap-server", cluster.bootstrap(), "--command-config",
                   login(user, password), "abort", "--topic", MY_TOPIC, "--partition", "0", "--producer-id", "4242",
                   "--producer-epoch", "0", "--coordinator-epoch", "0")  # fmt: skip

    def end_offset() -> int:
        with cluster.admin() as a:
            return a.list_offsets([(MY_TOPIC, 0)], -1)[(MY_TOPIC, 0)]

    before = end_offset()
    assert_one_line_error(abort("alice", "alice-secret"), "CLUSTER_AUTHORIZATION_FAILED")
    assert end_offset() == before
    cp = abort("admin", "a-secret")
    assert cp.returncode == 0, cp.stderr
    assert end_offset() == before + 1  # the abort marker


def test_authorized_operations_are_what_each_principal_may_do(cluster):
    """Asked with include_authorized_operations (confluent-kafka's describe_topics, describe_consumer_groups and
    describe_cluster; Kafka's Metadata, DescribeGroups and DescribeCluster fields), each principal is told what the
    ACLs let it do, as Kafka computes it (READ implies DESCRIBE); not asked, nothing is said."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    def client(user: str, password: str) -> AdminClient:
        return AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{cluster[1].kafka_port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": MECH,
                "sasl.username": user,
                "sasl.password": password,
            }
        )

    def names(ops) -> list[str] | None:
        return None if ops is None else sorted(op.name for op in ops)

    alice_admin, root = client("alice", "alice-secret"), client("admin", "a-secret")
    topic = alice_admin.describe_topics(TopicCollection([MY_TOPIC]), include_authorized_operations=True)
    assert names(topic[MY_TOPIC].result(30).authorized_operations) == ["DESCRIBE", "READ"]
    plain = alice_admin.describe_topics(TopicCollection([MY_TOPIC]))[MY_TOPIC].result(30)
    assert not plain.authorized_operations  # not asked: Kafka's "not given"
    group = alice_admin.describe_consumer_groups([MINE], include_authorized_operations=True)[MINE].result(30)
    assert names(group.authorized_operations) == ["DELETE", "DESCRIBE", "READ"]
    # none on the cluster: 0, not Kafka's "not given" (confluent-kafka shows both as None, so read the wire)
    wire = KafkaWire(cluster)
    try:
        asked = {"include_cluster_authorized_operations": True}
        assert wire.call(60, 1, asked)["cluster_authorized_operations"] == 0
        assert wire.call(60, 1, {})["cluster_authorized_operations"] == -(2**31)
        meta = wire.call(3, 10, {"topics": [{"name": MY_TOPIC}], "allow_auto_topic_creation": False, **asked})
        assert meta["cluster_authorized_operations"] == 0 and meta["topics"][0]["topic_authorized_operations"] == -(
            2**31
        )
    finally:
        wire.close()
    everything = ["ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE"]
    secret = root.describe_topics(TopicCollection([SECRET]), include_authorized_operations=True)[SECRET].result(30)
    assert names(secret.authorized_operations) == everything
    cluster_ops = names(root.describe_cluster(include_authorized_operations=True).result(30).authorized_operations)
    assert cluster_ops is not None and {"ALTER", "CLUSTER_ACTION", "DESCRIBE", "IDEMPOTENT_WRITE"} <= set(cluster_ops)
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED|not authorized"):  # no operations for a refusal
        alice_admin.describe_topics(TopicCollection([SECRET]), include_authorized_operations=True)[SECRET].result(30)
