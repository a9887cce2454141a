"""ShareGroupHeartbeat (76) and ShareGroupDescribe (77): share group membership at the group's coordinator.

The coordinator of a share group is the one of any group id (the leader of its `__consumer_offsets` partition,
FindCoordinator key type 0); the membership itself is broker/group/share_membership.py, kept by the group
coordinator's logic with the other group types: a heartbeat that changes the group is answered once its records
are in `__consumer_offsets`, and members whose session ended are removed by the coordinator's tick.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import TYPE_CHECKING, Callable

from broker.group.group_configs import GroupConfigs
from broker.group.share_membership import ASSIGNOR, HeartbeatResult, Records, ShareGroupMembership
from broker.network.server import ConnectionContext
from net.errors import ErrorCode
from net.protocol import ApiKey
from net.schema.share_group_describe import Assignment as DescribedAssignment
from net.schema.share_group_describe import (
    DescribedGroup,
    Member,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from net.schema.share_group_describe import TopicPartitions as DescribedPartitions
from net.schema.share_group_heartbeat import (
    Assignment,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    TopicPartitions,
)

if TYPE_CHECKING:
    from broker.group.coordinator import GroupCoordinator
    from broker.metadata.image import MetadataImage


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class ShareGroupApis:
    def __init__(
        self,
        coordinator: "GroupCoordinator",
        image: Callable[[], "MetadataImage"],
        configs: GroupConfigs,
    ) -> None:
        self.coordinator = coordinator
        self._image = image
        self.configs = configs  # each group's session timeout and heartbeat interval
        self.membership: ShareGroupMembership = coordinator.logic.share
        self.membership.session_timeout_of = configs.session_timeout_ms
        self.handlers = {
            ApiKey.SHARE_GROUP_HEARTBEAT: self.heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: self.describe,
        }

    def not_here(self, group_id: str) -> tuple[ErrorCode, str] | None:
        """NOT_COORDINATOR (or loading) unless this broker coordinates the group; a classic group of that id
        refuses a share member (Kafka: one group type per id)."""
        logic = self.coordinator.logic
        err = logic.check_owner(self.coordinator.partition_for(group_id))
        if err is not None:
            return ErrorCode(err["error_code"]), str(err.get("error_message") or "")
        classic = logic.groups.get(group_id)
        if classic is not None and classic.members:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} is not a share group"
        return None

    async def heartbeat(self, req: ShareGroupHeartbeatRequest, ctx: ConnectionContext) -> ShareGroupHeartbeatResponse:
        if not req.group_id:
            return ShareGroupHeartbeatResponse(
                error_code=int(ErrorCode.INVALID_GROUP_ID), error_message="GroupId can't be empty."
            )
        refused = self.not_here(req.group_id)
        if refused is not None:
            return ShareGroupHeartbeatResponse(error_code=int(refused[0]), error_message=refused[1])
        image = self._image()
        partitions_of = {name: len(t.partitions) for name, t in image.topics.items()}
        partition = self.coordinator.partition_for(req.group_id)
        r = self.membership.heartbeat(
            partition,
            req.group_id,
            req.member_id,
            req.member_epoch,
            req.subscribed_topic_names,
            partitions_of,
            now_ms(),
            client_id=ctx.client_id or "",
            client_host=ctx.member_host,  # "/1.2.3.4", as Kafka shows it
            rack_id=req.rack_id,
            topic_ids={name: t.topic_id for name, t in image.topics.items()},
        )
        written = await self.write(partition, req.group_id, r.records)
        if written is not None:  # not durable: the member retries (at the new coordinator, if it moved)
            r = HeartbeatResult(written[0], written[1])
        assignment = None
        if r.assignment is not None:
            assignment = Assignment(
                topic_partitions=tuple(
                    TopicPartitions(topic_id=uuid.UUID(image.topics[t].topic_id), partitions=ps)
                    for t, ps in r.assignment.items()
                    if t in image.topics
                )
            )
        return ShareGroupHeartbeatResponse(
            error_code=int(r.error),
            error_message=r.message,
            member_id=req.member_id if not r.error else None,
            member_epoch=r.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=self.configs.heartbeat_interval_ms(req.group_id)),
            assignment=assignment,
        )

    def describe(self, req: ShareGroupDescribeRequest, ctx: ConnectionContext) -> ShareGroupDescribeResponse:
        image = self._image()
        groups = []
        for gid in req.group_ids:
            refused = self.not_here(gid)
            g = self.membership.groups.get(gid)
            if refused is not None or g is None:
                code, msg = refused or (ErrorCode.GROUP_ID_NOT_FOUND, f"group {gid} is not a share group")
                groups.append(DescribedGroup(error_code=int(code), error_message=msg, group_id=gid, group_state="Dead"))
                continue
            members = tuple(
                Member(
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed,
                    assignment=DescribedAssignment(
                        topic_partitions=tuple(
                            DescribedPartitions(
                                topic_id=uuid.UUID(image.topics[t].topic_id), topic_name=t, partitions=ps
                            )
                            for t, ps in m.assignment.items()
                            if t in image.topics
                        )
                    ),
                )
                for m in g.members.values()
            )
            groups.append(
                DescribedGroup(
                    group_id=gid,
                    group_state=g.state,
                    group_epoch=g.epoch,
                    assignment_epoch=g.epoch,
                    assignor_name=ASSIGNOR,
                    members=members,
                )
            )
        return ShareGroupDescribeResponse(groups=tuple(groups))

    def listed(self) -> list[list[object]]:
        """ListGroups' rows of the share groups this broker coordinates: [group_id, "share", state, "share"]."""
        logic = self.coordinator.logic
        return [
            [gid, "share", g.state, "share"]
            for gid, g in sorted(self.membership.groups.items())
            if logic.check_owner(self.coordinator.partition_for(gid)) is None
        ]

    async def write(self, partition: int, group_id: str, records: Records) -> tuple[ErrorCode, str] | None:
        """Writes a share group's records to its __consumer_offsets partition (acks=all); the error if that
        failed (NOT_COORDINATOR when the coordinator moved meanwhile), None once written."""
        if not records:
            return None
        body = await self.coordinator.call(
            self.coordinator.logic.write, partition, group_id, records, {"error_code": 0}
        )
        if body.get("error_code"):
            return ErrorCode(body["error_code"]), str(body.get("error_message") or "")
        return None
