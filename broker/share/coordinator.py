"""ShareCoordinator: the durable state of share-partitions, in `__share_group_state` (Kafka's share coordinator).

The leader of a `__share_group_state` partition is the share coordinator of the share-partitions whose keys hash
there (broker/share/state_records.py). It follows that leadership as the group coordinator follows
`__consumer_offsets`: becoming leader loads the partition's latest snapshot per key from the log (while loading,
requests are answered COORDINATOR_LOAD_IN_PROGRESS); losing it drops them (NOT_COORDINATOR). A write is an
acks=all append of one ShareSnapshot record, applied to the map once replicated, so what a read answers survives
the coordinator. A write carrying an older state epoch than the one stored is FENCED_STATE_EPOCH: a leader that
lost its partition cannot overwrite what the next leader wrote, nor what AlterShareGroupOffsets initialized
(`initialize`, one epoch past the stored one). `delete` writes a tombstone (DeleteShareGroupOffsets, DeleteGroups).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from broker.share.state_records import SHARE_STATE_TOPIC, ShareSnapshot, StateKey, build_batch, read_records
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError

if TYPE_CHECKING:
    from broker.partition import Partition
    from broker.replica_manager import ReplicaManager

log = logging.getLogger("kafkalite.share")
LOAD_CHUNK_BYTES = 4 * 1024 * 1024
LOADING = "loading"


class StateError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ShareCoordinator:
    def __init__(self, replica_manager: "ReplicaManager", num_partitions: int, write_timeout_ms: int) -> None:
        self.replica_manager = replica_manager
        self.num_partitions = num_partitions
        self.write_timeout_s = write_timeout_ms / 1000
        # __share_group_state partition -> its keys' latest snapshots, or LOADING
        self.states: dict[int, dict[StateKey, ShareSnapshot] | str] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}

    # --- leadership of __share_group_state ------------------------------------------------------

    def on_partition_change(self, part: "Partition", change: str) -> None:
        if part.topic != SHARE_STATE_TOPIC:
            return
        p = part.partition
        old = self._loads.pop(p, None)
        if old is not None:
            old.cancel()
        if change == "leader":
            self.states[p] = LOADING
            self._loads[p] = asyncio.ensure_future(self._load(part))
        elif self.states.pop(p, None) is not None:
            log.info("no longer share coordinator for %s-%d", SHARE_STATE_TOPIC, p)

    async def _load(self, part: "Partition") -> None:
        t0 = time.monotonic()
        lg = part.log
        offset, end = lg.log_start_offset, lg.log_end_offset
        states: dict[StateKey, ShareSnapshot] = {}
        while offset < end:
            data = lg.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
            if not data:
                break
            nxt = offset
            for key, snap in read_records(data):
                if snap is None:
                    states.pop(key, None)
                else:
                    states[key] = snap
            for _, h in batch_fmt.iter_batches(data):
                nxt = h.next_offset
            offset = max(offset + 1, nxt)
            await asyncio.sleep(0)  # a long log must not stall the loop
        if part.leader_state is None:
            return
        self.states[part.partition] = states
        self._loads.pop(part.partition, None)
        log.log(
            logging.INFO if states else logging.DEBUG,
            "loaded %s-%d: %d share-partitions in %.3fs",
            SHARE_STATE_TOPIC,
            part.partition,
            len(states),
            time.monotonic() - t0,
        )

    def _owned(self, p: int) -> dict[StateKey, ShareSnapshot]:
        st = self.states.get(p)
        if st is None:
            raise StateError(ErrorCode.NOT_COORDINATOR, f"this broker is not the share coordinator of {p}")
        if isinstance(st, str):
            raise StateError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the share coordinator is loading its state")
        return st

    # --- Read / Write -------------------------------------------------------------------------

    def read(self, partition: int, key: StateKey) -> ShareSnapshot | None:
        return self._owned(partition).get(key)

    async def write(self, partition: int, key: StateKey, snap: ShareSnapshot) -> None:
        states = self._owned(partition)
        cur = states.get(key)
        if cur is not None and snap.state_epoch < cur.state_epoch:
            raise StateError(
                ErrorCode.FENCED_STATE_EPOCH, f"state epoch {snap.state_epoch} is older than {cur.state_epoch}"
            )
        snap.snapshot_epoch = cur.snapshot_epoch + 1 if cur is not None else 0
        snap.write_ts = int(time.time() * 1000)
        await self._append(partition, key, snap, snap.write_ts)
        now = self.states.get(partition)
        if isinstance(now, dict):  # still ours: the write is the key's state
            latest = now.get(key)
            if latest is None or latest.state_epoch <= snap.state_epoch:
                now[key] = snap

    async def initialize(self, partition: int, key: StateKey, state_epoch: int, start_offset: int) -> ShareSnapshot:
        """InitializeShareGroupState: the share-partition starts again at `start_offset`, nothing in flight
        (AlterShareGroupOffsets). The state epoch written is one past the stored one (at least the request's), so
        a leader still holding the old state is fenced at its next write (FENCED_STATE_EPOCH) and reads it again."""
        cur = self._owned(partition).get(key)
        if cur is not None and 0 <= state_epoch < cur.state_epoch:
            raise StateError(ErrorCode.FENCED_STATE_EPOCH, f"state epoch {state_epoch} is older than {cur.state_epoch}")
        epoch = max(state_epoch, cur.state_epoch + 1 if cur is not None else 1)
        snap = ShareSnapshot(epoch, start_offset, [])
        await self.write(partition, key, snap)
        return snap

    async def delete(self, partition: int, key: StateKey) -> None:
        """DeleteShareGroupState: a tombstone for the key (none if it has no state: deleting is idempotent, as
        Kafka's); a compacted __share_group_state forgets it."""
        states = self._owned(partition)
        if key not in states:
            return
        await self._append(partition, key, None, int(time.time() * 1000))
        now = self.states.get(partition)
        if isinstance(now, dict):
            now.pop(key, None)

    async def _append(self, partition: int, key: StateKey, snap: ShareSnapshot | None, now_ms: int) -> None:
        """One record (a snapshot, or a tombstone for None), acks=all; the coordinator's errors as Kafka's."""
        tp = (SHARE_STATE_TOPIC, partition)
        try:
            results, pending = self.replica_manager.append_records(-1, {tp: build_batch(key, snap, now_ms)})
            if not results[tp].error and pending:
                await self.replica_manager.wait_for_commit(results, pending, self.write_timeout_s)
            code = results[tp].error
            message = results[tp].message or ""
        except KafkaLiteError as e:
            code, message = int(e.code), str(e)
        if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            raise StateError(ErrorCode.NOT_COORDINATOR, message)
        if code:
            raise StateError(ErrorCode.COORDINATOR_NOT_AVAILABLE, message)

    def close(self) -> None:
        for t in self._loads.values():
            t.cancel()
