"""The metadata log as the quorum sees it: offsets, the epoch of each record, and nothing else.

The quorum never looks inside a record. The broker adapts its on-disk `Log` to `MetadataLog`
(broker/metadata/metadata_log.py); `InMemoryLog` is the reference implementation used by the tests and the
simulator, and it follows the same KIP-101 conventions as broker/log/epoch.py so that the two are
interchangeable.

Durability contract: when `append`, `append_replicated` or `truncate_to` returns, the change must
survive a crash. The quorum reports its log end offset to the controller in the very next fetch, and
the controller counts that offset towards a majority; an adapter that acknowledged records it could
still lose would break the majority argument in docs/ELECTION.md.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any, Protocol

Record = dict[str, Any]
Entry = tuple[int, int, Record]  # (offset, epoch, record)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class MetadataLog(Protocol):
    @property
    def end_offset(self) -> int:
        """The offset the next record will get (number of records, as the log never starts above 0 here)."""
        ...

    @property
    def last_epoch(self) -> int:
        """The epoch of the last record, 0 when the log is empty."""
        ...

    def append(self, records: Sequence[Record], epoch: int) -> int:
        """Controller side: append `records` stamped with `epoch`; return the offset of the last one."""
        ...

    def append_replicated(self, entries: Sequence[Entry]) -> None:
        """Follower side: append entries keeping the offsets and epochs the controller gave them."""
        ...

    def epoch_of(self, offset: int) -> int:
        """The epoch of the record at `offset` (< end_offset); -1 before the log start."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """KIP-101: (largest epoch <= `epoch`, the start offset of the next epoch or the log end offset).

        (-1, -1) when the log is empty or `epoch` is newer than anything in it; (epoch, first offset)
        when `epoch` is older than anything in it.
        """
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above `offset`."""
        ...

    def read(self, from_offset: int, max_records: int) -> list[Entry]: ...


class InMemoryLog:
    """A `MetadataLog` in a Python list; 'durable' in the sense that it outlives a simulated crash."""

    def __init__(self) -> None:
        self._epochs: list[int] = []  # epoch of each record
        self._records: list[Record] = []
        # The epoch history (KIP-101 leader epoch cache): parallel lists of epoch and its start offset.
        self._hist_epochs: list[int] = []
        self._hist_starts: list[int] = []

    @property
    def end_offset(self) -> int:
        return len(self._records)

    @property
    def last_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else 0

    def append(self, records: Sequence[Record], epoch: int) -> int:
        if not records:
            raise ValueError("nothing to append")
        if epoch < self.last_epoch:
            raise ValueError(f"epoch {epoch} is older than the log's last epoch {self.last_epoch}")
        for r in records:
            self._push(epoch, r)
        return len(self._records) - 1

    def append_replicated(self, entries: Sequence[Entry]) -> None:
        for offset, epoch, record in entries:
            if offset != len(self._records):
                raise ValueError(f"gap or overlap: entry at {offset}, log ends at {len(self._records)}")
            if epoch < self.last_epoch:
                raise ValueError(f"entry at {offset} has epoch {epoch} below the last epoch {self.last_epoch}")
            self._push(epoch, record)

    def _push(self, epoch: int, record: Record) -> None:
        if not self._hist_epochs or self._hist_epochs[-1] != epoch:
            self._hist_epochs.append(epoch)
            self._hist_starts.append(len(self._records))
        self._epochs.append(epoch)
        self._records.append(record)

    def epoch_of(self, offset: int) -> int:
        if offset < 0:
            return UNDEFINED_EPOCH
        return self._epochs[offset]

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        if epoch == UNDEFINED_EPOCH or not self._hist_epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self._hist_epochs[-1]:
            return epoch, len(self._records)
        higher = bisect_right(self._hist_epochs, epoch)
        if higher == len(self._hist_epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return epoch, self._hist_starts[0]
        return self._hist_epochs[higher - 1], self._hist_starts[higher]

    def truncate_to(self, offset: int) -> None:
        if offset >= len(self._records):
            return
        del self._epochs[offset:]
        del self._records[offset:]
        while self._hist_starts and self._hist_starts[-1] >= offset:
            self._hist_starts.pop()
            self._hist_epochs.pop()

    def read(self, from_offset: int, max_records: int) -> list[Entry]:
        end = min(len(self._records), from_offset + max_records)
        return [(o, self._epochs[o], self._records[o]) for o in range(from_offset, end)]
