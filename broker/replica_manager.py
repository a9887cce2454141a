"""ReplicaManager: the partitions this broker hosts, and the produce / fetch /
list-offsets operations on them. Results are per partition, with error codes,
so one bad partition never fails a whole request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.partition import Partition
from net.errors import (
    ErrorCode,
    InvalidRequiredAcksError,
    KafkaLiteError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from broker.log.manager import LogManager

log = logging.getLogger("kafkalite.replica")
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@dataclass(slots=True)
class ProduceResult:
    error: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    batch_offsets: list[int] | None = None

    def to_wire(self, partition: int) -> list:
        return [
            partition,
            self.error,
            self.base_offset,
            self.log_append_time,
            self.log_start_offset,
            self.message,
            self.batch_offsets,
        ]


@dataclass(slots=True)
class FetchResult:
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    message: str | None = None

    def to_wire(self, partition: int) -> list:
        return [
            partition,
            self.error,
            self.high_watermark,
            self.high_watermark,
            self.log_start_offset,
            self.records,
            self.message,
        ]


def _error_result(cls: type, e: Exception) -> object:
    if isinstance(e, KafkaLiteError):
        return cls(int(e.code), message=str(e))
    return cls(int(ErrorCode.UNKNOWN_SERVER_ERROR), message=f"{type(e).__name__}: {e}")


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: "LogManager") -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.partitions: dict[tuple[str, int], Partition] = {}

    # --- partition lifecycle -------------------------------------------------

    def add_partition(self, p: Partition) -> None:
        self.partitions[(p.topic, p.partition)] = p

    def remove_partition(self, topic: str, partition: int) -> Partition | None:
        p = self.partitions.pop((topic, partition), None)
        if p is not None:
            p.wake()
        return p

    def get_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise UnknownTopicOrPartitionError(f"this broker does not host {topic}-{partition}")
        return p

    # --- produce -------------------------------------------------------------

    def append_records(self, acks: int, entries: dict[tuple[str, int], bytes]) -> dict[tuple[str, int], ProduceResult]:
        if acks not in (-1, 0, 1):
            raise InvalidRequiredAcksError(f"acks must be -1 (all), 0 or 1, got {acks}")
        results: dict[tuple[str, int], ProduceResult] = {}
        for tp, records in entries.items():
            try:
                p = self.get_partition(*tp)
                offsets = p.append_as_leader(records, acks)
                results[tp] = ProduceResult(
                    0, offsets[0], -1, p.log.log_start_offset, None, offsets if len(offsets) > 1 else None
                )
            except Exception as e:
                if isinstance(e, KafkaStorageError):
                    log.error("KAFKA_STORAGE_ERROR appending to %s-%d: %s", tp[0], tp[1], e)
                results[tp] = _error_result(ProduceResult, e)
        return results

    # --- fetch ---------------------------------------------------------------

    def read(self, tp: tuple[str, int], offset: int, max_bytes: int, is_replica: bool = False) -> FetchResult:
        try:
            p = self.get_partition(*tp)
            p.check_leader()
            limit = None if is_replica else p.high_watermark
            data = p.log.read(offset, max_bytes, max_offset=limit)
            return FetchResult(0, p.high_watermark, p.log.log_start_offset, data)
        except Exception as e:
            result = _error_result(FetchResult, e)
            p = self.partitions.get(tp)
            if p is not None:
                result.high_watermark = p.high_watermark
                result.log_start_offset = p.log.log_start_offset
            return result

    async def fetch_messages(
        self, requests: list[tuple[tuple[str, int], int, int]], max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> dict[tuple[str, int], FetchResult]:
        """Long poll: answer once `min_bytes` are available, an error occurs, or `max_wait_ms` passes."""
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            results = self._read_all(requests, max_bytes)
            total = sum(len(r.records) for r in results.values())
            errors = any(r.error for r in results.values())
            remaining = deadline - time.monotonic()
            if total >= min_bytes or errors or remaining <= 0:
                return results
            waiters = [p.wait_for_data() for tp, _, _ in requests if (p := self.partitions.get(tp))]
            if not waiters:
                return results
            _, pending = await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for w in pending:
                w.cancel()

    def _read_all(self, requests: list[tuple[tuple[str, int], int, int]], max_bytes: int) -> dict:
        results = {}
        budget = max_bytes
        for tp, offset, part_max in requests:
            # As in Kafka, the first partition may return one oversized batch so a consumer never stalls.
            r = self.read(tp, offset, max(1, min(part_max, budget)) if budget > 0 else 1)
            if budget <= 0 and r.records:
                r.records = b""
            budget -= len(r.records)
            results[tp] = r
        return results

    # --- list offsets --------------------------------------------------------

    def list_offset(self, tp: tuple[str, int], timestamp: int) -> tuple[int, int, int]:
        """(error, timestamp, offset) for Kafka's ListOffsets: -2 earliest, -1 latest, else by time."""
        try:
            p = self.get_partition(*tp)
            p.check_leader()
            if timestamp == EARLIEST_TIMESTAMP:
                return 0, -1, p.log.log_start_offset
            if timestamp == LATEST_TIMESTAMP:
                return 0, -1, p.high_watermark
            found = p.log.offset_for_timestamp(timestamp)
            if found is None or found[0] >= p.high_watermark:
                return 0, -1, -1
            return 0, found[1], found[0]
        except KafkaLiteError as e:
            return int(e.code), -1, -1
