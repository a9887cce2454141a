"""The controller quorum's metadata log, stored as the internal partition
`__cluster_metadata-0` with the same Log, segments and batch format as any topic.
Each metadata record is one record whose value is the msgpack of a dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from broker.log.log import Log
from net import batch as batch_fmt
from net.wire_types import EPOCH, OFFSET

METADATA_TOPIC = "__cluster_metadata"


def _pack(record: dict[str, Any]) -> bytes:
    return msgpack.packb(record, use_bin_type=True)


def _batch(records: Sequence[dict[str, Any]], ts: int = 0) -> bytes:
    return batch_fmt.build([(i, 0, None, _pack(r), None) for i, r in enumerate(records)], ts, ts)


class DiskMetadataLog:
    """Adapts a `Log` to the quorum's `MetadataLog` interface (election/log.py)."""

    def __init__(self, log: Log) -> None:
        self.log = log

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_epoch(self) -> int:
        return max(self.log.latest_epoch, 0) if self.log.log_end_offset > 0 else 0

    def append(self, records: Sequence[dict[str, Any]], epoch: int) -> int:
        EPOCH.check(epoch, "metadata log epoch")  # defensive: the batch field is int32 (net/wire_types.py)
        info = self.log.append_as_leader(_batch(records), epoch)
        self.log.flush()  # the quorum counts this record toward a majority: it must survive a power loss
        return info.last_offset

    def append_replicated(self, entries: Sequence[tuple[int, int, dict[str, Any]]]) -> None:
        """Follower side: entries keep the offsets and epochs the controller gave them."""
        run: list[tuple[int, int, dict[str, Any]]] = []
        for e in entries:
            OFFSET.check(e[0], "metadata log offset")  # defensive: refused on the wire already
            EPOCH.check(e[1], "metadata log epoch")
            if run and (e[1] != run[0][1] or e[0] != run[-1][0] + 1):
                self._append_run(run)
                run = []
            run.append(e)
        if run:
            self._append_run(run)
        self.log.flush()

    def _append_run(self, run: list[tuple[int, int, dict[str, Any]]]) -> None:
        raw = bytearray(_batch([r for _, _, r in run]))
        batch_fmt.stamp(raw, run[0][0], run[0][1])
        self.log.append_as_follower(bytes(raw))

    def epoch_of(self, offset: int) -> int:
        """The epoch of the record at `offset` (-1 before the log start)."""
        entries = self.log.leader_epoch_entries
        epoch = -1
        for e, start in entries:
            if start <= offset:
                epoch = e
            else:
                break
        return epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.end_offset_for_epoch(epoch)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.log.flush()

    def read(self, from_offset: int, max_records: int) -> list[tuple[int, int, dict[str, Any]]]:
        out: list[tuple[int, int, dict[str, Any]]] = []
        offset = from_offset
        while len(out) < max_records and offset < self.log.log_end_offset:
            data = self.log.read(offset, 1024 * 1024)
            if not data:
                break
            for pos, h in batch_fmt.iter_batches(data):
                for d_off, _ts, _k, value, _h in batch_fmt.records_of(data, pos, h):
                    off = h.base_offset + d_off
                    if off >= offset and len(out) < max_records:
                        out.append((off, h.leader_epoch, msgpack.unpackb(value, raw=False)))
                offset = max(offset, h.next_offset)
        return out
