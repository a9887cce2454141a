"""The consumer-group requests: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup, OffsetCommit/Fetch/Delete,
List/Describe/DeleteGroups, typed end to end (net/schema/): the same handler for both listeners, whose field
ranges were checked when the request was decoded. Decisions are the GroupCoordinatorLogic's. Authorization is
decided before these run (broker/server/authorization.py): a handler gets the request the table checked, without the
groups and topics it refused."""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from broker.group.consumer_group_api import ConsumerGroupApis
from broker.group.coordinator import now_ms
from broker.metadata.naming import OFFSETS_TOPIC, TXN_TOPIC
from broker.network.server import ConnectionContext, error_body
from broker.security.listeners import metadata_listener
from net.errors import ErrorCode, KafkaLiteError, TopicAlreadyExistsError
from net.protocol import ApiKey
from net.schema.delete_groups import DeletableGroupResult, DeleteGroupsRequest, DeleteGroupsResponse
from net.schema.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from net.schema.find_coordinator import Coordinator, FindCoordinatorRequest, FindCoordinatorResponse
from net.schema.heartbeat import HeartbeatRequest, HeartbeatResponse
from net.schema.join_group import JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember
from net.schema.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberResponse
from net.schema.list_groups import ListedGroup, ListGroupsRequest, ListGroupsResponse
from net.schema.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from net.schema.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from net.schema.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from net.schema.sync_group import SyncGroupRequest, SyncGroupResponse
from net.schema.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.group.coordinator import GroupCoordinator
    from broker.metadata.image import MetadataImage
    from broker.server.config import BrokerConfig

log = logging.getLogger("kafkalite.group")


def _conn(ctx: ConnectionContext) -> str:
    """The request's client connection, as the group logic tells members apart by it (its listener and the
    client's address and port: unique while the connection lives)."""
    return f"{ctx.listener} {ctx.peer}"


class GroupApis:
    def __init__(
        self,
        config: "BrokerConfig",
        coordinator: "GroupCoordinator",
        image: "MetadataImage",
        channel: "ControllerChannel",
        transaction_partition_for: Callable[[str], int] | None = None,
    ) -> None:
        self.config = config
        self.coordinator = coordinator
        # FindCoordinator key_type 1: the __transaction_state partition of a transactional id.
        self.transaction_partition_for = transaction_partition_for
        self.image = image
        self.channel = channel  # creates __consumer_offsets through the active controller
        # The groups of the other group types this broker coordinates, for ListGroups: each gives rows
        # [group_id, protocol_type, state, group_type] (share groups: broker/share/group_api.py).
        self.other_groups: list[Callable[[], list[list[Any]]]] = []
        # ... and their DeleteGroups: (error code, message) for a group of theirs, None for one they do not know
        # (Kafka's GroupCoordinatorService deletes share groups first, then the others).
        self.other_deletes: list[Callable[[str], Awaitable[tuple[int, str | None] | None]]] = []
        self.handlers = {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_DELETE: self.offset_delete,
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
            # The consumer group protocol (KIP-848), typed.
            **ConsumerGroupApis(coordinator, image).handlers,
        }

    # --- finding the coordinator -------------------------------------------------------------

    def find_coordinator(
        self, req: FindCoordinatorRequest, ctx: ConnectionContext
    ) -> FindCoordinatorResponse | Awaitable[FindCoordinatorResponse]:
        """One `key`, or several `coordinator_keys` (v4+, answered in `coordinators`). The coordinator is named by
        its endpoint of the request's listener (broker/security/listeners.py)."""
        if not req.coordinator_keys:
            one = self._find_one(req.key, req.key_type, ctx)
            if isinstance(one, Coordinator):
                return _single_coordinator(one)
            return self._await_single(one)
        answers = [self._find_one(k, req.key_type, ctx) for k in req.coordinator_keys]
        if all(isinstance(a, Coordinator) for a in answers):
            return FindCoordinatorResponse(coordinators=tuple(a for a in answers if isinstance(a, Coordinator)))
        return self._gather_coordinators(answers)

    @staticmethod
    async def _await_single(answer: Awaitable[Coordinator]) -> FindCoordinatorResponse:
        return _single_coordinator(await answer)

    @staticmethod
    async def _gather_coordinators(answers: list[Coordinator | Awaitable[Coordinator]]) -> FindCoordinatorResponse:
        return FindCoordinatorResponse(
            coordinators=tuple([a if isinstance(a, Coordinator) else await a for a in answers])
        )

    def _find_one(self, key: str, key_type: int, ctx: ConnectionContext) -> Coordinator | Awaitable[Coordinator]:
        create: Callable[[str], Awaitable[Coordinator]]
        if key_type == 1 and self.transaction_partition_for is not None:  # a transactional id's coordinator
            if not key:
                return _no_coordinator(key, ErrorCode.INVALID_REQUEST, "transactional id is empty")
            topic, partition, create = TXN_TOPIC, self.transaction_partition_for(key), self._create_txn_topic
        elif key_type != 0:
            return _no_coordinator(key, ErrorCode.INVALID_REQUEST, "key_type must be 0 (group) or 1 (transaction)")
        elif not key:
            return _no_coordinator(key, ErrorCode.INVALID_GROUP_ID, "group id must be non-empty")
        else:
            topic, partition, create = OFFSETS_TOPIC, self.coordinator.partition_for(key), self._create_offsets_topic
        image = self.image
        info = image.topics.get(topic)
        if info is None:
            return create(key)
        st = info.partitions.get(partition)
        b = image.brokers.get(st.leader) if st is not None else None
        if b is None or b.fenced:
            return _not_available(key, "the group's coordinator partition has no leader yet")
        listener = metadata_listener({}, ctx)  # the coordinator as the clients of this listener reach it
        endpoint = self.config.endpoint_of(b, listener)
        if endpoint is None:
            return _not_available(key, f"the coordinator, broker {b.id}, has no {listener} listener registered yet")
        return Coordinator(key=key, node_id=b.id, host=endpoint[0], port=endpoint[1])

    async def _create_txn_topic(self, key: str) -> Coordinator:
        """Kafka creates __transaction_state on the first FindCoordinator for a transactional id."""
        cfg = self.config
        rf = cfg.transaction_state_log_replication_factor
        if rf < 1:
            rf = min(3, max(len(cfg.voters()), len(self.image.brokers)))
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(cfg.transaction_state_log_segment_bytes),
            "min.insync.replicas": str(min(cfg.transaction_state_log_min_isr, rf)),
        }
        return await self._create_internal(key, TXN_TOPIC, cfg.transaction_state_log_num_partitions, rf, configs)

    async def _create_offsets_topic(self, key: str) -> Coordinator:
        """Kafka creates __consumer_offsets on the first FindCoordinator; the caller retries meanwhile."""
        cfg = self.config
        rf = cfg.offsets_topic_replication_factor
        if rf < 1:
            # The configured peers, or in ZooKeeper mode (where --peers is optional) the registered brokers.
            rf = min(3, max(len(cfg.voters()), len(self.image.brokers)))
        configs = {"cleanup.policy": "compact", "segment.bytes": str(cfg.offsets_topic_segment_bytes)}
        return await self._create_internal(key, OFFSETS_TOPIC, cfg.offsets_topic_num_partitions, rf, configs)

    async def _create_internal(self, key: str, topic: str, n: int, rf: int, configs: dict[str, str]) -> Coordinator:
        """An internal topic made on first use; the caller retries meanwhile (COORDINATOR_NOT_AVAILABLE)."""
        try:
            await self.channel.create_topic(topic, n, rf, configs)
            log.info("created %s with %d partitions, replication factor %d", topic, n, rf)
        except TopicAlreadyExistsError:
            pass
        except KafkaLiteError as e:
            log.warning("cannot create %s yet: %s", topic, e)
            return _not_available(key, f"{topic} cannot be created yet: {e}")
        return _not_available(key, f"{topic} is being created")

    # --- transactional offsets ------------------------------------------------------------------

    async def txn_offset_commit(self, req: TxnOffsetCommitRequest, ctx: ConnectionContext) -> TxnOffsetCommitResponse:
        """Kafka's TxnOffsetCommit: the offsets join the producer's transaction (broker/group/coordinator.py)."""
        offsets = {
            (t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "", p.committed_leader_epoch)
            for t in req.topics
            for p in t.partitions
        }
        code = await self.coordinator.txn_offset_commit(
            req.group_id, req.producer_id, req.producer_epoch, req.generation_id, req.member_id, offsets
        )
        return TxnOffsetCommitResponse(
            topics=tuple(
                TxnOffsetCommitResponseTopic(
                    name=t.name,
                    partitions=tuple(
                        TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
                        for p in t.partitions
                    ),
                )
                for t in req.topics
            )
        )

    # --- membership ------------------------------------------------------------------------

    def join_group(self, req: JoinGroupRequest, ctx: ConnectionContext) -> Answer | Awaitable[Answer]:
        err = self.coordinator.owner_error(req.group_id)
        if err:
            return err
        session = _ms(req.session_timeout)
        rebalance = _ms(req.rebalance_timeout)
        return _unless_failed(
            _join_response,
            self.coordinator.call(
                self.coordinator.logic.join,
                self.coordinator.partition_for(req.group_id),
                req.group_id,
                req.member_id,
                ctx.client_id or "",
                ctx.member_host,
                session,
                session if rebalance < 0 else rebalance,  # v0 has none: the session timeout, as Kafka's
                req.protocol_type,
                [(p.name, p.metadata) for p in req.protocols],
                now_ms(),
                {t: len(info.partitions) for t, info in self.image.topics.items()},  # for a consumer group's member
                _conn(ctx),
                req.group_instance_id,
            ),
        )

    def sync_group(self, req: SyncGroupRequest, ctx: ConnectionContext) -> Answer | Awaitable[Answer]:
        err = self.coordinator.owner_error(req.group_id)
        if err:
            return err
        synced = self.coordinator.call(
            self.coordinator.logic.sync,
            req.group_id,
            req.generation_id,
            req.member_id,
            {a.member_id: a.assignment for a in req.assignments},
            now_ms(),
            req.group_instance_id,
        )
        return _unless_failed(
            lambda answer: SyncGroupResponse(
                protocol_type=req.protocol_type,  # v5: the group's, which the coordinator checked the member's against
                protocol_name=req.protocol_name,
                assignment=answer.get("assignment") or b"",
            ),
            synced,
        )

    def heartbeat(self, req: HeartbeatRequest, ctx: ConnectionContext) -> Answer:
        err = self.coordinator.owner_error(req.group_id)
        if err:
            return err
        answer = self.coordinator.logic.heartbeat(
            req.group_id, req.generation_id, req.member_id, now_ms(), _conn(ctx), req.group_instance_id
        )
        return answer if _failed(answer) else HeartbeatResponse()

    def leave_group(self, req: LeaveGroupRequest, ctx: ConnectionContext) -> Answer:
        """v3+ names `members`, one row each; before, one `member_id`, whose code is the answer's own."""
        err = self.coordinator.owner_error(req.group_id)
        if err:
            return err
        members = [m.member_id for m in req.members] if req.members else [req.member_id] if req.member_id else []
        instances = [m.group_instance_id for m in req.members or ()]
        answer, outputs = self.coordinator.logic.leave(req.group_id, members, now_ms(), instances)
        self.coordinator.run(outputs)
        if _failed(answer):
            return answer
        rows = tuple(
            MemberResponse(member_id=m, group_instance_id=instances[i] if i < len(instances) else None, error_code=code)
            for i, (m, code) in enumerate(answer["members"])
        )
        code = rows[0].error_code if rows and not req.members else 0
        return LeaveGroupResponse(error_code=code, members=rows)

    # --- offsets -----------------------------------------------------------------------------

    def offset_commit(self, req: OffsetCommitRequest, ctx: ConnectionContext) -> Answer | Awaitable[Answer]:
        err = self.coordinator.owner_error(req.group_id)
        if err:
            return err
        offsets = {
            (t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "", p.committed_leader_epoch)
            for t in req.topics
            for p in t.partitions
        }
        known = {t: len(info.partitions) for t, info in self.image.topics.items()}
        committed = self.coordinator.call(
            self.coordinator.logic.commit,
            self.coordinator.partition_for(req.group_id),
            req.group_id,
            req.generation_id_or_member_epoch,  # a consumer-protocol member's epoch (KIP-848), else the generation
            req.member_id,
            offsets,
            now_ms(),
            known,
            _conn(ctx),
            req.group_instance_id,
        )
        return _unless_failed(
            lambda a: OffsetCommitResponse(
                topics=_coded(a["topics"], OffsetCommitResponseTopic, OffsetCommitResponsePartition)
            ),
            committed,
        )

    def offset_fetch(self, req: OffsetFetchRequest, ctx: ConnectionContext) -> Answer:
        """One group (`group_id`, before v8), or several (`groups`, v8+: each answered in its own row)."""
        if not req.groups:
            asked = None if req.topics is None else [(t.name, p) for t in req.topics for p in t.partition_indexes]
            one = self._fetched(req.group_id, asked, "", -1, req.require_stable, FETCH_ROWS_BEFORE_V8)
            return one if isinstance(one, dict) else OffsetFetchResponse(topics=tuple(one))
        groups = []
        for g in req.groups:
            asked = None if g.topics is None else [(t.name, p) for t in g.topics for p in t.partition_indexes]
            fetched = self._fetched(
                g.group_id, asked, g.member_id or "", g.member_epoch, req.require_stable, FETCH_ROWS_V8
            )
            if isinstance(fetched, dict):
                groups.append(OffsetFetchResponseGroup(group_id=g.group_id, error_code=fetched["error_code"]))
            else:
                groups.append(OffsetFetchResponseGroup(group_id=g.group_id, topics=tuple(fetched)))
        return OffsetFetchResponse(groups=tuple(groups))

    def _fetched(
        self,
        group_id: str,
        asked: list[tuple[str, int]] | None,
        member_id: str,
        member_epoch: int,
        stable: bool,
        layout: tuple[type[Any], type[Any]],
    ) -> list[Any] | dict[str, Any]:
        """One group's committed offsets (every one with `asked` None) as rows of `layout`'s (topic, partition)
        classes, or its error body."""
        err = self.coordinator.owner_error(group_id)
        if err:
            return err
        refused = self.coordinator.logic.check_member_epoch(group_id, member_id, member_epoch)
        if refused is not None:  # OffsetFetch v9 of a consumer-protocol member (KIP-848): its epoch is checked
            return error_body(refused[0], refused[1])
        topic_cls, partition_cls = layout
        out = []
        for t, rows in self.coordinator.logic.fetch_offsets(group_id, asked)["topics"]:
            parts = []
            for p, offset, metadata, code, epoch in rows:
                if stable and self.coordinator.has_pending(group_id, [(t, p)]):
                    # KIP-447: an offset an open transaction is about to replace is not answered; the client
                    # retries once the transaction's marker has decided it.
                    offset, metadata, code, epoch = -1, "", int(ErrorCode.UNSTABLE_OFFSET_COMMIT), -1
                parts.append(
                    partition_cls(
                        partition_index=p,
                        committed_offset=offset,
                        committed_leader_epoch=epoch,
                        metadata=metadata,
                        error_code=code,
                    )
                )
            out.append(topic_cls(name=t, partitions=tuple(parts)))
        return out

    def offset_delete(self, req: OffsetDeleteRequest, ctx: ConnectionContext) -> Answer | Awaitable[Answer]:
        err = self.coordinator.owner_error(req.group_id)
        if err:
            return err
        tps = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        return _unless_failed(
            lambda a: OffsetDeleteResponse(
                topics=_coded(a["topics"], OffsetDeleteResponseTopic, OffsetDeleteResponsePartition)
            ),
            self.coordinator.call(self.coordinator.logic.delete_offsets, req.group_id, tps),
        )

    # --- admin ------------------------------------------------------------------------------

    def list_groups(self, req: ListGroupsRequest, ctx: ConnectionContext) -> ListGroupsResponse:
        """Every group type's groups (share groups too, as Kafka lists them), filtered by `states_filter` (v4+)
        and `types_filter` (v5+: "classic", "consumer", "share"), compared case-insensitively as Kafka 4's."""
        rows, types = self.coordinator.logic.list_groups()
        listed = [(g, ptype, state, gtype) for (g, ptype, state), gtype in zip(rows, types)]
        for other in self.other_groups:  # the other group types' coordinators (share groups, KIP-932)
            listed += [(g, ptype, state, gtype) for g, ptype, state, gtype in other()]
        states = {s.lower() for s in req.states_filter}
        kinds = {t.lower() for t in req.types_filter}
        return ListGroupsResponse(
            groups=tuple(
                ListedGroup(group_id=g, protocol_type=ptype, group_state=state, group_type=gtype)
                for g, ptype, state, gtype in listed
                if (not states or state.lower() in states) and (not kinds or gtype.lower() in kinds)
            )
        )

    def describe_groups(self, req: DescribeGroupsRequest, ctx: ConnectionContext) -> DescribeGroupsResponse:
        out = []
        for group_id in req.groups:
            err = self.coordinator.owner_error(group_id)
            if err:
                out.append(DescribedGroup(group_id=group_id, error_code=err["error_code"]))
                continue
            g = self.coordinator.logic.describe(group_id)
            if g.get("group_type") == "consumer":
                # Kafka 4 describes a consumer-protocol group through ConsumerGroupDescribe only; the DescribeGroups
                # versions served here (before v6's GROUP_ID_NOT_FOUND) answer it as a Dead group, as Kafka's do.
                out.append(DescribedGroup(group_id=group_id, group_state="Dead"))
                continue
            out.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=g["state"],
                    protocol_type=g.get("protocol_type") or "",
                    protocol_data=g.get("protocol") or "",
                    members=tuple(
                        DescribedGroupMember(
                            member_id=mid,
                            client_id=cid,
                            client_host=host,
                            member_metadata=meta or b"",
                            member_assignment=assignment or b"",
                            group_instance_id=instance,
                        )
                        for mid, cid, host, meta, assignment, instance in g["members"]
                    ),
                )
            )
        return DescribeGroupsResponse(groups=tuple(out))

    async def delete_groups(self, req: DeleteGroupsRequest, ctx: ConnectionContext) -> DeleteGroupsResponse:
        results = []
        for group_id in req.groups_names:
            err = self.coordinator.owner_error(group_id)
            code = err["error_code"] if err else None
            if code is None:
                for delete in self.other_deletes:  # Kafka's GroupCoordinatorService: share groups first
                    done = await delete(group_id)
                    if done is not None:
                        code = done[0]
                        break
            if code is None:
                code = (await self.coordinator.call(self.coordinator.logic.delete, group_id))["error_code"]
            results.append(DeletableGroupResult(group_id=group_id, error_code=code))
        return DeleteGroupsResponse(results=tuple(results))


# A handler's answer: the api's typed response, or a whole-request error body ({"error_code", "error_message"}),
# which the Kafka listener answers in the api's error layout and the native one as every native error.
Answer = Any


# OffsetFetch's answer rows before v8 (the request's one group) and from v8 on (each of its groups).
FETCH_ROWS_BEFORE_V8 = (OffsetFetchResponseTopic, OffsetFetchResponsePartition)
FETCH_ROWS_V8 = (OffsetFetchResponseTopics, OffsetFetchResponsePartitions)
T = TypeVar("T")


def _coded(topics: list[Any], topic_cls: type[T], partition_cls: type[Any]) -> tuple[T, ...]:
    """The coordinator's rows `[[topic, [[partition, error code, message], ...]], ...]` as an answer's topics."""
    return tuple(
        topic_cls(name=t, partitions=tuple(partition_cls(partition_index=p, error_code=code) for p, code, _ in rows))  # type: ignore[call-arg]
        for t, rows in topics
    )


def _join_response(answer: dict[str, Any]) -> JoinGroupResponse:
    return JoinGroupResponse(
        generation_id=answer["generation_id"],
        protocol_type=answer["protocol_type"],
        protocol_name=answer["protocol_name"],
        leader=answer["leader"],
        skip_assignment=answer.get("skip_assignment", False),
        member_id=answer["member_id"],
        # [member id, metadata, group.instance.id]; a classic member of a consumer group (migration) has no third
        members=tuple(
            JoinGroupResponseMember(member_id=m, metadata=meta, group_instance_id=instance[0] if instance else None)
            for m, meta, *instance in answer["members"]
        ),
    )


async def _unless_failed(build: Callable[[dict[str, Any]], Any], reply: Awaitable[dict[str, Any]]) -> Answer:
    """The coordinator's answer, once it comes, as `build` makes it the api's response; or, failed as a whole,
    the error body itself."""
    answer = await reply
    return answer if _failed(answer) else build(answer)


def _failed(answer: dict[str, Any]) -> bool:
    """A coordinator answer that is only an error (its code and message): the request failed as a whole."""
    return bool(answer.get("error_code")) and set(answer) <= {"error_code", "error_message"}


def _ms(d: datetime.timedelta) -> int:
    return int(d.total_seconds() * 1000)


def _single_coordinator(c: Coordinator) -> FindCoordinatorResponse:
    """A one-key (before v4) answer: the coordinator's fields at the top."""
    return FindCoordinatorResponse(
        error_code=c.error_code, error_message=c.error_message, node_id=c.node_id, host=c.host, port=c.port
    )


def _no_coordinator(key: str, code: ErrorCode, message: str) -> Coordinator:
    return Coordinator(key=key, node_id=-1, host="", port=-1, error_code=int(code), error_message=message)


def _not_available(key: str, message: str) -> Coordinator:
    return _no_coordinator(key, ErrorCode.COORDINATOR_NOT_AVAILABLE, message)
