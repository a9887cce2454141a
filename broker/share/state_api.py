"""ReadShareGroupState (84) and WriteShareGroupState (85) at the share coordinator (broker/share/coordinator.py).

Only brokers send them (a share-partition's leader, broker/share/persister.py), on the inter-broker listener
with CLUSTER_ACTION; a leader that is the coordinator itself calls the coordinator without a request.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from broker.network.server import ConnectionContext
from broker.share.coordinator import ShareCoordinator, StateError
from broker.share.partition import StateBatch
from broker.share.state_records import ShareSnapshot, partition_for
from net.errors import ErrorCode
from net.protocol import ApiKey
from net.schema.read_share_group_state import PartitionResult as ReadResult
from net.schema.read_share_group_state import ReadShareGroupStateRequest, ReadShareGroupStateResponse, ReadStateResult
from net.schema.read_share_group_state import StateBatch as ReadBatch
from net.schema.write_share_group_state import PartitionResult as WriteResult
from net.schema.write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
    WriteStateResult,
)

T = TypeVar("T")
NO_STATE = -1  # a read's start offset when the share-partition has no state yet (Kafka's uninitialized)


class ShareStateApis:
    def __init__(self, coordinator: ShareCoordinator) -> None:
        self.coordinator = coordinator
        self.handlers = {
            ApiKey.READ_SHARE_GROUP_STATE: self.read_state,
            ApiKey.WRITE_SHARE_GROUP_STATE: self.write_state,
        }

    def read_state(self, req: ReadShareGroupStateRequest, ctx: ConnectionContext) -> ReadShareGroupStateResponse:
        results = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                key = (req.group_id, t.topic_id.hex if t.topic_id else "", p.partition)
                try:
                    snap = self.coordinator.read(partition_for(key, self.coordinator.num_partitions), key)
                except StateError as e:
                    rows.append(ReadResult(partition=p.partition, error_code=int(e.code), error_message=str(e)))
                    continue
                if snap is None:
                    rows.append(ReadResult(partition=p.partition, state_epoch=0, start_offset=NO_STATE))
                    continue
                rows.append(
                    ReadResult(
                        partition=p.partition,
                        state_epoch=snap.state_epoch,
                        start_offset=snap.start_offset,
                        state_batches=message_batches(ReadBatch, snap.batches),
                    )
                )
            results.append(ReadStateResult(topic_id=t.topic_id, partitions=tuple(rows)))
        return ReadShareGroupStateResponse(results=tuple(results))

    async def write_state(
        self, req: WriteShareGroupStateRequest, ctx: ConnectionContext
    ) -> WriteShareGroupStateResponse:
        results = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                key = (req.group_id, t.topic_id.hex if t.topic_id else "", p.partition)
                snap = ShareSnapshot(
                    p.state_epoch,
                    p.start_offset,
                    [
                        StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                        for b in p.state_batches
                    ],
                    p.leader_epoch,
                )
                code, message = ErrorCode.NONE, None
                try:
                    await self.coordinator.write(partition_for(key, self.coordinator.num_partitions), key, snap)
                except StateError as e:
                    code, message = e.code, str(e)
                rows.append(WriteResult(partition=p.partition, error_code=int(code), error_message=message))
            results.append(WriteStateResult(topic_id=t.topic_id, partitions=tuple(rows)))
        return WriteShareGroupStateResponse(results=tuple(results))


def message_batches(cls: Callable[..., T], batches: list[StateBatch]) -> tuple[T, ...]:
    """State batches as a Read/WriteShareGroupState message's StateBatch rows (`cls`)."""
    return tuple(
        cls(
            first_offset=b.first_offset,
            last_offset=b.last_offset,
            delivery_state=b.delivery_state,
            delivery_count=b.delivery_count,
        )
        for b in batches
    )
