"""AsyncAdmin: create, describe, alter, delete and list topics; list, describe, reset and delete groups; elect
partition leaders."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

from client.cluster import KafkaLiteClient, PartitionMeta, TopicMeta
from client.config import AdminConfig
from client.group import GroupClient
from client.topic_partition import TopicPartition
from net.acl import CREATION_FIELDS, FILTER_FIELDS, AclBinding, AclBindingFilter, as_fields
from net.config_def import ConfigSource, is_default
from net.consumer_protocol import Assignment
from net.errors import ErrorCode, KafkaLiteError, error_for, group_error
from net.protocol import ApiKey, ElectionType
from net.retry import retry_until
from net.schema.alter_client_quotas import AlterClientQuotasRequest
from net.schema.alter_client_quotas import EntityData as QuotaEntity
from net.schema.alter_client_quotas import EntryData as QuotaEntry
from net.schema.alter_client_quotas import OpData as QuotaOp
from net.schema.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ReassignablePartition,
    ReassignableTopic,
)
from net.schema.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from net.schema.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from net.schema.consumer_group_describe import ConsumerGroupDescribeRequest
from net.schema.create_acls import AclCreation, CreateAclsRequest
from net.schema.create_partitions import CreatePartitionsAssignment, CreatePartitionsRequest, CreatePartitionsTopic
from net.schema.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from net.schema.delete_acls import DeleteAclsFilter, DeleteAclsRequest
from net.schema.delete_groups import DeleteGroupsRequest
from net.schema.delete_records import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from net.schema.delete_share_group_offsets import DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequestTopic
from net.schema.delete_topics import DeleteTopicsRequest
from net.schema.describe_acls import DescribeAclsRequest
from net.schema.describe_client_quotas import DescribeClientQuotasRequest
from net.schema.describe_configs import DescribeConfigsRequest, DescribeConfigsResource, DescribeConfigsResult
from net.schema.describe_groups import DescribeGroupsRequest
from net.schema.describe_log_dirs import DescribableLogDirTopic, DescribeLogDirsRequest, DescribeLogDirsResult
from net.schema.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponsePartitionData
from net.schema.describe_quorum import PartitionData as QuorumPartition
from net.schema.describe_quorum import TopicData as QuorumTopic
from net.schema.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from net.schema.describe_user_scram_credentials import DescribeUserScramCredentialsRequest, UserName
from net.schema.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from net.schema.elect_leaders import TopicPartitions as ElectTopic
from net.schema.incremental_alter_configs import AlterableConfig, AlterConfigsResource, IncrementalAlterConfigsRequest
from net.schema.list_groups import ListGroupsRequest
from net.schema.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from net.schema.list_partition_reassignments import ListPartitionReassignmentsTopics as ListReassignTopic
from net.schema.share_group_describe import DescribedGroup as DescribedShareGroup
from net.schema.share_group_describe import ShareGroupDescribeRequest

T = TypeVar("T")


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] | None = None
    # Kafka's manual assignment: partition -> its replicas (the first leads); num_partitions and
    # replication_factor stay -1.
    replica_assignments: dict[int, list[int]] | None = None


@dataclass
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    assignment: frozenset[tuple[str, int]]
    # A consumer-protocol member's (KIP-848): its epoch and the partitions it is moving towards.
    member_epoch: int | None = None
    target_assignment: frozenset[tuple[str, int]] | None = None
    group_instance_id: str | None = None  # a static member's group.instance.id (KIP-345)


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    # (id, host, port) of the broker coordinating the group, when known.
    coordinator: tuple[int, str, int] | None = None
    # "classic", or "consumer" (KIP-848) with its group epoch and target assignment epoch.
    group_type: str = "classic"
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


@dataclass
class TopicDescription:
    name: str
    topic_id: str
    partitions: list[PartitionMeta]
    configs: dict[str, tuple[str, bool]]  # name -> (value, is_default)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


def _raise_rows(rows: Iterable[Any]) -> None:
    """Raise the first per-topic error of a typed answer's rows (name, error_code, error_message)."""
    for r in rows:
        if r.error_code:
            raise error_for(r.error_code, r.error_message or f"topic {r.name!r}")


TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, GROUP_RESOURCE = 2, 4, 8, 32  # Kafka's ConfigResource.Type


def _incremental(
    kind: int, name: str, changes: dict[str, str | None], validate_only: bool
) -> IncrementalAlterConfigsRequest:
    """IncrementalAlterConfigs of one resource: SET (0) each value, DELETE (1) each None."""
    configs = tuple(
        AlterableConfig(name=k, config_operation=1 if v is None else 0, value=v) for k, v in changes.items()
    )
    resource = AlterConfigsResource(resource_type=kind, resource_name=name, configs=configs)
    return IncrementalAlterConfigsRequest(resources=(resource,), validate_only=validate_only)


class AsyncAdmin:
    def __init__(self, bootstrap_servers: str, **config: Any) -> None:
        """Kafka's admin client configs as keyword arguments (request.timeout.ms -> request_timeout_ms):
        client/config.py AdminConfig."""
        cfg = AdminConfig.from_kwargs(config)
        self.client = KafkaLiteClient.from_config(bootstrap_servers, cfg)

    async def start(self) -> None:
        await self.client.any_connection()

    async def _controller_request(self, api: ApiKey, body: dict[str, Any], rows_key: str = "topics") -> dict[str, Any]:
        """Send to the active controller; follow it through NOT_CONTROLLER and elections until the timeout."""

        async def send(controller: int) -> dict[str, Any]:
            resp = await self.client.request(controller, api, body)
            if resp.get("error_code"):
                raise error_for(resp["error_code"], resp.get("error_message", ""))
            if any(r[1] == ErrorCode.NOT_CONTROLLER for r in resp.get(rows_key, [])):
                raise error_for(ErrorCode.NOT_CONTROLLER, "controller moved")
            return resp

        return await self._at_controller(send)

    async def _controller_call(self, request: Any, rows: Callable[[Any], Iterable[Any]] = lambda a: ()) -> Any:
        """A typed request (net/schema/) to the active controller, followed as _controller_request follows it
        (NOT_CONTROLLER at the top of the answer, or in one of its `rows`)."""

        async def send(controller: int) -> Any:
            conn = await self.client.connection(controller)
            answer = await conn.call(request, self.client.request_timeout)
            codes = [getattr(answer, "error_code", 0), *(r.error_code for r in rows(answer))]
            if ErrorCode.NOT_CONTROLLER in codes:
                raise error_for(ErrorCode.NOT_CONTROLLER, "controller moved")
            return answer

        return await self._at_controller(send)

    async def _at_controller(self, send: Callable[[int], Awaitable[T]]) -> T:
        """`send(controller id)` until it answers: the controller looked up again before each attempt,
        retriable errors and NOT_CONTROLLER retried with backoff until request.timeout.ms."""

        async def attempt() -> T:
            await self.client.refresh_metadata([])  # where the controller is now
            controller = self.client.metadata.controller_id
            if controller < 0:
                raise error_for(ErrorCode.NOT_CONTROLLER, "no active controller (an election may be running)")
            return await send(controller)

        return await retry_until(
            attempt,
            self.client.backoff(),
            KafkaLiteError,
            lambda e: e.retriable or e.code == ErrorCode.NOT_CONTROLLER,
            deadline=time.monotonic() + self.client.request_timeout,
        )

    async def create_topics(self, topics: list[NewTopic], validate_only: bool = False) -> None:
        request = CreateTopicsRequest(
            topics=tuple(
                CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (t.configs or {}).items()),
                    assignments=tuple(
                        CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(r))
                        for p, r in sorted((t.replica_assignments or {}).items())
                    ),
                )
                for t in topics
            ),
            validate_only=validate_only,
        )
        _raise_rows((await self._controller_call(request, lambda a: a.topics)).topics)

    async def create_partitions(
        self, topic: str, count: int, validate_only: bool = False, assignments: list[list[int]] | None = None
    ) -> None:
        """Grow `topic` to `count` partitions (Kafka's CreatePartitions; partitions are never removed);
        `assignments`: the new partitions' replicas, one list each, else the controller places them."""
        placed = (
            None if assignments is None else tuple(CreatePartitionsAssignment(broker_ids=tuple(a)) for a in assignments)
        )
        request = CreatePartitionsRequest(
            topics=(CreatePartitionsTopic(name=topic, count=count, assignments=placed),), validate_only=validate_only
        )
        _raise_rows((await self._controller_call(request, lambda a: a.results)).results)

    async def delete_topics(self, names: list[str]) -> None:
        request = DeleteTopicsRequest(topic_names=tuple(names))
        _raise_rows((await self._controller_call(request, lambda a: a.responses)).responses)

    async def _alter(self, request: IncrementalAlterConfigsRequest) -> None:
        answer = await self._controller_call(request, lambda a: a.responses)
        for r in answer.responses:
            if r.error_code:
                raise error_for(r.error_code, r.error_message or f"resource {r.resource_name!r}")

    async def alter_configs(self, topic: str, changes: dict[str, str | None], validate_only: bool = False) -> None:
        """Kafka's incrementalAlterConfigs on a topic: a value sets the key, None deletes its override."""
        await self._alter(_incremental(TOPIC_RESOURCE, topic, changes, validate_only))

    async def alter_broker_configs(
        self, broker: int | None, changes: dict[str, str | None], validate_only: bool = False
    ) -> None:
        """A broker's dynamic configs (None: the cluster default), Kafka's IncrementalAlterConfigs on a BROKER
        resource: a value sets the key, None deletes it."""
        name = "" if broker is None else str(broker)
        await self._alter(_incremental(BROKER_RESOURCE, name, changes, validate_only))

    async def _describe(self, broker: int | None, kind: int, name: str) -> DescribeConfigsResult:
        request = DescribeConfigsRequest(resources=(DescribeConfigsResource(resource_type=kind, resource_name=name),))
        conn = await (self.client.connection(broker) if broker is not None else self.client.any_connection())
        result: DescribeConfigsResult = (await conn.call(request, self.client.request_timeout)).results[0]
        if result.error_code:
            raise error_for(result.error_code, result.error_message or f"resource {name!r}")
        return result

    async def describe_broker_configs(self, broker: int | None) -> dict[str, tuple[str | None, int]]:
        """name -> (value, Kafka's ConfigSource) of a broker's configs, asked of that broker (None: the cluster
        default's dynamic configs, asked of any broker)."""
        name = "" if broker is None else str(broker)
        if broker is not None and broker not in self.client.metadata.brokers:
            await self.client.refresh_metadata([])  # to learn where it listens
        result = await self._describe(broker, BROKER_RESOURCE, name)
        return {c.name: (c.value, c.config_source) for c in result.configs}

    async def describe_group_configs(self, group: str) -> dict[str, tuple[str | None, int]]:
        """name -> (value, Kafka's ConfigSource) of a group's configs (Kafka 4's GroupConfig: GROUP_CONFIG, 8, for
        the group's own value, else the broker's default), asked of any broker."""
        result = await self._describe(None, GROUP_RESOURCE, group)
        return {c.name: (c.value, c.config_source) for c in result.configs}

    async def alter_group_configs(
        self, group: str, changes: dict[str, str | None], validate_only: bool = False
    ) -> None:
        """A group's own configs (consumer.session.timeout.ms, share.isolation.level, ...), IncrementalAlterConfigs
        on a GROUP resource: a value sets the key, None deletes it (back to the broker's)."""
        await self._alter(_incremental(GROUP_RESOURCE, group, changes, validate_only))

    async def describe_broker_loggers(self, broker: int) -> dict[str, str]:
        """logger -> its level (Kafka's names: TRACE, DEBUG, INFO, WARN, ...) in that broker's process, asked of it
        (Kafka's BROKER_LOGGER resource, `kafka-configs --entity-type broker-loggers`)."""
        if broker not in self.client.metadata.brokers:
            await self.client.refresh_metadata([])
        result = await self._describe(broker, BROKER_LOGGER_RESOURCE, str(broker))
        return {c.name: c.value or "" for c in result.configs}

    async def alter_broker_loggers(
        self, broker: int, changes: dict[str, str | None], validate_only: bool = False
    ) -> None:
        """Set loggers' levels in that broker's process (None: the logger inherits its parent's again); the broker
        changes its own, so the request goes to it, not to the controller. Lasts until the broker restarts."""
        if broker not in self.client.metadata.brokers:
            await self.client.refresh_metadata([])
        conn = await self.client.connection(broker)
        request = _incremental(BROKER_LOGGER_RESOURCE, str(broker), changes, validate_only)
        answer = await conn.call(request, self.client.request_timeout)
        for r in answer.responses:
            if r.error_code:
                raise error_for(r.error_code, r.error_message or f"broker {broker}'s loggers")

    async def broker_ids(self) -> list[int]:
        """The ids of the cluster's live brokers (Kafka's describeCluster nodes)."""
        await self.client.refresh_metadata([])
        return sorted(self.client.metadata.brokers)

    async def topic_partitions(self, include_internal: bool = False) -> dict[str, list[int]]:
        """Every topic's partition ids, from one Metadata answer (no configs asked, unlike describe_topics)."""
        topics = await self.client.list_topics()
        shown = {n: t for n, t in topics.items() if not t.error and (include_internal or not t.is_internal)}
        return {n: sorted(t.partitions) for n, t in shown.items()}

    async def describe_log_dirs(
        self, brokers: list[int] | None = None, topics: list[str] | None = None
    ) -> dict[int, tuple[DescribeLogDirsResult, ...]]:
        """Kafka's describeLogDirs: each broker's (every live one's, by default) data directories, with the
        replicas of `topics` (None: of every topic) each holds: size, offset lag, whether a future replica."""
        await self.client.refresh_metadata(topics or [])
        if brokers is None:
            brokers = sorted(self.client.metadata.brokers)
        wanted: tuple[DescribableLogDirTopic, ...] | None = None
        if topics is not None:
            wanted = tuple(
                DescribableLogDirTopic(topic=t, partitions=tuple(sorted(self.client.metadata.topics[t].partitions)))
                for t in topics
                if t in self.client.metadata.topics
            )
        out: dict[int, tuple[DescribeLogDirsResult, ...]] = {}
        for broker in brokers:
            conn = await self.client.connection(broker)
            answer = await conn.call(DescribeLogDirsRequest(topics=wanted), self.client.request_timeout)
            if answer.error_code:
                raise error_for(answer.error_code, f"describing the log directories of broker {broker}")
            out[broker] = answer.results
        return out

    async def describe_metadata_quorum(self) -> tuple[str, DescribeQuorumResponsePartitionData]:
        """Kafka's describeMetadataQuorum: the cluster id and the controller quorum's state (leader, epoch,
        high watermark, each voter's and observer's log end and fetch times), as the quorum leader knows it."""
        await self.client.refresh_metadata([])
        request = DescribeQuorumRequest(
            topics=(QuorumTopic(topic_name="__cluster_metadata", partitions=(QuorumPartition(partition_index=0),)),)
        )
        conn = await self.client.any_connection()
        answer = await conn.call(request, self.client.request_timeout)
        if answer.error_code:
            raise error_for(answer.error_code, answer.error_message or "describing the metadata quorum")
        [partition] = [p for t in answer.topics for p in t.partitions]
        if partition.error_code:
            raise error_for(partition.error_code, partition.error_message or "describing the metadata quorum")
        return self.client.metadata.cluster_id, partition

    async def describe_configs(self, topic: str) -> dict[str, tuple[str, bool]]:
        """name -> (value, is_default: not set on the topic itself) of a topic's configs."""
        result = await self._describe(None, TOPIC_RESOURCE, topic)
        return {c.name: (c.value or "", is_default(ConfigSource(c.config_source), c.read_only)) for c in result.configs}

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        topics = await self.client.list_topics()
        return sorted(n for n, t in topics.items() if include_internal or not t.is_internal)

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicDescription]:
        if names is None:
            names = await self.list_topics()
        await self.client.refresh_metadata(names)
        out = []
        for name in names:
            tm: TopicMeta | None = self.client.metadata.topics.get(name)
            if tm is None or tm.error:
                raise error_for(tm.error if tm else 3, f"topic {name!r} does not exist")
            configs = await self.describe_configs(name)
            out.append(TopicDescription(name, tm.topic_id, [tm.partitions[p] for p in sorted(tm.partitions)], configs))
        return out

    async def elect_leaders(
        self, election_type: ElectionType | int, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, KafkaLiteError | None]:
        """Kafka's Admin.electLeaders: PREFERRED moves each partition's leadership to its first replica if that
        one is alive and in the ISR; UNCLEAN gives a partition without a leader any live replica. Each
        partition's outcome: None (elected) or its error (ElectionNotNeededError: already led as asked,
        PreferredLeaderNotAvailableError, EligibleLeadersNotAvailableError, UnknownTopicOrPartitionError).
        `partitions` None: every partition of the cluster, and only those that needed an election come back."""
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions or []:
            topics.setdefault(topic, []).append(partition)
        asked = (
            None if partitions is None else tuple(ElectTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items())
        )
        request = ElectLeadersRequest(election_type=int(ElectionType(election_type)), topic_partitions=asked)
        answer: ElectLeadersResponse = await self._controller_call(request)
        if answer.error_code:
            first = next((p.error_message for t in answer.replica_election_results for p in t.partition_result), None)
            raise error_for(answer.error_code, first or "")
        return {
            TopicPartition(t.topic, p.partition_id): error_for(p.error_code, p.error_message or "")
            if p.error_code
            else None
            for t in answer.replica_election_results
            for p in t.partition_result
        }

    async def alter_partition_reassignments(
        self, targets: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, KafkaLiteError | None]:
        """Kafka's Admin.alterPartitionReassignments (KIP-455): move each partition to its target replicas, or
        cancel its reassignment in progress (None). Each partition's outcome: None (started or cancelled) or its
        error (InvalidReplicaAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError)."""
        topics: dict[str, list[ReassignablePartition]] = {}
        for (topic, partition), replicas in targets.items():
            topics.setdefault(topic, []).append(
                ReassignablePartition(partition_index=partition, replicas=None if replicas is None else tuple(replicas))
            )
        request = AlterPartitionReassignmentsRequest(
            topics=tuple(ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items())
        )
        answer: AlterPartitionReassignmentsResponse = await self._controller_call(request)
        if answer.error_code:
            raise error_for(answer.error_code, answer.error_message or "")
        return {
            TopicPartition(t.name, p.partition_index): error_for(p.error_code, p.error_message or "")
            if p.error_code
            else None
            for t in answer.responses
            for p in t.partitions
        }

    async def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """Kafka's Admin.listPartitionReassignments: (replicas, adding, removing) of each reassignment in
        progress, of `partitions` (None: all)."""
        asked: tuple[ListReassignTopic, ...] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            asked = tuple(ListReassignTopic(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
        answer: ListPartitionReassignmentsResponse = await self._controller_call(
            ListPartitionReassignmentsRequest(topics=asked)
        )
        if answer.error_code:
            raise error_for(answer.error_code, answer.error_message or "")
        return {
            TopicPartition(t.name, p.partition_index): (
                list(p.replicas),
                list(p.adding_replicas),
                list(p.removing_replicas),
            )
            for t in answer.topics
            for p in t.partitions
        }

    # --- consumer groups ---------------------------------------------------------

    async def list_groups(self) -> list[tuple[str, str, str]]:
        """(group_id, protocol_type, state) of every group: each broker lists the groups it coordinates."""
        out = {}
        for g in await self.listed_groups():
            out[g.group_id] = (g.group_id, g.protocol_type, g.group_state)
        return [out[g] for g in sorted(out)]

    async def listed_groups(self, broker_ids: Iterable[int] | None = None, timeout: float | None = None) -> list[Any]:
        """Every group each broker (default: every one) coordinates, of every type: ListGroups' rows
        (`group_id`, `protocol_type`, `group_state`, `group_type`)."""
        if broker_ids is None:
            await self.client.refresh_metadata([])
            broker_ids = sorted(self.client.metadata.brokers)
        out: list[Any] = []
        for broker_id in broker_ids:
            answer = await self.client.call(broker_id, ListGroupsRequest(), timeout)
            if answer.error_code:
                raise error_for(answer.error_code, f"ListGroups on broker {broker_id}")
            out += answer.groups
        return out

    async def describe_group(self, group_id: str) -> GroupDescription:
        """State "Dead" means the group does not exist (as in Kafka)."""
        gc = GroupClient(self.client, group_id)
        answer = await gc.call(
            DescribeGroupsRequest(groups=(group_id,)), lambda a: _group_row_error(a.groups), action="describe"
        )
        g = answer.groups[0]
        if g.error_code:
            raise group_error(g.error_code, group_id, "describe")
        members = []
        for m in g.members:
            try:
                tps = Assignment.decode(m.member_assignment).partitions
            except ValueError:
                tps = frozenset()
            members.append(
                MemberDescription(m.member_id, m.client_id, m.client_host, tps, group_instance_id=m.group_instance_id)
            )
        address = self.client.metadata.brokers.get(gc.coordinator_id) if gc.coordinator_id is not None else None
        coordinator = (gc.coordinator_id, *address) if gc.coordinator_id is not None and address else None
        desc = GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members, coordinator)
        if g.group_state == "Dead":
            # DescribeGroups describes classic groups only (as Kafka 4's): a consumer-protocol group (KIP-848)
            # is Dead there, and described by ConsumerGroupDescribe, which knows it.
            await self._describe_consumer_group(gc, desc)
        return desc

    async def _describe_consumer_group(self, gc: GroupClient, desc: GroupDescription) -> None:
        """A consumer-protocol group (KIP-848): its epochs and each member's, from ConsumerGroupDescribe."""
        answer = await gc.call(
            ConsumerGroupDescribeRequest(group_ids=(desc.group_id,)),
            lambda a: (a.groups[0].error_code, a.groups[0].error_message) if a.groups else (0, None),
        )
        g = answer.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return  # no group of either kind: Dead, as Kafka says
        if g.error_code:
            raise group_error(g.error_code, desc.group_id, "describe", g.error_message or "")

        def tps(a: Any) -> frozenset[tuple[str, int]]:
            return frozenset((t.topic_name, p) for t in a.topic_partitions for p in t.partitions)

        desc.group_type, desc.state, desc.protocol = "consumer", g.group_state, g.assignor_name
        desc.protocol_type = "consumer"
        desc.group_epoch, desc.target_assignment_epoch = g.group_epoch, g.assignment_epoch
        desc.members = [
            MemberDescription(
                m.member_id,
                m.client_id,
                m.client_host,
                tps(m.assignment),
                m.member_epoch,
                tps(m.target_assignment),
                m.instance_id,
            )  # fmt: skip
            for m in g.members
        ]

    async def list_group_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return {
            tp: off for tp, off in (await GroupClient(self.client, group_id).fetch_committed(None)).items() if off >= 0
        }

    async def alter_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Set committed offsets of a group without active members (the coordinator refuses otherwise)."""
        await GroupClient(self.client, group_id).commit(
            {tp: (off, "") for tp, off in offsets.items()}, use_generation=False
        )

    async def delete_groups(self, group_ids: list[str]) -> dict[str, KafkaLiteError | None]:
        out: dict[str, KafkaLiteError | None] = {}
        for gid in group_ids:
            answer = await GroupClient(self.client, gid).call(
                DeleteGroupsRequest(groups_names=(gid,)),
                lambda a: (a.results[0].error_code, None) if a.results else (0, None),
                action="delete",
            )
            code = answer.results[0].error_code
            out[gid] = group_error(code, gid, "delete") if code else None
        return out

    # --- share groups (KIP-932) ---------------------------------------------------------------------------

    async def describe_share_group(self, group_id: str) -> DescribedShareGroup:
        """ShareGroupDescribe at the group's coordinator; a group it does not know is state "Dead" (Kafka's)."""
        answer = await GroupClient(self.client, group_id).call(
            ShareGroupDescribeRequest(group_ids=(group_id,)), lambda a: _group_row_error(a.groups)
        )
        row: DescribedShareGroup = answer.groups[0]
        if row.error_code and row.error_code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise error_for(row.error_code, row.error_message or f"share group {group_id!r}")
        return row

    async def list_share_group_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Kafka's Admin.listShareGroupOffsets: each share-partition's start offset (-1: none yet), for the
        topics the group's members subscribe to."""
        request = DescribeShareGroupOffsetsRequest(groups=(DescribeShareGroupOffsetsRequestGroup(group_id=group_id),))
        answer = await GroupClient(self.client, group_id).call(request, lambda a: _group_row_error(a.groups))
        (g,) = answer.groups
        if g.error_code:
            raise error_for(g.error_code, g.error_message or f"share group {group_id!r}")
        out = {}
        for t in g.topics:
            for p in t.partitions:
                if p.error_code:
                    raise error_for(p.error_code, f"{t.topic_name}-{p.partition_index}: {p.error_message or ''}")
                out[(t.topic_name, p.partition_index)] = p.start_offset
        return out

    async def alter_share_group_offsets(
        self, group_id: str, offsets: dict[tuple[str, int], int]
    ) -> dict[tuple[str, int], KafkaLiteError | None]:
        """Kafka's Admin.alterShareGroupOffsets: the start offset of each share-partition of an empty share
        group (-1: share.auto.offset.reset decides at the next fetch). A group-level error (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP, GROUP_AUTHORIZATION_FAILED) is raised; per partition, None or its error."""
        by_topic: dict[str, list[AlterShareGroupOffsetsRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            row = AlterShareGroupOffsetsRequestPartition(partition_index=partition, start_offset=offset)
            by_topic.setdefault(topic, []).append(row)
        request = AlterShareGroupOffsetsRequest(
            group_id=group_id,
            topics=tuple(
                AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )
        answer = await GroupClient(self.client, group_id).call(request, lambda a: (a.error_code, a.error_message))
        if answer.error_code:
            raise error_for(answer.error_code, answer.error_message or f"share group {group_id!r}")
        out: dict[tuple[str, int], KafkaLiteError | None] = {}
        for t in answer.responses:
            for p in t.partitions:
                err = error_for(p.error_code, p.error_message or "") if p.error_code else None
                out[(t.topic_name, p.partition_index)] = err
        return out

    async def delete_share_group_offsets(self, group_id: str, topics: list[str]) -> dict[str, KafkaLiteError | None]:
        """Kafka's Admin.deleteShareGroupOffsets: forget the share-partitions of these topics in an empty share
        group (its next member starts at share.auto.offset.reset). A group-level error is raised; per topic,
        None or its error."""
        request = DeleteShareGroupOffsetsRequest(
            group_id=group_id, topics=tuple(DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics)
        )
        answer = await GroupClient(self.client, group_id).call(request, lambda a: (a.error_code, a.error_message))
        if answer.error_code:
            raise error_for(answer.error_code, answer.error_message or f"share group {group_id!r}")
        return {
            t.topic_name: error_for(t.error_code, t.error_message or "") if t.error_code else None
            for t in answer.responses
        }

    async def delete_share_groups(self, group_ids: list[str]) -> dict[str, KafkaLiteError | None]:
        """Kafka's Admin.deleteShareGroups: DeleteGroups, which deletes an empty share group with its state."""
        return await self.delete_groups(group_ids)

    async def list_offsets(self, tps: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        return await self.client.list_offsets(tps, timestamp)

    async def list_offsets_each(
        self, tps: list[tuple[str, int]], timestamp: int
    ) -> dict[tuple[str, int], int | KafkaLiteError]:
        """Per partition, its offset or its error (Kafka's Admin.listOffsets: one result per partition)."""
        return await self.client.list_offsets_each(tps, timestamp)

    async def delete_records(
        self, offsets: dict[tuple[str, int], int], timeout_ms: int = 30000
    ) -> dict[tuple[str, int], int | KafkaLiteError]:
        """Kafka's Admin.deleteRecords: records below each offset (-1: the high watermark) are deleted, i.e. the
        partition's log start moves there. Per partition, its low watermark afterwards or the error. Each partition
        goes to its leader; NOT_LEADER_OR_FOLLOWER, a leader not known yet or a lost connection are retried (the
        metadata asked again) with backoff for up to request.timeout.ms, as Kafka's admin client does."""
        client = self.client

        def again(e: KafkaLiteError) -> bool:  # a partition that does not exist is said at once, not waited for
            return e.retriable and e.code not in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT)

        out: dict[tuple[str, int], int | KafkaLiteError] = {}
        pending = dict(offsets)
        backoff = client.backoff()
        deadline = time.monotonic() + client.request_timeout
        while True:
            retry: dict[tuple[str, int], KafkaLiteError] = {}
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in pending:
                try:
                    by_leader.setdefault(await client.leader_for(*tp), []).append(tp)
                except KafkaLiteError as e:
                    (retry if again(e) else out)[tp] = e
            for leader, tps in by_leader.items():
                topics: dict[str, list[DeleteRecordsPartition]] = {}
                for t, p in tps:
                    topics.setdefault(t, []).append(DeleteRecordsPartition(partition_index=p, offset=pending[(t, p)]))
                request = DeleteRecordsRequest(
                    topics=tuple(DeleteRecordsTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()),
                    timeout=datetime.timedelta(milliseconds=timeout_ms),
                )
                try:
                    conn = await client.connection(leader)
                    answer = await conn.call(request, timeout=client.request_timeout + timeout_ms / 1000)
                except KafkaLiteError as e:  # the leader is gone or unreachable, or refused the request as a whole
                    for tp in tps:
                        client.invalidate(tp[0])
                        (retry if again(e) else out)[tp] = e
                    continue
                for topic in answer.topics:
                    for part in topic.partitions:
                        tp = (topic.name, part.partition_index)
                        if not part.error_code:
                            out[tp] = part.low_watermark
                            continue
                        refused = error_for(part.error_code, f"delete records of {tp[0]}-{tp[1]}")
                        if again(refused):
                            client.invalidate(tp[0])
                            retry[tp] = refused
                        else:
                            out[tp] = refused
            pending = {tp: pending[tp] for tp in retry}
            wait = backoff.next()
            if not pending or time.monotonic() + wait > deadline:
                out.update(retry)
                return out
            await asyncio.sleep(wait)

    # --- security: ACLs and SCRAM credentials (Kafka's Admin createAcls, describeAcls, deleteAcls, ...) ------

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        creations = tuple(AclCreation(**as_fields(b, CREATION_FIELDS)) for b in bindings)
        answer = await self._controller_call(CreateAclsRequest(creations=creations), lambda a: a.results)
        _raise_first(answer.results)

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        f = acl_filter or AclBindingFilter()
        answer = await self.client.call(None, DescribeAclsRequest(**as_fields(f, FILTER_FIELDS)))
        _raise_first([answer])
        return [
            AclBinding.from_wire(
                [r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type]
            )
            for r in answer.resources
            for a in r.acls
        ]

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[AclBinding]:
        """Delete every binding a filter matches; returns them."""
        request = DeleteAclsRequest(filters=tuple(DeleteAclsFilter(**as_fields(f, FILTER_FIELDS)) for f in filters))
        answer = await self._controller_call(request, lambda a: a.filter_results)
        _raise_first(answer.filter_results)
        return [
            AclBinding.from_wire(
                [m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation, m.permission_type]
            )
            for r in answer.filter_results
            for m in r.matching_acls
        ]

    async def describe_user_scram_credentials(self, users: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """user -> [(mechanism, iterations)]: never the credentials themselves."""
        asked = None if users is None else tuple(UserName(name=u) for u in users)
        answer = await self.client.call(None, DescribeUserScramCredentialsRequest(users=asked))
        _raise_first([answer, *answer.results])
        return {
            r.user: [
                (SCRAM_MECHANISM_NAMES.get(c.mechanism, str(c.mechanism)), c.iterations) for c in r.credential_infos
            ]
            for r in answer.results
        }

    async def alter_user_scram_credentials(
        self,
        upsertions: list[tuple[str, str, str, int]] = (),  # type: ignore[assignment]
        deletions: list[tuple[str, str]] = (),  # type: ignore[assignment]
    ) -> None:
        """Upsert (user, mechanism, password, iterations) and delete (user, mechanism). As Kafka's clients do,
        the password never leaves this process: only a fresh salt and SaltedPassword = Hi(password, salt, i)."""
        ups = []
        for user, mech, password, iterations in upsertions:
            salt = os.urandom(32)
            algo = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}.get(mech)
            if algo is None:
                raise error_for(ErrorCode.INVALID_REQUEST, f"unknown SCRAM mechanism {mech!r}")
            salted = hashlib.pbkdf2_hmac(algo, password.encode(), salt, iterations)
            ups.append(
                ScramCredentialUpsertion(
                    name=user,
                    mechanism=SCRAM_MECHANISM_CODES[mech],
                    iterations=iterations,
                    salt=salt,
                    salted_password=salted,
                )
            )
        dels = []
        for user, mech in deletions:
            if mech not in SCRAM_MECHANISM_CODES:
                raise error_for(ErrorCode.INVALID_REQUEST, f"unknown SCRAM mechanism {mech!r}")
            dels.append(ScramCredentialDeletion(name=user, mechanism=SCRAM_MECHANISM_CODES[mech]))
        request = AlterUserScramCredentialsRequest(deletions=tuple(dels), upsertions=tuple(ups))
        answer = await self._controller_call(request, lambda a: a.results)
        _raise_first(answer.results)

    async def describe_client_quotas(self) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        """{entity: {quota: value}}; an entity is ((type, name or None for <default>), ...)."""
        answer = await self.client.call(None, DescribeClientQuotasRequest())
        _raise_first([answer])
        return {
            tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in answer.entries or ()
        }

    async def alter_client_quotas(self, entity: list[tuple[str, str | None]], changes: dict[str, float | None]) -> None:
        """Set (a number) or remove (None) producer_byte_rate, consumer_byte_rate, request_percentage."""
        entry = QuotaEntry(
            entity=tuple(QuotaEntity(entity_type=t, entity_name=n) for t, n in entity),
            ops=tuple(QuotaOp(key=k, value=v or 0.0, remove=v is None) for k, v in changes.items()),
        )
        answer = await self._controller_call(AlterClientQuotasRequest(entries=(entry,)), lambda a: a.entries)
        _raise_first(answer.entries)

    async def close(self) -> None:
        await self.client.close()


__all__ = ["AsyncAdmin", "NewTopic", "TopicDescription", "KafkaLiteError"]


# Kafka's ScramMechanism codes.
SCRAM_MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_MECHANISM_NAMES = {v: k for k, v in SCRAM_MECHANISM_CODES.items()}


def _raise_first(rows: Iterable[Any]) -> None:
    """Raise the first error of typed answer rows (their error_code and error_message)."""
    for r in rows:
        if r.error_code:
            raise error_for(r.error_code, r.error_message or ErrorCode(r.error_code).name)


def _group_row_error(groups: Any) -> tuple[int, str | None]:
    """The first group row's error, for GroupClient.call to follow a coordinator that moved."""
    return (groups[0].error_code, getattr(groups[0], "error_message", None)) if groups else (0, None)
