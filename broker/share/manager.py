"""SharePartitionManager: the share-partitions this broker leads (Kafka's SharePartitionManager).

A share-partition (broker/share/partition.py) exists for each (share group, topic partition) that a member
fetched from this broker while it leads the partition. Its first use reads the group's persisted state (the
persister, broker/share/persister.py; none: a new share-partition starts at `share.auto.offset.reset`), every
change that must survive is written back, and a leadership that moves away drops it: the next leader reads the
persisted state again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Callable, Protocol

from broker.group.group_configs import GroupConfigs
from broker.share.partition import SharePartition, StateBatch
from net.errors import ErrorCode, KafkaLiteError

if TYPE_CHECKING:
    from broker.replica.replica_manager import ReplicaManager

log = logging.getLogger("kafkalite.share")

Key = tuple[str, str, int]  # group id, topic, partition


class Persister(Protocol):
    """Where share-partition state lives across leaders (Kafka's Persister: Read/WriteShareGroupState)."""

    async def read(self, key: Key) -> tuple[int, int, list[StateBatch]] | None:
        """(state epoch, start offset, state batches), or None if the group never had state for the partition."""
        ...

    async def write(self, key: Key, state_epoch: int, start_offset: int, batches: list[StateBatch]) -> None: ...

    async def initialize(self, key: Key, start_offset: int) -> None:
        """Start the share-partition again at `start_offset` (AlterShareGroupOffsets), fencing its old state."""
        ...

    async def delete(self, key: Key) -> None:
        """Forget the share-partition's state (DeleteShareGroupOffsets, DeleteGroups)."""
        ...


class SharePartitionManager:
    def __init__(
        self,
        replica_manager: "ReplicaManager",
        configs: GroupConfigs,
        persister: Persister | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        # each group's lock duration, delivery count limit, record locks, auto offset reset and isolation level
        self.configs = configs
        self.persister = persister
        self.partitions: dict[Key, SharePartition] = {}
        self._loading: dict[Key, asyncio.Future[SharePartition]] = {}
        self._writes: dict[Key, asyncio.Task[None]] = {}
        self._waiters: dict[Key, list[asyncio.Future[None]]] = {}

    async def get(self, key: Key) -> SharePartition:
        """The share-partition, loaded from the persister on its first use here. The caller checked leadership."""
        sp = self.partitions.get(key)
        if sp is not None:
            # the group's configs may have changed (IncrementalAlterConfigs on the group): they apply from now on
            sp.lock_duration_ms = self.configs.lock_duration_ms(key[0])
            sp.delivery_count_limit = self.configs.delivery_count_limit(key[0])
            sp.max_in_flight = self.configs.max_record_locks(key[0])
            return sp
        fut = self._loading.get(key)
        if fut is None:
            fut = self._loading[key] = asyncio.ensure_future(self._load(key))
            fut.add_done_callback(lambda _f: self._loading.pop(key, None))
        return await asyncio.shield(fut)

    async def _load(self, key: Key) -> SharePartition:
        group, topic, partition = key
        p = self.replica_manager.get_partition(topic, partition)
        state = await self.persister.read(key) if self.persister is not None else None
        log_start = p.log.log_start_offset
        if state is None or state[1] < 0:
            # No state, or one AlterShareGroupOffsets reset to -1 (Kafka's uninitialized start offset).
            start = log_start if self.configs.auto_offset_reset(group) == "earliest" else p.high_watermark
            sp = self._new(group, start)
            sp.state_epoch = 1 if state is None else state[0] + 1
            sp.dirty = True  # the start offset chosen now is the group's from now on
        else:
            epoch, start, batches = state
            sp = self._new(group, start)
            sp.restore(start, batches)
            # A new leader's epoch: the coordinator refuses the old leader's writes from now on.
            sp.state_epoch = epoch + 1
            sp.dirty = True
        sp.reset_start(log_start)
        self.partitions[key] = sp
        if sp.dirty:
            try:
                await self.written(key)  # the start offset chosen (or the new state epoch) holds before any delivery
            except BaseException:
                self.partitions.pop(key, None)  # loaded again by the next request
                raise
        return sp

    def _new(self, group: str, start: int) -> SharePartition:
        c = self.configs
        limits = (c.lock_duration_ms(group), c.delivery_count_limit(group), c.max_record_locks(group))
        return SharePartition(start, *limits)

    def written(self, key: Key) -> "asyncio.Future[None]":
        """Write the share-partition's state if it changed. The future is done once the state as of this call is
        durable (or the write failed); one write per key at a time, the latest state last."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sp = self.partitions.get(key)
        if sp is None or self.persister is None or (not sp.dirty and key not in self._writes):
            fut.set_result(None)
            return fut
        self._waiters.setdefault(key, []).append(fut)
        if key not in self._writes:
            self._writes[key] = asyncio.ensure_future(self._write(key))
        return fut

    def write_soon(self, key: Key) -> None:
        """`written` for a change nobody waits for (acquisitions, expired locks): a failure is logged there."""
        self.written(key).add_done_callback(_retrieved)

    async def _write(self, key: Key) -> None:
        try:
            while self._waiters.get(key):
                waiters = self._waiters.pop(key)
                sp = self.partitions.get(key)
                if sp is None or self.persister is None:
                    _finish(waiters, KafkaLiteError("the share-partition moved", ErrorCode.NOT_LEADER_OR_FOLLOWER))
                    return
                start, batches = sp.snapshot()
                try:
                    await self.persister.write(key, sp.state_epoch, start, batches)
                except KafkaLiteError as e:
                    if e.code == ErrorCode.FENCED_STATE_EPOCH:
                        # Another leader has written since this state was read: ours is stale. Forget it; the
                        # next request here reads the group's state again.
                        log.info("share state of %s is another leader's now: reloading on next use", key)
                        self.partitions.pop(key, None)
                    else:  # the next change (or tick) writes again
                        log.warning("share state of %s not written: %s", key, e)
                        sp.dirty = True
                    _finish(waiters, e)
                    continue
                except Exception as e:  # a connection that broke: the next change (or tick) writes again
                    log.warning("share state of %s not written: %s", key, e)
                    sp.dirty = True
                    _finish(waiters, e)
                    continue
                _finish(waiters, None)
        finally:
            self._writes.pop(key, None)

    def release_member(self, group_id: str, member_id: str) -> None:
        for key, sp in self.partitions.items():
            if key[0] == group_id and sp.release_member(member_id):
                self.write_soon(key)

    def tick(self, now_ms: int) -> None:
        for key, sp in self.partitions.items():
            sp.tick(now_ms)
            if sp.dirty:
                self.write_soon(key)

    def forget_group(self, group_id: str, still_idle: Callable[[], bool]) -> None:
        """The group has no member here any more (its last share session ended): each of its share-partitions is
        dropped once its state is written, unless a member came back meanwhile (`still_idle()` is false). The next
        use reads the persisted state, which an admin may have reset or deleted while the group was empty."""
        for key, sp in list(self.partitions.items()):
            if key[0] == group_id:
                self.written(key).add_done_callback(functools.partial(self._forget, key, sp, still_idle))

    def _forget(
        self, key: Key, sp: SharePartition, still_idle: Callable[[], bool], fut: "asyncio.Future[None]"
    ) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return  # not written: kept, the next tick writes it again
        if self.partitions.get(key) is sp and not sp.dirty and still_idle():
            del self.partitions[key]

    def drop_partition(self, topic: str, partition: int) -> None:
        """Leadership of the topic partition moved away: its share-partitions are the next leader's."""
        for key in [k for k in self.partitions if k[1] == topic and k[2] == partition]:
            del self.partitions[key]


def _finish(waiters: list["asyncio.Future[None]"], error: BaseException | None) -> None:
    for w in waiters:
        if w.done():
            continue
        if error is None:
            w.set_result(None)
        else:
            w.set_exception(error)


def _retrieved(fut: "asyncio.Future[None]") -> None:
    if not fut.cancelled():
        fut.exception()  # already logged by _write
