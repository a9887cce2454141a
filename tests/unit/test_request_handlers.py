"""The request handlers (produce, fetch, list offsets, the group's, the ACLs') called as the network layer calls
them (KafkaApis.handle), without a broker process: a real ReplicaManager over real logs in a scratch directory,
the metadata image a controller would publish, a real group coordinator on __consumer_offsets, real metrics,
quotas and authorization. The controller and coordination are absent (None): these handlers never reach them,
and a test that did would fail on it."""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Awaitable, Callable

import pytest

from broker.group.api import GroupApis
from broker.group.coordinator import GroupCoordinator
from broker.log.log import Log
from broker.log.manager import LogManager
from broker.metadata.image import MetadataImage, PartitionState
from broker.metadata.naming import OFFSETS_TOPIC
from broker.metadata.records import AclRecord, BrokerRecord, MetadataRecord, PartitionRecord, TopicRecord
from broker.metrics.broker_metrics import BrokerMetrics
from broker.network.native_legacy import LEGACY
from broker.network.server import INTER_BROKER_LISTENER, ConnectionContext
from broker.quota.client_quota import ClientQuotaManager
from broker.replica.replica_manager import ReplicaManager
from broker.security.acl import AclAuthorizer
from broker.security.request_authorizer import RequestAuthorizer
from broker.server.admin_apis import config_changes
from broker.server.config import BrokerConfig
from broker.server.kafka_apis import KafkaApis
from broker.server.security_api import SecurityApis
from broker.transaction.api import TransactionApis
from broker.transaction.coordinator import TransactionCoordinator
from net import batch as batch_fmt
from net.acl import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from net.consumer_protocol import Assignment, Subscription
from net.errors import ErrorCode, KafkaLiteError, error_code_of, error_for
from net.messages import MessageError
from net.messages import decode as decode_message
from net.messages import encode as encode_message
from net.protocol import SUPPORTED_VERSIONS, ApiKey
from net.retry import Backoff, retry_until
from net.schema.describe_acls import DescribeAclsRequest
from net.schema.describe_configs import DescribeConfigsRequest, DescribeConfigsResource
from net.schema.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic, PartitionData
from net.schema.incremental_alter_configs import AlterableConfig as IncrementalAlterableConfig
from net.schema.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from net.schema.messages import MESSAGES
from net.schema.metadata import MetadataRequest, MetadataRequestTopic
from net.schema.offset_commit import OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic
from net.schema.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from net.schema.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from net.schema.sync_group import SyncGroupRequest, SyncGroupRequestAssignment

TOPIC = "orders"
EARLIEST, LATEST = -2, -1


def fetch_request(partition: int, offset: int, epoch: int = -1, **fields: Any) -> FetchRequest:
    """A consumer's fetch of one partition of TOPIC that does not wait; `fields`: the request's others."""
    part = FetchPartition(
        partition=partition, fetch_offset=offset, current_leader_epoch=epoch, partition_max_bytes=1 << 20
    )
    fields.setdefault("replica_id", -1)
    return FetchRequest(
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        topics=(FetchTopic(topic=TOPIC, partitions=(part,)),),
        **fields,
    )


def records(*values: bytes) -> bytes:
    return batch_fmt.build([(i, 0, None, v, None) for i, v in enumerate(values)], 1_700_000_000_000, 0)


def values_of(buf: bytes) -> list[bytes]:
    return [r[3] for pos, h in batch_fmt.iter_batches(buf) for r in batch_fmt.records_of(buf, pos, h)]


def topic_records(name: str, partitions: int) -> list[dict]:
    """What the controller commits for a topic led by broker 1 alone, in leader epoch 3, as the log holds it."""
    out: list[MetadataRecord] = [TopicRecord(name, f"id-{name}", {})]
    out += [PartitionRecord(name, p, 1, 3, [1], [1], 1) for p in range(partitions)]
    return [r.to_dict() for r in out]


BROKER_1 = BrokerRecord(1, "127.0.0.1", 9092, False).to_dict()


class Broker:
    """Broker 1, alone, leading both partitions of TOPIC and the one of __consumer_offsets: the parts KafkaApis
    is built from, wired as broker/server/broker_server.py wires them. `acls`: authorization on (authorizer=acl)
    with these bindings; a plaintext connection's principal is User:ANONYMOUS."""

    def __init__(self, tmp_path: Path, acls: list[AclBinding] | None = None) -> None:
        self.config = cfg = BrokerConfig.from_props(
            {
                "broker.id": "1",
                "log.dirs": str(tmp_path),
                "offsets.topic.num.partitions": "1",
                "group.initial.rebalance.delay.ms": "0",
            }
        )
        self.image = image = MetadataImage()
        metadata = [BROKER_1, *topic_records(TOPIC, 2), *topic_records(OFFSETS_TOPIC, 1)]
        metadata += [AclRecord(b).to_dict() for b in acls or []]
        for offset, record in enumerate(metadata):
            image.apply(offset, record)
        self.logs = LogManager([tmp_path], cfg.topic_config_defaults())
        self.replicas = ReplicaManager(
            1,
            self.logs,
            self.topic_config,
            cfg.replica_lag_time_max_ms,
            lambda *a: None,
            on_change=lambda p, change: self.groups.on_partition_change(p, change),
        )
        self.groups = GroupCoordinator(
            self.replicas, cfg.group_config(), cfg.offsets_topic_num_partitions, cfg.offsets_commit_timeout_ms
        )
        authz = RequestAuthorizer(AclAuthorizer() if acls is not None else None, image)
        self.apis = KafkaApis(
            cfg,
            replica_manager=self.replicas,
            image=image,
            coordination=None,  # type: ignore[arg-type]
            controller=None,  # type: ignore[arg-type]
            channel=None,  # type: ignore[arg-type]
            groups=GroupApis(cfg, self.groups, image, None),  # type: ignore[arg-type]
            security=SecurityApis(image, None, None, authz),  # type: ignore[arg-type]
            metrics=BrokerMetrics(1),
            topic_config=self.topic_config,
            authz=authz,
            quotas=ClientQuotaManager(lambda: image.client_quotas, cfg.quota_window_num, cfg.quota_window_size_seconds),
            transactions=TransactionApis(
                TransactionCoordinator(1, self.replicas, lambda: image, 1, 900_000, 604_800_000, 10_000, 3_600_000),
                self.replicas,
                lambda: image,
                self.groups.partition_for,
            ),
        )
        self.ctx = ConnectionContext("127.0.0.1:5000")

    def start(self) -> None:
        """Publish the image (on the running loop, as the broker does: the coordinator loads its partition)."""
        self.replicas.apply_image(self.image, set(self.image.topics))

    def topic_config(self, topic: str) -> Any:
        return self.config.topic_config_defaults()

    async def call(self, api: ApiKey, body: Any) -> Any:
        answer = self.apis.handle(api, SUPPORTED_VERSIONS[api][1], body, self.ctx)
        return await answer if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future) else answer

    async def produce(self, acks: int, *entries: list, topic: str = TOPIC) -> ProduceResponse | None:
        """Produce is typed (net/schema/): the handler takes and answers the api's classes."""
        parts = tuple(PartitionProduceData(index=p, records=blob) for p, blob in entries)
        request = ProduceRequest(
            acks=acks,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(TopicProduceData(name=topic, partition_data=parts),),
        )
        return await self.call(ApiKey.PRODUCE, request)  # type: ignore[no-any-return]

    async def fetch(self, partition: int, offset: int, epoch: int = -1, **fields: Any) -> PartitionData:
        """Fetch is typed (net/schema/): one partition's answer row, as the handler answers it."""
        answer = await self.call(ApiKey.FETCH, fetch_request(partition, offset, epoch, **fields))
        assert isinstance(answer, FetchResponse), answer
        [topic] = answer.responses
        [row] = topic.partitions
        assert topic.topic == TOPIC
        return row

    async def list_offset(self, partition: int, timestamp: int) -> list:
        """ListOffsets is typed (net/schema/): the handler takes and answers the api's classes."""
        request = ListOffsetsRequest(
            replica_id=-1,
            topics=(
                ListOffsetsTopic(
                    name=TOPIC, partitions=(ListOffsetsPartition(partition_index=partition, timestamp=timestamp),)
                ),
            ),
        )
        answer = await self.call(ApiKey.LIST_OFFSETS, request)
        [topic] = answer.topics
        [row] = topic.partitions
        assert topic.name == TOPIC
        return [row.partition_index, int(row.error_code), row.timestamp, row.offset]

    async def group_call(self, request: Any) -> Any:
        """A typed group request, asked again while the coordinator loads its partition (as a client does)."""

        async def once() -> Any:
            answer = await self.call(ApiKey(type(request).API_KEY), request)
            if isinstance(answer, dict):  # failed as a whole: the coordinator is loading, or a real error
                raise error_for(answer["error_code"], answer.get("error_message") or "")
            return answer

        loading = lambda e: e.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # noqa: E731
        return await retry_until(once, Backoff(10, 50), KafkaLiteError, loading, time.monotonic() + 10)

    def close(self) -> None:
        self.groups.close()
        self.replicas.close()
        self.logs.shutdown(self.replicas.high_watermarks())


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    yield b
    b.close()


def produced(answer: ProduceResponse | None) -> dict[int, PartitionProduceResponse]:
    """A produce answer's partition rows by partition index."""
    assert answer is not None
    return {r.index: r for t in answer.responses for r in t.partition_responses}


def run(broker: Broker, scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        broker.start()
        await scenario()

    asyncio.run(main())


def test_produce_appends_at_the_log_end_and_fetch_reads_it_back(broker):
    async def scenario() -> None:
        first = await broker.produce(1, [0, records(b"a", b"b")])
        second = await broker.produce(-1, [0, records(b"c")], [1, records(b"x")])  # acks=all: ISR is [1]
        [row] = produced(first).values()
        assert (row.index, row.error_code, row.base_offset) == (0, 0, 0)
        assert (row.log_append_time, row.log_start_offset) == (None, 0)  # CreateTime: no append time
        rows = produced(second)
        assert (rows[0].error_code, rows[0].base_offset) == (0, 2) and (rows[1].error_code, rows[1].base_offset) == (
            0,
            0,
        )
        fetched = await broker.fetch(0, 0)
        assert (fetched.partition_index, fetched.error_code, fetched.high_watermark) == (0, 0, 3)
        assert values_of(fetched.records) == [b"a", b"b", b"c"]
        assert await broker.list_offset(0, EARLIEST) == [0, 0, -1, 0]
        assert await broker.list_offset(0, LATEST) == [0, 0, -1, 3]

    run(broker, scenario)


def test_acks_0_is_not_answered_but_is_stored(broker):
    async def scenario() -> None:
        assert await broker.produce(0, [1, records(b"quiet")]) is None
        assert values_of((await broker.fetch(1, 0)).records) == [b"quiet"]

    run(broker, scenario)


def test_each_partition_is_answered_on_its_own(broker):
    """A partition this broker does not have fails alone; the other one in the same request is stored."""

    async def scenario() -> None:
        answer = await broker.produce(1, [0, records(b"ok")], [7, records(b"lost")])
        rows = {i: r.error_code for i, r in produced(answer).items()}
        assert rows == {0: 0, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert values_of((await broker.fetch(0, 0)).records) == [b"ok"]

    run(broker, scenario)


def test_one_base_offset_answers_a_partitions_batches_only_while_they_follow_each_other(broker):
    """A request may carry several batches of a partition (the own producer's); Kafka's answer has one base_offset.
    It is the first batch's while the batches follow each other in the log; a retry whose duplicates kept their
    first offsets, with a new batch behind them elsewhere, answers -1: not known (FORMAT.md §8)."""

    def idempotent(pid: int, seq: int, *values: bytes) -> bytes:
        rows = [(i, 0, None, v, None) for i, v in enumerate(values)]
        return batch_fmt.build(rows, 1_700_000_000_000, 0, producer_id=pid, producer_epoch=0, base_sequence=seq)

    async def scenario() -> None:
        a, b = idempotent(7, 0, b"a1", b"a2"), idempotent(7, 2, b"b")
        assert produced(await broker.produce(1, [0, a]))[0].base_offset == 0
        assert produced(await broker.produce(1, [0, records(b"other")]))[0].base_offset == 2
        retried = produced(await broker.produce(1, [0, a + b]))[0]  # a: a duplicate at 0; b: new, at 3
        assert (retried.error_code, retried.base_offset) == (0, -1)
        both = produced(await broker.produce(1, [0, idempotent(8, 0, b"c") + idempotent(8, 1, b"d", b"e")]))[0]
        assert (both.error_code, both.base_offset) == (0, 4)  # consecutive: 4, then 5
        again = produced(await broker.produce(1, [0, idempotent(8, 0, b"c") + idempotent(8, 1, b"d", b"e")]))[0]
        assert (again.error_code, again.base_offset) == (0, 4)  # both duplicates, still consecutive
        assert values_of((await broker.fetch(0, 0)).records) == [b"a1", b"a2", b"other", b"b", b"c", b"d", b"e"]

    run(broker, scenario)


def test_fetch_out_of_range_and_with_a_stale_leader_epoch_are_refused_per_partition(broker):
    async def scenario() -> None:
        await broker.produce(1, [0, records(b"a")])
        assert (await broker.fetch(0, 5)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (
            await broker.fetch(0, 0, epoch=2)
        ).error_code == ErrorCode.FENCED_LEADER_EPOCH  # KIP-320: we lead epoch 3
        assert (await broker.fetch(0, 0, epoch=4)).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert (await broker.fetch(0, 0, epoch=3)).error_code == 0

    run(broker, scenario)


def test_malformed_requests_are_refused_before_anything_is_stored(broker):
    async def scenario() -> None:
        # A typed produce is checked as it is decoded; a native v0 map as it is read into the typed request.
        with pytest.raises(MessageError) as raised:
            LEGACY[ApiKey.PRODUCE][0]({"acks": 1, "topics": [[TOPIC, [[0, records(b"a")], [1, "not bytes"]]]]})
        assert error_code_of(raised.value)[0] == ErrorCode.INVALID_REQUEST
        with pytest.raises(MessageError, match="acks"):
            decode_message(ProduceRequest, encode_message(ProduceRequest(acks=2**15)))
        with pytest.raises(MessageError, match="epoch"):  # not an int32: refused as it is decoded
            decode_message(FetchRequest, encode_message(fetch_request(0, 0, 2**31)))
        with pytest.raises(MessageError, match="fetch partition entry"):  # a native v0 row, too short
            LEGACY[ApiKey.FETCH][0]({"topics": [[TOPIC, [[0, 0]]]]})
        assert await broker.list_offset(0, LATEST) == [0, 0, -1, 0]  # nothing of the refused produce

    run(broker, scenario)


def test_a_corrupt_batch_is_refused_and_the_log_is_unchanged(broker):
    async def scenario() -> None:
        bad = bytearray(records(b"a"))
        bad[-1] ^= 0xFF  # the CRC no longer matches
        answer = await broker.produce(1, [0, bytes(bad)])
        [row] = produced(answer).values()
        assert row.error_code == ErrorCode.CORRUPT_MESSAGE
        assert await broker.list_offset(0, LATEST) == [0, 0, -1, 0]

    run(broker, scenario)


GROUP = "billing"


def test_a_member_joins_syncs_commits_and_a_new_coordinator_reads_the_commit_back(tmp_path):
    """JoinGroup, SyncGroup and OffsetCommit of one member; the commit is in __consumer_offsets, so the
    coordinator of a broker started again over the same directory answers it from its log."""
    first = Broker(tmp_path)

    async def member() -> None:
        join = await first.group_call(
            JoinGroupRequest(
                group_id=GROUP,
                session_timeout=datetime.timedelta(seconds=10),
                rebalance_timeout=datetime.timedelta(seconds=10),
                protocol_type="consumer",
                protocols=(JoinGroupRequestProtocol(name="range", metadata=Subscription((TOPIC,)).encode()),),
            )
        )
        assert join.error_code == 0 and join.leader == join.member_id
        assert (join.generation_id, join.protocol_name) == (1, "range")
        assert [m.member_id for m in join.members] == [join.member_id]
        mine = Assignment(frozenset({(TOPIC, 0), (TOPIC, 1)}))
        generation, member_id = join.generation_id, join.member_id
        sync = await first.group_call(
            SyncGroupRequest(
                group_id=GROUP,
                generation_id=generation,
                member_id=member_id,
                assignments=(SyncGroupRequestAssignment(member_id=member_id, assignment=mine.encode()),),
            )
        )
        assert sync.error_code == 0 and Assignment.decode(sync.assignment) == mine

        def commit(generation_id: int, partition: int, offset: int) -> OffsetCommitRequest:
            part = OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata="m"
            )
            return OffsetCommitRequest(
                group_id=GROUP,
                generation_id_or_member_epoch=generation_id,
                member_id=member_id,
                topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(part,)),),
            )

        done = await first.group_call(commit(generation, 0, 42))
        assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in done.topics] == [
            (TOPIC, [(0, 0)])
        ]
        # refused as a whole, with why (the Kafka listener puts the code in every row of Kafka's layout)
        stale = await first.call(ApiKey.OFFSET_COMMIT, commit(generation + 1, 1, 7))
        assert stale["error_code"] == ErrorCode.ILLEGAL_GENERATION and "generation" in stale["error_message"]

    run(first, member)
    first.close()

    second = Broker(tmp_path)

    async def read_back() -> None:
        asked = (OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0, 1)),)
        answer = await second.group_call(OffsetFetchRequest(group_id=GROUP, topics=asked))
        offsets = {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}
        assert offsets == {0: 42, 1: -1}  # the refused commit of partition 1 is not there

    try:
        run(second, read_back)
    finally:
        second.close()


def allow(principal: str, op: AclOperation, rt: ResourceType, name: str) -> AclBinding:
    return AclBinding(rt, name, PatternType.LITERAL, principal, "*", op, AclPermission.ALLOW)


def test_with_acls_a_produce_is_refused_per_topic_and_describe_acls_lists_what_the_filter_matches(tmp_path):
    bindings = [
        allow("User:ANONYMOUS", AclOperation.WRITE, ResourceType.TOPIC, TOPIC),
        allow("User:ANONYMOUS", AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"),
        allow("User:alice", AclOperation.READ, ResourceType.GROUP, GROUP),
    ]
    broker = Broker(tmp_path, acls=bindings)

    async def scenario() -> None:
        allowed = await broker.produce(1, [0, records(b"ok")])
        assert produced(allowed)[0].error_code == 0
        other = await broker.produce(1, [0, records(b"no")], topic=OFFSETS_TOPIC)
        assert produced(other)[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert await broker.list_offset(0, LATEST) == [0, 0, -1, 1]
        alices = DescribeAclsRequest(
            resource_type_filter=int(ResourceType.ANY),
            pattern_type_filter=int(PatternType.ANY),
            principal_filter="User:alice",
            operation=1,
            permission_type=1,
        )
        described = await broker.call(ApiKey.DESCRIBE_ACLS, alices)
        assert described.error_code == 0
        found = [
            (r.resource_type, r.resource_name, a.principal, a.operation) for r in described.resources for a in r.acls
        ]
        assert found == [(int(ResourceType.GROUP), GROUP, "User:alice", int(AclOperation.READ))]
        # typed Metadata: the listing leaves out what she may not describe (WRITE implies DESCRIBE, nothing on
        # __consumer_offsets); a named topic she may not describe is TOPIC_AUTHORIZATION_FAILED; operations when asked
        everything = MetadataRequest(
            topics=None, include_topic_authorized_operations=True, include_cluster_authorized_operations=True
        )
        broker.apis.coordination = SimpleNamespace(controller_id=1, controller_epoch=1)  # type: ignore[assignment]
        listing = await broker.call(ApiKey.METADATA, everything)
        assert [(t.name, t.topic_authorized_operations) for t in listing.topics] == [
            (TOPIC, 1 << AclOperation.WRITE | 1 << AclOperation.DESCRIBE)
        ]
        assert listing.cluster_authorized_operations == 1 << AclOperation.DESCRIBE
        named = MetadataRequest(topics=(MetadataRequestTopic(name=OFFSETS_TOPIC), MetadataRequestTopic(name=TOPIC)))
        answered = await broker.call(ApiKey.METADATA, named)
        assert [(t.name, t.error_code, t.topic_authorized_operations) for t in answered.topics] == [
            (TOPIC, 0, -(2**31)),  # not asked: Kafka's "not given"
            (OFFSETS_TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -(2**31)),
        ]

    try:
        run(broker, scenario)
    finally:
        broker.close()


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker):
    async def scenario() -> None:
        answer = await broker.call(ApiKey.DESCRIBE_ACLS, DescribeAclsRequest(resource_type_filter=1, operation=1))
        assert answer["error_code"] == ErrorCode.SECURITY_DISABLED

    run(broker, scenario)


def test_describe_configs_answers_each_resource_with_the_keys_asked(broker):
    """DescribeConfigs, typed (broker/server/admin_apis.py): a topic's configs (only `configuration_keys`, synonyms
    and documentation only when asked), this broker's own, another broker's or an unknown topic's error in its row,
    this broker's log levels (BROKER_LOGGER), another broker's INVALID_REQUEST in its row, as Kafka answers."""

    async def scenario() -> None:
        def ask(kind: int, name: str, *keys: str) -> DescribeConfigsResource:
            return DescribeConfigsResource(resource_type=kind, resource_name=name, configuration_keys=keys or None)

        resources = (
            ask(2, TOPIC, "segment.bytes"),
            ask(4, "1", "num.partitions"),
            ask(4, "2"),
            ask(2, "missing"),
            ask(8, "1"),
            ask(8, "2"),
        )
        bare = await broker.call(ApiKey.DESCRIBE_CONFIGS, DescribeConfigsRequest(resources=resources))
        topic, own, other, missing, logger, other_logger = bare.results
        (segment,) = topic.configs
        assert (segment.name, segment.config_source, segment.synonyms, segment.documentation) == (
            "segment.bytes",
            5,  # DEFAULT_CONFIG
            (),
            None,
        )
        assert [(c.name, c.read_only) for c in own.configs] == [("num.partitions", True)]
        assert other.error_code == ErrorCode.INVALID_REQUEST and not other.configs
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        levels = {c.name: (c.value, c.config_source, c.read_only) for c in logger.configs}
        assert (logger.resource_type, logger.error_code) == (8, 0) and levels["root"][1:] == (6, False)
        assert levels["kafkalite.api"][0] in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
        assert (other_logger.error_code, other_logger.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "Unexpected broker id, expected 1 but received 2",
        )
        full = await broker.call(
            ApiKey.DESCRIBE_CONFIGS,
            DescribeConfigsRequest(resources=resources[:1], include_synonyms=True, include_documentation=True),
        )
        (segment,) = full.results[0].configs
        assert [sy.name for sy in segment.synonyms] == ["log.segment.bytes"]
        assert "segment file" in (segment.documentation or "")

    run(broker, scenario)


def test_an_unknown_incremental_operation_is_its_resources_invalid_request():
    with pytest.raises(KafkaLiteError) as e:
        config_changes((IncrementalAlterableConfig(name="cleanup.policy", config_operation=4, value="x"),))
    assert e.value.code == ErrorCode.INVALID_REQUEST and "cleanup.policy" in str(e.value)
    ops = [(n, o) for n, o in enumerate(("a", None, "b", "c"))]
    changes = config_changes(
        tuple(IncrementalAlterableConfig(name=f"k{n}", config_operation=n, value=v) for n, v in ops)
    )
    assert changes == {"k0": "a", "k1": None, "k2": ("append", "b"), "k3": ("subtract", "c")}


def test_a_kafka_clients_metadata_waits_for_the_first_published_image(tmp_path):
    """A starting broker listens while it catches up with the metadata log (Kafka opens its client listeners only
    after that). Until its first image is published a Kafka client's Metadata waits: an answer from the empty
    image would name no broker, and librdkafka forgets every broker a Metadata answer leaves out. A native
    client (kl-cluster, the test harness) is answered at once, from what the broker has."""
    b = Broker(tmp_path)
    published = b.image
    b.apis.image = starting = MetadataImage()
    b.apis.coordination = SimpleNamespace(controller_id=1, controller_epoch=1)  # type: ignore[assignment]
    kafka = ConnectionContext("127.0.0.1:5000", listener="NATIVE", wire="kafka")
    native = ConnectionContext("127.0.0.1:5001")
    body = {"topics": [TOPIC]}

    async def scenario() -> None:
        answer = b.apis.handle(ApiKey.METADATA, 0, body, native)
        assert answer["brokers"] == [] and answer["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        typed = MetadataRequest(topics=(MetadataRequestTopic(name=TOPIC),))
        waiting = asyncio.ensure_future(b.apis.handle(ApiKey.METADATA, 1, typed, kafka))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "a Kafka client was answered from the empty image of a starting broker"
        for offset in range(published.offset + 1):  # the broker catches up: its first image is published
            starting.apply(offset, published_records[offset])
        answer = await asyncio.wait_for(waiting, 2)
        assert [b.node_id for b in answer.brokers] == [1] and answer.controller_id == 1
        [topic] = answer.topics
        assert topic.error_code == 0 and len(topic.partitions) == 2

    published_records = [BROKER_1, *topic_records(TOPIC, 2), *topic_records(OFFSETS_TOPIC, 1)]
    try:
        asyncio.run(scenario())
    finally:
        b.close()


# --- Fetch (typed on both listeners) ------------------------------------------------------------------------------

REPLICATED = "replicated"  # led by broker 1 in epoch 3, followed by broker 2 (replicas and ISR [1, 2])


def with_replicated_topic(broker: Broker) -> Broker:
    """Adds REPLICATED to the image before the broker starts: its high watermark waits for broker 2's fetches, so
    its log end runs ahead of it after an acks=1 produce."""
    records = [
        BrokerRecord(2, "127.0.0.1", 9093, False).to_dict(),
        TopicRecord(REPLICATED, f"id-{REPLICATED}", {}).to_dict(),
        PartitionRecord(REPLICATED, 0, 1, 3, [1, 2], [1, 2], 1).to_dict(),
    ]
    start = broker.image.offset + 1
    for i, record in enumerate(records):
        broker.image.apply(start + i, record)
    return broker


def inter_broker(broker: Broker) -> ConnectionContext:
    """A broker's connection on the inter-broker listener (everything is allowed without authorizer=acl)."""
    return ConnectionContext("127.0.0.1:6000", INTER_BROKER_LISTENER)


async def handle(broker: Broker, request: Any, ctx: ConnectionContext) -> Any:
    api = ApiKey(type(request).API_KEY)
    answer = broker.apis.handle(api, SUPPORTED_VERSIONS[api][1], request, ctx)
    return await answer if inspect.isawaitable(answer) else answer


def follower_fetch(
    partition: int, offset: int, session_id: int = 0, epoch: int = 0, topic: str = TOPIC
) -> FetchRequest:
    part = FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)
    return FetchRequest(
        replica_id=2,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=(FetchTopic(topic=topic, partitions=(part,)),),
    )


def test_a_consumers_fetch_declines_a_session_and_a_followers_is_in_one(tmp_path):
    """KIP-227 as today: a consumer asking for a session (epoch 0) is answered without one (session id 0, every
    partition every time); a follower's full fetch opens one, its next fetch carries only what moved and an epoch
    out of turn is Kafka's top-level INVALID_FETCH_SESSION_EPOCH, not a crash."""
    broker = with_replicated_topic(Broker(tmp_path))

    async def scenario() -> None:
        await broker.produce(1, [0, records(b"a")], topic=REPLICATED)
        consumer = await broker.call(ApiKey.FETCH, fetch_request(0, 0, session_id=0, session_epoch=0))
        assert consumer.session_id == 0 and consumer.responses[0].partitions[0].error_code == 0
        ctx = inter_broker(broker)
        full = await handle(broker, follower_fetch(0, 0, topic=REPLICATED), ctx)
        assert full.error_code == 0 and full.session_id != 0
        [row] = full.responses[0].partitions
        assert (row.error_code, values_of(row.records)) == (0, [b"a"])
        # the next fetch, in the session: at the log end, nothing moved, so nothing is answered
        moved = await handle(broker, follower_fetch(0, 1, full.session_id, 1, REPLICATED), ctx)
        assert (moved.error_code, moved.session_id) == (0, full.session_id)
        assert [p.high_watermark for t in moved.responses for p in t.partitions] in ([], [1])
        stale = await handle(broker, follower_fetch(0, 1, full.session_id, 7, REPLICATED), ctx)
        assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and stale.responses == ()

    run(broker, scenario)
    broker.close()


def test_a_replica_id_fetch_is_refused_on_a_client_listener_and_a_replica_id_list_offsets_served(broker, caplog):
    """A follower's Fetch (replica_id >= 0: fetch sessions, the follower's state on the leader) is the inter-broker
    listener's: a client listener refuses it whole, INVALID_REQUEST, whoever asks. ListOffsets with a replica id is
    served there, as Kafka serves it to any client (kafka-python 3.1 sends replica id 0): its latest is the log end."""

    async def scenario() -> None:
        fetch = await broker.call(ApiKey.FETCH, fetch_request(0, 0, replica_id=2))
        assert isinstance(fetch, dict) and fetch["error_code"] == ErrorCode.INVALID_REQUEST
        with caplog.at_level(logging.WARNING, logger="kafkalite.api"):
            for _ in range(50):  # a peer repeating it as fast as it can: answered each time, logged once at most
                again = await broker.call(ApiKey.FETCH, fetch_request(0, 0, replica_id=2))
                assert again["error_code"] == ErrorCode.INVALID_REQUEST
        assert sum("brokers only" in r.getMessage() for r in caplog.records) <= 1
        # Refused before the fetch path: the forged follower has no clock there (replica.silence.time.max.ms).
        assert broker.replicas.follower_silence.silent(10**15, 1) == frozenset()
        await broker.produce(1, [0, records(b"x", b"y")])
        for replica_id in (0, 2, -1):
            listed = await broker.call(ApiKey.LIST_OFFSETS, list_offsets(TOPIC, 0, replica_id=replica_id))
            row = listed.topics[0].partitions[0]
            assert (row.error_code, row.offset) == (0, 2), replica_id
        assert (await broker.fetch(0, 0)).error_code == 0  # a consumer's, on the same listener, is served

    run(broker, scenario)


def list_offsets(topic: str, partition: int, replica_id: int, timestamp: int = LATEST) -> ListOffsetsRequest:
    part = ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
    return ListOffsetsRequest(replica_id=replica_id, topics=(ListOffsetsTopic(name=topic, partitions=(part,)),))


def test_a_followers_latest_offset_is_the_log_end(tmp_path):
    """ListOffsets latest is the high watermark for a consumer, the log end offset for a follower (Kafka's, with a
    broker's replica id): where a follower ahead of its leader truncates to."""
    broker = with_replicated_topic(Broker(tmp_path))

    async def scenario() -> None:
        await broker.produce(1, [0, records(b"a", b"b")], topic=REPLICATED)  # broker 2 has not fetched: HW 0
        consumer = await broker.call(ApiKey.LIST_OFFSETS, list_offsets(REPLICATED, 0, -1))
        assert consumer.topics[0].partitions[0].offset == 0
        follower = await handle(broker, list_offsets(REPLICATED, 0, 2), inter_broker(broker))
        assert (follower.topics[0].partitions[0].error_code, follower.topics[0].partitions[0].offset) == (0, 2)

    run(broker, scenario)
    broker.close()


def test_a_follower_ahead_of_its_leader_truncates_to_the_leaders_log_end(tmp_path):
    """Kafka's fetchOffsetAndTruncate: a follower whose log runs past its leader's end (fetched at offset 3 of a
    log ending at 1) is answered OFFSET_OUT_OF_RANGE, asks the leader's ListOffsets for its log end (replica_id =
    its own id, on the inter-broker listener) and truncates to it; its next fetch reads from there. The leader is
    broker 1's real KafkaApis, the requests go through the native typed encoding."""
    from broker.replica.partition import Partition
    from broker.replica.replica_fetcher import ReplicaFetcher
    from tests.unit.test_log_support import FakeClock, config

    broker = with_replicated_topic(Broker(tmp_path / "leader"))
    lg = Log(tmp_path / "follower", REPLICATED, 0, config(), clean_shutdown=True, clock=FakeClock(), defer_files=True)
    follower = Partition(REPLICATED, 0, lg, 2, 1, 30_000, lambda *a: None)
    follower.apply_state(PartitionState(0, 1, 3, [1, 2], [1, 2]), 0)  # broker 1 leads epoch 3, broker 2 follows
    asked: list[str] = []

    async def call(leader: int, request: Any, timeout: float) -> Any:
        assert leader == 1
        asked.append(type(request).__name__)
        wire = decode_message(type(request), encode_message(request))  # as the native listener reads it
        answer = await handle(broker, wire, inter_broker(broker))
        return decode_message(MESSAGES[type(request).API_KEY][1], encode_message(answer))

    async def scenario() -> None:
        await broker.produce(1, [0, records(b"a")], topic=REPLICATED)  # the leader's log ends at 1
        # the follower's log ends at 3: ahead, in batches of no leader epoch (-1), so none to compare (KIP-101)
        # (a batch each: a log truncates at a batch's start)
        ahead = [
            batch_fmt.build([(0, 0, None, v, None)], 1_700_000_000_000, 0, base_offset=i)
            for i, v in enumerate((b"x", b"y", b"z"))
        ]
        follower.append_as_follower(b"".join(ahead), 0)
        assert follower.log.log_end_offset == 3
        fetcher = ReplicaFetcher(2, 1, call, max_wait_ms=0)
        fetcher.followed.add(follower)
        await fetcher._fetch_once()
        assert asked == ["FetchRequest", "ListOffsetsRequest"]
        assert follower.log.log_end_offset == 1  # truncated to the leader's log end
        await fetcher._fetch_once()
        assert follower.log.log_end_offset == 1 and asked[-1] == "FetchRequest"  # in range now: no ListOffsets

    run(broker, scenario)
    broker.close()


def test_a_consumer_over_its_byte_rate_is_throttled_by_the_typed_answers_records(tmp_path):
    """Client quotas read the typed Fetch answer: the records bytes a consumer got count against its
    consumer_byte_rate, the answer carries the delay (throttle_time) and the connection is muted as long; a
    follower's fetch is replication, not charged."""
    from broker.metadata.records import ClientQuotaRecord

    broker = with_replicated_topic(Broker(tmp_path))
    quota = ClientQuotaRecord((("client-id", "slow"),), {"consumer_byte_rate": 10.0})
    broker.image.apply(broker.image.offset + 1, quota.to_dict())
    muted: list[int] = []

    async def scenario() -> None:
        await broker.produce(1, [0, records(b"x" * 2000)])
        fast = await broker.fetch(0, 0)  # another client id: no quota
        assert fast.records and values_of(fast.records) == [b"x" * 2000]
        ctx = ConnectionContext("127.0.0.1:5001")
        ctx.client_id = "slow"
        ctx.throttle = muted.append
        answer = await handle(broker, fetch_request(0, 0), ctx)
        assert isinstance(answer, FetchResponse) and answer.responses[0].partitions[0].records
        assert answer.throttle_time > datetime.timedelta(0) and muted and muted[-1] > 0
        # the same bytes to a follower of the slow client id's name: not a consumer, not charged
        await broker.produce(1, [0, records(b"y")], topic=REPLICATED)
        follower_ctx = inter_broker(broker)
        follower_ctx.client_id = "slow"
        follower_ctx.throttle = muted.append
        before = len(muted)
        replicated = await handle(broker, follower_fetch(0, 0, topic=REPLICATED), follower_ctx)
        assert replicated.responses[0].partitions[0].records  # read, and
        assert replicated.throttle_time == datetime.timedelta(0) and len(muted) == before  # not throttled

    run(broker, scenario)
    broker.close()


def test_a_native_v0_follower_fetch_still_gets_its_old_rows(tmp_path):
    """Native v0 of Fetch, answered one more release (broker/network/native_legacy.py): a follower's map (session
    fields, forgotten partitions, six-column partition entries) is read into the typed request, served by the same
    handler, and answered in the old 11-column rows with its session id; a diverging follower's row carries the
    diverging epoch and end offset where they were."""
    broker = with_replicated_topic(Broker(tmp_path))
    read, write = LEGACY[ApiKey.FETCH]

    async def v0(body: dict) -> dict:
        return write(await handle(broker, read(body), inter_broker(broker)))

    async def scenario() -> None:
        await broker.produce(1, [0, records(b"a", b"b")], topic=REPLICATED)
        opened = await v0(
            {"replica_id": 2, "max_wait_ms": 0, "session_id": 0, "session_epoch": 0,
             "topics": [[REPLICATED, [[0, 0, 1 << 20, 3, -1, 0]]]], "forgotten": []}
        )  # fmt: skip
        [[topic, [row]]] = opened["topics"]
        assert topic == REPLICATED and opened["session_id"] != 0 and len(row) == 11
        assert row[:5] == [0, 0, 0, 0, 0] and values_of(row[5]) == [b"a", b"b"] and row[6:] == [None, -1, -1, 0, []]
        # a sessionless follower that fetched epoch 3 up to offset 5, where this leader's epoch 3 ends at 2: diverging
        diverged = await v0(
            {"replica_id": 2, "max_wait_ms": 0, "topics": [[REPLICATED, [[0, 5, 1 << 20, 3, 3, 0]]]]}
        )  # fmt: skip
        [[_, [row]]] = diverged["topics"]
        assert (row[1], row[5], row[7], row[8]) == (0, b"", 3, 2) and "session_id" not in diverged

    run(broker, scenario)
    broker.close()
