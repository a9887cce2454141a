"""The consumer's fetcher (Kafka's Fetcher and its record decoding): one Fetch in flight per leader for every
assigned partition it leads, one response prefetched per partition, raw record bytes decoded only when
poll() hands them out (at most max.poll.records at a time), positions moved as they are, fetch errors
sorted into retried (metadata refresh) and raised (from the next poll). client/consumer.py owns the
assignment and positions' meaning (seek, reset, commit); this fetches."""

from __future__ import annotations

import asyncio
import datetime
import gc
import logging
from collections import deque
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any, Awaitable, Callable, Iterator

from client.cluster import KafkaLiteClient
from client.config import ConsumerConfig
from client.topic_partition import TopicPartition
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError, OffsetOutOfRangeError, error_for, topic_error
from net.schema.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic

log = logging.getLogger("kafkalite.consumer")

# How long past fetch.max.wait.ms a fetch may go unanswered before the leaders it asked are looked up again.
FETCH_OVERDUE_S = 1.0
EARLIEST = -2
LATEST = -1


class ConsumerRecord(tuple[Any, ...]):
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
    def headers(self) -> tuple[tuple[str, bytes], ...]:
        return tuple(self[6]) if self[6] else ()

    def __repr__(self) -> str:
        return f"ConsumerRecord({self[0]}-{self[1]}@{self[2]}, key={self[4]!r}, value={self[5]!r})"


_new_record = partial(tuple.__new__, ConsumerRecord)


def decode_records(
    topic: str, partition: int, data: bytes, position: int, pause_gc: bool = False
) -> tuple[list[ConsumerRecord], int]:
    """Records at or after `position` in raw fetched batches, and the next position.

    With `pause_gc` (the consumer's `pause_gc_while_decoding`), Python's cyclic GC is paused while
    the fetch is decoded: it would otherwise rescan the young records, which hold no cycles, over and
    over (decoding is 2-3x slower with it on while an application holds many records). The GC is
    process-wide state, so only a caller that owns the process asks for it (kl-consume, kl-perf)."""
    paused = pause_gc and gc.isenabled()
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
        if h.attributes & batch_fmt.CONTROL:  # a transaction marker: never a record of the application's
            position = h.next_offset
            continue
        if h.magic == batch_fmt.MAGIC and not h.attributes & batch_fmt.TIMESTAMP_LOG_APPEND:
            # Kafka's records, decoded in C by aiokafka: absolute offsets and timestamps as they come.
            batch = [
                _new_record((topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers))
                for r in batch_fmt.iter_records(data, pos, h)
            ]
            if h.base_offset < position:  # only the first batch after a seek into its middle
                batch = [r for r in batch if r[2] >= position]
            out += batch
            position = h.next_offset
            continue
        recs = batch_fmt.records_of(data, pos, h)
        if recs:
            d_off, d_ts, keys, values, headers = zip(*recs)
            if h.attributes & batch_fmt.TIMESTAMP_LOG_APPEND:
                stamps: Iterator[int] = repeat(h.max_timestamp, len(recs))  # the broker's append time, as in Kafka
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


def committed_only(data: bytes, aborted: list[Any]) -> bytes:
    """The batches of a read_committed fetch an application may see (net/batch.py's committed_batches: those of an
    aborted transaction and the markers left out), the bytes as fetched when nothing is left out."""
    if not aborted and not _has_control(data):
        return data
    view = memoryview(data)
    kept = [(pos, h.size) for pos, h in batch_fmt.committed_batches(data, ((int(p), int(f)) for p, f in aborted))]
    if sum(size for _, size in kept) == len(data):
        return data
    return b"".join(bytes(view[pos : pos + size]) for pos, size in kept)


class PartitionFetchState:
    """One assigned partition: its position, what was fetched ahead, what was decoded and not yet handed out."""

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
        # Raw fetched data waiting to be decoded: (batches, the offset asked from, the offset after the fetch).
        # Under read_committed the batches may stop short of that offset: aborted ones and markers are left out.
        self.buffer: deque[tuple[bytes, int, int]] = deque()
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


class Fetcher:
    def __init__(
        self,
        client: KafkaLiteClient,
        cfg: ConsumerConfig,
        reset: Callable[[list[TopicPartition], int], Awaitable[None]],
    ) -> None:
        """`reset(tps, EARLIEST|LATEST)` moves positions the consumer's way (ListOffsets, then seek)."""
        self.client = client
        self._reset = reset
        self.auto_offset_reset = cfg.auto_offset_reset
        self.fetch_min_bytes = cfg.fetch_min_bytes
        self.fetch_max_wait_ms = cfg.fetch_max_wait_ms
        self.fetch_max_bytes = cfg.fetch_max_bytes
        self.max_partition_fetch_bytes = cfg.max_partition_fetch_bytes
        self.pause_gc_while_decoding = cfg.pause_gc_while_decoding
        self.read_committed = cfg.isolation_level == "read_committed"
        self.states: dict[TopicPartition, PartitionFetchState] = {}
        self._fetches: dict[int, asyncio.Task[None]] = {}
        self.data_ready = asyncio.Event()
        self.errors: list[Exception] = []  # raised by the next poll()
        self.closed = False

    def drain(self, max_records: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for tp, st in self.states.items():
            while len(out) < max_records and not st.paused:
                if st.decoded_at < len(st.decoded):
                    take = st.decoded[st.decoded_at : st.decoded_at + max_records - len(out)]
                    st.decoded_at += len(take)
                    out += take
                    st.position = take[-1][2] + 1 if st.decoded_at < len(st.decoded) else st.decoded_next
                    continue
                if not st.buffer:
                    break
                data, start, nxt = st.buffer.popleft()
                if start != st.position:  # a seek happened since this was fetched
                    continue
                st.decoded, decoded_next = decode_records(
                    tp.topic, tp.partition, data, start, self.pause_gc_while_decoding
                )
                st.decoded_next = max(decoded_next, nxt)
                st.decoded_at = 0
                if not st.decoded:
                    st.position = st.decoded_next
            if len(out) >= max_records:
                break
        return out

    def drain_raw(self) -> list[tuple[TopicPartition, bytes, int]]:
        """What drain() would decode, as the broker sent it: (partition, whole record batches, position). The first
        batch may begin before the position (a seek into its middle); positions move past every batch handed out."""
        out = []
        for tp, st in self.states.items():
            if st.paused or st.decoded_at < len(st.decoded):
                continue  # records already decoded are drain()'s to hand out
            while st.buffer:
                data, start, nxt = st.buffer.popleft()
                if start != st.position:  # a seek happened since this was fetched
                    continue
                if data:
                    out.append((tp, data, start))
                st.position = nxt
        return out

    def send_fetches(self) -> None:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, st in self.states.items():
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

    async def _look_for_moved_leaders(self, tps: list[TopicPartition], overdue_leader: int) -> None:
        """While a fetch of `tps` from `overdue_leader` is overdue (cancelled once answered): metadata from another
        broker every FETCH_OVERDUE_S, and send_fetches again (the poll loop runs it when woken) once one of them
        has another leader."""
        topics = sorted({tp.topic for tp in tps})
        await asyncio.sleep(self.fetch_max_wait_ms / 1000 + FETCH_OVERDUE_S)
        while not self.closed:
            try:
                md = await self.client.refresh_metadata(topics, avoid=(overdue_leader,))
            except KafkaLiteError as e:
                log.info("metadata refresh after an overdue fetch from broker %d failed: %s", overdue_leader, e)
            else:
                if any(md.leader(tp.topic, tp.partition) not in (overdue_leader, None) for tp in tps):
                    self.data_ready.set()
            await asyncio.sleep(FETCH_OVERDUE_S)

    async def _refresh(self, topics: list[str]) -> None:
        try:
            await self.client.refresh_metadata(topics)
        except KafkaLiteError as e:
            log.warning("metadata refresh failed: %s", e)
            await asyncio.sleep(self.client.retry_backoff)

    async def _fetch(self, leader: int, tps: list[TopicPartition]) -> None:
        topics: dict[str, list[FetchPartition]] = {}
        positions: dict[TopicPartition, int | None] = {}
        epoch_of = self.client.metadata.leader_epoch
        for tp in tps:
            fetching = self.states[tp]
            position = fetching.fetch_position
            positions[tp] = position
            assert position is not None  # send_fetches asks only for partitions with a position
            topics.setdefault(tp.topic, []).append(
                FetchPartition(
                    partition=tp.partition,
                    # a leader of another epoch refuses rather than serving (KIP-320)
                    current_leader_epoch=epoch_of(*tp),
                    fetch_offset=position,
                    partition_max_bytes=self.max_partition_fetch_bytes,
                )
            )
        request = FetchRequest(
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=self.fetch_max_wait_ms),
            min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes,
            isolation_level=1 if self.read_committed else 0,
            topics=tuple(FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
        )
        call = asyncio.ensure_future(
            self.client.call(leader, request, timeout=self.client.request_timeout + self.fetch_max_wait_ms / 1000)
        )
        # A broker answers a fetch within fetch.max.wait.ms. One that has not, well past it, may be paused or cut
        # off, and the partitions it led may have new leaders it cannot tell us of (a network cut hangs the
        # connection for the whole request timeout). Metadata is looked at again while this fetch waits: any of
        # them that moved is fetched from its new leader at the next send_fetches; this fetch's late answer for
        # them is dropped (their position moved on).
        overdue = asyncio.ensure_future(self._look_for_moved_leaders(tps, leader))
        try:
            resp: FetchResponse = await call
        except KafkaLiteError as e:
            if self.closed:
                return
            log.warning("fetch from broker %d failed: %s", leader, e)
            for tp in tps:
                self.client.invalidate(tp.topic)
            await self._refresh(list({tp.topic for tp in tps}))
            self.data_ready.set()
            return
        finally:
            overdue.cancel()
        if resp.error_code:
            self.errors.append(error_for(resp.error_code, ""))
            self.data_ready.set()
            return
        for t in resp.responses:
            topic = t.topic
            for row in t.partitions:
                partition, err, hw = row.partition_index, row.error_code, row.high_watermark
                tp = TopicPartition(topic, partition)
                st = self.states.get(tp)
                if st is None or st.fetch_position != positions.get(tp):
                    continue  # unassigned or sought meanwhile
                if hw >= 0:  # an error answer carries -1: keep the last known
                    # Under read_committed the end a consumer can reach (its lag's end) is the last stable offset.
                    lso = row.last_stable_offset
                    st.high_watermark = lso if self.read_committed and lso >= 0 else hw
                    st.log_start_offset = row.log_start_offset
                records = row.records
                if err == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._handle_out_of_range(tp, st)
                elif err == ErrorCode.OFFSET_NOT_AVAILABLE:
                    # The right leader, just elected: its high watermark catches up within a fetch round trip.
                    await asyncio.sleep(self.client.retry_backoff)
                elif err:
                    error = topic_error(err, topic, "read", partition)
                    if error.retriable:
                        self.client.invalidate(topic)
                        await self._refresh([topic])
                    else:
                        self.errors.append(error)
                elif records:
                    assert st.fetch_position is not None  # equal to the position this fetch asked from
                    nxt = _next_offset(records)
                    if self.read_committed:
                        aborted = [(a.producer_id, a.first_offset) for a in row.aborted_transactions or ()]
                        records = committed_only(records, aborted)
                    st.buffer.append((records, st.fetch_position, nxt))
                    st.fetch_position = nxt
        self.data_ready.set()

    async def _handle_out_of_range(self, tp: TopicPartition, st: PartitionFetchState) -> None:
        if self.auto_offset_reset == "none":
            self.errors.append(
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

    def close(self) -> None:
        self.closed = True
        for t in self._fetches.values():
            t.cancel()


def _has_control(data: bytes) -> bool:
    return any(h.attributes & batch_fmt.CONTROL for _, h in batch_fmt.iter_batches(data))


def _next_offset(records: bytes) -> int:
    nxt = -1
    for _, h in batch_fmt.iter_batches(records):
        nxt = h.next_offset
    return nxt
