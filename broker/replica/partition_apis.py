"""PartitionApis: Kafka's apis about one partition's log on its leader, typed end to end (net/schema/).

- DeleteRecords (21): the log start offset moves up (offset -1: the high watermark), is checkpointed, and the
  answer waits until the in-sync followers start there too (the low watermark, Kafka's DelayedDeleteRecords).
- OffsetForLeaderEpoch (23, KIP-320): where an epoch ends in the leader's log, so a consumer detects that the
  log it read was truncated by a leader change.
- DescribeProducers (61): the idempotent and transactional producers the leader's producer state knows, with
  the first offset of each one's open transaction.
- DescribeLogDirs (35): every data directory with its partitions' sizes and their lag behind the high watermark.

Every partition is answered by its leader only (NOT_LEADER_OR_FOLLOWER elsewhere; UNKNOWN_TOPIC_OR_PARTITION
for one the metadata does not have), as Kafka's ReplicaManager answers. Authorization is decided before these
run (broker/server/authorization.py): DELETE on a topic, DESCRIBE on a topic (or CLUSTER_ACTION), READ on a topic,
DESCRIBE on the cluster.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Callable

from broker.network.server import ConnectionContext
from broker.replica.partition import Partition
from net.errors import (
    ErrorCode,
    KafkaLiteError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from net.protocol import ApiKey
from net.schema.delete_records import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from net.schema.describe_log_dirs import (
    DescribeLogDirsPartition,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)
from net.schema.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)
from net.schema.offset_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage
    from broker.replica.replica_manager import ReplicaManager


class PartitionApis:
    def __init__(self, replica_manager: "ReplicaManager", image: "MetadataImage") -> None:
        self.replica_manager = replica_manager
        self.image = image
        self.handlers: dict[ApiKey, Callable[..., object]] = {
            ApiKey.DELETE_RECORDS: self.delete_records,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.DESCRIBE_PRODUCERS: self.describe_producers,
            ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs,
        }

    def leader_of(self, topic: str, partition: int) -> Partition:
        """This broker's replica of a partition it leads; Kafka's error for any other."""
        p = self.replica_manager.partitions.get((topic, partition))
        if p is None:
            info = self.image.topics.get(topic)
            if info is None or partition not in info.partitions:
                raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
            raise NotLeaderOrFollowerError(f"broker does not host {topic}-{partition}")
        p.check_leader()
        return p

    # --- DeleteRecords ------------------------------------------------------------------------------------

    async def delete_records(self, req: DeleteRecordsRequest, ctx: ConnectionContext) -> DeleteRecordsResponse:
        timeout_s = max(req.timeout.total_seconds(), 0.0)
        jobs = []
        for t in req.topics:
            for p in t.partitions:
                jobs.append(self._delete_one(t.name, p.partition_index, p.offset, timeout_s))
        results = iter(await asyncio.gather(*jobs))
        topics = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                err, low = next(results)
                row = DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=low, error_code=err)
                rows.append(row)
            topics.append(DeleteRecordsTopicResult(name=t.name, partitions=tuple(rows)))
        return DeleteRecordsResponse(topics=tuple(topics))

    async def _delete_one(self, topic: str, partition: int, offset: int, timeout_s: float) -> tuple[int, int]:
        try:
            self.leader_of(topic, partition)
        except KafkaLiteError as e:
            return int(e.code), -1
        return await self.replica_manager.delete_records((topic, partition), offset, timeout_s)

    # --- OffsetForLeaderEpoch --------------------------------------------------------------------------------

    def offset_for_leader_epoch(
        self, req: OffsetForLeaderEpochRequest, ctx: ConnectionContext
    ) -> OffsetForLeaderEpochResponse:
        topics = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                row = EpochEndOffset(partition=p.partition)  # -1, -1: Kafka's undefined epoch and offset
                try:
                    part = self.leader_of(t.topic, p.partition)
                    row.leader_epoch, row.end_offset = part.last_offset_for_leader_epoch(
                        p.current_leader_epoch, p.leader_epoch
                    )
                except KafkaLiteError as e:
                    row.error_code = int(e.code)
                rows.append(row)
            topics.append(OffsetForLeaderTopicResult(topic=t.topic, partitions=tuple(rows)))
        return OffsetForLeaderEpochResponse(topics=tuple(topics))

    # --- DescribeProducers ----------------------------------------------------------------------------------

    def describe_producers(self, req: DescribeProducersRequest, ctx: ConnectionContext) -> DescribeProducersResponse:
        topics = []
        for t in req.topics:
            rows = []
            for index in t.partition_indexes:
                row = PartitionResponse(partition_index=index)
                try:
                    part = self.leader_of(t.name, index)
                    open_txns = {pid: first for pid, _epoch, first in part.producer_state.ongoing_transactions()}
                    row.active_producers = tuple(
                        ProducerState(
                            producer_id=pid,
                            producer_epoch=epoch,
                            last_sequence=last_seq,
                            last_timestamp=last_ts,
                            coordinator_epoch=-1,  # the markers' coordinator epoch is not kept per producer
                            current_txn_start_offset=open_txns.get(pid, -1),  # kafka-transactions find-hanging
                        )
                        for pid, epoch, last_seq, last_ts in part.producer_state.active_producers()
                    )
                except KafkaLiteError as e:
                    row.error_code, row.error_message = int(e.code), str(e)
                rows.append(row)
            topics.append(TopicResponse(name=t.name, partitions=tuple(rows)))
        return DescribeProducersResponse(topics=tuple(topics))

    # --- DescribeLogDirs --------------------------------------------------------------------------------------

    def describe_log_dirs(self, req: DescribeLogDirsRequest, ctx: ConnectionContext) -> DescribeLogDirsResponse:
        """Every data directory (Kafka's log.dirs), its partitions (those asked for; null: all) with their size
        and how far their log end is below the high watermark, and the volume's total and usable bytes."""
        wanted: dict[str, set[int]] | None = None
        if req.topics is not None:
            wanted = {}
            for t in req.topics:
                wanted.setdefault(t.topic, set()).update(t.partitions)
        partitions = self.replica_manager.partitions
        results = []
        for d, logs in self.replica_manager.log_manager.logs_by_dir().items():
            by_topic: dict[str, list[DescribeLogDirsPartition]] = {}
            for (topic, index), lg in sorted(logs.items()):
                if wanted is not None and index not in wanted.get(topic, ()):
                    continue
                p = partitions.get((topic, index))
                lag = max(p.high_watermark - lg.log_end_offset, 0) if p is not None else 0
                by_topic.setdefault(topic, []).append(
                    DescribeLogDirsPartition(partition_index=index, partition_size=lg.size_bytes, offset_lag=lag)
                )
            result = DescribeLogDirsResult(
                log_dir=str(d),
                topics=tuple(DescribeLogDirsTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )
            try:
                st = os.statvfs(d)
                result.total_bytes, result.usable_bytes = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                # The directory is gone or unreadable: Kafka's answer for an offline log dir.
                result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
            results.append(result)
        return DescribeLogDirsResponse(results=tuple(results))
