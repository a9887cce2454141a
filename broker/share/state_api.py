"""The share coordinator's state RPCs (broker/share/coordinator.py): InitializeShareGroupState (83),
ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86), ReadShareGroupStateSummary (87).

Only brokers send them (a share-partition's leader, or the group coordinator for Alter/DeleteShareGroupOffsets
and DeleteGroups: broker/share/persister.py), on the inter-broker listener with CLUSTER_ACTION; a broker that is
the coordinator itself calls the coordinator without a request. As Kafka's ShareCoordinatorShard, a row without a
topic id or with a negative partition is INVALID_REQUEST, and one of a topic partition that does not exist is
UNKNOWN_TOPIC_OR_PARTITION (Initialize, Delete and ReadSummary; Read and Write come from the partition's leader).
"""

from __future__ import annotations

import functools
import uuid
from typing import TYPE_CHECKING, Awaitable, Callable, TypeVar

from broker.network.server import ConnectionContext
from broker.share.coordinator import ShareCoordinator, StateError
from broker.share.partition import StateBatch
from broker.share.state_records import ShareSnapshot, StateKey, partition_for
from net.errors import ErrorCode
from net.protocol import ApiKey
from net.schema.delete_share_group_state import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    DeleteStateResult,
)
from net.schema.delete_share_group_state import PartitionResult as DeleteResult
from net.schema.initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    InitializeStateResult,
)
from net.schema.initialize_share_group_state import PartitionResult as InitializeResult
from net.schema.read_share_group_state import PartitionResult as ReadResult
from net.schema.read_share_group_state import ReadShareGroupStateRequest, ReadShareGroupStateResponse, ReadStateResult
from net.schema.read_share_group_state import StateBatch as ReadBatch
from net.schema.read_share_group_state_summary import PartitionResult as SummaryResult
from net.schema.read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    ReadStateSummaryResult,
)
from net.schema.write_share_group_state import PartitionResult as WriteResult
from net.schema.write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
    WriteStateResult,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage

T = TypeVar("T")
NO_STATE = -1  # a read's start offset when the share-partition has no state yet (Kafka's uninitialized)


class ShareStateApis:
    def __init__(self, coordinator: ShareCoordinator, image: Callable[[], "MetadataImage"]) -> None:
        self.coordinator = coordinator
        self._image = image
        self.handlers = {
            ApiKey.INITIALIZE_SHARE_GROUP_STATE: self.initialize_state,
            ApiKey.READ_SHARE_GROUP_STATE: self.read_state,
            ApiKey.WRITE_SHARE_GROUP_STATE: self.write_state,
            ApiKey.DELETE_SHARE_GROUP_STATE: self.delete_state,
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: self.read_state_summary,
        }

    def _refused(self, topic_id: uuid.UUID | None, partition: int) -> tuple[ErrorCode, str] | None:
        """Kafka's checks of one row before the coordinator acts on it (ShareCoordinatorShard)."""
        if topic_id is None:
            return ErrorCode.INVALID_REQUEST, "Topic id must not be null."
        if partition < 0:
            return ErrorCode.INVALID_REQUEST, "Partition id must not be negative."
        counts = {t.topic_id: len(t.partitions) for t in self._image().topics.values()}
        if counts.get(topic_id.hex, 0) <= partition:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        return None

    async def _each(
        self, group_id: str, topic_id: uuid.UUID | None, partition: int, act: Callable[[int, StateKey], Awaitable[None]]
    ) -> tuple[int, str | None]:
        """(error code, message) of one row: checked, then `act(__share_group_state partition, key)`."""
        refused = self._refused(topic_id, partition)
        if refused is not None:
            return int(refused[0]), refused[1]
        assert topic_id is not None
        key = (group_id, topic_id.hex, partition)
        try:
            await act(partition_for(key, self.coordinator.num_partitions), key)
        except StateError as e:
            return int(e.code), str(e)
        return 0, None

    async def initialize_state(
        self, req: InitializeShareGroupStateRequest, ctx: ConnectionContext
    ) -> InitializeShareGroupStateResponse:
        results = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                init = functools.partial(self._initialize, epoch=p.state_epoch, start=p.start_offset)
                code, message = await self._each(req.group_id, t.topic_id, p.partition, init)
                rows.append(InitializeResult(partition=p.partition, error_code=code, error_message=message))
            results.append(InitializeStateResult(topic_id=t.topic_id, partitions=tuple(rows)))
        return InitializeShareGroupStateResponse(results=tuple(results))

    async def _initialize(self, sp: int, key: StateKey, *, epoch: int, start: int) -> None:
        await self.coordinator.initialize(sp, key, epoch, start)

    async def delete_state(
        self, req: DeleteShareGroupStateRequest, ctx: ConnectionContext
    ) -> DeleteShareGroupStateResponse:
        results = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                code, message = await self._each(req.group_id, t.topic_id, p.partition, self.coordinator.delete)
                rows.append(DeleteResult(partition=p.partition, error_code=code, error_message=message))
            results.append(DeleteStateResult(topic_id=t.topic_id, partitions=tuple(rows)))
        return DeleteShareGroupStateResponse(results=tuple(results))

    def read_state_summary(
        self, req: ReadShareGroupStateSummaryRequest, ctx: ConnectionContext
    ) -> ReadShareGroupStateSummaryResponse:
        """Each share-partition's state epoch, leader epoch and start offset, without its batches (-1: none)."""
        results = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                row = SummaryResult(partition=p.partition, state_epoch=0, leader_epoch=-1, start_offset=NO_STATE)
                refused = self._refused(t.topic_id, p.partition)
                if refused is not None:
                    row.error_code, row.error_message = int(refused[0]), refused[1]
                else:
                    assert t.topic_id is not None
                    key = (req.group_id, t.topic_id.hex, p.partition)
                    try:
                        snap = self.coordinator.read(partition_for(key, self.coordinator.num_partitions), key)
                    except StateError as e:
                        row.error_code, row.error_message = int(e.code), str(e)
                    else:
                        if snap is not None:
                            row.state_epoch, row.leader_epoch = snap.state_epoch, snap.leader_epoch
                            row.start_offset = snap.start_offset
                rows.append(row)
            results.append(ReadStateSummaryResult(topic_id=t.topic_id, partitions=tuple(rows)))
        return ReadShareGroupStateSummaryResponse(results=tuple(results))

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
