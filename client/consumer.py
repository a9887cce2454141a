"""AsyncConsumer (manual assignment): positions, a prefetching fetcher, and
record decoding. Reads only up to the high watermark (the broker enforces it).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import deque
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Iterable, NamedTuple

from client.cluster import KafkaLiteClient
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError, OffsetOutOfRangeError, error_for
from net.protocol import ApiKey

log = logging.getLogger("kafkalite.consumer")

EARLIEST = -2
LATEST = -1
ASSIGN_METADATA_WAIT_S = 2.0


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class ConsumerRecord(tuple):
    """(topic, partition, offset, timestamp, key, value, headers), like kafka-python's namedtuple.

    A tuple subclass so a whole batch is built by C-level map/zip, with no Python call per record.
    """

    __slots__ = ()
    _fields = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
    topic = property(itemgetter(0))
    partition = property(itemgetter(1))
    offset = property(itemgetter(2))
    timestamp = property(itemgetter(3))
    key = property(itemgetter(4))
    value = property(itemgetter(5))

    @property
    def headers(self) -> tuple:
        return self[6] or ()

    def __repr__(self) -> str:
        return f"ConsumerRecord({self[0]}-{self[1]}@{self[2]}, key={self[4]!r}, value={self[5]!r})"


_new_record = partial(tuple.__new__, ConsumerRecord)


def decode_records(topic: str, partition: int, data: bytes, position: int) -> tuple[list[ConsumerRecord], int]:
    """Records at or after `position` in raw fetched batches, and the next position."""
    # The cyclic GC would scan the young records over and over while a fetch is decoded (2.5x slower);
    # they hold no cycles, so pause it for the duration.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _decode(topic, partition, data, position)
    finally:
        if paused:
            gc.enable()


def _decode(topic: str, partition: int, data: bytes, position: int) -> tuple[list[ConsumerRecord], int]:
    out: list[ConsumerRecord] = []
    for pos, h in batch_fmt.iter_batches(data, validate_crc=True):
        if h.next_offset <= position:
            continue
        recs = batch_fmt.records_of(data, pos, h)
        if recs:
            d_off, d_ts, keys, values, headers = zip(*recs)
            if h.attributes & batch_fmt.TIMESTAMP_LOG_APPEND:
                stamps = repeat(h.max_timestamp, len(recs))  # the broker's append time, as in Kafka
            else:
                stamps = map(h.first_timestamp.__add__, d_ts)
            batch = list(
                map(
                    _new_record,
                    zip(
                        repeat(topic),
                        repeat(partition),
                        map(h.base_offset.__add__, d_off),
                        stamps,
                        keys,
                        values,
                        headers,
                    ),
                )
            )
            if h.base_offset < position:  # only the first batch after a seek into its middle
                batch = [r for r in batch if r[2] >= position]
            out += batch
        position = h.next_offset
    return out, position


class _PartitionState:
    __slots__ = (
        "position",
        "fetch_position",
        "buffer",
        "paused",
        "high_watermark",
        "log_start_offset",
        "decoded",
        "decoded_at",
        "decoded_next",
    )

    def __init__(self) -> None:
        self.position: int | None = None  # next offset to hand to the application
        self.fetch_position: int | None = None  # next offset to ask the broker for (may run ahead: prefetch)
        self.buffer: deque[tuple[bytes, int]] = deque()  # raw fetched data waiting to be decoded
        self.paused = False
        self.high_watermark = -1
        self.log_start_offset = -1
        # One fetched chunk decoded but not yet all handed out (poll returns at most max.poll.records).
        self.decoded: list[ConsumerRecord] = []
        self.decoded_at = 0
        self.decoded_next = 0

    def clear(self) -> None:
        self.buffer.clear()
        self.decoded = []
        self.decoded_at = 0


class AsyncConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "kl-consumer",
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52428800,
        max_partition_fetch_bytes: int = 1048576,
        max_poll_records: int = 500,
        request_timeout_ms: int = 30000,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto.offset.reset must be earliest, latest or none, got {auto_offset_reset!r}")
        self.client = KafkaLiteClient(bootstrap_servers, client_id, request_timeout_ms)
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._fetches: dict[int, asyncio.Task] = {}
        self._data_ready = asyncio.Event()
        self._errors: list[Exception] = []
        self._closed = False

    async def start(self) -> None:
        await self.client.refresh_metadata([])

    # --- assignment and positions ---------------------------------------------

    async def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        # A broker's metadata can trail the controller's for a moment after a topic is created: retry briefly
        # before calling the topic unknown.
        deadline = time.monotonic() + ASSIGN_METADATA_WAIT_S
        for tp in tps:
            while True:
                try:
                    await self.client.leader_for(tp.topic, tp.partition)
                    break
                except KafkaLiteError as e:
                    if not e.retriable or time.monotonic() >= deadline:
                        if e.code == ErrorCode.LEADER_NOT_AVAILABLE:
                            break  # assigned anyway: fetching starts when a leader appears
                        raise
                    self.client.metadata.updated_at = 0
                    await asyncio.sleep(self.client.retry_backoff)
                    await self.client.refresh_metadata({tp.topic})
        self._states = {tp: self._states.get(tp) or _PartitionState() for tp in tps}

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def _state(self, tp: TopicPartition | tuple[str, int]) -> _PartitionState:
        st = self._states.get(TopicPartition(*tp))
        if st is None:
            raise KafkaLiteError(f"partition {tp[0]}-{tp[1]} is not assigned to this consumer")
        return st

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        st = self._state(tp)
        st.position = st.fetch_position = offset
        st.clear()

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._reset(tps or tuple(self._states), EARLIEST)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        await self._reset(tps or tuple(self._states), LATEST)

    async def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        st = self._state(tp)
        if st.position is None:
            await self._reset_by_policy([TopicPartition(*tp)])
        return st.position  # type: ignore[return-value]

    async def list_offsets(self, tps: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """Kafka's ListOffsets: EARLIEST (-2), LATEST (-1) or the first offset at/after a timestamp (-1 if none)."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            by_leader.setdefault(await self.client.leader_for(tp.topic, tp.partition), []).append(tp)
        out: dict[TopicPartition, int] = {}
        for leader, group in by_leader.items():
            topics: dict[str, list] = {}
            for tp in group:
                topics.setdefault(tp.topic, []).append([tp.partition, timestamp])
            body = await self.client.request(
                leader, ApiKey.LIST_OFFSETS, {"topics": [[t, p] for t, p in topics.items()]}
            )
            if body.get("error_code"):
                raise error_for(body["error_code"], body.get("error_message", ""))
            for topic, rows in body["topics"]:
                for partition, err, _ts, offset in rows:
                    if err:
                        raise error_for(err, f"list offsets for {topic}-{partition}")
                    out[TopicPartition(topic, partition)] = offset
        return out

    async def _reset(self, tps: Iterable[TopicPartition], which: int) -> None:
        tps = [TopicPartition(*tp) for tp in tps]
        offsets = await self.list_offsets(tps, which)
        for tp, off in offsets.items():
            self.seek(tp, off)

    async def _reset_by_policy(self, tps: list[TopicPartition]) -> None:
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(f"no position for {tps} and auto.offset.reset=none")
        await self._reset(tps, EARLIEST if self.auto_offset_reset == "earliest" else LATEST)

    # --- fetching --------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from assigned partitions, in offset order per partition; [] on timeout."""
        max_records = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        if self._errors:
            raise self._errors.pop(0)
        need = [tp for tp, st in self._states.items() if st.position is None]
        if need:
            await self._reset_by_policy(need)
        while True:
            records = self._drain(max_records)
            self._send_fetches()
            if records:
                return records
            if self._errors:
                raise self._errors.pop(0)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                return []
            self._data_ready.clear()
            try:
                await asyncio.wait_for(self._data_ready.wait(), remaining)
            except TimeoutError:
                pass

    def _drain(self, max_records: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for tp, st in self._states.items():
            while len(out) < max_records and not st.paused:
                if st.decoded_at < len(st.decoded):
                    take = st.decoded[st.decoded_at : st.decoded_at + max_records - len(out)]
                    st.decoded_at += len(take)
                    out += take
                    st.position = take[-1][2] + 1 if st.decoded_at < len(st.decoded) else st.decoded_next
                    continue
                if not st.buffer:
                    break
                data, start = st.buffer.popleft()
                if start != st.position:  # a seek happened since this was fetched
                    continue
                st.decoded, st.decoded_next = decode_records(tp.topic, tp.partition, data, st.position)
                st.decoded_at = 0
                if not st.decoded:
                    st.position = st.decoded_next
            if len(out) >= max_records:
                break
        return out

    def _send_fetches(self) -> None:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, st in self._states.items():
            # Prefetch one response ahead per partition: decode the current one while the next is in flight.
            if st.fetch_position is None or st.paused or len(st.buffer) > 1:
                continue
            leader = self.client.metadata.leader(tp.topic, tp.partition)
            if leader is None:
                asyncio.ensure_future(self._refresh([tp.topic]))
                continue
            by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            task = self._fetches.get(leader)
            if task is not None and not task.done():
                continue
            self._fetches[leader] = asyncio.ensure_future(self._fetch(leader, tps))

    async def _refresh(self, topics: list[str]) -> None:
        try:
            await self.client.refresh_metadata(topics)
        except KafkaLiteError as e:
            log.warning("metadata refresh failed: %s", e)
            await asyncio.sleep(self.client.retry_backoff)

    async def _fetch(self, leader: int, tps: list[TopicPartition]) -> None:
        topics: dict[str, list] = {}
        positions = {}
        for tp in tps:
            st = self._states[tp]
            positions[tp] = st.fetch_position
            topics.setdefault(tp.topic, []).append(
                [tp.partition, st.fetch_position, self.max_partition_fetch_bytes, -1]
            )
        body = {
            "replica_id": -1,
            "max_wait_ms": self.fetch_max_wait_ms,
            "min_bytes": self.fetch_min_bytes,
            "max_bytes": self.fetch_max_bytes,
            "topics": [[t, p] for t, p in topics.items()],
        }
        try:
            resp = await self.client.request(
                leader, ApiKey.FETCH, body, timeout=self.client.request_timeout + self.fetch_max_wait_ms / 1000
            )
        except KafkaLiteError as e:
            log.warning("fetch from broker %d failed: %s", leader, e)
            for tp in tps:
                self.client.invalidate(tp.topic)
            await self._refresh(list({tp.topic for tp in tps}))
            self._data_ready.set()
            return
        if resp.get("error_code"):
            self._errors.append(error_for(resp["error_code"], resp.get("error_message", "")))
            self._data_ready.set()
            return
        for topic, rows in resp.get("topics", []):
            for partition, err, hw, _lso, log_start, records, message, *_ in rows:
                tp = TopicPartition(topic, partition)
                st = self._states.get(tp)
                if st is None or st.fetch_position != positions.get(tp):
                    continue  # unassigned or sought meanwhile
                st.high_watermark, st.log_start_offset = hw, log_start
                if err == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._handle_out_of_range(tp, st)
                elif err:
                    e = error_for(err, message or "")
                    if e.retriable:
                        self.client.invalidate(topic)
                        await self._refresh([topic])
                    else:
                        self._errors.append(e)
                elif records:
                    st.buffer.append((records, st.fetch_position))
                    st.fetch_position = _next_offset(records)
        self._data_ready.set()

    async def _handle_out_of_range(self, tp: TopicPartition, st: _PartitionState) -> None:
        if self.auto_offset_reset == "none":
            self._errors.append(
                OffsetOutOfRangeError(
                    f"offset {st.fetch_position} of {tp.topic}-{tp.partition} is out of range "
                    f"[{st.log_start_offset}, {st.high_watermark}] and auto.offset.reset=none"
                )
            )
            st.fetch_position = None
            return
        log.info(
            "offset %s of %s-%d out of range; resetting to %s",
            st.fetch_position,
            tp.topic,
            tp.partition,
            self.auto_offset_reset,
        )
        await self._reset([tp], EARLIEST if self.auto_offset_reset == "earliest" else LATEST)

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._state(tp).high_watermark

    async def close(self) -> None:
        self._closed = True
        for t in self._fetches.values():
            t.cancel()
        await self.client.close()


def _next_offset(records: bytes) -> int:
    nxt = -1
    for _, h in batch_fmt.iter_batches(records):
        nxt = h.next_offset
    return nxt
