"""ShareCoordinator: the durable state of share-partitions, in `__share_group_state` (Kafka's share coordinator).

The leader of a `__share_group_state` partition is the share coordinator of the share-partitions whose keys hash
there (broker/share/state_records.py). It follows that leadership as the group coordinator follows
`__consumer_offsets`: becoming leader loads the partition's latest snapshot per key from the log (while loading,
requests are answered COORDINATOR_LOAD_IN_PROGRESS); losing it drops them (NOT_COORDINATOR). A write is an
acks=all append of one ShareSnapshot record, applied to the map once replicated, so what a read answers survives
the coordinator. A write carrying an older state epoch than the one stored is FENCED_STATE_EPOCH: a leader that
lost its partition cannot overwrite what the next leader wrote, nor what AlterShareGroupOffsets initialized
(`initialize`, one epoch past the stored one). `delete` writes a tombstone (DeleteShareGroupOffsets, DeleteGroups)
and remembers the deleted state's epoch: a leader that still held the state is fenced too, instead of writing it
back, and the next leader starts at share.auto.offset.reset one epoch past it.
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
    from broker.replica.partition import Partition
    from broker.replica.replica_manager import ReplicaManager

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
        # __share_group_state partition -> the state epoch each deleted key had: a leader still holding the state
        # (its epoch at most that) is fenced rather than writing it back; read, the key has that epoch and no start
        # offset (-1: share.auto.offset.reset), so the next leader writes one past it. Rebuilt from the tombstones.
        self.deleted: dict[int, dict[StateKey, int]] = {}
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
            self.deleted.pop(p, None)
            log.info("no longer share coordinator for %s-%d", SHARE_STATE_TOPIC, p)

    async def _load(self, part: "Partition") -> None:
        t0 = time.monotonic()
        lg = part.log
        offset, end = lg.log_start_offset, lg.log_end_offset
        states: dict[StateKey, ShareSnapshot] = {}
        deleted: dict[StateKey, int] = {}
        while offset < end:
            data = lg.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
            if not data:
                break
            nxt = offset
            for key, snap in read_records(data):
                if snap is None:
                    gone = states.pop(key, None)
                    if gone is not None:
                        deleted[key] = gone.state_epoch
                else:
                    states[key] = snap
                    deleted.pop(key, None)
            for _, h in batch_fmt.iter_batches(data):
                nxt = h.next_offset
            offset = max(offset + 1, nxt)
            await asyncio.sleep(0)  # a long log must not stall the loop
        if part.leader_state is None:
            return
        self.states[part.partition] = states
        self.deleted[part.partition] = deleted
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
        snap = self._owned(partition).get(key)
        gone = self.deleted.get(partition, {}).get(key)
        if snap is None and gone is not None:
            return ShareSnapshot(gone, -1)  # deleted: no start offset, the epoch a new state must pass
        return snap

    def _epoch(self, partition: int, key: StateKey) -> int | None:
        """The key's state epoch: stored, or as it was when deleted; None if it never had state here."""
        cur = self._owned(partition).get(key)
        return cur.state_epoch if cur is not None else self.deleted.get(partition, {}).get(key)

    async def write(self, partition: int, key: StateKey, snap: ShareSnapshot) -> None:
        states = self._owned(partition)
        cur = states.get(key)
        stored = self._epoch(partition, key)
        if stored is not None and (snap.state_epoch < stored or (cur is None and snap.state_epoch == stored)):
            # older than the stored state, or the state of a leader that held it before it was deleted
            raise StateError(ErrorCode.FENCED_STATE_EPOCH, f"state epoch {snap.state_epoch} is not past {stored}")
        snap.snapshot_epoch = cur.snapshot_epoch + 1 if cur is not None else 0
        snap.write_ts = int(time.time() * 1000)
        await self._append(partition, key, snap, snap.write_ts)
        now = self.states.get(partition)
        if isinstance(now, dict):  # still ours: the write is the key's state
            latest = now.get(key)
            if latest is None or latest.state_epoch <= snap.state_epoch:
                now[key] = snap
                self.deleted.get(partition, {}).pop(key, None)

    async def initialize(self, partition: int, key: StateKey, state_epoch: int, start_offset: int) -> ShareSnapshot:
        """InitializeShareGroupState: the share-partition starts again at `start_offset`, nothing in flight
        (AlterShareGroupOffsets). The state epoch written is one past the stored one (at least the request's), so
        a leader still holding the old state is fenced at its next write (FENCED_STATE_EPOCH) and reads it again."""
        stored = self._epoch(partition, key)
        if stored is not None and 0 <= state_epoch < stored:
            raise StateError(ErrorCode.FENCED_STATE_EPOCH, f"state epoch {state_epoch} is older than {stored}")
        epoch = max(state_epoch, stored + 1 if stored is not None else 1)
        snap = ShareSnapshot(epoch, start_offset, [])
        await self.write(partition, key, snap)
        return snap

    async def delete(self, partition: int, key: StateKey) -> None:
        """DeleteShareGroupState: a tombstone for the key (none if it has no state: deleting is idempotent, as
        Kafka's); a compacted __share_group_state forgets it."""
        states = self._owned(partition)
        cur = states.get(key)
        if cur is None:
            return
        await self._append(partition, key, None, int(time.time() * 1000))
        now = self.states.get(partition)
        if isinstance(now, dict) and now.get(key) is cur:
            del now[key]
            self.deleted.setdefault(partition, {})[key] = cur.state_epoch

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
