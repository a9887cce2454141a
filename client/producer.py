"""AsyncProducer: partitioning, batching, the sender, retries, idempotence.

`send` never blocks and allocates nothing per message but the record itself;
a sender task on the event loop drains closed or lingered batches, one
in-flight request per partition (so retries keep order) carrying at most
`max.in.flight.requests.per.connection` (<= 5 with idempotence) batches of it,
and the broker de-duplicates retried batches by producer id and sequence
(idempotence): its window of 5 retained batches per producer covers every
batch a retry can carry.

A record that cannot be delivered gets an error with `exc.outcome`, either
"not_written" or "unknown" (client/outcome.py says which errors mean which);
`flush()` raises a `ProduceError` listing every failed record.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from time import time as _time
from typing import Any, Callable

from crc32c import crc32c

from client.accumulator import DeliveryCallback, ProducerBatch, RecordAccumulator
from client.cluster import KafkaLiteClient
from client.config import ClientConfigError, ProducerConfig
from client.outcome import NOT_WRITTEN, UNKNOWN, FailedRecord, proves_not_appended, with_outcome
from net import batch as batch_fmt
from net.compression import codec_id
from net.errors import (
    ErrorCode,
    KafkaLiteError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for,
)
from net.protocol import ApiKey
from net.retry import Backoff

log = logging.getLogger("kafkalite.producer")

Serializer = Callable[[Any], bytes | None]


class ProduceError(KafkaLiteError):
    """Raised by flush()/close() when records could not be delivered since the last flush.

    `failures` lists every failed record with its error and outcome; `not_written` records were not
    appended anywhere (safe to send again), `unknown` ones may be in the log (client/outcome.py)."""

    def __init__(self, failures: list[FailedRecord]) -> None:
        self.failures = failures
        self.not_written = sum(1 for f in failures if f.outcome == NOT_WRITTEN)
        self.unknown = len(failures) - self.not_written
        first = failures[0].error if failures else None
        super().__init__(
            f"{self.not_written} records not written, {self.unknown} records with unknown outcome "
            f"(they may be in the log); first error: {first}",
            getattr(first, "code", None),
        )


def parse_acks(acks: int | str) -> int:
    a = str(acks).strip().lower()
    if a in ("all", "-1"):
        return -1
    if a in ("0", "1"):
        return int(a)
    raise ValueError(f"acks must be all, -1, 0 or 1, got {acks!r}")


def default_partition(key: bytes, num_partitions: int) -> int:
    """Stable across processes and versions: CRC32C of the key bytes (docs/FORMAT.md)."""
    return crc32c(key) % num_partitions


def _to_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"cannot send {type(v).__name__}; give bytes or str, or set a serializer")


class AsyncProducer:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        **config: Any,
    ) -> None:
        """Kafka's producer configs as keyword arguments (linger.ms -> linger_ms): client/config.py
        ProducerConfig declares them, with their defaults and bounds; an unknown or invalid one raises
        InvalidConfigError naming the Kafka key."""
        cfg = ProducerConfig.from_kwargs(config)
        self.config = cfg
        self.acks = parse_acks(cfg.acks)
        self.linger = cfg.linger_ms / 1000
        self.codec = codec_id(cfg.compression_type)
        self.retries = cfg.retries
        self.retry_backoff = cfg.retry_backoff_ms / 1000
        # A batch's consecutive failures (since its last new leader) set its wait: net/retry.py, Kafka's KIP-580.
        self._backoff = Backoff(cfg.retry_backoff_ms, cfg.retry_backoff_max_ms)
        self.delivery_timeout = cfg.delivery_timeout_ms / 1000
        self.request_timeout = cfg.request_timeout_ms / 1000
        self.max_request_size = cfg.max_request_size
        self.max_block = cfg.max_block_ms / 1000
        self.idempotent = cfg.enable_idempotence and self.acks == -1
        max_in_flight_requests_per_connection = cfg.max_in_flight_requests_per_connection
        if self.idempotent and max_in_flight_requests_per_connection > 5:
            # Kafka's rule: the broker retains 5 batches per producer; a retry of more could not be recognised.
            raise ClientConfigError("max.in.flight.requests.per.connection must be at most 5 with enable.idempotence")
        self.max_in_flight = max_in_flight_requests_per_connection
        self.key_serializer = key_serializer or _to_bytes
        self.value_serializer = value_serializer or _to_bytes
        self.client = KafkaLiteClient.from_config(bootstrap_servers, cfg)
        # Kafka's allow.auto.create.topics (producer default true): brokers with auto.create.topics.enable create
        # a topic this producer sends to.
        self.client.allow_auto_topic_creation = cfg.allow_auto_create_topics
        self.accumulator = RecordAccumulator(cfg.batch_size, cfg.buffer_memory)
        self._append = self.accumulator.append
        self._partition_counts: dict[str, int] = {}
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes left before moving on]
        self._sticky_seq = 0
        self._unresolved: dict[str, list[tuple]] = {}
        self._stash_lock = threading.Lock()
        self._unresolved_since: dict[str, float] = {}
        self._inflight: set[tuple[str, int]] = set()
        self._sequences: dict[tuple[str, int], int] = {}
        # Partitions waiting for a different leader than the one that failed them (None: no leader known).
        self._failed_leader: dict[tuple[str, int], int | None] = {}
        self._watching: set[str] = set()  # topics with a running _refresh_quietly poll
        self._producer_id = -1
        self._producer_epoch = -1
        self._failures: list[FailedRecord] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._wake_pending = False
        self._sender_task: asyncio.Task | None = None
        self._flushing = 0
        self._closing = False
        self._idle: asyncio.Event | None = None
        self.on_batch_complete: Callable[[ProducerBatch, float], None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self.accumulator.on_batch_full = self._wakeup_threadsafe
        self.accumulator.on_new_batch = self._wakeup_threadsafe
        await self.client.refresh_metadata([])
        if self.idempotent:
            body = await self.client.request(None, ApiKey.INIT_PRODUCER_ID, {})
            if body.get("error_code"):
                raise error_for(body["error_code"], body.get("error_message", ""))
            self._producer_id, self._producer_epoch = body["producer_id"], body["producer_epoch"]
        self._sender_task = asyncio.create_task(self._run_sender())

    # --- the per-message path ------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue one record. Errors reach `on_delivery(err, None)`, and flush()/close() raise them."""
        if value.__class__ is not bytes:
            value = self.value_serializer(value)
        if key is not None and key.__class__ is not bytes:
            key = self.key_serializer(key)
        ts = timestamp_ms if timestamp_ms is not None else int(_time() * 1000)
        if partition is None:
            n = self._partition_counts.get(topic)
            if n is None:
                if self._stash(topic, value, key, headers, on_delivery, ts):
                    return
                n = self._partition_counts[topic]
            if key is None:
                sticky = self._sticky.get(topic)
                if sticky is None or sticky[1] <= 0:
                    sticky = self._new_sticky(topic, n)
                sticky[1] -= len(value) if value is not None else 0
                partition = sticky[0]
            else:
                partition = crc32c(key) % n
        if headers:
            headers = [(str(k), _to_bytes(v)) for k, v in headers]
        if self._append(topic, partition, ts, key, value, headers or None, on_delivery) and key is None:
            self._sticky.pop(topic, None)

    def _new_sticky(self, topic: str, n: int) -> list[int]:
        # KIP-794 (uniform sticky): stay on one partition for batch.size bytes, then move on; also when its
        # batch closes early. Switching only on a full batch would pin a slow, linger.ms=0 producer (every
        # send its own batch) to one partition forever.
        self._sticky_seq += 1
        sticky = self._sticky[topic] = [self._sticky_seq % n, self.accumulator.batch_size]
        return sticky

    def _stash(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Any, cb: DeliveryCallback | None, ts: int
    ) -> bool:
        """Hold a record until the topic's partition count is known. False if it became known meanwhile.

        The lock orders this against `_publish_count` on the sender's thread, so records stashed before
        the count was known are appended before any record sent after (per-partition order)."""
        with self._stash_lock:
            if topic in self._partition_counts:
                return False
            if self.accumulator.buffered >= self.accumulator.buffer_memory:
                raise KafkaLiteError("producer buffer is full")
            self._unresolved.setdefault(topic, []).append((value, key, headers, cb, ts))
            self._unresolved_since.setdefault(topic, time.monotonic())
        self._wakeup_threadsafe()
        return True

    def _publish_count(self, topic: str, n: int) -> None:
        with self._stash_lock:
            pending = self._unresolved.pop(topic, [])
            self._unresolved_since.pop(topic, None)
            for value, key, headers, cb, ts in pending:
                if key is not None:
                    partition = crc32c(key) % n
                else:
                    sticky = self._sticky.get(topic) or self._new_sticky(topic, n)
                    partition = sticky[0]
                self.send(topic, value, key, partition, headers, cb, ts)
            self._partition_counts[topic] = n

    def _wakeup_threadsafe(self) -> None:
        if self._loop is None or self._wake_pending:
            return
        self._wake_pending = True
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._wake.set()
        else:
            self._loop.call_soon_threadsafe(self._wake.set)

    # --- the sender ----------------------------------------------------------

    async def _run_sender(self) -> None:
        wake = self._wake
        while True:
            self._wake_pending = False
            wake.clear()
            try:
                if self._unresolved:
                    await self._resolve_unresolved()
                self._send_ready()
            except Exception:
                log.exception("sender iteration failed")
            if self._closing and not self.accumulator.has_pending() and not self._inflight and not self._unresolved:
                self._idle.set()
                return
            if not self.accumulator.has_pending() and not self._inflight and not self._unresolved:
                self._idle.set()
            else:
                self._idle.clear()
            deadline = self.accumulator.next_linger_deadline(self.linger, self._inflight)
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0005)
            if self._unresolved:
                timeout = min(timeout or self.retry_backoff, self.retry_backoff)
            if self._has_retry_waiting():
                timeout = min(timeout or self.retry_backoff, self.retry_backoff)
            try:
                await asyncio.wait_for(wake.wait(), timeout)
            except TimeoutError:
                pass

    def _has_retry_waiting(self) -> bool:
        return any(q and q[0].retry_at > 0 for q in list(self.accumulator.queues.values()))

    async def _resolve_unresolved(self) -> None:
        topics = list(self._unresolved)
        try:
            await self.client.refresh_metadata(topics)
        except KafkaLiteError as e:
            log.warning("metadata refresh failed: %s", e)
        now = time.monotonic()
        for topic in topics:
            n = self.client.metadata.partition_count(topic)
            if n:
                self._publish_count(topic, n)
            elif now - self._unresolved_since.get(topic, now) > self.max_block:
                with self._stash_lock:
                    pending = self._unresolved.pop(topic, [])
                    self._unresolved_since.pop(topic, None)
                err = UnknownTopicOrPartitionError(
                    f"topic {topic!r} not present in metadata after {int(self.max_block * 1000)} ms"
                )
                self._fail_records(topic, pending, err)

    def _fail_records(self, topic: str, pending: list[tuple], err: Exception) -> None:
        """Records never sent (their topic never appeared in metadata): not written."""
        exc = with_outcome(err, NOT_WRITTEN, None)
        for value, key, _headers, cb, _ts in pending:
            self._failures.append(FailedRecord(topic, -1, key, value, exc))
            if cb is not None:
                cb(exc, None)

    def _send_ready(self) -> None:
        now = time.monotonic()
        force = bool(self._flushing or self._closing)
        by_leader: dict[int, list[tuple[tuple[str, int], list[ProducerBatch]]]] = {}
        for tp in self.accumulator.pending_partitions():
            if tp in self._inflight:
                continue
            batches = self.accumulator.drain(tp, now, self.linger, force, self.max_in_flight)
            if not batches:
                continue
            live = [b for b in batches if now - b.created <= self.delivery_timeout]
            if len(live) < len(batches):
                expired = [b for b in batches if now - b.created > self.delivery_timeout]
                self._fail_batches(
                    expired,
                    RequestTimedOutError(
                        f"{sum(len(b.records) for b in expired)} records for {tp[0]}-{tp[1]} expired: "
                        f"delivery.timeout.ms={int(self.delivery_timeout * 1000)} passed"
                    ),
                )
            if not live:
                continue
            leader = self.client.metadata.leader(*tp)
            if leader is None:
                self._failed_leader.setdefault(tp, None)  # watch for any leader (see _refresh_quietly)
                self._retry_later(tp, live, None)
                continue
            by_leader.setdefault(leader, []).append((tp, live))
        for leader, items in by_leader.items():
            request: list = []
            size = 0
            for tp, batches in items:
                blob = self._encode(tp, batches)
                if request and size + len(blob) > self.max_request_size:
                    self._dispatch(leader, request)
                    request, size = [], 0
                request.append((tp, batches, blob))
                size += len(blob)
                self._inflight.add(tp)
            if request:
                self._dispatch(leader, request)

    def _encode(self, tp: tuple[str, int], batches: list[ProducerBatch]) -> bytes:
        parts = []
        for b in batches:
            if b.encoded is None and self.idempotent:
                seq = self._sequences.get(tp, 0)
                b.encoded = batch_fmt.build(
                    b.records, b.first_ts, b.max_ts, self.codec, self._producer_id, self._producer_epoch, seq
                )
                self._sequences[tp] = (seq + len(b.records)) & 0x7FFFFFFF
            parts.append(b.encode(self.codec))
        return b"".join(parts)

    def _dispatch(self, leader: int, request: list) -> None:
        asyncio.create_task(self._produce(leader, request))

    async def _produce(self, leader: int, request: list) -> None:
        topics: dict[str, list] = {}
        for (topic, p), _, blob in request:
            topics.setdefault(topic, []).append([p, blob])
        body = {
            "acks": self.acks,
            "timeout_ms": int(self.request_timeout * 1000),
            "topics": [[t, parts] for t, parts in topics.items()],
        }
        sent = time.monotonic()
        try:
            conn = await self.client.connection(leader)
            if not conn.connected:  # `request` writes at once, with no await before: checked here, it holds
                raise KafkaLiteError(f"connection to broker {leader} is closed", ErrorCode.NETWORK_EXCEPTION)
        except Exception as e:  # never written to a socket: this attempt cannot have been appended
            err = e if isinstance(e, KafkaLiteError) else KafkaLiteError(str(e), ErrorCode.NETWORK_EXCEPTION)
            for tp, batches, _ in request:
                self._on_partition_error(tp, batches, err, reached_broker=False)
            self.client.metadata.updated_at = 0
            self._wakeup_threadsafe()
            return
        try:
            if self.acks == 0:
                conn.send(ApiKey.PRODUCE, body, expect_response=False)
                await conn.drain()
                for tp, batches, _ in request:
                    self._complete(tp, batches, [-1] * len(batches), sent)
                return
            resp = await conn.request(ApiKey.PRODUCE, body, timeout=self.request_timeout)
        except Exception as e:
            err = e if isinstance(e, KafkaLiteError) else KafkaLiteError(str(e), ErrorCode.NETWORK_EXCEPTION)
            for tp, batches, _ in request:
                self._on_partition_error(tp, batches, err)
            self.client.metadata.updated_at = 0
            return
        finally:
            self._wakeup_threadsafe()
        if resp.get("error_code"):
            err = error_for(resp["error_code"], resp.get("error_message", ""))
            for tp, batches, _ in request:
                self._on_partition_error(tp, batches, err)
            return
        rows = {(t, row[0]): row for t, parts in resp.get("topics", []) for row in parts}
        for tp, batches, _ in request:
            row = rows.get(tp)
            if row is None:
                self._on_partition_error(tp, batches, KafkaLiteError("partition missing from produce response"))
            elif row[1]:
                self._on_partition_error(tp, batches, error_for(row[1], row[5] or ""))
            else:
                offsets = row[6] if len(row) > 6 and row[6] else _cumulative(row[2], batches)
                self._complete(tp, batches, offsets, sent)

    def _complete(self, tp: tuple[str, int], batches: list[ProducerBatch], offsets: list[int], sent: float) -> None:
        self._inflight.discard(tp)
        self._failed_leader.pop(tp, None)  # its leader answers: stop watching the metadata for a new one
        self.accumulator.release(batches)
        hook = self.on_batch_complete
        for b, base in zip(batches, offsets):
            if b.callbacks:
                b.complete(base, None)
            if hook is not None:
                hook(b, sent)

    def _on_partition_error(
        self, tp: tuple[str, int], batches: list[ProducerBatch], err: Exception, reached_broker: bool = True
    ) -> None:
        self._inflight.discard(tp)
        if reached_broker and not proves_not_appended(err, self.acks):
            for b in batches:
                if b.unknown_cause is None:
                    b.unknown_cause = err
        retriable = isinstance(err, KafkaLiteError) and err.retriable
        if retriable:
            self._failed_leader[tp] = self.client.metadata.leader(*tp)
            self.client.invalidate(tp[0])
            self._retry_later(tp, batches, err)
        else:
            # The user hears of it through the callbacks and flush(); a CLI prints that as its one line.
            log.warning("produce to %s-%d failed: %s", tp[0], tp[1], err)
            self._fail_batches(batches, err)

    def _retry_later(self, tp: tuple[str, int], batches: list[ProducerBatch], err: Exception | None) -> None:
        now = time.monotonic()
        keep = []
        for b in batches:
            b.attempts += 1
            if b.attempts > self.retries or now - b.created > self.delivery_timeout:
                self._fail_batches(
                    [b], err or RequestTimedOutError(f"no leader for {tp[0]}-{tp[1]} within delivery.timeout.ms")
                )
            else:
                b.retry_at = now + self._backoff.delay(max(b.attempts - b.backoff_from, 1))
                keep.append(b)
        if keep:
            if err is not None:
                log.warning("retrying %d batches for %s-%d after: %s", len(keep), tp[0], tp[1], err)
            self.accumulator.requeue_front(tp, keep)
            asyncio.ensure_future(self._refresh_quietly(tp[0]))

    async def _refresh_quietly(self, topic: str) -> None:
        """Refresh `topic`'s metadata, and keep refreshing every retry.backoff.ms while one of its partitions
        waits for a new leader; retry that partition as soon as one is known.

        The data retries back off exponentially (up to 640 ms apart after a few failures), which is right
        for hammering one broker but not for noticing that the controller moved the leadership: polling
        only at those retries made the producer see a new leader up to 640 ms late (Kafka likewise
        refreshes metadata on its own, fixed backoff). The poll is one small Metadata request per
        retry.backoff.ms and ends when the partition has a new leader, an answer, or nothing left to send.
        """
        if topic in self._watching:
            return  # already polling; it will see the new failure
        self._watching.add(topic)
        try:
            while not self.client.closed:
                try:
                    await self.client.refresh_metadata([topic])
                except KafkaLiteError as e:
                    log.debug("metadata refresh failed: %s", e)
                if not self._retry_on_new_leader(topic) or self._closing:
                    return
                await asyncio.sleep(self.retry_backoff)
        finally:
            self._watching.discard(topic)

    def _retry_on_new_leader(self, topic: str) -> bool:
        """Release partitions of `topic` whose leader changed; True while some still wait for a new one."""
        waiting = False
        for tp, failed in list(self._failed_leader.items()):
            if tp[0] != topic:
                continue
            q = self.accumulator.queues.get(tp)
            if not q and tp not in self._inflight:
                del self._failed_leader[tp]  # nothing left to send (delivered, failed or expired)
                continue
            leader = self.client.metadata.leader(*tp)
            if leader is None or leader == failed:
                waiting = True
                continue
            # A new leader is known: retry now rather than at the end of a backoff meant for the old one.
            del self._failed_leader[tp]
            for b in list(q or ()):
                b.retry_at = 0.0
                b.backoff_from = b.attempts
            self._wakeup_threadsafe()
        return waiting

    def _fail_batches(self, batches: list[ProducerBatch], err: Exception) -> None:
        self.accumulator.release(batches)
        for b in batches:
            # A batch whose any attempt may have been appended stays "unknown", whatever the last answer was.
            exc = with_outcome(err, UNKNOWN if b.unknown_cause is not None else NOT_WRITTEN, b.unknown_cause)
            self._failures.extend(FailedRecord(b.topic, b.partition, r[2], r[3], exc) for r in b.records)
            b.complete(-1, exc)

    # --- flush / close -------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait for the outcome; raise if any record failed since the last flush."""
        self._flushing += 1
        try:
            self._idle.clear()
            self._wake.set()
            await asyncio.wait_for(self._wait_idle(), timeout)
        except TimeoutError:
            raise RequestTimedOutError(f"flush did not complete within {timeout}s") from None
        finally:
            self._flushing -= 1
        self._raise_errors()

    async def _wait_idle(self) -> None:
        while self.accumulator.has_pending() or self._inflight or self._unresolved:
            self._idle.clear()
            self._wake.set()
            await self._idle.wait()

    def _raise_errors(self) -> None:
        if self._failures:
            failures, self._failures = self._failures, []
            raise ProduceError(failures)

    async def close(self, timeout: float | None = None) -> None:
        if self._sender_task is None:
            await self.client.close()
            return
        try:
            await self.flush(timeout)
        finally:
            self._closing = True
            self._append = _closed_append
            self._wake.set()
            try:
                await asyncio.wait_for(self._sender_task, 1)
            except (TimeoutError, asyncio.CancelledError):
                self._sender_task.cancel()
            await self.client.close()

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions. A topic the broker is creating (auto.create.topics.enable: the answer is
        LEADER_NOT_AVAILABLE) is waited for up to max.block.ms; one that does not exist fails at once."""
        deadline = time.monotonic() + self.max_block
        while True:
            await self.client.refresh_metadata([topic])
            n = self.client.metadata.partition_count(topic)
            tm = self.client.metadata.topics.get(topic)
            if n is not None or tm is None or tm.error != ErrorCode.LEADER_NOT_AVAILABLE:
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(self.retry_backoff)
        if n is None:
            if tm is not None and tm.error not in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                raise error_for(tm.error, f"topic {topic!r}")  # an invalid name, ...: the broker's reason
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        if topic not in self._partition_counts:
            self._publish_count(topic, n)
        return list(range(n))


def _closed_append(*_: Any) -> bool:
    raise KafkaLiteError("producer is closed")


def _cumulative(base: int, batches: list[ProducerBatch]) -> list[int]:
    out = []
    for b in batches:
        out.append(base)
        base += len(b.records)
    return out
