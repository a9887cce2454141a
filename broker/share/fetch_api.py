"""ShareFetch (78) and ShareAcknowledge (79) on the partitions' leaders.

A ShareFetch first applies the acknowledgements it carries (piggybacked), then acquires records for its member
from each partition of its share session this broker leads, and answers the log's batches that hold them with
the acquired offset ranges (AcquiredRecords): the client hands out only those. Without anything to acquire it
waits, up to `max_wait`, for new records or for records that become available again. ShareAcknowledge applies
acknowledgements only. Epoch -1 (the member's last request) closes the session and releases what the member
still holds here.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from broker.network.server import ConnectionContext
from broker.replica.partition import FetchSpec
from broker.share.manager import SharePartitionManager
from broker.share.partition import AcknowledgeError, SharePartition
from broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, SessionError, ShareSession, ShareSessionCache
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError, error_code_of, error_for
from net.protocol import ApiKey
from net.schema.share_acknowledge import PartitionData as AckPartitionData
from net.schema.share_acknowledge import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopicResponse,
)
from net.schema.share_fetch import (
    AcquiredRecords,
    PartitionData,
    ShareFetchableTopicResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage
    from broker.replica.replica_manager import ReplicaManager

WAKE_CHECK_S = 0.25
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1  # ShareFetch's share_acquire_mode (KIP-1206)
PARTITION_READ_BYTES = 1 << 20  # read per share-partition per ShareFetch (Kafka's max.partition.fetch.bytes)
MAX_WAIT_S = 60.0  # how often a waiting ShareFetch looks again for records whose locks ran out meanwhile


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class ShareFetchApis:
    def __init__(
        self,
        manager: SharePartitionManager,
        replica_manager: "ReplicaManager",
        image: Callable[[], "MetadataImage"],
        sessions: ShareSessionCache,
    ) -> None:
        self.manager = manager
        self.replica_manager = replica_manager
        self._image = image
        self.sessions = sessions
        self.handlers = {ApiKey.SHARE_FETCH: self.share_fetch, ApiKey.SHARE_ACKNOWLEDGE: self.share_acknowledge}

    # --- sessions ------------------------------------------------------------------------------

    def _session(self, group_id: str, member_id: str, epoch: int, has_acks: bool) -> ShareSession:
        if epoch == INITIAL_EPOCH:
            if has_acks:
                raise SessionError(ErrorCode.INVALID_REQUEST, "acknowledgements in a share session's first request")
            s, old = self.sessions.open(group_id, member_id, now_ms())
            if old is not None:
                self.manager.release_member(group_id, member_id)
            return s
        return self.sessions.use(group_id, member_id, epoch, now_ms())

    def _close(self, group_id: str, member_id: str) -> None:
        self.sessions.close(group_id, member_id)
        self._released(group_id, member_id)

    def evict_idle(self) -> None:
        for s in self.sessions.evict_idle(now_ms()):
            self._released(s.group_id, s.member_id)

    def _released(self, group_id: str, member_id: str) -> None:
        """A member's session ended: its records go back. The group's last session here (Kafka's onGroupEmpty):
        its share-partitions are forgotten once written, so the next member reads the state again, as an
        AlterShareGroupOffsets or DeleteShareGroupOffsets of the empty group may have changed it meanwhile."""
        self.manager.release_member(group_id, member_id)
        if not self.sessions.has_group(group_id):
            self.manager.forget_group(group_id, lambda: not self.sessions.has_group(group_id))

    # --- ShareFetch ----------------------------------------------------------------------------

    async def share_fetch(self, req: ShareFetchRequest, ctx: ConnectionContext) -> ShareFetchResponse:
        group_id, member_id = req.group_id or "", req.member_id or ""
        if not group_id or not member_id:
            return ShareFetchResponse(error_code=int(ErrorCode.INVALID_REQUEST), error_message="group and member ids")
        if req.share_acquire_mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
            return ShareFetchResponse(
                error_code=int(ErrorCode.INVALID_REQUEST),
                error_message=f"unknown share acquire mode {req.share_acquire_mode}",
            )
        names = _topic_names(self._image())
        has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        try:
            session = self._session(group_id, member_id, req.share_session_epoch, has_acks)
        except SessionError as e:
            return ShareFetchResponse(error_code=int(e.code), error_message=str(e))
        rows: dict[tuple[uuid.UUID, int], PartitionData] = {}
        # Acknowledgements first: what they release may be fetched again by this same request. They are applied
        # now and made durable below, by the same state write as this request's acquisitions (one write per
        # share-partition per ShareFetch rather than two, each a replicated append to __share_group_state); the
        # answer still goes out only once they are durable.
        unwritten: list[tuple[PartitionData, tuple[str, str, int]]] = []
        for t in req.topics:
            for p in t.partitions:
                if p.acknowledgement_batches:
                    code, msg, key = await self._apply_acks(group_id, member_id, names, t.topic_id, p)
                    row = rows[(t.topic_id or uuid.UUID(int=0), p.partition_index)] = PartitionData(
                        partition_index=p.partition_index,
                        acknowledge_error_code=int(code),
                        acknowledge_error_message=msg,
                    )
                    if key is not None:
                        unwritten.append((row, key))
        if req.share_session_epoch == FINAL_EPOCH:
            await self._written(unwritten)
            self._close(group_id, member_id)
            return self._fetch_response(group_id, rows)
        for t in req.topics:
            for p in t.partitions:
                session.partitions.add((str(t.topic_id or uuid.UUID(int=0)), p.partition_index))
        for f in req.forgotten_topics_data:
            for i in f.partitions:
                session.partitions.discard((str(f.topic_id or uuid.UUID(int=0)), i))
        # as Fetch's (broker/server/kafka_apis.py MAX_FETCH_WAIT_MS): a forged max_wait of days does not hold a request
        # that long
        deadline = time.monotonic() + min(req.max_wait.total_seconds(), MAX_WAIT_S)
        budget = req.max_records if req.max_records > 0 else 500
        while True:
            whole = req.share_acquire_mode == BATCH_OPTIMIZED
            acquired = await self._acquire_all(group_id, member_id, session, names, budget, req.max_bytes, whole, rows)
            if unwritten:  # the acknowledgements' write, which carries this first acquisition too
                await self._written(unwritten)
                unwritten = []
            remaining = deadline - time.monotonic()
            if acquired or remaining <= 0 or any(r.error_code for r in rows.values()):
                return self._fetch_response(group_id, rows)
            await self._wait_for_records(session, names, min(remaining, WAKE_CHECK_S))

    async def _acquire_all(
        self,
        group_id: str,
        member_id: str,
        session: ShareSession,
        names: dict[str, str],
        budget: int,
        max_bytes: int,
        whole_batches: bool,
        rows: dict[tuple[uuid.UUID, int], PartitionData],
    ) -> int:
        total = 0
        for tid, partition in sorted(session.partitions):
            if total >= budget:
                break
            key = (uuid.UUID(tid), partition)
            row = rows.get(key) or PartitionData(partition_index=partition)
            topic = names.get(tid)
            if topic is None:
                row.error_code = int(ErrorCode.UNKNOWN_TOPIC_ID)
                rows[key] = row
                continue
            try:
                self.replica_manager.get_partition(topic, partition).check_leader()
                sp = await self.manager.get((group_id, topic, partition))
                records, acquired = self._acquire(
                    sp, group_id, member_id, topic, partition, budget - total, max_bytes, whole_batches
                )
            except KafkaLiteError as e:
                code, message = error_code_of(e)
                row.error_code, row.error_message = int(code), message
                rows[key] = row
                continue
            if acquired:
                row.records = records
                row.acquired_records = tuple(
                    AcquiredRecords(
                        first_offset=a.first_offset, last_offset=a.last_offset, delivery_count=a.delivery_count
                    )
                    for a in acquired
                )
                total += sum(a.last_offset - a.first_offset + 1 for a in acquired)
                rows[key] = row
                self.manager.write_soon((group_id, topic, partition))
        return total

    def _acquire(
        self,
        sp: SharePartition,
        group_id: str,
        member_id: str,
        topic: str,
        partition: int,
        budget: int,
        max_bytes: int,
        whole_batches: bool,
    ) -> tuple[bytes, list[Any]]:
        sp.tick(now_ms())
        offset = sp.next_fetch_offset()
        # At most a partition's worth of a Kafka fetch (max.partition.fetch.bytes' default): a forged or default
        # max_bytes of 2 GiB would otherwise copy the rest of the segment into every answer's read.
        limit = max(1, min(max_bytes, PARTITION_READ_BYTES))
        # share.isolation.level=read_committed: up to the last stable offset (an open transaction holds the group
        # back), an aborted transaction's records left out as the gaps that control records are (never handed
        # out: Kafka archives them).
        committed = self.manager.configs.read_committed(group_id)
        read = self.replica_manager.read(FetchSpec((topic, partition), offset, limit, read_committed=committed), -1)
        if read.error == ErrorCode.OFFSET_OUT_OF_RANGE and read.log_start_offset > sp.start_offset:
            sp.reset_start(read.log_start_offset)  # retention or DeleteRecords moved the log's start
            return b"", []
        if read.error:
            raise error_for(read.error, read.message or "")
        end = offset
        for _, h in batch_fmt.iter_batches(read.records):
            end = h.next_offset
        if committed:
            aborted = ((int(pid), int(first)) for pid, first in read.aborted or ())
            readable = [h for _, h in batch_fmt.committed_batches(read.records, aborted)]
        else:
            readable = [h for _, h in batch_fmt.iter_batches(read.records) if not h.is_control]
        offsets: list[int] = []
        lasts: list[int] = []
        for h in readable:
            offsets.extend(range(max(h.base_offset, offset), h.next_offset))
            lasts.append(h.last_offset)
        # batch-optimized (Kafka's default): whole batches, MaxRecords a soft limit, so that the client decodes
        # each batch once and a fetch carries more; record-limit: MaxRecords exactly.
        acquired = sp.acquire(member_id, offsets, end, budget, now_ms(), batch_lasts=lasts if whole_batches else None)
        if not acquired:
            return b"", []
        return _holding(read.records, acquired), acquired

    async def _wait_for_records(self, session: ShareSession, names: dict[str, str], timeout: float) -> None:
        parts = []
        for tid, partition in session.partitions:
            topic = names.get(tid)
            p = self.replica_manager.partitions.get((topic, partition)) if topic is not None else None
            if p is not None:
                parts.append(p)
        woken = asyncio.get_running_loop().create_future()
        for p in parts:
            p.add_data_waiter(woken)
        try:
            await asyncio.wait({woken}, timeout=timeout)
        finally:
            for p in parts:
                p.remove_data_waiter(woken)
            woken.cancel()

    def _lock_timeout(self, group_id: str) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.manager.configs.lock_duration_ms(group_id))

    def _fetch_response(self, group_id: str, rows: dict[tuple[uuid.UUID, int], PartitionData]) -> ShareFetchResponse:
        by_topic: dict[uuid.UUID, list[PartitionData]] = {}
        for (tid, _), row in sorted(rows.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            by_topic.setdefault(tid, []).append(row)
        return ShareFetchResponse(
            acquisition_lock_timeout=self._lock_timeout(group_id),
            responses=tuple(
                ShareFetchableTopicResponse(topic_id=tid, partitions=tuple(ps)) for tid, ps in by_topic.items()
            ),
        )

    # --- acknowledging ---------------------------------------------------------------------------

    async def _acknowledge(
        self, group_id: str, member_id: str, names: dict[str, str], topic_id: uuid.UUID | None, p: Any
    ) -> tuple[ErrorCode, str | None]:
        """Apply one partition's acknowledgements and wait until they are durable."""
        code, msg, key = await self._apply_acks(group_id, member_id, names, topic_id, p)
        if key is not None:
            code, msg = await self._durable(key, code, msg)
        return code, msg

    async def _apply_acks(
        self, group_id: str, member_id: str, names: dict[str, str], topic_id: uuid.UUID | None, p: Any
    ) -> tuple[ErrorCode, str | None, tuple[str, str, int] | None]:
        """Apply one partition's acknowledgements in memory: (error code, message, the share-partition's key to
        wait on with `_durable` before answering; None if nothing was applied)."""
        topic = names.get(str(topic_id))
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID, f"no topic of id {topic_id}", None
        try:
            self.replica_manager.get_partition(topic, p.partition_index).check_leader()
            key = (group_id, topic, p.partition_index)
            sp = await self.manager.get(key)
        except KafkaLiteError as e:
            code, message = error_code_of(e)
            return ErrorCode(code), message, None
        code, msg = ErrorCode.NONE, None
        now = now_ms()
        for b in p.acknowledgement_batches:
            try:
                sp.acknowledge(member_id, b.first_offset, b.last_offset, list(b.acknowledge_types), now)
            except AcknowledgeError as e:  # Kafka answers the partition's first failure; the others still apply
                if code == ErrorCode.NONE:
                    code, msg = e.code, str(e)
        return code, msg, key

    async def _durable(
        self, key: tuple[str, str, int], code: ErrorCode, msg: str | None
    ) -> tuple[ErrorCode, str | None]:
        """Wait for the share-partition's state to be written: acknowledged once durable, as Kafka answers after
        its persister. A failed write is the partition's error unless it already has one."""
        try:
            await self.manager.written(key)
        except KafkaLiteError as e:
            if code == ErrorCode.NONE:
                code, msg = e.code, f"acknowledgement not persisted: {e}"
        except Exception as e:
            if code == ErrorCode.NONE:
                code, msg = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"acknowledgement not persisted: {e}"
        return code, msg

    async def _written(self, unwritten: list[tuple[PartitionData, tuple[str, str, int]]]) -> None:
        """`_durable` for each acknowledged partition of a ShareFetch, the writes under way together."""
        results = await asyncio.gather(
            *(
                self._durable(key, ErrorCode(row.acknowledge_error_code), row.acknowledge_error_message)
                for row, key in unwritten
            )
        )
        for (row, _), (code, msg) in zip(unwritten, results):
            row.acknowledge_error_code, row.acknowledge_error_message = int(code), msg

    async def share_acknowledge(self, req: ShareAcknowledgeRequest, ctx: ConnectionContext) -> ShareAcknowledgeResponse:
        group_id, member_id = req.group_id or "", req.member_id or ""
        if not group_id or not member_id:
            return ShareAcknowledgeResponse(
                error_code=int(ErrorCode.INVALID_REQUEST), error_message="group and member ids"
            )
        if req.share_session_epoch == INITIAL_EPOCH:
            return ShareAcknowledgeResponse(
                error_code=int(ErrorCode.INVALID_SHARE_SESSION_EPOCH),
                error_message="ShareAcknowledge cannot open a session",
            )
        try:
            self.sessions.use(group_id, member_id, req.share_session_epoch, now_ms())
        except SessionError as e:
            return ShareAcknowledgeResponse(error_code=int(e.code), error_message=str(e))
        names = _topic_names(self._image())
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                code, msg = await self._acknowledge(group_id, member_id, names, t.topic_id, p)
                parts.append(
                    AckPartitionData(partition_index=p.partition_index, error_code=int(code), error_message=msg)
                )
            topics.append(ShareAcknowledgeTopicResponse(topic_id=t.topic_id, partitions=tuple(parts)))
        if req.share_session_epoch == FINAL_EPOCH:
            self._close(group_id, member_id)
        return ShareAcknowledgeResponse(acquisition_lock_timeout=self._lock_timeout(group_id), responses=tuple(topics))


def _holding(records: bytes, acquired: list[Any]) -> bytes:
    """The batches of `records` that hold acquired offsets (no marker, no aborted or unavailable batch between
    them), walking both in offset order."""
    parts = []
    runs = iter(acquired)
    run = next(runs, None)
    for pos, h in batch_fmt.iter_batches(records):
        while run is not None and run.last_offset < h.base_offset:
            run = next(runs, None)
        if run is None:
            break
        if run.first_offset <= h.last_offset:
            parts.append(records[pos : pos + h.size])
    return b"".join(parts)


def _topic_names(image: "MetadataImage") -> dict[str, str]:
    """Topic id (as uuid.UUID's str) -> name."""
    return {str(uuid.UUID(t.topic_id)): name for name, t in image.topics.items()}
