"""DescribeShareGroupOffsets (90) at the share group's coordinator: each share-partition's start offset (SPSO).

The start offsets are the share coordinator's (the durable state, broker/share/persister.py), so they answer for
partitions whose leader is elsewhere; a partition the group never fetched from has none (-1). Without topics,
the partitions of the topics the group's members subscribe to. Lag is left to the client (-1): the coordinator
does not know the partitions' high watermarks (kl-share-groups asks the leaders with ListOffsets).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Callable

from broker.network.server import ConnectionContext
from broker.share.group_api import ShareGroupApis
from broker.share.manager import Persister
from net.errors import ErrorCode, KafkaLiteError, error_code_of
from net.protocol import ApiKey
from net.schema.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)

if TYPE_CHECKING:
    from broker.controller import MetadataImage


class ShareOffsetsApis:
    def __init__(self, groups: ShareGroupApis, persister: Persister, image: Callable[[], "MetadataImage"]) -> None:
        self.groups = groups
        self.persister = persister
        self._image = image
        self.handlers = {ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.describe_offsets}

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
                subscribed = sorted({t for m in group.members.values() for t in m.subscribed}) if group else []
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
