"""The consumer group protocol's apis (KIP-848), typed end to end (net/schema/): ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69). Kafka names topics here by id; the coordinator's logic works with names (the broker's
metadata maps them), so a topic deleted and made again under the same name is a new topic to the client and the
same name to the group. Authorization is decided before these run (broker/server/authorization.py)."""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Callable

from broker.group.consumer_logic import Heartbeat, HeartbeatResult
from broker.group.consumer_state import TopicPartitions
from broker.group.coordinator import now_ms
from broker.network.server import ConnectionContext
from net.errors import ErrorCode
from net.protocol import ApiKey
from net.schema.base import ZERO_UUID
from net.schema.consumer_group_describe import Assignment as DescribedAssignment
from net.schema.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
    Member,
)
from net.schema.consumer_group_describe import TopicPartitions as DescribedTopicPartitions
from net.schema.consumer_group_heartbeat import (
    Assignment,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)

if TYPE_CHECKING:
    from broker.group.coordinator import GroupCoordinator
    from broker.group.state import Group
    from broker.metadata.image import MetadataImage

# ConsumerGroupDescribe v1's member_type (KIP-1099): a classic member of a consumer group (online migration), or not.
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1


class ConsumerGroupApis:
    def __init__(self, coordinator: "GroupCoordinator", image: "MetadataImage") -> None:
        self.coordinator = coordinator
        self.image = image
        self.handlers: dict[ApiKey, Callable[..., object]] = {
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self.describe,
        }

    async def heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, ctx: ConnectionContext
    ) -> ConsumerGroupHeartbeatResponse:
        err = self.coordinator.owner_error(req.group_id)
        if err:
            return ConsumerGroupHeartbeatResponse(error_code=err["error_code"], error_message=err["error_message"])
        names = {uuid.UUID(info.topic_id): name for name, info in self.image.topics.items()}
        owned: TopicPartitions | None = None
        if req.topic_partitions is not None:
            # A topic id we do not know (deleted since) is not owned any more as far as the group is concerned.
            owned = {
                names[t.topic_id]: frozenset(t.partitions)
                for t in req.topic_partitions
                if t.topic_id in names and t.partitions
            }
        timeout = int(req.rebalance_timeout.total_seconds() * 1000)
        hb = Heartbeat(
            group_id=req.group_id,
            member_id=req.member_id,
            member_epoch=req.member_epoch,
            client_id=ctx.client_id or "",
            client_host=ctx.member_host,
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=timeout,
            subscribed_topic_names=req.subscribed_topic_names,
            subscribed_topic_regex=req.subscribed_topic_regex,
            server_assignor=req.server_assignor,
            owned=owned,
            # v0 let the coordinator make the member id; the listener does not tell this handler the version,
            # so an empty one is taken at any version (Kafka refuses it from v1 on).
            member_id_from_client=False,
        )
        topics = {name: len(info.partitions) for name, info in self.image.topics.items()}
        logic = self.coordinator.logic
        result: HeartbeatResult = await self.coordinator.call(
            logic.consumer_heartbeat, self.coordinator.partition_for(req.group_id), hb, topics, now_ms()
        )  # type: ignore[assignment]
        if isinstance(result, dict):  # the coordinator shut down under the request
            return ConsumerGroupHeartbeatResponse(
                error_code=result["error_code"], error_message=result.get("error_message")
            )
        return ConsumerGroupHeartbeatResponse(
            error_code=result.error_code,
            error_message=result.error_message,
            member_id=result.member_id,
            member_epoch=result.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
            assignment=None
            if result.assignment is None
            else Assignment(
                topic_partitions=tuple(
                    ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=tid, partitions=tuple(sorted(ps)))
                    for tid, ps in self._by_id(result.assignment)
                )
            ),
        )

    def describe(self, req: ConsumerGroupDescribeRequest, ctx: ConnectionContext) -> ConsumerGroupDescribeResponse:
        groups = []
        for gid in req.group_ids:
            err = self.coordinator.owner_error(gid)
            g = self.coordinator.logic.groups.get(gid) if not err else None
            if err:
                groups.append(
                    DescribedGroup(group_id=gid, error_code=err["error_code"], error_message=err["error_message"])
                )
            elif g is None or g.consumer is None:
                msg = f"Group {gid} not found." if g is None else f"Group {gid} is not a consumer group."
                groups.append(
                    DescribedGroup(group_id=gid, error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), error_message=msg)
                )
            else:
                groups.append(self._described(g))
        return ConsumerGroupDescribeResponse(groups=tuple(groups))

    def _described(self, g: "Group") -> DescribedGroup:
        cg = g.consumer
        assert cg is not None
        members = tuple(
            Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=self._assignment(m.assigned),
                target_assignment=self._assignment(cg.target.get(m.member_id, {})),
                member_type=CLASSIC_MEMBER_TYPE if m.classic_protocols is not None else CONSUMER_MEMBER_TYPE,
            )
            for m in cg.members.values()
        )
        return DescribedGroup(
            group_id=g.group_id,
            group_state=cg.state().value,
            group_epoch=cg.group_epoch,
            assignment_epoch=cg.target_epoch,
            assignor_name=cg.assignor,
            members=members,
        )

    def _assignment(self, tps: TopicPartitions) -> DescribedAssignment:
        rows = []
        for name, ps in sorted(tps.items()):
            info = self.image.topics.get(name)
            rows.append(
                DescribedTopicPartitions(
                    topic_id=uuid.UUID(info.topic_id) if info is not None else ZERO_UUID,
                    topic_name=name,
                    partitions=tuple(sorted(ps)),
                )
            )
        return DescribedAssignment(topic_partitions=tuple(rows))

    def _by_id(self, tps: TopicPartitions) -> list[tuple[uuid.UUID, frozenset[int]]]:
        """The assignment by topic id; a topic gone from the metadata since is left out (the next epoch drops it)."""
        out = []
        for name, ps in sorted(tps.items()):
            info = self.image.topics.get(name)
            if info is not None:
                out.append((uuid.UUID(info.topic_id), ps))
        return out
