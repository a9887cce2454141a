"""DescribeTopicPartitions (75, KIP-966): topics and their partitions from the metadata image, a page at a time.

Kafka's AdminClient (3.7+) describes topics with it rather than Metadata, because a cluster with many partitions
does not fit one Metadata answer: the answer holds at most `response_partition_limit` partitions (and never more
than the broker's `max.request.partition.size.limit`, at least one), topics in name order, and when it stops short
it names the `next_cursor` (the topic and partition to ask for next). Served as Kafka's
DescribeTopicPartitionsRequestHandler and KRaftMetadataCache.describeTopicResponse do:

- the topics asked (none: every topic), from the cursor's topic on, in name order, each once;
- a topic the metadata does not have: UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for a name no topic could
  have), with no partitions;
- a partition without a leader: LEADER_NOT_AVAILABLE and leader -1, as Metadata answers;
- the cursor's partition where its topic starts; the page full at the start of a topic: the cursor names that
  topic's partition 0.

The request as sent (its cursor among its topics, a cursor partition >= 0) and authorization (DESCRIBE on each
topic; the refused ones left out of a listing of every topic, answered TOPIC_AUTHORIZATION_FAILED when named; every
answered topic's `topic_authorized_operations`) are checked before this runs (broker/server/authorization.py), since the
refused topics must not count against the page.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Callable

from broker.metadata.naming import missing_topic_code
from broker.network.server import ConnectionContext
from net.errors import ErrorCode
from net.protocol import ApiKey
from net.schema.base import ZERO_UUID
from net.schema.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseCursor,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage, PartitionState


def topic_uuid(topic_id: str) -> uuid.UUID:
    """The image's topic id (32 hex digits) as Kafka's Uuid; ZERO_UUID if it is not one."""
    try:
        return uuid.UUID(hex=topic_id)
    except (ValueError, TypeError, AttributeError):
        return ZERO_UUID


def _partition(st: "PartitionState") -> DescribeTopicPartitionsResponsePartition:
    led = st.leader >= 0
    return DescribeTopicPartitionsResponsePartition(
        error_code=0 if led else int(ErrorCode.LEADER_NOT_AVAILABLE),
        partition_index=st.partition,
        leader_id=st.leader if led else -1,
        leader_epoch=st.leader_epoch,
        replica_nodes=tuple(st.replicas),
        isr_nodes=tuple(st.isr),
        # No eligible leader replicas (KIP-966's ELR is off, as in Kafka by default): empty lists, as Kafka sends.
        eligible_leader_replicas=(),
        last_known_elr=(),
        offline_replicas=(),  # no broker has an offline log directory here (JBOD failures are not modelled)
    )


class DescribeTopicPartitionsApi:
    def __init__(self, image: "MetadataImage", partition_size_limit: int) -> None:
        self.image = image
        self.partition_size_limit = partition_size_limit  # max.request.partition.size.limit
        self.handlers: dict[ApiKey, Callable[..., Any]] = {ApiKey.DESCRIBE_TOPIC_PARTITIONS: self.describe}

    def describe(self, req: DescribeTopicPartitionsRequest, ctx: ConnectionContext) -> DescribeTopicPartitionsResponse:
        cursor = req.cursor
        start_topic = cursor.topic_name if cursor is not None else ""
        names = sorted({t.name for t in req.topics if t.name >= start_topic})
        remaining = max(min(self.partition_size_limit, req.response_partition_limit), 1)
        topics: list[DescribeTopicPartitionsResponseTopic] = []
        next_cursor = None
        for name in names:
            if remaining == 0:  # the page filled up at the end of the previous topic: go on with this one
                next_cursor = DescribeTopicPartitionsResponseCursor(topic_name=name, partition_index=0)
                break
            info = self.image.topics.get(name)
            internal = name.startswith("__")
            if info is None:
                topics.append(
                    DescribeTopicPartitionsResponseTopic(
                        error_code=missing_topic_code(name), name=name, topic_id=ZERO_UUID, is_internal=internal
                    )
                )
                continue
            first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            count = len(info.partitions)
            upper = min(count, first + remaining)
            parts = tuple(_partition(info.partitions[p]) for p in range(first, upper) if p in info.partitions)
            topics.append(
                DescribeTopicPartitionsResponseTopic(
                    name=name, topic_id=topic_uuid(info.topic_id), is_internal=internal, partitions=parts
                )
            )
            if upper < count:
                next_cursor = DescribeTopicPartitionsResponseCursor(topic_name=name, partition_index=upper)
                break
            remaining -= len(parts)
        return DescribeTopicPartitionsResponse(topics=tuple(topics), next_cursor=next_cursor)
