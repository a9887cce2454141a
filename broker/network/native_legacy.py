"""Native version 0 of the apis that now take typed bodies (net/protocol.py TYPED_SINCE), for one more release.

Before the typed messages of net/schema/, a native body was a map whose rows were positional lists
(docs/FORMAT.md §6). A client of that release still sends them; this module turns such a request into the
api's typed request and the typed answer back into the old map, so the handler sees one kind of request. The
typed request is checked field by field as a typed body is (net/messages.py), so a value out of its Kafka type
is refused the same way. Delete an api's entry one release after its typed version shipped.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

from net.acl import CREATION_FIELDS, FILTER_FIELDS
from net.config_def import ConfigSource, is_default
from net.errors import ErrorCode
from net.messages import MessageError, decode, encode
from net.protocol import ApiKey
from net.schema.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from net.schema.alter_client_quotas import EntityData as QuotaEntity
from net.schema.alter_client_quotas import EntryData as QuotaEntry
from net.schema.alter_client_quotas import OpData as QuotaOp
from net.schema.alter_configs import AlterableConfig, AlterConfigsRequest, AlterConfigsResource, AlterConfigsResponse
from net.schema.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from net.schema.create_acls import AclCreation, CreateAclsRequest, CreateAclsResponse
from net.schema.create_partitions import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
)
from net.schema.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from net.schema.delete_acls import DeleteAclsFilter, DeleteAclsRequest, DeleteAclsResponse
from net.schema.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from net.schema.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from net.schema.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from net.schema.describe_client_quotas import ComponentData as QuotaComponent
from net.schema.describe_client_quotas import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from net.schema.describe_configs import DescribeConfigsRequest, DescribeConfigsResource, DescribeConfigsResponse
from net.schema.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from net.schema.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    UserName,
)
from net.schema.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from net.schema.elect_leaders import TopicPartitions as ElectLeadersTopic
from net.schema.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic, ForgottenTopic
from net.schema.find_coordinator import Coordinator, FindCoordinatorRequest, FindCoordinatorResponse
from net.schema.heartbeat import HeartbeatRequest, HeartbeatResponse
from net.schema.incremental_alter_configs import AlterableConfig as IncrementalAlterableConfig
from net.schema.incremental_alter_configs import AlterConfigsResource as IncrementalAlterConfigsResource
from net.schema.incremental_alter_configs import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from net.schema.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from net.schema.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from net.schema.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from net.schema.list_groups import ListGroupsRequest, ListGroupsResponse
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopic
from net.schema.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from net.schema.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from net.schema.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
)
from net.schema.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from net.schema.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData
from net.schema.sync_group import SyncGroupRequest, SyncGroupRequestAssignment, SyncGroupResponse


def _checked(message: Any) -> Any:
    """The message as a typed body read off the wire would be: every field within its type, or MessageError."""
    return decode(type(message), encode(message))


def _rows(body: dict[str, Any], what: str, entries_are_lists: bool = True) -> list[tuple[str, list[Any]]]:
    """[[topic, [partition entries]], ...] checked for shape (an entry a list starting with the partition, or
    with `entries_are_lists` False, the partition itself)."""
    topics = body.get("topics")
    if not isinstance(topics, list):
        raise MessageError("topics must be a list")
    out = []
    for entry in topics:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
            raise MessageError("each topics entry must be [topic, [partition entries]]")
        for p in entry[1] if entries_are_lists else ():
            if not isinstance(p, list) or not p:
                raise MessageError(f"each {what} partition entry must be a list starting with the partition")
        out.append((entry[0], entry[1]))
    return out


def list_offsets_request(body: dict[str, Any]) -> ListOffsetsRequest:
    """v0: {"topics": [[topic, [[partition, timestamp(, current leader epoch)], ...]], ...]}."""
    topics = []
    for name, parts in _rows(body, "list offsets"):
        entries = []
        for p in parts:
            if len(p) not in (2, 3):
                raise MessageError("list offsets partition entry must be [partition, timestamp(, leader epoch)]")
            epoch = p[2] if len(p) == 3 else -1
            entries.append(ListOffsetsPartition(partition_index=p[0], timestamp=p[1], current_leader_epoch=epoch))
        topics.append(ListOffsetsTopic(name=name, partitions=tuple(entries)))
    return _checked(ListOffsetsRequest(replica_id=-1, topics=tuple(topics)))  # type: ignore[no-any-return]


def list_offsets_response(resp: ListOffsetsResponse) -> dict[str, Any]:
    """v0: {"topics": [[topic, [[partition, error code, timestamp, offset], ...]], ...]}."""
    return {
        "topics": [
            [t.name, [[p.partition_index, int(p.error_code), p.timestamp, p.offset] for p in t.partitions]]
            for t in resp.topics
        ]
    }


def elect_leaders_request(body: dict[str, Any]) -> ElectLeadersRequest:
    """v0: {"election_type": 0 or 1, "topics": [[topic, [partition, ...]], ...] or nil (every partition)}."""
    topics = None
    if body.get("topics") is not None:
        topics = []
        for name, parts in _rows(body, "elect leaders", entries_are_lists=False):
            topics.append(ElectLeadersTopic(topic=name, partitions=tuple(parts)))
    election_type = body.get("election_type", 0)
    return _checked(  # type: ignore[no-any-return]
        ElectLeadersRequest(election_type=election_type, topic_partitions=None if topics is None else tuple(topics))
    )


def elect_leaders_response(resp: ElectLeadersResponse) -> dict[str, Any]:
    """v0: {"error_code", "topics": [[topic, [[partition, error code, message], ...]], ...]} (and the first
    message as "error_message" when the request failed as a whole)."""
    topics = [
        [t.topic, [[p.partition_id, int(p.error_code), p.error_message] for p in t.partition_result]]
        for t in resp.replica_election_results
    ]
    body: dict[str, Any] = {"error_code": int(resp.error_code), "topics": topics}
    if resp.error_code:
        body["error_message"] = next((r[2] for _, rows in topics for r in rows if r[2]), None)
    return body


def init_producer_id_request(body: dict[str, Any]) -> InitProducerIdRequest:
    """Version 0 had no fields: an idempotent producer's id."""
    return InitProducerIdRequest()


def init_producer_id_response(resp: InitProducerIdResponse) -> dict[str, Any]:
    return {"error_code": resp.error_code, "producer_id": resp.producer_id, "producer_epoch": resp.producer_epoch}


# The apis whose native v0 map the handler's side reads itself (broker/server/kafka_apis.py `_metadata_map`), for one
# more release: Metadata's map names fields its typed message has none for ("listener", and "broker_info" in the
# answer), and DescribeTopicPartitions v0 was a Metadata request under key 75.
MAP_FORM_APIS = frozenset({ApiKey.METADATA, ApiKey.DESCRIBE_TOPIC_PARTITIONS})

# api key -> (v0 body -> typed request, typed answer -> v0 body)
LEGACY: dict[int, tuple[Callable[[dict[str, Any]], Any], Callable[[Any], dict[str, Any]]]] = {
    ApiKey.LIST_OFFSETS: (list_offsets_request, list_offsets_response),
    ApiKey.ELECT_LEADERS: (elect_leaders_request, elect_leaders_response),
    ApiKey.INIT_PRODUCER_ID: (init_producer_id_request, init_producer_id_response),
}


# --- the classic group apis (FindCoordinator, Join/Sync/Heartbeat/LeaveGroup, offsets, List/Describe/DeleteGroups)


def _map_form(convert: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """A v0 map turned into its typed request and checked: a field of the wrong shape (a row too short, a list
    where a string goes) is the client's INVALID_REQUEST, as a typed body out of its type is."""

    def converted(body: dict[str, Any]) -> Any:
        if not isinstance(body, dict):
            raise MessageError("the request body must be a map")
        try:
            return _checked(convert(body))
        except MessageError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError) as e:
            raise MessageError(f"malformed request: {type(e).__name__}: {e}") from None

    converted.__doc__ = convert.__doc__
    return converted


def _one_shape(body: dict[str, Any], single: str, batched: str, api: str) -> bool:
    """True for the batched shape; a body carrying both fields is no shape of the api."""
    if batched not in body:
        return False
    if single in body:
        raise MessageError(f"a {api} request carries {single!r} or {batched!r}, not both")
    return True


def _ms(body: dict[str, Any], key: str, default: int) -> datetime.timedelta:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MessageError(f"{key} must be an integer")
    return datetime.timedelta(milliseconds=value)


def _pairs(value: Any, what: str) -> list[tuple[Any, Any]]:
    if not isinstance(value, list) or not all(isinstance(e, list) and len(e) == 2 for e in value):
        raise MessageError(f"{what} must be a list of [name, value] pairs")
    return [(e[0], e[1]) for e in value]


def find_coordinator_request(body: dict[str, Any]) -> FindCoordinatorRequest:
    """v0: {"key", "key_type": 0 (group) | 1 (transaction) = 0} or {"keys": [key, ...], "key_type"}."""
    key_type = body.get("key_type", 0)
    if _one_shape(body, "key", "keys", "FindCoordinator"):
        return FindCoordinatorRequest(key_type=key_type, coordinator_keys=tuple(body["keys"]))
    return FindCoordinatorRequest(key=body["key"], key_type=key_type)


def _coordinator_row(c: Coordinator | FindCoordinatorResponse) -> dict[str, Any]:
    return {
        "error_code": c.error_code,
        "error_message": c.error_message,
        "node_id": c.node_id,
        "host": c.host,
        "port": c.port,
    }


def find_coordinator_response(resp: FindCoordinatorResponse) -> dict[str, Any]:
    """v0: {"error_code", "error_message", "node_id", "host", "port"}, or for "keys" {"coordinators": [that and
    "key", ...]}."""
    if resp.coordinators:
        return {"coordinators": [dict(_coordinator_row(c), key=c.key) for c in resp.coordinators]}
    return _coordinator_row(resp)


def join_group_request(body: dict[str, Any]) -> JoinGroupRequest:
    """v0: {"group_id", "session_timeout_ms", "rebalance_timeout_ms" = the session's, "member_id" = "",
    "protocol_type" = "consumer", "protocols": [[name, metadata bytes], ...]}."""
    session = _ms(body, "session_timeout_ms", 0)
    return JoinGroupRequest(
        group_id=body["group_id"],
        session_timeout=session,
        rebalance_timeout=_ms(body, "rebalance_timeout_ms", int(session.total_seconds() * 1000)),
        member_id=body.get("member_id", ""),
        protocol_type=body.get("protocol_type", "consumer"),
        protocols=tuple(
            JoinGroupRequestProtocol(name=n, metadata=bytes(m or b""))
            for n, m in _pairs(body.get("protocols"), "protocols")
        ),
    )


def join_group_response(resp: JoinGroupResponse) -> dict[str, Any]:
    """v0: {"error_code", "generation_id", "protocol_type", "protocol_name", "leader", "member_id", "members":
    [[member id, metadata], ...] (the leader's only)}."""
    return {
        "error_code": resp.error_code,
        "generation_id": resp.generation_id,
        "protocol_type": resp.protocol_type,
        "protocol_name": resp.protocol_name,
        "leader": resp.leader,
        "member_id": resp.member_id,
        "members": [[m.member_id, m.metadata] for m in resp.members],
    }


def sync_group_request(body: dict[str, Any]) -> SyncGroupRequest:
    """v0: {"group_id", "generation_id", "member_id", "assignments": [[member id, assignment bytes], ...]}."""
    return SyncGroupRequest(
        group_id=body["group_id"],
        generation_id=body["generation_id"],
        member_id=body["member_id"],
        assignments=tuple(
            SyncGroupRequestAssignment(member_id=m, assignment=bytes(a or b""))
            for m, a in _pairs(body.get("assignments") or [], "assignments")
        ),
    )


def sync_group_response(resp: SyncGroupResponse) -> dict[str, Any]:
    """v0: {"error_code", "assignment"}."""
    return {"error_code": resp.error_code, "assignment": resp.assignment}


def heartbeat_request(body: dict[str, Any]) -> HeartbeatRequest:
    """v0: {"group_id", "generation_id", "member_id"}."""
    return HeartbeatRequest(group_id=body["group_id"], generation_id=body["generation_id"], member_id=body["member_id"])


def heartbeat_response(resp: HeartbeatResponse) -> dict[str, Any]:
    return {"error_code": resp.error_code}


def leave_group_request(body: dict[str, Any]) -> LeaveGroupRequest:
    """v0: {"group_id", "members": [member id, ...]}."""
    members = body["members"]
    if not isinstance(members, list):
        raise MessageError("members must be a list of member ids")
    return LeaveGroupRequest(group_id=body["group_id"], members=tuple(MemberIdentity(member_id=m) for m in members))


def leave_group_response(resp: LeaveGroupResponse) -> dict[str, Any]:
    """v0: {"error_code", "members": [[member id, error code], ...]}."""
    return {"error_code": resp.error_code, "members": [[m.member_id, m.error_code] for m in resp.members]}


def offset_commit_request(body: dict[str, Any]) -> OffsetCommitRequest:
    """v0: {"group_id", "generation_id" = -1, "member_id" = "", "topics": [[topic, [[partition, offset(,
    metadata)], ...]], ...]}."""
    topics = []
    for name, parts in _rows(body, "offset commit"):
        entries = []
        for p in parts:
            if len(p) not in (2, 3):
                raise MessageError("each offset entry must be [partition, offset, metadata?]")
            meta = p[2] if len(p) == 3 and isinstance(p[2], str) else ""
            entries.append(
                OffsetCommitRequestPartition(partition_index=p[0], committed_offset=p[1], committed_metadata=meta)
            )
        topics.append(OffsetCommitRequestTopic(name=name, partitions=tuple(entries)))
    return OffsetCommitRequest(
        group_id=body["group_id"],
        generation_id_or_member_epoch=body.get("generation_id", -1),
        member_id=body.get("member_id", ""),
        topics=tuple(topics),
    )


def offset_commit_response(resp: OffsetCommitResponse) -> dict[str, Any]:
    """v0: {"topics": [[topic, [[partition, error code, error message], ...]], ...]}."""
    return {
        "topics": [
            [t.name, [[p.partition_index, p.error_code, _code_name(p.error_code)] for p in t.partitions]]
            for t in resp.topics
        ]
    }


def _code_name(code: int) -> str | None:
    """A row's error message where the typed answer carries only the code: its name, as native errors say."""
    if not code:
        return None
    try:
        return ErrorCode(code).name
    except ValueError:
        return None


def _asked(body: dict[str, Any], what: str) -> list[tuple[str, list[Any]]] | None:
    return None if body.get("topics") is None else _rows(body, what, entries_are_lists=False)


def offset_fetch_request(body: dict[str, Any]) -> OffsetFetchRequest:
    """v0: {"group_id", "topics": [[topic, [partition, ...]], ...] | nil (every one), "require_stable" = false},
    or {"groups": [{"group_id", "topics", "member_id" = "", "member_epoch" = -1}, ...], "require_stable"}."""
    stable = bool(body.get("require_stable"))
    if not _one_shape(body, "group_id", "groups", "OffsetFetch"):
        asked = _asked(body, "offset fetch")
        topics = (
            None
            if asked is None
            else tuple(OffsetFetchRequestTopic(name=n, partition_indexes=tuple(ps)) for n, ps in asked)
        )
        return OffsetFetchRequest(group_id=body["group_id"], topics=topics, require_stable=stable)
    groups = []
    for g in body["groups"]:
        if not isinstance(g, dict):
            raise MessageError("each groups entry must be a map with group_id and topics")
        asked = _asked(g, "offset fetch")
        groups.append(
            OffsetFetchRequestGroup(
                group_id=g["group_id"],
                member_id=g.get("member_id") or None,
                member_epoch=g.get("member_epoch", -1),
                topics=None
                if asked is None
                else tuple(OffsetFetchRequestTopics(name=n, partition_indexes=tuple(ps)) for n, ps in asked),
            )
        )
    return OffsetFetchRequest(groups=tuple(groups), require_stable=stable)


def offset_fetch_response(resp: OffsetFetchResponse) -> dict[str, Any]:
    """v0: {"error_code", "topics": [[topic, [[partition, offset, metadata, error code], ...]], ...]}, or for
    "groups" {"error_code": 0, "groups": [{"group_id", "error_code", "topics"}, ...]}."""
    if resp.groups:
        return {
            "error_code": 0,
            "groups": [
                {
                    "group_id": g.group_id,
                    "error_code": g.error_code,
                    "topics": [
                        [
                            t.name,
                            [[p.partition_index, p.committed_offset, p.metadata, p.error_code] for p in t.partitions],
                        ]
                        for t in g.topics
                    ],
                }
                for g in resp.groups
            ],
        }
    return {
        "error_code": resp.error_code,
        "topics": [
            [t.name, [[p.partition_index, p.committed_offset, p.metadata, p.error_code] for p in t.partitions]]
            for t in resp.topics
        ],
    }


def list_groups_request(body: dict[str, Any]) -> ListGroupsRequest:
    """v0: {} (every group of every type)."""
    return ListGroupsRequest()


def list_groups_response(resp: ListGroupsResponse) -> dict[str, Any]:
    """v0: {"error_code", "groups": [[group id, protocol type, state], ...], "group_types": [type, ...]}."""
    return {
        "error_code": resp.error_code,
        "groups": [[g.group_id, g.protocol_type, g.group_state] for g in resp.groups],
        "group_types": [g.group_type for g in resp.groups],
    }


def describe_groups_request(body: dict[str, Any]) -> DescribeGroupsRequest:
    """v0: {"groups": [group id, ...], "include_authorized_operations" = false}."""
    return DescribeGroupsRequest(
        groups=tuple(body["groups"]), include_authorized_operations=body.get("include_authorized_operations") is True
    )


def describe_groups_response(resp: DescribeGroupsResponse) -> dict[str, Any]:
    """v0: {"groups": [{"error_code", "group_id", "state", "protocol_type", "protocol", "members": [[member id,
    client id, client host, metadata, assignment], ...], "authorized_operations"?}, ...]}."""
    out = []
    for g in resp.groups:
        row: dict[str, Any] = {
            "error_code": g.error_code,
            "group_id": g.group_id,
            "state": g.group_state,
            "protocol_type": g.protocol_type,
            "protocol": g.protocol_data,
            "members": [
                [m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment] for m in g.members
            ],
        }
        if g.authorized_operations != -(2**31):
            row["authorized_operations"] = g.authorized_operations
        out.append(row)
    return {"groups": out}


def delete_groups_request(body: dict[str, Any]) -> DeleteGroupsRequest:
    """v0: {"groups": [group id, ...]}."""
    return DeleteGroupsRequest(groups_names=tuple(body["groups"]))


def delete_groups_response(resp: DeleteGroupsResponse) -> dict[str, Any]:
    """v0: {"results": [[group id, error code, error message], ...]}."""
    return {"results": [[r.group_id, r.error_code, _code_name(r.error_code)] for r in resp.results]}


def offset_delete_request(body: dict[str, Any]) -> OffsetDeleteRequest:
    """v0: {"group_id", "topics": [[topic, [partition, ...]], ...]}."""
    return OffsetDeleteRequest(
        group_id=body["group_id"],
        topics=tuple(
            OffsetDeleteRequestTopic(
                name=n, partitions=tuple(OffsetDeleteRequestPartition(partition_index=p) for p in ps)
            )
            for n, ps in _rows(body, "offset delete", entries_are_lists=False)
        ),
    )


def offset_delete_response(resp: OffsetDeleteResponse) -> dict[str, Any]:
    """v0: {"error_code", "topics": [[topic, [[partition, error code, error message], ...]], ...]}."""
    return {
        "error_code": resp.error_code,
        "topics": [
            [t.name, [[p.partition_index, p.error_code, _code_name(p.error_code)] for p in t.partitions]]
            for t in resp.topics
        ],
    }


LEGACY.update(
    {
        ApiKey.FIND_COORDINATOR: (_map_form(find_coordinator_request), find_coordinator_response),
        ApiKey.JOIN_GROUP: (_map_form(join_group_request), join_group_response),
        ApiKey.SYNC_GROUP: (_map_form(sync_group_request), sync_group_response),
        ApiKey.HEARTBEAT: (_map_form(heartbeat_request), heartbeat_response),
        ApiKey.LEAVE_GROUP: (_map_form(leave_group_request), leave_group_response),
        ApiKey.OFFSET_COMMIT: (_map_form(offset_commit_request), offset_commit_response),
        ApiKey.OFFSET_FETCH: (_map_form(offset_fetch_request), offset_fetch_response),
        ApiKey.LIST_GROUPS: (_map_form(list_groups_request), list_groups_response),
        ApiKey.DESCRIBE_GROUPS: (_map_form(describe_groups_request), describe_groups_response),
        ApiKey.DELETE_GROUPS: (_map_form(delete_groups_request), delete_groups_response),
        ApiKey.OFFSET_DELETE: (_map_form(offset_delete_request), offset_delete_response),
    }
)


# --- ACLs, SCRAM credentials, client quotas -------------------------------------------------------------------

_SCRAM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # Kafka's ScramMechanism
_SCRAM_NAMES = {v: k for k, v in _SCRAM_CODES.items()}


def _acl_row(row: Any) -> list[Any]:
    """[resource_type, name, pattern_type, principal, host, operation, permission]."""
    if not isinstance(row, list) or len(row) != 7:
        raise MessageError("an ACL row is [resource_type, name, pattern_type, principal, host, operation, permission]")
    return row


def describe_acls_request(body: dict[str, Any]) -> DescribeAclsRequest:
    """v0: {"filter": [resource_type, name, pattern_type, principal, host, operation, permission]}."""
    return DescribeAclsRequest(**dict(zip(FILTER_FIELDS, _acl_row(body["filter"]))))


def describe_acls_response(resp: DescribeAclsResponse) -> dict[str, Any]:
    """v0: {"error_code", "bindings": [ACL row, ...]}."""
    rows = [
        [r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type]
        for r in resp.resources
        for a in r.acls
    ]
    return {"error_code": resp.error_code, "error_message": resp.error_message, "bindings": rows}


def create_acls_request(body: dict[str, Any]) -> CreateAclsRequest:
    """v0: {"creations": [ACL row, ...]}."""
    return CreateAclsRequest(
        creations=tuple(AclCreation(**dict(zip(CREATION_FIELDS, _acl_row(r)))) for r in body["creations"])
    )


def create_acls_response(resp: CreateAclsResponse) -> dict[str, Any]:
    """v0: {"results": [[error_code, error_message], ...]}, one per creation."""
    return {"results": [[r.error_code, r.error_message] for r in resp.results]}


def delete_acls_request(body: dict[str, Any]) -> DeleteAclsRequest:
    """v0: {"filters": [ACL filter row, ...]}."""
    return DeleteAclsRequest(
        filters=tuple(DeleteAclsFilter(**dict(zip(FILTER_FIELDS, _acl_row(r)))) for r in body["filters"])
    )


def delete_acls_response(resp: DeleteAclsResponse) -> dict[str, Any]:
    """v0: {"results": [[error_code, error_message, [ACL row deleted, ...]], ...]}, one per filter."""
    return {
        "results": [
            [
                r.error_code,
                r.error_message,
                [
                    [
                        m.resource_type,
                        m.resource_name,
                        m.pattern_type,
                        m.principal,
                        m.host,
                        m.operation,
                        m.permission_type,
                    ]
                    for m in r.matching_acls
                ],
            ]
            for r in resp.filter_results
        ]
    }


def describe_scram_request(body: dict[str, Any]) -> DescribeUserScramCredentialsRequest:
    """v0: {"users": [user, ...] | nil (every user)}."""
    users = body.get("users")
    return DescribeUserScramCredentialsRequest(users=None if users is None else tuple(UserName(name=u) for u in users))


def describe_scram_response(resp: DescribeUserScramCredentialsResponse) -> dict[str, Any]:
    """v0: {"error_code", "results": [[user, error_code, error_message, [[mechanism, iterations], ...]], ...]}."""
    return {
        "error_code": resp.error_code,
        "results": [
            [
                r.user,
                r.error_code,
                r.error_message,
                [[_SCRAM_NAMES.get(c.mechanism, str(c.mechanism)), c.iterations] for c in r.credential_infos],
            ]
            for r in resp.results
        ],
    }


def alter_scram_request(body: dict[str, Any]) -> AlterUserScramCredentialsRequest:
    """v0: {"deletions": [[user, mechanism], ...], "upsertions": [[user, mechanism, iterations, salt,
    salted_password], ...]} (a mechanism by name: SCRAM-SHA-256, SCRAM-SHA-512)."""

    def code(mechanism: Any) -> int:
        if mechanism not in _SCRAM_CODES:
            raise MessageError(f"unknown SCRAM mechanism {mechanism!r}")
        return _SCRAM_CODES[mechanism]

    deletions = [ScramCredentialDeletion(name=u, mechanism=code(m)) for u, m in body.get("deletions") or []]
    upsertions = [
        ScramCredentialUpsertion(name=u, mechanism=code(m), iterations=i, salt=salt, salted_password=salted)
        for u, m, i, salt, salted in body.get("upsertions") or []
    ]
    return AlterUserScramCredentialsRequest(deletions=tuple(deletions), upsertions=tuple(upsertions))


def alter_scram_response(resp: AlterUserScramCredentialsResponse) -> dict[str, Any]:
    """v0: {"results": [[user, error_code, error_message], ...]}."""
    return {"results": [[r.user, r.error_code, r.error_message] for r in resp.results]}


def describe_quotas_request(body: dict[str, Any]) -> DescribeClientQuotasRequest:
    """v0: {"entity": [[type, name or nil (the default)], ...] | nil (every entity)}: that entity exactly."""
    entity = body.get("entity")
    if entity is None:
        return DescribeClientQuotasRequest()
    components = tuple(
        QuotaComponent(entity_type=t, match_type=_MATCH_DEFAULT if n is None else _MATCH_EXACT, match=n)
        for t, n in _pairs(entity, "entity")
    )
    return DescribeClientQuotasRequest(components=components, strict=True)


def describe_quotas_response(resp: DescribeClientQuotasResponse) -> dict[str, Any]:
    """v0: {"error_code", "entries": [[[[type, name], ...], {key: value}], ...]}."""
    return {
        "error_code": resp.error_code,
        "entries": [
            [[[e.entity_type, e.entity_name] for e in entry.entity], {v.key: v.value for v in entry.values}]
            for entry in resp.entries or ()
        ],
    }


def alter_quotas_request(body: dict[str, Any]) -> AlterClientQuotasRequest:
    """v0: {"entries": [[[[type, name or nil], ...], {key: value or nil (remove)}], ...]}."""
    entries = []
    for entity, changes in _pairs(body["entries"], "entries"):
        ops = tuple(
            QuotaOp(key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in dict(changes).items()
        )
        entries.append(
            QuotaEntry(
                entity=tuple(QuotaEntity(entity_type=t, entity_name=n) for t, n in _pairs(entity, "entity")), ops=ops
            )
        )
    return AlterClientQuotasRequest(entries=tuple(entries))


def alter_quotas_response(resp: AlterClientQuotasResponse) -> dict[str, Any]:
    """v0: {"results": [[[[type, name], ...], error_code, error_message], ...]}."""
    return {
        "results": [
            [[[e.entity_type, e.entity_name] for e in r.entity], r.error_code, r.error_message] for r in resp.entries
        ]
    }


_MATCH_EXACT, _MATCH_DEFAULT = 0, 1  # KIP-546's match types

LEGACY.update(
    {
        ApiKey.DESCRIBE_ACLS: (_map_form(describe_acls_request), describe_acls_response),
        ApiKey.CREATE_ACLS: (_map_form(create_acls_request), create_acls_response),
        ApiKey.DELETE_ACLS: (_map_form(delete_acls_request), delete_acls_response),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (_map_form(describe_scram_request), describe_scram_response),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (_map_form(alter_scram_request), alter_scram_response),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (_map_form(describe_quotas_request), describe_quotas_response),
        ApiKey.ALTER_CLIENT_QUOTAS: (_map_form(alter_quotas_request), alter_quotas_response),
    }
)


# --- topics and configs ---------------------------------------------------------------------------------------

_TOPIC_RESOURCE, _BROKER_RESOURCE, _GROUP_RESOURCE = 2, 4, 32  # Kafka's ConfigResource.Type
_IS_DEFAULT_SOURCES = (ConfigSource.DEFAULT_CONFIG, ConfigSource.UNKNOWN)


def _not_forwarded(body: dict[str, Any]) -> None:
    """A v0 map marked forwarded was a broker's, served as forwarded; requests are forwarded in an ENVELOPE now."""
    if "forwarded" in body:
        raise MessageError("a forwarded request travels in an ENVELOPE (api 58) now, not as a map marked forwarded")


def _topic_rows(rows: Any) -> list[list[Any]]:
    return [[r.name, r.error_code, r.error_message] for r in rows]


def _throttle_ms(resp: Any) -> int:
    return int(resp.throttle_time.total_seconds() * 1000)


def create_topics_request(body: dict[str, Any]) -> CreateTopicsRequest:
    """v0: {"topics": [{"name", "num_partitions" = -1, "replication_factor" = -1 (the broker's defaults),
    "assignments": [[partition, [broker, ...]], ...], "configs": {name: value}}, ...], "validate_only"}."""
    _not_forwarded(body)
    topics = []
    for t in body["topics"]:
        configs = t.get("configs") or {}
        if not isinstance(configs, dict):
            raise MessageError("configs must be a map of name to value")
        topics.append(
            CreatableTopic(
                name=t["name"],
                num_partitions=t.get("num_partitions", -1),
                replication_factor=t.get("replication_factor", -1),
                assignments=tuple(
                    CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(brokers))
                    for p, brokers in _pairs(t.get("assignments") or [], "assignments")
                ),
                configs=tuple(
                    CreatableTopicConfig(name=str(k), value=None if v is None else str(v)) for k, v in configs.items()
                ),
            )
        )
    return CreateTopicsRequest(topics=tuple(topics), validate_only=bool(body.get("validate_only", False)))


def create_topics_response(resp: CreateTopicsResponse) -> dict[str, Any]:
    """v0: {"topics": [[name, error_code, error_message], ...], "throttle_time_ms"}."""
    return {"topics": _topic_rows(resp.topics), "throttle_time_ms": _throttle_ms(resp)}


def delete_topics_request(body: dict[str, Any]) -> DeleteTopicsRequest:
    """v0: {"topics": [name, ...]}."""
    _not_forwarded(body)
    return DeleteTopicsRequest(topic_names=tuple(body["topics"]))


def delete_topics_response(resp: DeleteTopicsResponse) -> dict[str, Any]:
    """v0: {"topics": [[name, error_code, error_message], ...], "throttle_time_ms"}."""
    return {"topics": _topic_rows(resp.responses), "throttle_time_ms": _throttle_ms(resp)}


def create_partitions_request(body: dict[str, Any]) -> CreatePartitionsRequest:
    """v0: {"topics": [{"name", "count", "assignments": [[broker, ...], ...] (one per new partition)}, ...],
    "validate_only"}."""
    _not_forwarded(body)
    topics = tuple(
        CreatePartitionsTopic(
            name=t["name"],
            count=t["count"],
            assignments=tuple(CreatePartitionsAssignment(broker_ids=tuple(a)) for a in t["assignments"])
            if t.get("assignments")
            else None,
        )
        for t in body["topics"]
    )
    return CreatePartitionsRequest(topics=topics, validate_only=bool(body.get("validate_only", False)))


def create_partitions_response(resp: CreatePartitionsResponse) -> dict[str, Any]:
    """v0: {"topics": [[name, error_code, error_message], ...], "throttle_time_ms"}."""
    return {"topics": _topic_rows(resp.results), "throttle_time_ms": _throttle_ms(resp)}


def describe_configs_request(body: dict[str, Any]) -> DescribeConfigsRequest:
    """v0: {"topics": [name, ...], "brokers": [id, ...], "groups": [group, ...]}: every config of each, with its
    synonyms and documentation."""
    resources = [
        DescribeConfigsResource(resource_type=kind, resource_name=str(name), configuration_keys=None)
        for key, kind in (("topics", _TOPIC_RESOURCE), ("brokers", _BROKER_RESOURCE), ("groups", _GROUP_RESOURCE))
        for name in body.get(key) or []
    ]
    return DescribeConfigsRequest(resources=tuple(resources), include_synonyms=True, include_documentation=True)


def describe_configs_response(resp: DescribeConfigsResponse) -> dict[str, Any]:
    """v0: {"results": [[topic, error_code, error_message, {name: row}], ...], "brokers": [...], "groups": [...]}, a
    row [value, is_default, doc, is_sensitive, config_type, config_source, [[name, value, source], ...], read_only]
    (ConfigEntry.to_wire)."""
    out: dict[str, list[Any]] = {"results": [], "brokers": [], "groups": []}
    key = {_TOPIC_RESOURCE: "results", _BROKER_RESOURCE: "brokers", _GROUP_RESOURCE: "groups"}
    for r in resp.results:
        rows = {
            c.name: [
                c.value,
                is_default(ConfigSource(c.config_source), c.read_only),
                c.documentation or "",
                c.is_sensitive,
                c.config_type,
                c.config_source,
                [[s.name, s.value, s.source] for s in c.synonyms],
                c.read_only,
            ]
            for c in r.configs
        }
        out[key.get(r.resource_type, "results")].append([r.resource_name, r.error_code, r.error_message, rows])
    if not out["groups"]:
        del out["groups"]
    return out


def alter_configs_request(body: dict[str, Any]) -> AlterConfigsRequest | IncrementalAlterConfigsRequest:
    """v0: {"topics": [[topic, changes], ...], "brokers": [[id or "" (the cluster default), changes], ...],
    "groups": [[group, changes], ...], "validate_only", "replace"}. With "replace" the changes {name: value} become
    each resource's whole set of overrides (AlterConfigs); without, {name: value | nil (deleted) | ["append" |
    "subtract", items]} change it (IncrementalAlterConfigs)."""
    _not_forwarded(body)
    replace = body.get("replace") is True
    resources: list[Any] = []
    for key, kind in (("topics", _TOPIC_RESOURCE), ("brokers", _BROKER_RESOURCE), ("groups", _GROUP_RESOURCE)):
        for name, changes in _pairs(body.get(key) or [], key):
            if not isinstance(changes, dict):
                raise MessageError("configs must be a map of name to value")
            if replace:
                configs: tuple[Any, ...] = tuple(
                    AlterableConfig(name=str(k), value=None if v is None else str(v)) for k, v in changes.items()
                )
                resources.append(AlterConfigsResource(resource_type=kind, resource_name=str(name), configs=configs))
            else:
                configs = tuple(_incremental(str(k), v) for k, v in changes.items())
                resources.append(
                    IncrementalAlterConfigsResource(resource_type=kind, resource_name=str(name), configs=configs)
                )
    validate_only = bool(body.get("validate_only", False))
    if replace:
        return AlterConfigsRequest(resources=tuple(resources), validate_only=validate_only)
    return IncrementalAlterConfigsRequest(resources=tuple(resources), validate_only=validate_only)


_LIST_OPS = {"append": 2, "subtract": 3}  # IncrementalAlterConfigs' APPEND and SUBTRACT


def _incremental(name: str, value: Any) -> IncrementalAlterableConfig:
    if value is None:
        return IncrementalAlterableConfig(name=name, config_operation=1, value=None)  # DELETE
    if isinstance(value, list):
        if len(value) != 2 or value[0] not in _LIST_OPS:
            raise MessageError(f'a list change of {name!r} is ["append" | "subtract", items]')
        return IncrementalAlterableConfig(name=name, config_operation=_LIST_OPS[value[0]], value=str(value[1]))
    return IncrementalAlterableConfig(name=name, config_operation=0, value=str(value))  # SET


def alter_configs_response(resp: AlterConfigsResponse | IncrementalAlterConfigsResponse) -> dict[str, Any]:
    """v0: {"topics": [[topic, error_code, error_message], ...], "brokers": [...], "groups": [...]}."""
    out: dict[str, list[Any]] = {"topics": [], "brokers": [], "groups": []}
    key = {_TOPIC_RESOURCE: "topics", _BROKER_RESOURCE: "brokers", _GROUP_RESOURCE: "groups"}
    for r in resp.responses:
        out[key.get(r.resource_type, "topics")].append([r.resource_name, r.error_code, r.error_message])
    if not out["groups"]:
        del out["groups"]
    return out


LEGACY.update(
    {
        ApiKey.CREATE_TOPICS: (_map_form(create_topics_request), create_topics_response),
        ApiKey.DELETE_TOPICS: (_map_form(delete_topics_request), delete_topics_response),
        ApiKey.CREATE_PARTITIONS: (_map_form(create_partitions_request), create_partitions_response),
        ApiKey.DESCRIBE_CONFIGS: (_map_form(describe_configs_request), describe_configs_response),
        ApiKey.ALTER_CONFIGS: (_map_form(alter_configs_request), alter_configs_response),
    }
)
# --- Metadata (3), and DescribeTopicPartitions v0, which was a Metadata request ---------------------------------

# Kafka's "authorized operations not asked for" (Integer.MIN_VALUE), left out of the v0 map.
_NOT_GIVEN = -(2**31)


def _metadata_request(body: dict[str, Any]) -> MetadataRequest:
    """v0: {"topics": [name, ...] | nil (every topic), "topic_ids": [32 hex digits, ...] (more topics, named by
    id), "allow_auto_topic_creation": bool (false unless true), "include_topic_authorized_operations",
    "include_cluster_authorized_operations"}; "listener" (whose endpoints to name) is read by the map form's
    caller, as the typed message has no field for it."""
    names = body.get("topics")
    topics = None
    if names is not None:
        if not isinstance(names, list):
            raise MessageError("topics must be a list of topic names or nil")
        ids = body.get("topic_ids") or []
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise MessageError("topic_ids must be a list of topic ids (32 hex digits)")
        by_id = tuple(MetadataRequestTopic(topic_id=uuid.UUID(hex=i)) for i in ids)
        topics = tuple(MetadataRequestTopic(name=n) for n in names) + by_id
    return MetadataRequest(
        topics=topics,
        allow_auto_topic_creation=body.get("allow_auto_topic_creation") is True,
        include_topic_authorized_operations=body.get("include_topic_authorized_operations") is True,
        include_cluster_authorized_operations=body.get("include_cluster_authorized_operations") is True,
    )


metadata_request = _map_form(_metadata_request)


def metadata_response(resp: MetadataResponse) -> dict[str, Any]:
    """v0: {"error_code": 0, "cluster_id", "controller_id", "brokers": [[id, host, port], ...], "topics":
    [{"error_code", "name", "topic_id" (32 hex digits; absent for a topic without one), "is_internal", "partitions":
    [[error_code, partition, leader, leader_epoch, [replicas], [isr], [offline replicas]], ...]}, ...]}, with
    "topic_authorized_operations" per topic and "cluster_authorized_operations" when asked."""
    topics = []
    for t in resp.topics:
        row: dict[str, Any] = {"error_code": t.error_code, "name": t.name}
        if t.topic_id is not None and t.topic_id.int:
            row["topic_id"] = t.topic_id.hex
        row["is_internal"] = t.is_internal
        row["partitions"] = [
            [
                p.error_code,
                p.partition_index,
                p.leader_id,
                p.leader_epoch,
                list(p.replica_nodes),
                list(p.isr_nodes),
                list(p.offline_replicas),
            ]
            for p in t.partitions
        ]
        if t.topic_authorized_operations != _NOT_GIVEN:
            row["topic_authorized_operations"] = t.topic_authorized_operations
        topics.append(row)
    body: dict[str, Any] = {
        "error_code": 0,
        "cluster_id": resp.cluster_id,
        "controller_id": resp.controller_id,
        "brokers": [[b.node_id, b.host, b.port] for b in resp.brokers],
        "topics": topics,
    }
    if resp.cluster_authorized_operations != _NOT_GIVEN:
        body["cluster_authorized_operations"] = resp.cluster_authorized_operations
    return body


# --- the data path ----------------------------------------------------------------------------------------------


def produce_request(body: dict[str, Any]) -> ProduceRequest:
    """v0: {"acks" (-1), "timeout_ms" (30000), "transactional_id"?, "topics": [[topic, [[partition, records bytes],
    ...]], ...]}."""
    topics = []
    for name, parts in _rows(body, "produce"):
        entries = []
        for p in parts:
            if len(p) != 2 or not isinstance(p[1], bytes):
                raise MessageError("produce partition entry must be [partition, records bytes]")
            entries.append(PartitionProduceData(index=p[0], records=p[1]))
        topics.append(TopicProduceData(name=name, partition_data=tuple(entries)))
    return ProduceRequest(
        transactional_id=body.get("transactional_id"),
        acks=body.get("acks", -1),
        timeout=_ms(body, "timeout_ms", 30000),
        topic_data=tuple(topics),
    )


def produce_response(resp: ProduceResponse) -> dict[str, Any]:
    """v0: {"topics": [[topic, [[partition, error code, base offset, log append time ms (-1: none), log start
    offset, error message], ...]], ...]} (and "throttle_time_ms" when a quota delays the client)."""
    body: dict[str, Any] = {
        "topics": [
            [
                t.name,
                [
                    [
                        p.index,
                        p.error_code,
                        p.base_offset,
                        -1 if p.log_append_time is None else _epoch_ms(p.log_append_time),
                        p.log_start_offset,
                        p.error_message,
                    ]
                    for p in t.partition_responses
                ],
            ]
            for t in resp.responses
        ]
    }
    if resp.throttle_time:
        body["throttle_time_ms"] = resp.throttle_time // datetime.timedelta(milliseconds=1)
    return body


def _epoch_ms(t: datetime.datetime) -> int:
    return round(t.timestamp() * 1000)


LEGACY.update({ApiKey.PRODUCE: (_map_form(produce_request), produce_response)})


def fetch_request(body: dict[str, Any]) -> FetchRequest:
    """v0: {"replica_id" (-1), "max_wait_ms" (500), "min_bytes" (1), "max_bytes" (52428800), "isolation_level" (0),
    "session_id" (0), "session_epoch" (absent: -1, sessionless), "topics": [[topic, [[partition, fetch offset,
    max bytes > 0, current leader epoch?, last fetched epoch?, follower's log start?], ...]], ...], "forgotten":
    [[topic, [partition, ...]], ...]}."""
    topics = []
    for name, parts in _rows(body, "fetch"):
        entries = []
        for p in parts:
            if len(p) < 3 or len(p) > 6 or not all(type(x) is int for x in p) or p[2] <= 0:
                raise MessageError(
                    "fetch partition entry must be [partition, fetch_offset, max_bytes>0, "
                    "current_leader_epoch?, last_fetched_epoch?, log_start_offset?] of integers"
                )
            entries.append(
                FetchPartition(
                    partition=p[0],
                    fetch_offset=p[1],
                    partition_max_bytes=p[2],
                    current_leader_epoch=p[3] if len(p) > 3 else -1,
                    last_fetched_epoch=p[4] if len(p) > 4 else -1,
                    log_start_offset=p[5] if len(p) > 5 else -1,
                )
            )
        topics.append(FetchTopic(topic=name, partitions=tuple(entries)))
    forgotten = body.get("forgotten") or []
    if not isinstance(forgotten, list) or not all(
        isinstance(e, list) and len(e) == 2 and isinstance(e[1], list) and all(type(q) is int for q in e[1])
        for e in forgotten
    ):
        raise MessageError("each forgotten entry must be [topic, [partition numbers]]")
    max_bytes = body.get("max_bytes", 52428800)
    if type(max_bytes) is not int or max_bytes <= 0:
        raise MessageError("max_bytes must be a positive integer")
    return FetchRequest(
        replica_id=body.get("replica_id", -1),
        max_wait=_ms(body, "max_wait_ms", 500),
        min_bytes=body.get("min_bytes", 1),
        max_bytes=max_bytes,
        isolation_level=body.get("isolation_level", 0),
        session_id=body.get("session_id", 0),
        session_epoch=body.get("session_epoch", -1),
        topics=tuple(topics),
        forgotten_topics_data=tuple(ForgottenTopic(topic=t, partitions=tuple(qs)) for t, qs in forgotten),
    )


def fetch_response(resp: FetchResponse) -> dict[str, Any]:
    """v0: {"topics": [[topic, [[partition, error code, high watermark, last stable offset, log start offset, records,
    message, diverging epoch, diverging end offset, log end offset, [[producer id, first offset], ...]], ...]], ...]}
    (and a follower's "session_id", "throttle_time_ms" when a quota delays the client). The typed answer has no
    message (the code's name is given) nor the leader's log end offset: the high watermark stands for it, at or below
    the log end, so an out-of-range follower of that release ahead of the leader truncates no further than it must
    refetch (its own rule truncates to that offset)."""
    body: dict[str, Any] = {
        "topics": [
            [
                t.topic,
                [
                    [
                        p.partition_index,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                        p.records or b"",
                        _code_name(p.error_code),
                        p.diverging_epoch.epoch,
                        p.diverging_epoch.end_offset,
                        p.high_watermark,
                        [[a.producer_id, a.first_offset] for a in p.aborted_transactions or ()],
                    ]
                    for p in t.partitions
                ],
            ]
            for t in resp.responses
        ]
    }
    if resp.session_id:
        body["session_id"] = resp.session_id
    if resp.error_code:
        body["error_code"] = resp.error_code
        body["error_message"] = _code_name(resp.error_code)
    if resp.throttle_time:
        body["throttle_time_ms"] = resp.throttle_time // datetime.timedelta(milliseconds=1)
    return body


LEGACY.update({ApiKey.FETCH: (_map_form(fetch_request), fetch_response)})
