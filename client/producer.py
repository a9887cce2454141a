"""AsyncProducer: partitioning, serializers, batching into the accumulator; the Sender sends.

`send` never blocks and allocates nothing per message but the record itself: it serializes, picks the
partition (the key's hash, or KIP-794's uniform sticky partitioner) and appends to the RecordAccumulator.
The Sender (client/sender.py) drains it on the event loop, with retries and idempotence.

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

from client.accumulator import DeliveryCallback, Headers, ProducerBatch, RecordAccumulator
from client.cluster import KafkaLiteClient
from client.config import ClientConfigError, ProducerConfig
from client.outcome import NOT_WRITTEN, FailedRecord
from client.sender import Sender
from client.transactions import ConsumerGroupMetadata, State, TransactionManager
from net.errors import ErrorCode, KafkaLiteError, RequestTimedOutError, UnknownTopicOrPartitionError

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
        self.retry_backoff = cfg.retry_backoff_ms / 1000
        self.max_block = cfg.max_block_ms / 1000
        if cfg.enable_idempotence and self.acks == -1 and cfg.max_in_flight_requests_per_connection > 5:
            # Kafka's rule: the broker retains 5 batches per producer; a retry of more could not be recognised.
            raise ClientConfigError("max.in.flight.requests.per.connection must be at most 5 with enable.idempotence")
        self.key_serializer = key_serializer or _to_bytes
        self.value_serializer = value_serializer or _to_bytes
        self.client = KafkaLiteClient.from_config(bootstrap_servers, cfg)
        # Kafka's allow.auto.create.topics (producer default true): brokers with auto.create.topics.enable create
        # a topic this producer sends to.
        self.client.allow_auto_topic_creation = cfg.allow_auto_create_topics
        self.accumulator = RecordAccumulator(cfg.batch_size, cfg.buffer_memory)
        self._append: Callable[
            [str, int, int, bytes | None, bytes | None, Headers | None, DeliveryCallback | None], bool
        ] = self.accumulator.append
        self._partition_counts: dict[str, int] = {}
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes left before moving on]
        self._sticky_seq = 0
        # Records whose topic's partition count is not known yet, by topic (resolved by the sender's loop).
        self._unresolved: dict[str, list[tuple[Any, ...]]] = {}
        self._stash_lock = threading.Lock()
        self._unresolved_since: dict[str, float] = {}
        # metadata.max.age.ms: the partition counts are refreshed this often, so partitions added to a topic
        # (CreatePartitions) are written to, as Kafka's producer does.
        self._counts_checked = time.monotonic()
        self._txn: TransactionManager | None = None
        if cfg.transactional_id is not None:
            if self.acks != -1 or not cfg.enable_idempotence:
                # Kafka's rule: a transactional producer is idempotent, so acks=all.
                raise ClientConfigError("transactional.id needs enable.idempotence=true and acks=all")
            self._txn = TransactionManager(
                self.client, cfg.transactional_id, cfg.transaction_timeout_ms, cfg.max_block_ms
            )
        self.sender = Sender(
            cfg, self.acks, self.client, self.accumulator, self._metadata_due, self._resolve_unresolved, self._txn
        )

    @property
    def idempotent(self) -> bool:
        return self.sender.idempotent

    @property
    def on_batch_complete(self) -> Callable[[ProducerBatch, float], None] | None:
        """Called with each delivered batch and when its request was sent (kl-perf measures latency so)."""
        return self.sender.on_batch_complete

    @on_batch_complete.setter
    def on_batch_complete(self, hook: Callable[[ProducerBatch, float], None] | None) -> None:
        self.sender.on_batch_complete = hook

    async def start(self) -> None:
        await self.client.refresh_metadata([])
        await self.sender.start()

    # --- transactions (KIP-98; client/transactions.py) ------------------------

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise KafkaLiteError("this producer has no transactional.id", ErrorCode.INVALID_TXN_STATE)
        return self._txn

    async def init_transactions(self) -> None:
        """Get this transactional.id's producer id and a new epoch: every older producer with the id is fenced
        and a transaction it left open is aborted. Once, before the first transaction."""
        txn = self._transactions()
        pid, epoch = await txn.init()
        self.sender.sequences.reset(pid, epoch)

    def begin_transaction(self) -> None:
        self._transactions().begin()

    async def send_offsets_to_transaction(self, offsets: Any, group_metadata: ConsumerGroupMetadata | str) -> None:
        """Commit a consumer's positions with this transaction (exactly-once consume-transform-produce):
        `offsets` maps (topic, partition) to the next offset to read, or is a list of TopicPartitions with
        offsets; `group_metadata` is the consumer's group_metadata() (or a group id)."""
        txn = self._transactions()
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        if not isinstance(offsets, dict):
            offsets = {(tp.topic, tp.partition): tp.offset for tp in offsets}
        await txn.send_offsets({(t, p): off for (t, p), off in offsets.items()}, group_metadata)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush the transaction's records, then commit it (EndTxn). If a record failed, the transaction can
        only be aborted: the error is raised and abort_transaction() must follow, as in Kafka."""
        txn = self._transactions()
        if txn.state.state != State.COMMITTING_TRANSACTION:  # else a retry of a commit that timed out
            txn.state.check_in_transaction("commit_transaction")
        try:
            await self.flush(timeout)
        except KafkaLiteError as e:
            txn.state.fail(e)
            raise
        await txn.end(True)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not sent yet are dropped (their callbacks get
        TransactionAbortedError), those in flight are waited for, then EndTxn(abort)."""
        txn = self._transactions()
        txn.state.begin_abort()
        self.sender.abort_undrained()
        try:
            await asyncio.wait_for(self._abort_drained(), timeout)
        except TimeoutError:
            raise RequestTimedOutError(f"abort_transaction did not complete within {timeout}s") from None
        self.sender.failures = []  # records of an aborted transaction: their outcome is the abort
        await txn.end(False)
        if txn.epoch_bump_needed:
            txn.epoch_bump_needed = False
            txn.state.state = State.ABORTING_TRANSACTION
            await self.init_transactions()

    async def _abort_drained(self) -> None:
        await self.sender.wait_idle()
        await self.sender.wait_adding()

    @property
    def transactional_id(self) -> str | None:
        return self._txn.transactional_id if self._txn is not None else None

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        """The producer id and epoch its batches carry (a transactional one's since init_transactions())."""
        return self.sender.producer_id, self.sender.producer_epoch

    # --- the per-message path ------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Headers | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue one record. Errors reach `on_delivery(err, None)`, and flush()/close() raise them."""
        if self._txn is not None:
            self._txn.state.check_send()
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

    async def _refresh_counts(self) -> None:
        """The topics this producer writes to, asked again: a grown topic's new partitions take records from
        now on (keyed records are spread over the new count, as in Kafka)."""
        known = list(self._partition_counts)
        if not known:
            return
        await self.client.refresh_metadata(known)
        for topic in known:
            n = self.client.metadata.partition_count(topic)
            if n and n > self._partition_counts.get(topic, 0):
                with self._stash_lock:
                    self._partition_counts[topic] = n
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
        self.sender.wakeup_threadsafe()
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

    def _metadata_due(self) -> bool:
        """Records wait for a topic's partition count, or the known counts are older than metadata.max.age.ms."""
        return bool(self._unresolved) or time.monotonic() - self._counts_checked >= self.client.metadata_max_age

    async def _resolve_unresolved(self) -> None:
        topics = list(self._unresolved)
        if time.monotonic() - self._counts_checked >= self.client.metadata_max_age:
            self._counts_checked = time.monotonic()
            try:
                await self._refresh_counts()
            except KafkaLiteError as e:
                log.warning("metadata refresh failed: %s", e)
        if not topics:
            return
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
                self.sender.fail_records(topic, pending, err)

    # --- flush / close -------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait for the outcome; raise if any record failed since the last flush."""
        try:
            await asyncio.wait_for(self.sender.wait_idle(), timeout)
        except TimeoutError:
            raise RequestTimedOutError(f"flush did not complete within {timeout}s") from None
        self._raise_errors()

    def _raise_errors(self) -> None:
        if self.sender.failures:
            failures, self.sender.failures = self.sender.failures, []
            raise ProduceError(failures)

    async def close(self, timeout: float | None = None) -> None:
        if not self.sender.started:
            await self.client.close()
            return
        try:
            await self.flush(timeout)
        finally:
            self._append = _closed_append
            await self.sender.stop()
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
            n = len(self.client.metadata.partitions(topic, "write"))  # raises the broker's reason, naming the topic
        if topic not in self._partition_counts:
            self._publish_count(topic, n)
        return list(range(n))


def _closed_append(*_: Any) -> bool:
    raise KafkaLiteError("producer is closed")
