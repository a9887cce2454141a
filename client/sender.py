"""Sender: the producer's background task (Kafka's Sender), on the event loop.

It drains closed or lingered batches from the RecordAccumulator, one in-flight request per partition (so
retries keep order) carrying ONE record batch of it, as Kafka's drain: the answer's one base_offset is then
every record's offset base, a retry's duplicate's too. The batches queued behind a request in flight, at
most `max.in.flight.requests.per.connection` (<= 5 with idempotence) of them, go next as one record batch
(ProducerBatch.merged: under load the broker appends fewer, larger batches, one request per partition per
round trip as before); a retried batch goes alone, with its bytes. It stamps idempotent batches with the
producer id and sequence numbers, groups partitions by leader into Produce requests of at most
`max.request.size`, and settles every batch: delivered, retried
(KIP-580 backoff, at once when the metadata names a new leader) or failed with its outcome
("not_written" or "unknown", client/outcome.py). The AsyncProducer (client/producer.py) partitions and
appends; this sends.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from typing import Any, Awaitable, Callable

from client.accumulator import ProducerBatch, RecordAccumulator
from client.cluster import KafkaLiteClient
from client.config import ProducerConfig
from client.outcome import NOT_WRITTEN, UNKNOWN, FailedRecord, proves_not_appended, with_outcome
from client.sequences import Sequences
from client.transactions import IllegalTransactionStateError, TransactionAbortedError, TransactionManager
from net.compression import codec_id
from net.errors import ErrorCode, KafkaLiteError, RequestTimedOutError, error_for
from net.messages import encode as encode_message
from net.protocol import TYPED_SINCE, ApiKey
from net.retry import Backoff
from net.schema.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData

log = logging.getLogger("kafkalite.producer")

# A merged batch stays within Kafka's default max.message.bytes (1 MiB + 12) whatever max.request.size says; a
# topic whose max.message.bytes is lower may still refuse it, and then its batches go one by one (_split).
MERGED_MAX = 1_048_576
# What a topic answers a batch larger than its max.message.bytes, or than its segment.bytes (never appended).
TOO_LARGE = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})


class Sender:
    def __init__(
        self,
        cfg: ProducerConfig,
        acks: int,
        client: KafkaLiteClient,
        accumulator: RecordAccumulator,
        unresolved: Callable[[], bool],
        resolve: Callable[[], Awaitable[None]],
        txn: TransactionManager | None = None,
    ) -> None:
        """`unresolved` says whether records wait for their topic's partition count, or the known counts are
        due for a refresh (metadata.max.age.ms); `resolve` fetches the metadata (the producer's side: it
        partitions them once the count is known)."""
        self.acks = acks
        self.linger = cfg.linger_ms / 1000
        self.codec = codec_id(cfg.compression_type)
        self.retries = cfg.retries
        self.retry_backoff = cfg.retry_backoff_ms / 1000
        # A batch's consecutive failures (since its last new leader) set its wait: net/retry.py, Kafka's KIP-580.
        self._backoff = Backoff(cfg.retry_backoff_ms, cfg.retry_backoff_max_ms)
        self.delivery_timeout = cfg.delivery_timeout_ms / 1000
        self.request_timeout = cfg.request_timeout_ms / 1000
        self.max_request_size = cfg.max_request_size
        # A transactional producer is idempotent too (Kafka requires it); its epoch is the coordinator's.
        self.txn = txn
        self.idempotent = (cfg.enable_idempotence and acks == -1) or txn is not None
        self._adding: asyncio.Task[None] | None = None  # AddPartitionsToTxn in flight
        self.max_in_flight = cfg.max_in_flight_requests_per_connection
        self.client = client
        self.accumulator = accumulator
        self._unresolved = unresolved
        self._resolve = resolve
        self._inflight: set[tuple[str, int]] = set()
        # Per partition, the largest merged batch its topic is known to take: set when one was refused as too
        # large (_split), so that later merges stay within what was accepted instead of being refused again.
        self._merge_limit: dict[tuple[str, int], int] = {}
        self.sequences = Sequences()
        # Partitions waiting for a different leader than the one that failed them (None: no leader known).
        self._failed_leader: dict[tuple[str, int], int | None] = {}
        self._watching: set[str] = set()  # topics with a running _refresh_quietly poll
        self.failures: list[FailedRecord] = []  # since the last flush
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event  # start() makes both events, in the loop that runs the sender
        self._wake_pending = False
        self._task: asyncio.Task[None] | None = None
        self.flushing = 0
        self.closing = False
        self._idle: asyncio.Event
        self.on_batch_complete: Callable[[ProducerBatch, float], None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self.accumulator.on_batch_full = self.wakeup_threadsafe
        self.accumulator.on_new_batch = self.wakeup_threadsafe
        if self.idempotent and self.txn is None:  # a transactional producer's comes from init_transactions()
            await self._init_producer_id()
        self._task = asyncio.create_task(self._run())

    async def _init_producer_id(self) -> None:
        body = await self.client.request(None, ApiKey.INIT_PRODUCER_ID, {})
        if body.get("error_code"):
            raise error_for(body["error_code"], body.get("error_message", ""))
        self.sequences.reset(body["producer_id"], body["producer_epoch"])

    @property
    def producer_id(self) -> int:
        return self.sequences.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.sequences.epoch

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def busy(self) -> bool:
        """Records buffered, in flight, or waiting for their topic's metadata."""
        return self.accumulator.has_pending() or bool(self._inflight) or self._unresolved()

    def wakeup_threadsafe(self) -> None:
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

    # --- the loop ----------------------------------------------------------------

    async def _run(self) -> None:
        wake = self._wake
        while True:
            self._wake_pending = False
            wake.clear()
            try:
                if self._unresolved():
                    await self._resolve()
                if self.sequences.bump_requested and self.txn is None:  # the epoch is exhausted: a new producer id
                    await self._init_producer_id()
                self._send_ready()
            except Exception:
                log.exception("sender iteration failed")
            busy = self.busy
            if self.closing and not busy:
                self._idle.set()
                return
            if busy:
                self._idle.clear()
            else:
                self._idle.set()
            deadline = self.accumulator.next_linger_deadline(self.linger, self._inflight)
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0005)
            if self._unresolved():
                timeout = min(timeout or self.retry_backoff, self.retry_backoff)
            if self._has_retry_waiting():
                timeout = min(timeout or self.retry_backoff, self.retry_backoff)
            try:
                await asyncio.wait_for(wake.wait(), timeout)
            except TimeoutError:
                pass

    def _has_retry_waiting(self) -> bool:
        return any(q and q[0].retry_at > 0 for q in list(self.accumulator.queues.values()))

    def fail_records(self, topic: str, pending: list[tuple[Any, ...]], err: Exception) -> None:
        """Records never sent (their topic never appeared in metadata): not written."""
        exc = with_outcome(err, NOT_WRITTEN, None)
        for value, key, _headers, cb, _ts in pending:
            self.failures.append(FailedRecord(topic, -1, key, value, exc))
            if cb is not None:
                cb(exc, None)

    def _send_ready(self) -> None:
        if self.sequences.bump_requested:
            return  # no new sequence numbers until the new producer id (_run asks for it first)
        now = time.monotonic()
        force = bool(self.flushing or self.closing)
        by_leader: dict[int, list[tuple[tuple[str, int], list[ProducerBatch]]]] = {}
        txn = self.txn
        unadded: list[tuple[str, int]] = []
        for tp in self.accumulator.pending_partitions():
            if tp in self._inflight:
                continue
            if txn is not None and txn.needs(tp):
                unadded.append(tp)  # AddPartitionsToTxn first: a batch may not start a transaction by itself
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
            by_leader.setdefault(leader, []).append((tp, self._one_batch(tp, live)))
        for leader, items in by_leader.items():
            request: list[Any] = []
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
        if unadded and (self._adding is None or self._adding.done()):
            self._adding = asyncio.create_task(self._add_partitions(unadded))

    async def _add_partitions(self, tps: list[tuple[str, int]]) -> None:
        """Add `tps` to the ongoing transaction; their batches wait for it, and fail with its error."""
        assert self.txn is not None
        try:
            await self.txn.add_partitions(tps)
        except Exception as e:
            err = e if isinstance(e, KafkaLiteError) else KafkaLiteError(str(e))
            log.warning("adding %d partitions to the transaction failed: %s", len(tps), err)
            if not isinstance(err, IllegalTransactionStateError):  # else the transaction ended first: none sent
                self.txn.state.fail(err)
            for tp in tps:
                batches = self.accumulator.take_all(tp)
                if batches:
                    self._fail_batches(batches, err)
        finally:
            self.wakeup_threadsafe()

    async def wait_adding(self) -> None:
        """Until the AddPartitionsToTxn in flight (if any) has its answer: an abort must not end the transaction
        before it, or the partitions join the next one (or a transaction the producer believes ended)."""
        if self._adding is not None and not self._adding.done():
            await asyncio.wait([self._adding])

    def abort_undrained(self) -> None:
        """abort_transaction(): batches not sent yet never will be (Kafka's abortUndrainedBatches)."""
        err = TransactionAbortedError("the transaction was aborted before this record was sent")
        # No record joins meanwhile: the transaction state refuses send() once the abort began.
        queued = [
            self.accumulator.take_all(tp) for tp in self.accumulator.pending_partitions() if tp not in self._inflight
        ]
        for batches in queued:
            self._fail_batches(batches, err, aborted=True)

    def _one_batch(self, tp: tuple[str, int], batches: list[ProducerBatch]) -> list[ProducerBatch]:
        """The one batch of `tp` a request carries (Kafka's drain), the rest back to the front of the queue. A
        batch sent before (its bytes and sequence fixed) or renumbered after OUT_OF_ORDER_SEQUENCE_NUMBER goes
        alone; new batches are merged into one record batch of at most max.request.size."""
        n = 1
        if batches[0].encoded is None and not batches[0].attempts and not batches[0].alone:
            size = batches[0].size
            limit = min(self.max_request_size, MERGED_MAX, self._merge_limit.get(tp, MERGED_MAX))
            while n < len(batches):
                b = batches[n]
                if b.encoded is not None or b.attempts or b.alone or size + b.size > limit:
                    break
                size += b.size
                n += 1
        if n < len(batches):
            self.accumulator.requeue_front(tp, batches[n:])
        return [batches[0]] if n == 1 else [ProducerBatch.merged(batches[:n])]

    def _encode(self, tp: tuple[str, int], batches: list[ProducerBatch]) -> bytes:
        """The batches' wire form (the Sender's: one, _one_batch), stamping a new idempotent one with the next
        sequences. A batch numbered in an older epoch goes alone (_one_batch), so a new one is never sent in a
        request with it (a retry of the whole request would have it fenced by the newer epoch); it is renumbered
        only once the broker proved it was not appended (_renumber_after_gap)."""
        parts = []
        for b in batches:
            if b.encoded is None and self.idempotent:
                epoch, seq = self.sequences.stamp(tp, len(b.records))
                b.encoded = b.build(self.codec, self.producer_id, epoch, seq, self.txn is not None)
                b.producer_epoch, b.base_sequence = epoch, seq
            parts.append(b.encode(self.codec))
        return b"".join(parts)

    def _dispatch(self, leader: int, request: list[Any]) -> None:
        asyncio.create_task(self._produce(leader, request))

    async def _produce(self, leader: int, request: list[Any]) -> None:
        topics: dict[str, list[PartitionProduceData]] = {}
        for (topic, p), _, blob in request:
            rows = topics.get(topic)
            if rows is None:
                rows = topics[topic] = []
            rows.append(PartitionProduceData(index=p, records=blob))
        produce = ProduceRequest(
            transactional_id=self.txn.transactional_id if self.txn is not None else None,
            acks=self.acks,
            timeout=datetime.timedelta(seconds=self.request_timeout),
            topic_data=tuple(TopicProduceData(name=t, partition_data=tuple(parts)) for t, parts in topics.items()),
        )
        sent = time.monotonic()
        try:
            conn = await self.client.connection(leader)
            if not conn.connected:  # `request` writes at once, with no await before: checked here, it holds
                raise KafkaLiteError(f"connection to broker {leader} is closed", ErrorCode.NETWORK_EXCEPTION)
        except Exception as e:  # never written to a socket: this attempt cannot have been appended
            err = e if isinstance(e, KafkaLiteError) else KafkaLiteError(str(e), ErrorCode.NETWORK_EXCEPTION)
            for tp, batches, _ in request:
                self._on_partition_error(tp, batches, err, reached_broker=False)
            self.wakeup_threadsafe()
            return
        try:
            if self.acks == 0:
                conn.send(ApiKey.PRODUCE, encode_message(produce), TYPED_SINCE[ApiKey.PRODUCE], expect_response=False)
                await conn.drain()
                for tp, batches, _ in request:
                    self._complete(tp, batches, [-1] * len(batches), sent)
                return
            # A request that failed as a whole is raised here, and fails each partition as a network error does.
            resp: ProduceResponse = await conn.call(produce, timeout=self.request_timeout)
        except Exception as e:
            err = e if isinstance(e, KafkaLiteError) else KafkaLiteError(str(e), ErrorCode.NETWORK_EXCEPTION)
            for tp, batches, _ in request:
                self._on_partition_error(tp, batches, err)
            return
        finally:
            self.wakeup_threadsafe()
        answered = {(t.name, row.index): row for t in resp.responses for row in t.partition_responses}
        for tp, batches, _ in request:
            row = answered.get(tp)
            if row is None:
                self._on_partition_error(tp, batches, KafkaLiteError("partition missing from produce response"))
            elif row.error_code:
                self._on_partition_error(tp, batches, error_for(row.error_code, row.error_message or ""))
            else:
                # One batch of the partition: base_offset is its first record's offset (a retry's duplicate's
                # too: the broker answers with the offset it was first appended at).
                self._complete(tp, batches, [row.base_offset] * len(batches), sent)

    def _complete(self, tp: tuple[str, int], batches: list[ProducerBatch], offsets: list[int], sent: float) -> None:
        self._inflight.discard(tp)
        self._failed_leader.pop(tp, None)  # its leader answers: stop watching the metadata for a new one
        self.accumulator.release(batches)
        hook = self.on_batch_complete
        for b, base in zip(batches, offsets):
            b.complete(base, None)
            if hook is not None:
                hook(b, sent)

    def _on_partition_error(
        self, tp: tuple[str, int], batches: list[ProducerBatch], err: Exception, reached_broker: bool = True
    ) -> None:
        self._inflight.discard(tp)
        if getattr(err, "code", None) in TOO_LARGE and self._split(tp, batches):
            return
        if (
            self.txn is None
            and self.idempotent
            and getattr(err, "code", None) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        ):
            self._renumber_after_gap(tp, batches, err)
            return
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

    def _split(self, tp: tuple[str, int], batches: list[ProducerBatch]) -> bool:
        """A merged batch the topic refused as larger than its max.message.bytes or segment.bytes (never
        appended): its parts go again one by one, each no larger than the producer made it, as Kafka's producer
        splits a batch refused as too large, and later merges of the partition stay within its largest part.
        Their sequences start where the merged batch's did. False: not a merged batch, or its numbers cannot be
        taken back (then it fails as any batch too large does)."""
        m = batches[0]
        if len(batches) != 1 or m.parts is None:
            return False
        if self.idempotent and not self.sequences.give_back(tp, m.producer_epoch, m.base_sequence, len(m.records)):
            return False
        log.info("%s-%d: a merged batch of %d was too large for the topic; sending them one by one", *tp, len(m.parts))
        self._merge_limit[tp] = max(b.size for b in m.parts)
        for b in m.parts:
            b.alone = True
        self.accumulator.requeue_front(tp, m.parts)  # still buffered: released when they complete
        return True

    def _renumber_after_gap(self, tp: tuple[str, int], batches: list[ProducerBatch], err: Exception) -> None:
        """The broker refused `batches` (never appended) because its last sequence for this producer is not
        the one before them: a hole it will never fill. Bump the epoch (unless that was done since they were
        numbered) and send them again at once from sequence 0, as Kafka's idempotent producer does."""
        if batches[0].producer_epoch == self.producer_epoch:
            self.sequences.restart(tp)
        for b in batches:
            b.attempts += 1
        if any(b.attempts > self.retries for b in batches):
            self._fail_batches(batches, err)
            return
        log.warning("%s-%d: %s; renumbering %d batches in a new epoch", tp[0], tp[1], err, len(batches))
        self._forget_numbers(tp, batches)
        self.accumulator.requeue_front(tp, batches)

    def _forget_numbers(self, tp: tuple[str, int], batches: list[ProducerBatch]) -> None:
        """Drop the sequence numbers of `batches` and of those queued behind them: encoded again when sent.
        Only after OUT_OF_ORDER_SEQUENCE_NUMBER: the broker refused the first of them, so none of them can
        have been appended (it appends a producer's sequences only contiguously, and recognises a retry of
        a retained batch), and new numbers cannot duplicate a record."""
        with self.accumulator.lock:
            queued = list(self.accumulator.queues.get(tp) or ())
        for b in [*batches, *queued]:
            b.encoded = None
            b.producer_epoch = -1

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
                if not self._retry_on_new_leader(topic) or self.closing:
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
            self.wakeup_threadsafe()
        return waiting

    def _fail_batches(self, batches: list[ProducerBatch], err: Exception, aborted: bool = False) -> None:
        """Fail `batches` (all of one partition) for good."""
        self.accumulator.release(batches)
        numbered = [b for b in batches if b.producer_epoch >= 0]
        if self.txn is not None:
            # The coordinator owns a transactional producer's epoch: the transaction can only be aborted now,
            # and the abort bumps the epoch when these batches left a hole in a partition's sequences.
            if not aborted:
                self.txn.state.fail(err if isinstance(err, KafkaLiteError) else KafkaLiteError(str(err)))
            if numbered:
                self.txn.epoch_bump_needed = True
        elif self.idempotent and numbered and numbered[0].producer_epoch == self.producer_epoch:
            # Their sequences are a hole the broker will never fill (or, if one was appended, did fill): the
            # partition's new batches start at 0 in a new epoch. Those numbered already keep their numbers:
            # they may have been appended; the broker's answer to them decides (_renumber_after_gap).
            self.sequences.restart((numbered[0].topic, numbered[0].partition))
        for b in batches:
            # A batch whose any attempt may have been appended stays "unknown", whatever the last answer was.
            exc = with_outcome(err, UNKNOWN if b.unknown_cause is not None else NOT_WRITTEN, b.unknown_cause)
            self.failures.extend(FailedRecord(b.topic, b.partition, r[2], r[3], exc) for r in b.records)
            b.complete(-1, exc)

    # --- flush / close -------------------------------------------------------

    async def wait_idle(self) -> None:
        """Until nothing is buffered, in flight or unresolved (flush() forces lingering batches out)."""
        self.flushing += 1
        try:
            while self.busy:
                self._idle.clear()
                self._wake.set()
                await self._idle.wait()
        finally:
            self.flushing -= 1

    async def stop(self) -> None:
        """After a flush: let the loop end (it does once idle), cancelling it if it does not within 1 s."""
        self.closing = True
        self._wake.set()
        task = self._task
        assert task is not None  # stop() follows start()
        try:
            await asyncio.wait_for(task, 1)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
