"""AsyncConsumer: positions, a prefetching fetcher, and record decoding, with manual assignment
(assign) or a consumer group (subscribe; see client/subscription.py and client/group.py). Reads only
up to the high watermark (the broker enforces it).
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
from typing import Any, Callable, Iterable

from client.assignors import assignors_for
from client.cluster import KafkaLiteClient
from client.config import ConsumerConfig
from client.group import ConsumerCoordinator
from client.subscription import ConsumerRebalanceListener, GroupSubscription
from client.topic_partition import TopicPartition
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError, OffsetOutOfRangeError, error_for
from net.protocol import ApiKey

log = logging.getLogger("kafkalite.consumer")

EARLIEST = -2
LATEST = -1
ASSIGN_METADATA_WAIT_S = 2.0


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
    def __init__(self, bootstrap_servers: str, **config: Any) -> None:
        """Kafka's consumer configs as keyword arguments (auto.offset.reset -> auto_offset_reset): client/config.py
        ConsumerConfig declares them, with their defaults and bounds. One is Kafka Lite's own:
        `pause_gc_while_decoding` pauses Python's cyclic garbage collector while a fetch is decoded, 2-3x faster
        for large fetches; off by default, because the collector belongs to the whole process (turn it on when
        your process can afford the pauses' absence, as our CLIs do)."""
        cfg = ConsumerConfig.from_kwargs(config)
        self.config = cfg
        self.client = KafkaLiteClient.from_config(bootstrap_servers, cfg)
        self.group_id = cfg.group_id
        self.enable_auto_commit = cfg.enable_auto_commit
        self.auto_commit_interval_ms = cfg.auto_commit_interval_ms
        self.metadata_max_age_ms = cfg.metadata_max_age_ms
        self._coordinator = (
            ConsumerCoordinator(
                self.client,
                cfg.group_id,
                assignors_for(cfg.partition_assignment_strategy),
                cfg.session_timeout_ms,
                cfg.max_poll_interval_ms,
                cfg.heartbeat_interval_ms,
            )
            if cfg.group_id is not None
            else None
        )
        self._subscription: GroupSubscription | None = None
        self.auto_offset_reset = cfg.auto_offset_reset
        self.fetch_min_bytes = cfg.fetch_min_bytes
        self.fetch_max_wait_ms = cfg.fetch_max_wait_ms
        self.fetch_max_bytes = cfg.fetch_max_bytes
        self.max_partition_fetch_bytes = cfg.max_partition_fetch_bytes
        self.max_poll_records = cfg.max_poll_records
        self.pause_gc_while_decoding = cfg.pause_gc_while_decoding
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._fetches: dict[int, asyncio.Task] = {}
        self._data_ready = asyncio.Event()
        self._errors: list[Exception] = []
        self._closed = False

    async def start(self) -> None:
        await self.client.refresh_metadata([])

    # --- group subscription -----------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the consumer group `group_id` for `topics`, or for every topic whose whole name matches
        the regex `pattern` (topics created later join the subscription at the next metadata refresh)."""
        if self._coordinator is None:
            raise KafkaLiteError("subscribe() needs a group_id; use assign() without one")
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe to either a list of topics or a pattern")
        if self._states and self._subscription is None:
            raise KafkaLiteError("this consumer has manually assigned partitions; it cannot also subscribe")
        if isinstance(topics, str):
            topics = [topics]
        if self._subscription is not None:
            self._subscription.coordinator.rejoin_needed = True
        self._subscription = GroupSubscription(
            self,
            self._add_partitions,
            self._remove_partitions,
            self._coordinator,
            list(topics) if topics is not None else None,
            pattern,
            listener,
            self.enable_auto_commit,
            self.auto_commit_interval_ms,
            self.metadata_max_age_ms,
        )

    def subscription(self) -> list[str]:
        return list(self._subscription.topics) if self._subscription is not None else []

    @property
    def member_id(self) -> str:
        return self._coordinator.member_id if self._coordinator is not None else ""

    @property
    def generation(self) -> int:
        return self._coordinator.generation if self._coordinator is not None else -1

    def tp(self, topic: str, partition: int) -> TopicPartition:
        return TopicPartition(topic, partition)

    def _add_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._states.setdefault(TopicPartition(*tp), _PartitionState())

    def _remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._states.pop(TopicPartition(*tp), None)

    def positions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset to consume of each partition with a known position: what a commit stores."""
        out = {}
        for tp in tps:
            st = self._states.get(TopicPartition(*tp))
            if st is not None and st.position is not None:
                out[TopicPartition(*tp)] = st.position
        return out

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (next offsets to consume), by default the positions of every assigned partition.
        Blocks until the coordinator has them replicated; raises CommitFailedError if the group moved on."""
        coordinator = self._need_group()
        offsets = (
            self.positions(self._states) if offsets is None else {TopicPartition(*k): v for k, v in offsets.items()}
        )
        if self._subscription is not None:
            await self._subscription.commit(offsets)
        else:
            await coordinator.commit({tp: (off, "") for tp, off in offsets.items()}, use_generation=False)

    def commit_async(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        callback: Callable[[dict, Exception | None], Any] | None = None,
    ) -> asyncio.Task:
        """Commit in the background; `callback(offsets, error_or_None)` runs when it is done."""
        self._need_group()
        offsets = self.positions(self._states) if offsets is None else dict(offsets)
        if self._subscription is None:

            async def manual() -> None:
                err = None
                try:
                    await self.commit(offsets)
                except KafkaLiteError as e:
                    err = e
                if callback is not None:
                    callback(offsets, err)

            return asyncio.ensure_future(manual())
        return self._subscription.commit_async(offsets, callback)

    async def committed(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        """The group's committed offset for `tp`, or None if it has none."""
        off = (await self._need_group().fetch_committed([tuple(tp)])).get(tuple(tp), -1)  # type: ignore[arg-type]
        return off if off >= 0 else None

    def _need_group(self) -> ConsumerCoordinator:
        if self._coordinator is None:
            raise KafkaLiteError("committing offsets needs a group_id")
        return self._coordinator

    # --- assignment and positions ---------------------------------------------

    async def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        if self._subscription is not None:
            raise KafkaLiteError("this consumer is subscribed to a group; it cannot also assign partitions")
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
        found = await self.client.list_offsets([TopicPartition(*tp) for tp in tps], timestamp)
        return {TopicPartition(*tp): off for tp, off in found.items()}

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
        if self._subscription is not None:
            await self._subscription.on_poll(deadline)
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
                st.decoded, st.decoded_next = decode_records(
                    tp.topic, tp.partition, data, st.position, self.pause_gc_while_decoding
                )
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
            if self._closed:
                return
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
        if self._subscription is not None:
            try:
                await self._subscription.close()
            except KafkaLiteError as e:
                log.warning("leaving group %s failed: %s", self.group_id, e)
        self._closed = True
        for t in self._fetches.values():
            t.cancel()
        await self.client.close()


def _next_offset(records: bytes) -> int:
    nxt = -1
    for _, h in batch_fmt.iter_batches(records):
        nxt = h.next_offset
    return nxt
