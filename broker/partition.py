"""Partition: one replica of one topic-partition on this broker: its Log, leader
epoch and high watermark, and the waiters woken when either moves.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from broker.producer_state import ProducerStateManager
from net import batch as batch_fmt
from net.errors import CorruptMessageError, FencedLeaderEpochError, NotEnoughReplicasError, NotLeaderOrFollowerError

if TYPE_CHECKING:
    from broker.log.log import Log


class Partition:
    def __init__(
        self,
        topic: str,
        partition: int,
        log: "Log",
        broker_id: int,
        leader: int,
        leader_epoch: int,
        isr: list[int],
        min_insync_replicas: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.broker_id = broker_id
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.min_insync_replicas = min_insync_replicas
        # On one broker the ISR is {self}, so everything appended is committed.
        self.high_watermark = log.log_end_offset
        self._waiters: list[asyncio.Future] = []
        self.producer_state = ProducerStateManager()
        self._rebuild_producer_state()

    def _rebuild_producer_state(self) -> None:
        """Replay the batch headers of the newest segments (enough for the dedup window)."""
        segs = self.log.segments
        offset = segs[-2].base_offset if len(segs) > 1 else self.log.log_start_offset
        offset = max(offset, self.log.log_start_offset)
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, 8 * 1024 * 1024)
            if not data:
                break
            for _, h in batch_fmt.iter_batches(data):
                if h.producer_id >= 0:
                    self.producer_state.update(h, h.base_offset)
                offset = h.next_offset

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    def check_leader(self, epoch: int | None = None) -> None:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}"
            )
        if epoch is not None and epoch >= 0 and epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"epoch {epoch} is older than the current {self.leader_epoch}")

    def append_as_leader(self, records: bytes, acks: int) -> list[int]:
        """Append a blob of one or more batches; returns each batch's base offset."""
        self.check_leader()
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"ISR {self.isr} is smaller than min.insync.replicas={self.min_insync_replicas}"
            )
        try:
            headers = list(batch_fmt.iter_batches(records))
        except batch_fmt.InvalidBatch as e:
            raise CorruptMessageError(str(e)) from None
        if not headers or headers[-1][0] + headers[-1][1].size != len(records):
            raise CorruptMessageError("produce records are not a whole number of batches")
        offsets: list[int | None] = []
        keep: list[tuple[int, batch_fmt.BatchHeader]] = []
        for pos, h in headers:
            dup = self.producer_state.duplicate_of(h) if h.producer_id >= 0 else None
            if dup is not None:
                try:  # a retry is only a duplicate if it is intact; otherwise the log rejects it below
                    batch_fmt.validate(records, pos)
                except batch_fmt.InvalidBatch as e:
                    raise CorruptMessageError(str(e)) from None
            offsets.append(dup)
            if dup is None:
                keep.append((pos, h))
        if keep:
            blob = records if len(keep) == len(headers) else b"".join(records[p : p + h.size] for p, h in keep)
            info = self.log.append_as_leader(blob, self.leader_epoch)
            base = info.first_offset
            it = iter(keep)
            for i, off in enumerate(offsets):
                if off is None:
                    _, h = next(it)
                    offsets[i] = base
                    self.producer_state.update(h, base)
                    base += h.last_offset_delta + 1
            self.maybe_increment_high_watermark()
        return offsets  # type: ignore[return-value]

    def maybe_increment_high_watermark(self) -> None:
        # With replication the HW becomes the minimum log end offset over the ISR.
        leo = self.log.log_end_offset
        if leo > self.high_watermark:
            self.high_watermark = leo
            self.wake()

    def wait_for_data(self) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def reset_after_truncation(self) -> None:
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
