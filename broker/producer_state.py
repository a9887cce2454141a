"""ProducerStateManager: per-partition idempotence, as Kafka's.

For each producer id it remembers the last few batches' sequence ranges and
offsets, so a retried batch is answered with its first offsets instead of
being appended twice. Rebuilt from batch headers when the partition opens.
"""

from __future__ import annotations

from collections import deque

from net.batch import BatchHeader
from net.errors import ErrorCode, KafkaLiteError

NUM_BATCHES_TO_RETAIN = 5  # Kafka's max.in.flight for idempotent producers


class OutOfOrderSequenceError(KafkaLiteError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class ProducerStateManager:
    def __init__(self) -> None:
        # pid -> (epoch, deque[(first_seq, last_seq, base_offset)])
        self._producers: dict[int, tuple[int, deque[tuple[int, int, int]]]] = {}

    def duplicate_of(self, h: BatchHeader) -> int | None:
        """The base offset this batch was already appended at, or None if it is new."""
        entry = self._producers.get(h.producer_id)
        if entry is None or entry[0] != h.producer_epoch:
            return None
        last_seq = h.base_sequence + h.record_count - 1
        for first, last, offset in entry[1]:
            if first == h.base_sequence and last == last_seq:
                return offset
        newest = entry[1][-1][1] if entry[1] else -1
        if h.base_sequence <= newest:
            raise OutOfOrderSequenceError(
                f"producer {h.producer_id}: sequence {h.base_sequence} is not after the last appended {newest}"
            )
        return None

    def update(self, h: BatchHeader, base_offset: int) -> None:
        if h.producer_id < 0:
            return
        entry = self._producers.get(h.producer_id)
        if entry is None or entry[0] != h.producer_epoch:
            entry = (h.producer_epoch, deque(maxlen=NUM_BATCHES_TO_RETAIN))
            self._producers[h.producer_id] = entry
        entry[1].append((h.base_sequence, h.base_sequence + h.record_count - 1, base_offset))

    def __len__(self) -> int:
        return len(self._producers)
