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

from broker.group.logic import Append, GroupConfig, GroupCoordinatorLogic, Output, Reply
from broker.group.records import OFFSETS_TOPIC, build_batch, partition_for, read_records
from broker.repeated_log import RepeatedConditionLog
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError

if TYPE_CHECKING:
    from broker.partition import Partition
    from broker.replica_manager import ReplicaManager

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

    async def _load(self, part: "Partition") -> None:
        t0 = time.monotonic()
        lg = part.log
        offset, end = lg.log_start_offset, lg.log_end_offset
        records = []
        while offset < end:
            data = lg.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
            if not data:
                break
            last = offset
            for off, key, value in read_records(data):
                records.append((key, value))
                last = off
            offset = max(last + 1, _next_offset(data, offset))
            await asyncio.sleep(0)  # a long log must not stall the loop
        if part.leader_state is None:
            return  # lost the leadership while loading; on_partition_change unloaded us
        self.logic.load(part.partition, records, now_ms())
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

    def close(self) -> None:
        for t in list(self._loads.values()) + list(self._tasks):
            t.cancel()
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_result({"error_code": int(ErrorCode.NOT_COORDINATOR), "error_message": "broker shutting down"})


def _next_offset(data: bytes, default: int) -> int:
    nxt = default
    for _, h in batch_fmt.iter_batches(data):
        nxt = h.next_offset
    return nxt
