"""An idempotent producer's sequence numbers per partition and its epoch bumps (Kafka's TxnPartitionMap, KIP-360).

Sans-IO: the Sender (client/sender.py) asks it for each new batch's (epoch, first sequence) and tells it
when a partition's numbering broke. A broker accepts an idempotent batch only as the last sequence + 1 within
the producer's epoch, or at sequence 0 in a newer epoch (broker/replica/producer_state.py). So when a partition's
numbering has a hole the broker will never fill (a batch failed for good, or the broker answered
OUT_OF_ORDER_SEQUENCE_NUMBER to the next expected batch), the producer bumps its epoch and that partition
starts again at 0; every other partition moves to the new epoch at 0 too, once its batches of the old epoch
are acknowledged (a newer epoch fences the older one's retries on the broker).
"""

from __future__ import annotations

MAX_EPOCH = 0x7FFF  # an int16: past it the producer needs a new producer id (InitProducerId)
_SEQUENCE_MASK = 0x7FFFFFFF  # sequences wrap from 2**31 - 1 to 0, as on the broker

TopicPartition = tuple[str, int]


class Sequences:
    def __init__(self) -> None:
        self.producer_id = -1
        self.epoch = -1
        self._next: dict[TopicPartition, int] = {}
        self._epoch_of: dict[TopicPartition, int] = {}  # the epoch each partition's numbering belongs to
        self.bump_requested = False

    def reset(self, producer_id: int, epoch: int) -> None:
        """A producer id from InitProducerId: every partition starts at 0 in it."""
        self.producer_id, self.epoch = producer_id, epoch
        self._next.clear()
        self._epoch_of.clear()
        self.bump_requested = False

    def stale(self, tp: TopicPartition) -> bool:
        """True when `tp`'s next new batch starts a new epoch at 0 (its old-epoch batches must be done first)."""
        return self._epoch_of.get(tp, self.epoch) != self.epoch

    def stamp(self, tp: TopicPartition, record_count: int) -> tuple[int, int]:
        """(epoch, first sequence) for a new batch of `record_count` records on `tp`."""
        if self.stale(tp):
            self._next.pop(tp, None)
        seq = self._next.get(tp, 0)
        self._next[tp] = (seq + record_count) & _SEQUENCE_MASK
        self._epoch_of[tp] = self.epoch
        return self.epoch, seq

    def give_back(self, tp: TopicPartition, epoch: int, first: int, record_count: int) -> bool:
        """Take back the numbers of `tp`'s last stamped batch (`first`, `record_count` records, in `epoch`), which
        the broker proved it did not append, so the next batch is numbered from `first`: only while nothing was
        stamped after it. False (nothing changed) otherwise."""
        if self._epoch_of.get(tp) != epoch or self._next.get(tp) != (first + record_count) & _SEQUENCE_MASK:
            return False
        self._next[tp] = first
        return True

    def restart(self, tp: TopicPartition) -> None:
        """`tp`'s numbering has a hole: bump the epoch (the bump KIP-360 lets an idempotent producer do by
        itself) and number `tp`'s unacknowledged batches again from 0 in it. When the epoch is exhausted,
        `bump_requested` stays set: the caller asks for a new producer id and calls reset()."""
        self._next.pop(tp, None)
        self._epoch_of.pop(tp, None)
        if self.epoch >= MAX_EPOCH:
            self.bump_requested = True
        else:
            self.epoch += 1
