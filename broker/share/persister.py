"""ShareStatePersister: a share-partition leader's way to its durable state (Kafka's DefaultStatePersister).

The state of (group, topic, partition) lives with the share coordinator of its key: the leader of one
`__share_group_state` partition (broker/share/coordinator.py), here or on another broker (Read/Write/Initialize/
DeleteShareGroupState over the inter-broker listener). The group coordinator uses it too: AlterShareGroupOffsets
initializes a share-partition's state, DeleteShareGroupOffsets and DeleteGroups delete it. The topic is made on
first use, as `__consumer_offsets` is. A coordinator that is moving, loading or not there yet is asked again
until REQUEST_TIMEOUT_S; a read that never gets an answer raises (the share-partition is not created from
nothing: that would forget its state).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from broker.share.coordinator import ShareCoordinator, StateError
from broker.share.partition import StateBatch
from broker.share.state_api import NO_STATE, message_batches
from broker.share.state_records import SHARE_STATE_TOPIC, ShareSnapshot, StateKey, partition_for
from net.errors import ErrorCode, KafkaLiteError, TopicAlreadyExistsError, error_for
from net.retry import Backoff, retry_until
from net.schema.delete_share_group_state import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    DeleteStateData,
)
from net.schema.delete_share_group_state import PartitionData as DeletePartition
from net.schema.initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    InitializeStateData,
)
from net.schema.initialize_share_group_state import PartitionData as InitializePartition
from net.schema.read_share_group_state import PartitionData as ReadPartition
from net.schema.read_share_group_state import ReadShareGroupStateRequest, ReadShareGroupStateResponse, ReadStateData
from net.schema.write_share_group_state import PartitionData as WritePartition
from net.schema.write_share_group_state import StateBatch as WriteBatch
from net.schema.write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
    WriteStateData,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage

log = logging.getLogger("kafkalite.share")
REQUEST_TIMEOUT_S = 10.0
RETRIABLE = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
    }
)


class ShareStatePersister:
    def __init__(
        self,
        broker_id: int,
        coordinator: ShareCoordinator,
        image: Callable[[], "MetadataImage"],
        call: Callable[[int, object, float], Awaitable[object]],
        create_topic: Callable[[], Awaitable[None]],
    ) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self._image = image
        self._call = call  # a typed request to another broker (BrokerPeers.call)
        self._create_topic = create_topic

    def _state_key(self, key: tuple[str, str, int]) -> StateKey:
        group, topic, partition = key
        info = self._image().topics.get(topic)
        if info is None:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} is gone")
        return (group, info.topic_id, partition)

    async def _coordinator_of(self, skey: StateKey) -> tuple[int, int]:
        """(__share_group_state partition, its leader); makes the topic on first use."""
        p = partition_for(skey, self.coordinator.num_partitions)
        info = self._image().topics.get(SHARE_STATE_TOPIC)
        if info is None:
            try:
                await self._create_topic()
            except TopicAlreadyExistsError:
                pass
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_STATE_TOPIC} is being created")
        st = info.partitions.get(p)
        if st is None or st.leader < 0:
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_STATE_TOPIC}-{p} has no leader")
        return p, st.leader

    async def _retrying(self, attempt: Callable[[], Awaitable[object]]) -> object:
        return await retry_until(
            attempt,
            Backoff(50, 1000),
            KafkaLiteError,
            lambda e: e.code in RETRIABLE,
            deadline=time.monotonic() + REQUEST_TIMEOUT_S,
        )

    # --- read ------------------------------------------------------------------------------------

    async def read(self, key: tuple[str, str, int]) -> tuple[int, int, list[StateBatch]] | None:
        skey = self._state_key(key)
        snap = await self._retrying(lambda: self._read_once(skey))
        if snap is None:
            return None
        assert isinstance(snap, ShareSnapshot)
        return snap.state_epoch, snap.start_offset, snap.batches

    async def _read_once(self, skey: StateKey) -> ShareSnapshot | None:
        p, leader = await self._coordinator_of(skey)
        if leader == self.broker_id:
            try:
                return self.coordinator.read(p, skey)
            except StateError as e:
                raise error_for(e.code, str(e)) from None
        group, topic_id, partition = skey
        req = ReadShareGroupStateRequest(
            group_id=group,
            topics=(ReadStateData(topic_id=uuid.UUID(topic_id), partitions=(ReadPartition(partition=partition),)),),
        )
        answer = await self._ask(leader, req)
        assert isinstance(answer, ReadShareGroupStateResponse)
        row = answer.results[0].partitions[0]
        if row.error_code:
            raise error_for(row.error_code, row.error_message or "")
        if row.start_offset == NO_STATE and row.state_epoch == 0:
            return None  # no state (a state reset to -1 by AlterShareGroupOffsets keeps its epoch)
        batches = [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in row.state_batches
        ]
        return ShareSnapshot(row.state_epoch, row.start_offset, batches)

    # --- write -----------------------------------------------------------------------------------

    async def write(
        self, key: tuple[str, str, int], state_epoch: int, start_offset: int, batches: list[StateBatch]
    ) -> None:
        skey = self._state_key(key)
        await self._retrying(lambda: self._write_once(skey, ShareSnapshot(state_epoch, start_offset, list(batches))))

    async def _write_once(self, skey: StateKey, snap: ShareSnapshot) -> None:
        p, leader = await self._coordinator_of(skey)
        if leader == self.broker_id:
            try:
                await self.coordinator.write(p, skey, snap)
            except StateError as e:
                raise error_for(e.code, str(e)) from None
            return
        group, topic_id, partition = skey
        req = WriteShareGroupStateRequest(
            group_id=group,
            topics=(
                WriteStateData(
                    topic_id=uuid.UUID(topic_id),
                    partitions=(
                        WritePartition(
                            partition=partition,
                            state_epoch=snap.state_epoch,
                            leader_epoch=snap.leader_epoch,
                            start_offset=snap.start_offset,
                            state_batches=message_batches(WriteBatch, snap.batches),
                        ),
                    ),
                ),
            ),
        )
        answer = await self._ask(leader, req)
        assert isinstance(answer, WriteShareGroupStateResponse)
        _raise_row(answer.results[0].partitions[0])

    # --- initialize / delete (the group coordinator: Alter/DeleteShareGroupOffsets, DeleteGroups) ------------

    async def initialize(self, key: tuple[str, str, int], start_offset: int) -> None:
        """The share-partition starts again at `start_offset` (-1: at share.auto.offset.reset), nothing in flight;
        the coordinator writes it one state epoch past the stored one, fencing a leader that still holds the old."""
        skey = self._state_key(key)
        await self._retrying(lambda: self._initialize_once(skey, start_offset))

    async def _initialize_once(self, skey: StateKey, start_offset: int) -> None:
        p, leader = await self._coordinator_of(skey)
        if leader == self.broker_id:
            try:
                await self.coordinator.initialize(p, skey, -1, start_offset)
            except StateError as e:
                raise error_for(e.code, str(e)) from None
            return
        group, topic_id, partition = skey
        req = InitializeShareGroupStateRequest(
            group_id=group,
            topics=(
                InitializeStateData(
                    topic_id=uuid.UUID(topic_id),
                    partitions=(InitializePartition(partition=partition, state_epoch=-1, start_offset=start_offset),),
                ),
            ),
        )
        answer = await self._ask(leader, req)
        assert isinstance(answer, InitializeShareGroupStateResponse)
        _raise_row(answer.results[0].partitions[0])

    async def delete(self, key: tuple[str, str, int]) -> None:
        """Forget the share-partition's state (a tombstone; nothing if it has none)."""
        skey = self._state_key(key)
        await self._retrying(lambda: self._delete_once(skey))

    async def _delete_once(self, skey: StateKey) -> None:
        p, leader = await self._coordinator_of(skey)
        if leader == self.broker_id:
            try:
                await self.coordinator.delete(p, skey)
            except StateError as e:
                raise error_for(e.code, str(e)) from None
            return
        group, topic_id, partition = skey
        req = DeleteShareGroupStateRequest(
            group_id=group,
            topics=(DeleteStateData(topic_id=uuid.UUID(topic_id), partitions=(DeletePartition(partition=partition),)),),
        )
        answer = await self._ask(leader, req)
        assert isinstance(answer, DeleteShareGroupStateResponse)
        _raise_row(answer.results[0].partitions[0])

    async def _ask(self, broker: int, req: object) -> object:
        try:
            return await self._call(broker, req, REQUEST_TIMEOUT_S / 2)
        except (OSError, TimeoutError, ConnectionError) as e:
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share coordinator {broker}: {e}") from None


def _raise_row(row: Any) -> None:
    """A state RPC's partition row: its error raised as the client-side exception."""
    if row.error_code:
        raise error_for(row.error_code, row.error_message or "")
