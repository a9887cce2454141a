"""GroupCoordinator: drives the sans-IO group logic (broker/group/logic.py) inside the broker.

It follows the leadership of `__consumer_offsets` partitions: becoming a partition's leader loads that
partition's groups and offsets from the log; losing it unloads them. Its writes are ordinary acks=all
appends through the ReplicaManager, so committed offsets are replicated like any other record.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

from broker.group.logic import GroupConfig, GroupCoordinatorLogic
from broker.group.outputs import Append, Output, Reply
from broker.group.records import (
    Key,
    OffsetKey,
    build_batch,
    build_txn_batch,
    partition_for,
    read_log,
)
from broker.group.state import OffsetAndMetadata
from broker.metadata.naming import OFFSETS_TOPIC
from broker.utils.repeated_log import RepeatedConditionLog
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError

if TYPE_CHECKING:
    from broker.replica.partition import Partition
    from broker.replica.replica_manager import ReplicaManager

log = logging.getLogger("kafkalite.group")
LOAD_CHUNK_BYTES = 4 * 1024 * 1024


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class GroupCoordinator:
    def __init__(
        self, replica_manager: "ReplicaManager", config: GroupConfig, num_partitions: int, commit_timeout_ms: int
    ) -> None:
        self.replica_manager = replica_manager
        self._write_log = RepeatedConditionLog(log)  # per __consumer_offsets partition
        self.logic = GroupCoordinatorLogic(config)
        self.num_partitions = num_partitions
        self.commit_timeout_ms = commit_timeout_ms
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._tokens = itertools.count(1)
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # TxnOffsetCommit's offsets not yet decided, per __consumer_offsets partition and producer id: a commit
        # marker of that producer on the partition makes them the group's, an abort drops them (Kafka's
        # pendingTransactionalOffsetCommits).
        self.pending_txn: dict[int, dict[int, dict[tuple[str, str, int], OffsetAndMetadata]]] = {}
        replica_manager.add_marker_listener(self.on_marker)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    # --- leadership of __consumer_offsets ----------------------------------------------------

    def on_partition_change(self, part: "Partition", change: str) -> None:
        """Called by the ReplicaManager for every change of an __consumer_offsets replica."""
        if part.topic != OFFSETS_TOPIC:
            return
        p = part.partition
        if change == "leader":
            self._execute(self.logic.begin_loading(p))
            old = self._loads.pop(p, None)
            if old is not None:
                old.cancel()
            self._loads[p] = asyncio.ensure_future(self._load(part))
        elif change in ("follower", "offline", "removed"):
            task = self._loads.pop(p, None)
            if task is not None:
                task.cancel()
            if p in self.logic.partitions:
                log.info("no longer coordinator for %s-%d", OFFSETS_TOPIC, p)
            self._execute(self.logic.unload(p))
            self.pending_txn.pop(p, None)

    async def _load(self, part: "Partition") -> None:
        t0 = time.monotonic()
        lg = part.log
        offset, end = lg.log_start_offset, lg.log_end_offset
        records: list[tuple[Key, dict[str, Any] | None]] = []
        pending: dict[int, list[tuple[Key, dict[str, Any] | None]]] = {}  # open transactions' offsets
        while offset < end:
            data = lg.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
            if not data:
                break
            for h, recs, marker in read_log(data):
                if marker is not None:  # a transaction's end: its offsets count from here, or never
                    decided = pending.pop(h.producer_id, [])
                    if marker.commit:
                        records += decided
                elif h.is_transactional:
                    pending.setdefault(h.producer_id, []).extend(recs)
                else:
                    records += recs
            offset = max(offset + 1, _next_offset(data, offset))
            await asyncio.sleep(0)  # a long log must not stall the loop
        if part.leader_state is None:
            return  # lost the leadership while loading; on_partition_change unloaded us
        self.logic.load(part.partition, records, now_ms())
        self.pending_txn[part.partition] = {
            pid: {
                (k.group, k.topic, k.partition): _offset_of(v)
                for k, v in recs
                if isinstance(k, OffsetKey) and v is not None
            }
            for pid, recs in pending.items()
        }
        self._loads.pop(part.partition, None)
        log.log(
            logging.INFO if records else logging.DEBUG,
            "loaded %s-%d: %d records in %.3fs",
            OFFSETS_TOPIC,
            part.partition,
            len(records),
            time.monotonic() - t0,
        )

    # --- requests ------------------------------------------------------------------------

    def owner_error(self, group_id: Any) -> dict[str, Any] | None:
        if not isinstance(group_id, str) or not group_id:
            return {
                "error_code": int(ErrorCode.INVALID_GROUP_ID),
                "error_message": "group id must be a non-empty string",
            }
        return self.logic.check_owner(self.partition_for(group_id))

    async def call(self, fn: Any, *args: Any) -> dict[str, Any]:
        """Run a logic call that answers through a Reply carrying our token."""
        token = next(self._tokens)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[token] = fut
        try:
            self._execute(fn(token, *args))
            if fut.done():
                # Answered at once (a SyncGroup that finds its group stable, ...): one turn of the loop first, so
                # that the members an earlier event answered (a join or a sync parked until it) are written before
                # this request's answer, as Kafka sends those when their event happens, before any request can
                # see its outcome. Without it a follower's late SyncGroup overtook the leader's, parked on the
                # assignment's write, by a loop turn (aiokafka's test_kip_345_*: the follower's start() returned
                # before the leader had its assignment).
                await asyncio.sleep(0)
            return await fut
        finally:
            self._waiting.pop(token, None)

    def run(self, outputs: list[Output]) -> None:
        self._execute(outputs)

    def tick(self) -> None:
        self._execute(self.logic.tick(now_ms()))

    def _execute(self, outputs: list[Output]) -> None:
        for o in outputs:
            if isinstance(o, Reply):
                token = o.token[0] if isinstance(o.token, tuple) else o.token
                fut = self._waiting.get(token)
                if fut is not None and not fut.done():
                    fut.set_result(o.body)
            elif isinstance(o, Append):
                task = asyncio.ensure_future(self._append(o))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _append(self, a: Append) -> None:
        tp = (OFFSETS_TOPIC, a.partition)
        error = 0
        try:
            results, pending = self.replica_manager.append_records(
                -1, {tp: build_batch(a.records, int(time.time() * 1000))}
            )
            if not results[tp].error and pending:
                await self.replica_manager.wait_for_commit(results, pending, self.commit_timeout_ms / 1000)
            error = results[tp].error
            if error:
                self._write_log.report(
                    a.partition,
                    logging.WARNING,
                    "write to %s-%d failed: %s",
                    OFFSETS_TOPIC,
                    a.partition,
                    results[tp].message,
                )
            else:
                self._write_log.clear(a.partition, how="writes succeed again")
        except KafkaLiteError as e:
            error = int(e.code)
        # Kafka maps storage-level failures to errors a consumer knows to retry on the coordinator.
        if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            error = int(ErrorCode.NOT_COORDINATOR)
        elif error and error != ErrorCode.NOT_COORDINATOR:
            error = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self._execute(self.logic.on_append_done(a.append_id, error, now_ms()))

    # --- transactional offsets (TxnOffsetCommit) --------------------------------------------------

    async def txn_offset_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, str, int]],
    ) -> int:
        """Write a transaction's offsets (offset, metadata, leader epoch) for the group as the producer's
        transactional records; they stay pending (OffsetFetch does not show them) until the producer's marker on
        the partition. Returns an error code for the whole commit (0: written)."""
        p = self.partition_for(group_id)
        err = self.logic.check_owner(p)
        if err:
            return int(err["error_code"])
        g = self.logic.groups.get(group_id)
        if g is not None and g.consumer is not None:
            # A consumer-protocol member (KIP-848) commits with its member epoch; TxnOffsetCommit has no
            # STALE_MEMBER_EPOCH for its clients, so Kafka answers a stale epoch ILLEGAL_GENERATION.
            refused = self.logic.check_member_epoch(group_id, member_id, generation)
            if refused is not None:
                refused_code = refused[0]
                stale = refused_code == ErrorCode.STALE_MEMBER_EPOCH
                return int(ErrorCode.ILLEGAL_GENERATION if stale else refused_code)
        elif generation >= 0 or member_id:  # v3+: the member's generation is checked, as for OffsetCommit
            if g is None or member_id not in g.members:
                return int(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation != g.generation:
                return int(ErrorCode.ILLEGAL_GENERATION)
        ts = int(time.time() * 1000)
        recs: list[tuple[Key, dict[str, Any] | None]] = [
            (OffsetKey(group_id, t, q), OffsetAndMetadata(off, meta or "", ts, epoch).to_value())
            for (t, q), (off, meta, epoch) in offsets.items()
        ]
        tp = (OFFSETS_TOPIC, p)
        try:
            results, pending = self.replica_manager.append_records(
                -1, {tp: build_txn_batch(recs, ts, producer_id, producer_epoch)}
            )
            if not results[tp].error and pending:
                await self.replica_manager.wait_for_commit(results, pending, self.commit_timeout_ms / 1000)
            code: int = results[tp].error
        except KafkaLiteError as e:
            code = int(e.code)
        if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            return int(ErrorCode.NOT_COORDINATOR)
        if code:
            return code
        mine = self.pending_txn.setdefault(p, {}).setdefault(producer_id, {})
        for (t, q), (off, meta, epoch) in offsets.items():
            mine[(group_id, t, q)] = OffsetAndMetadata(off, meta or "", ts, epoch)
        return 0

    def on_marker(self, topic: str, partition: int, pid: int, epoch: int, commit: bool, offset: int) -> None:
        """A transaction's marker committed on a partition this broker leads (ReplicaManager's marker listeners)."""
        if topic != OFFSETS_TOPIC:
            return
        decided = self.pending_txn.get(partition, {}).pop(pid, None)
        if not commit or not decided:
            return
        for (group, t, q), om in decided.items():
            g = self.logic.groups.get(group)
            if g is None:
                g = self.logic._group_for_load(group, partition, now_ms())
            g.offsets[(t, q)] = om

    def has_pending(self, group_id: str, tps: list[tuple[str, int]] | None = None) -> bool:
        """Whether an open transaction holds offsets of the group (for those partitions): Kafka's
        UNSTABLE_OFFSET_COMMIT for an OffsetFetch that asks for stable offsets."""
        p = self.partition_for(group_id)
        for offsets in self.pending_txn.get(p, {}).values():
            for g, t, q in offsets:
                if g == group_id and (tps is None or (t, q) in tps):
                    return True
        return False

    def close(self) -> None:
        for t in list(self._loads.values()) + list(self._tasks):
            t.cancel()
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_result({"error_code": int(ErrorCode.NOT_COORDINATOR), "error_message": "broker shutting down"})


def _offset_of(v: dict[str, Any]) -> OffsetAndMetadata:
    return OffsetAndMetadata.from_value(v)


def _next_offset(data: bytes, default: int) -> int:
    nxt = default
    for _, h in batch_fmt.iter_batches(data):
        nxt = h.next_offset
    return nxt
