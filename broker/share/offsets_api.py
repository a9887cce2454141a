"""A share group's offsets at its coordinator: DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91),
DeleteShareGroupOffsets (92), and DeleteGroups of a share group.

The start offsets are the share coordinator's (the durable state, broker/share/persister.py), so they answer for
partitions whose leader is elsewhere; a partition the group never fetched from has none (-1). Without topics,
the partitions of the topics the group's members subscribe to. Lag is left to the client (-1): the coordinator
does not know the partitions' high watermarks (kl-share-groups asks the leaders with ListOffsets).

Altering and deleting need an empty group, as Kafka's (GROUP_ID_NOT_FOUND for a group this coordinator does not
know, NON_EMPTY_GROUP while it has members): AlterShareGroupOffsets initializes each share-partition's state at
the new start offset with nothing in flight (InitializeShareGroupState, one state epoch past the stored one, so a
leader still holding the old state is fenced); DeleteShareGroupOffsets deletes a topic's share-partition states
(UNKNOWN_TOPIC_OR_PARTITION if the group has none for it); DeleteGroups deletes the group's states of every topic
and then the group (tombstones of its records in __consumer_offsets, so no later coordinator loads it again). A
consumer of the group then starts where share.auto.offset.reset says. The topics the group has offsets for
(Kafka's initialized topics) are its ShareGroupStatePartitionMetadata record, written when an alter or a delete
changes them. The leaders forget the share-partitions of a group when its last member's session ends
(broker/share/fetch_api.py), so the next member reads what was altered or deleted meanwhile.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Callable

from broker.group.share_membership import changes
from broker.network.server import ConnectionContext
from broker.share.group_api import ShareGroupApis
from broker.share.manager import Persister
from broker.share.state_records import SHARE_STATE_TOPIC
from net.errors import ErrorCode, KafkaLiteError, error_code_of
from net.protocol import ApiKey
from net.schema.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)
from net.schema.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)
from net.schema.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage, TopicInfo

UNKNOWN_PARTITION = "This server does not host this topic-partition."  # Kafka's UNKNOWN_TOPIC_OR_PARTITION text
# At most this many share-partition states written or deleted at once by one request (each is an acks=all append
# at its share coordinator, or a request to it).
PARALLEL_STATE_CHANGES = 32


class ShareOffsetsApis:
    def __init__(self, groups: ShareGroupApis, persister: Persister, image: Callable[[], "MetadataImage"]) -> None:
        self.groups = groups
        self.persister = persister
        self._image = image
        self.handlers = {
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.describe_offsets,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: self.alter_offsets,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: self.delete_offsets,
        }

    async def describe_offsets(
        self, req: DescribeShareGroupOffsetsRequest, ctx: ConnectionContext
    ) -> DescribeShareGroupOffsetsResponse:
        image = self._image()
        out = []
        for g in req.groups:
            refused = self.groups.not_here(g.group_id)
            if refused is not None:
                out.append(
                    DescribeShareGroupOffsetsResponseGroup(
                        group_id=g.group_id, error_code=int(refused[0]), error_message=refused[1]
                    )
                )
                continue
            if g.topics is None:
                group = self.groups.membership.groups.get(g.group_id)
                subscribed = sorted(group.topics) if group else []
                wanted = [(t, list(range(len(image.topics[t].partitions)))) for t in subscribed if t in image.topics]
            else:
                wanted = [(t.topic_name, list(t.partitions)) for t in g.topics]
            topics = []
            for name, partitions in wanted:
                info = image.topics.get(name)
                rows = []
                for p in partitions:
                    row = DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p, start_offset=-1, leader_epoch=-1
                    )
                    if info is None or p not in info.partitions:
                        row.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    else:
                        try:
                            state = await self.persister.read((g.group_id, name, p))
                        except KafkaLiteError as e:
                            code, message = error_code_of(e)
                            row.error_code, row.error_message = int(code), message
                        else:
                            if state is not None:
                                row.start_offset = state[1]
                    rows.append(row)
                topic_id = uuid.UUID(info.topic_id) if info is not None else None
                topics.append(
                    DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=topic_id, partitions=tuple(rows))
                )
            out.append(DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=tuple(topics)))
        return DescribeShareGroupOffsetsResponse(groups=tuple(out))

    # --- changes, of an empty group ------------------------------------------------------------------------

    def _refused_change(self, group_id: str) -> tuple[ErrorCode, str] | None:
        """Why the group's offsets may not change now (Kafka's order: the id, the coordinator, the group, empty)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, "The group id is empty."
        refused = self.groups.not_here(group_id)
        if refused is not None:
            return refused
        group = self.groups.membership.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty."
        return None

    async def alter_offsets(
        self, req: AlterShareGroupOffsetsRequest, ctx: ConnectionContext
    ) -> AlterShareGroupOffsetsResponse:
        refused = self._refused_change(req.group_id)
        if refused is not None:
            return AlterShareGroupOffsetsResponse(error_code=int(refused[0]), error_message=refused[1])
        group = self.groups.membership.groups[req.group_id]
        before = group.records()
        image = self._image()
        limit = asyncio.Semaphore(PARALLEL_STATE_CHANGES)

        async def one(
            info: "TopicInfo | None", name: str, p: int, start: int
        ) -> AlterShareGroupOffsetsResponsePartition:
            row = AlterShareGroupOffsetsResponsePartition(partition_index=p)
            if p < 0:  # Kafka's share coordinator refuses a negative partition id
                row.error_code, row.error_message = int(ErrorCode.INVALID_REQUEST), "Partition id must not be negative."
            elif info is None or p not in info.partitions:
                row.error_code, row.error_message = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), UNKNOWN_PARTITION
            elif start < -1:  # -1 is Kafka's uninitialized start offset: share.auto.offset.reset decides
                row.error_code = int(ErrorCode.INVALID_REQUEST)
                row.error_message = f"start offset {start} is neither an offset nor -1"
            else:
                async with limit:
                    try:
                        await self.persister.initialize((req.group_id, name, p), start)
                    except KafkaLiteError as e:
                        code, message = error_code_of(e)
                        row.error_code, row.error_message = int(code), message
            return row

        topics = []
        for t in req.topics:
            info = image.topics.get(t.topic_name)
            rows = await asyncio.gather(
                *(one(info, t.topic_name, p.partition_index, p.start_offset) for p in t.partitions)
            )
            if info is not None:
                group.topics.add(t.topic_name)
            topics.append(
                AlterShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name,
                    topic_id=uuid.UUID(info.topic_id) if info is not None else None,
                    partitions=tuple(rows),
                )
            )
        answer = AlterShareGroupOffsetsResponse(responses=tuple(topics))
        refused = await self.groups.write(group.partition, req.group_id, changes(before, group.records()))
        if refused is not None:  # the states are set; the group does not know it has them for those topics
            answer.error_code, answer.error_message = int(refused[0]), refused[1]
        return answer

    async def delete_offsets(
        self, req: DeleteShareGroupOffsetsRequest, ctx: ConnectionContext
    ) -> DeleteShareGroupOffsetsResponse:
        refused = self._refused_change(req.group_id)
        if refused is not None:
            return DeleteShareGroupOffsetsResponse(error_code=int(refused[0]), error_message=refused[1])
        group = self.groups.membership.groups[req.group_id]
        before = group.records()
        image = self._image()
        topics = []
        for t in req.topics:
            info = image.topics.get(t.topic_name)
            row = DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name)
            if info is None:
                row.error_code, row.error_message = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), UNKNOWN_PARTITION
            else:
                row.topic_id = uuid.UUID(info.topic_id)
                try:
                    deleted = await self._delete_states(req.group_id, t.topic_name, sorted(info.partitions))
                except KafkaLiteError as e:
                    code, message = error_code_of(e)
                    row.error_code, row.error_message = int(code), message
                else:
                    if not deleted:  # Kafka: the topic was never initialized for the group
                        row.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                        row.error_message = "There is no offset information to delete."
                    group.topics.discard(t.topic_name)  # no state left: no offsets to describe for it
            topics.append(row)
        answer = DeleteShareGroupOffsetsResponse(responses=tuple(topics))
        refused = await self.groups.write(group.partition, req.group_id, changes(before, group.records()))
        if refused is not None:
            answer.error_code, answer.error_message = int(refused[0]), refused[1]
        return answer

    async def _delete_states(self, group_id: str, topic: str, partitions: list[int]) -> int:
        """Deletes the group's share-partition states of the topic; how many it had. Raises the first error."""
        limit = asyncio.Semaphore(PARALLEL_STATE_CHANGES)

        async def one(p: int) -> bool:
            async with limit:
                state = await self.persister.read((group_id, topic, p))
                if state is None or (state[1] < 0 and not state[2]):
                    return False  # no state, or deleted (its epoch kept, no start offset)
                await self.persister.delete((group_id, topic, p))
                return True

        return sum(await asyncio.gather(*(one(p) for p in partitions)))

    async def delete_group(self, group_id: str) -> tuple[int, str | None] | None:
        """DeleteGroups of a share group: (error code, message), or None if this coordinator knows no share group
        of that id (the consumer groups' delete answers then). An empty group's states of every topic are deleted
        first (Kafka's persister deleteState), then the group is forgotten; with members, NON_EMPTY_GROUP."""
        group = self.groups.membership.groups.get(group_id)
        if group is None or self.groups.not_here(group_id) is not None:
            return None
        if group.members:
            return int(ErrorCode.NON_EMPTY_GROUP), f"Share group {group_id} is not empty."
        image = self._image()
        try:
            for name, info in sorted(image.topics.items()):
                if name != SHARE_STATE_TOPIC:
                    await self._delete_states(group_id, name, sorted(info.partitions))
        except KafkaLiteError as e:
            code, message = error_code_of(e)
            return int(code), message
        membership = self.groups.membership
        if membership.groups.get(group_id) is not group or group.members:
            return int(ErrorCode.NON_EMPTY_GROUP), f"Share group {group_id} is not empty."  # a member joined meanwhile
        refused = await self.groups.write(group.partition, group_id, membership.tombstones(group))
        if refused is not None:
            return int(refused[0]), refused[1]
        if membership.groups.get(group_id) is group and not group.members:
            del membership.groups[group_id]
        return 0, None
