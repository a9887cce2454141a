"""TransactionCoordinator: drives the transaction state (broker/transaction/state.py) in the broker.

It follows the leadership of `__transaction_state` partitions as the GroupCoordinator follows
`__consumer_offsets`: becoming a partition's leader loads that partition's transactional ids (and completes
any transaction it finds half-ended: a coordinator died between PrepareCommit and CompleteCommit); losing it
unloads them. A transition is an acks=all append to the partition, answered once committed. Ending a
transaction is answered once its Prepare* state is committed; then, in the background, its commit or abort
marker goes on every partition in it through WriteTxnMarkers to each partition's leader (Kafka's
TransactionMarkerChannelManager), retried until each has it, in-process when this broker leads the
partition, and Complete* is written. A tick aborts transactions open past their timeout and forgets ids unused
for transactional.id.expiration.ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from broker.metadata.naming import TXN_TOPIC
from broker.transaction import state as st
from broker.transaction.records import build_batch, decode, encode, partition_for, read_records
from broker.transaction.state import TransactionMetadata, TxnError, TxnState
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError
from net.schema.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage
    from broker.replica.partition import Partition
    from broker.replica.replica_manager import ReplicaManager

log = logging.getLogger("kafkalite.transaction")
LOAD_CHUNK_BYTES = 4 * 1024 * 1024
MARKER_RETRY_S = 0.2
WRITE_TIMEOUT_S = 10.0
LOCK_WAIT_S = 5.0  # how long a request waits for the previous transaction's completion

SendMarkers = Callable[[int, WriteTxnMarkersRequest], Awaitable[WriteTxnMarkersResponse]]


def now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        replica_manager: "ReplicaManager",
        image: Callable[[], "MetadataImage"],
        num_partitions: int,
        max_timeout_ms: int,
        id_expiration_ms: int,
        abort_interval_ms: int,
        expire_interval_ms: int,
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self._image = image
        self.num_partitions = num_partitions
        self.max_timeout_ms = max_timeout_ms
        self.id_expiration_ms = id_expiration_ms
        self.abort_interval_ms = abort_interval_ms
        self.expire_interval_ms = expire_interval_ms
        self.send_markers: SendMarkers | None = None  # set by the broker: WriteTxnMarkers to a leader (or here)
        self.txns: dict[str, TransactionMetadata] = {}
        self.epochs: dict[int, int] = {}  # loaded partition -> coordinator epoch (its leader epoch)
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Complete* appended to the log, durable not yet: (the state, its write). Requests for the id act on it.
        self._completing: dict[str, tuple[TransactionMetadata, asyncio.Future[None]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._next_abort_check = 0
        self._next_expire_check = 0

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    # --- leadership of __transaction_state -----------------------------------------------------

    def on_partition_change(self, part: "Partition", change: str) -> None:
        if part.topic != TXN_TOPIC:
            return
        p = part.partition
        if change == "leader":
            self._unload(p)
            self._loading[p] = asyncio.ensure_future(self._load(part))
        elif change in ("follower", "offline", "removed"):
            self._unload(p)

    def _unload(self, p: int) -> None:
        task = self._loading.pop(p, None)
        if task is not None:
            task.cancel()
        if self.epochs.pop(p, None) is not None:
            log.info("no longer transaction coordinator for %s-%d", TXN_TOPIC, p)
        for tid in [t for t in self.txns if self.partition_for(t) == p]:
            del self.txns[tid]
            self._completing.pop(tid, None)

    async def _load(self, part: "Partition") -> None:
        lg = part.log
        offset, end = lg.log_start_offset, lg.log_end_offset
        found: dict[str, TransactionMetadata | None] = {}
        while offset < end:
            data = lg.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
            if not data:
                break
            for key, value in read_records(data):
                d = decode(key, value)
                if d is not None:
                    found[d[0]] = d[1]
            nxt = offset
            for _, h in batch_fmt.iter_batches(data):
                nxt = h.next_offset
            offset = max(nxt, offset + 1)
            await asyncio.sleep(0)
        if part.leader_state is None:
            return
        for tid, meta in found.items():
            if meta is not None:
                self.txns[tid] = meta
        self.epochs[part.partition] = part.leader_epoch
        self._loading.pop(part.partition, None)
        log.info("loaded %s-%d: %d transactional ids", TXN_TOPIC, part.partition, len(self.txns))
        for meta in list(self.txns.values()):
            if self.partition_for(meta.transactional_id) == part.partition and meta.state in (
                TxnState.PREPARE_COMMIT,
                TxnState.PREPARE_ABORT,
            ):
                self._spawn(self._finish_quietly(meta.transactional_id))  # the previous coordinator died mid-way

    def check_owner(self, transactional_id: str) -> None:
        p = self.partition_for(transactional_id)
        if p in self._loading:
            raise TxnError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{TXN_TOPIC}-{p} is loading")
        if p not in self.epochs:
            raise TxnError(ErrorCode.NOT_COORDINATOR, f"broker {self.broker_id} is not the coordinator of {p}")

    # --- writing the state ---------------------------------------------------------------------

    def _append(
        self, meta: TransactionMetadata | None, tid: str, behind: "asyncio.Future[None] | None" = None
    ) -> "asyncio.Future[None]":
        """Append `meta` to __transaction_state now (acks=all); the future completes once it is durable, and
        `meta` is current from then on. NOT_COORDINATOR if the partition's leadership moved meanwhile.
        `behind`: the earlier write (a Complete* appended just before) that must be durable first; it is, once
        this one is (one log, one high watermark), but its outcome decides whether this one applies."""
        p = self.partition_for(tid)
        epoch = self.epochs.get(p)
        tp = (TXN_TOPIC, p)
        results, pending = self.replica_manager.append_records(-1, {tp: build_batch([encode(meta, tid)], now_ms())})

        async def durable() -> None:
            if not results[tp].error and pending:
                await self.replica_manager.wait_for_commit(results, pending, WRITE_TIMEOUT_S)
            err = results[tp].error
            if err or self.epochs.get(p) != epoch:
                code = ErrorCode.NOT_COORDINATOR if err in (0, ErrorCode.NOT_LEADER_OR_FOLLOWER) else ErrorCode(err)
                if code not in (ErrorCode.NOT_COORDINATOR, ErrorCode.REQUEST_TIMED_OUT):
                    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                raise TxnError(code, f"writing {tid!r} to {TXN_TOPIC}-{p}: {results[tp].message or code.name}")
            if behind is not None:
                await behind  # its error is ours: this state was computed from it
            if meta is None:
                self.txns.pop(tid, None)
            else:
                self.txns[tid] = meta

        return asyncio.ensure_future(durable())

    async def _write(self, meta: TransactionMetadata | None, tid: str) -> None:
        """Make `meta` durable in __transaction_state, then current (behind a Complete* being written)."""
        completing = self._completing.get(tid)
        await self._append(meta, tid, completing[1] if completing is not None else None)

    def _current(self, tid: str) -> TransactionMetadata | None:
        """The state a request for `tid` acts on, under its lock: a Complete* appended and not yet durable
        counts (the request's own write goes behind it and is answered only once both are durable)."""
        completing = self._completing.get(tid)
        return completing[0] if completing is not None else self.txns.get(tid)

    # --- the requests ------------------------------------------------------------------------

    async def init_producer_id(self, tid: str, timeout_ms: int, expected: tuple[int, int]) -> tuple[int, int]:
        self.check_owner(tid)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise TxnError(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms {timeout_ms} is not in (0, {self.max_timeout_ms}]: transaction.max.timeout.ms",
            )
        async with self._locked(tid):
            meta = self._current(tid)
            if meta is not None and meta.state == TxnState.ONGOING:
                # A new producer with this id: the old one's transaction is aborted (and the old one fenced).
                await self._end(meta, st.fence_for_abort(meta, now_ms()))
                meta = self._current(tid)
            elif meta is not None and meta.state in st.PREPARING:
                raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{tid!r}: a transaction is being completed")
            nxt = st.init_producer(meta, tid, timeout_ms, secrets.randbits(62), now_ms(), expected)
            await self._write(nxt, tid)
            return nxt.producer_id, nxt.producer_epoch

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions: set[tuple[str, int]]) -> None:
        self.check_owner(tid)
        self._check_not_fenced(tid, pid, epoch)
        async with self._locked(tid):
            meta = self._get(tid)
            nxt = st.add_partitions(meta, pid, epoch, partitions, now_ms())
            if nxt is not None:
                await self._write(nxt, tid)

    def verify_partitions(
        self, tid: str, pid: int, epoch: int, partitions: set[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        """KIP-890's verify_only: which of `partitions` are in the ongoing transaction of (pid, epoch). While the
        transaction is being completed (Prepare*), CONCURRENT_TRANSACTIONS, as Kafka's coordinator answers: the
        leader turns it into a retriable produce error, so a produce racing the commit is retried, not refused."""
        self.check_owner(tid)
        meta = self.txns.get(tid)  # the durable state: an ongoing transaction's partitions are durable in it
        if meta is None:
            raise TxnError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"no producer id is known for {tid!r}")
        st.check_producer(meta, pid, epoch)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{tid!r} has a transaction being completed")
        return partitions & meta.partitions if meta.state == TxnState.ONGOING else set()

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> None:
        """Answered once Prepare* is durable, as Kafka does: the outcome is decided then. The markers and
        Complete* follow in the background; until they are written, requests for this id wait their turn
        (`_locked`) or get CONCURRENT_TRANSACTIONS."""
        self.check_owner(tid)
        self._check_not_fenced(tid, pid, epoch)
        async with self._locked(tid):
            meta = self._get(tid)
            prepared = st.end_transaction(meta, pid, epoch, commit, now_ms())
            if prepared is None:
                return
            await self._write(prepared, tid)
        self._spawn(self._finish_quietly(tid))

    def _check_not_fenced(self, tid: str, pid: int, epoch: int) -> None:
        """A fenced producer is told so at once, before waiting for the id's lock, as Kafka's coordinator checks
        the epoch before any pending transition: while a transaction of the new producer's is being completed
        (markers waiting for a partition leader) a zombie would otherwise be answered CONCURRENT_TRANSACTIONS,
        which clients retry until their own timeout, never learning it is fenced. Producer ids and epochs only
        move forward, so what is fenced now stays fenced."""
        known = self._current(tid)
        if known is not None and (pid != known.producer_id or epoch < known.producer_epoch):
            st.check_producer(known, pid, epoch)

    @contextlib.asynccontextmanager
    async def _locked(self, tid: str) -> AsyncIterator[None]:
        """The id's lock, waited for at most LOCK_WAIT_S: a transaction being completed that long (its
        markers waiting for a partition leader) answers CONCURRENT_TRANSACTIONS, which clients retry."""
        lock = self._locks[tid]
        try:
            # Not wait_for, which acquires in a task of its own: the waiter then resumed turns after the lock was
            # released, behind the replication round of the Complete* just appended, and its own state took a
            # round of its own, where appended in the turn after Complete* both go in one (_finish_quietly).
            async with asyncio.timeout(LOCK_WAIT_S):
                await lock.acquire()
        except TimeoutError:
            raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{tid!r}: a transaction is being completed") from None
        try:
            yield
        finally:
            lock.release()

    def _get(self, tid: str) -> TransactionMetadata:
        meta = self._current(tid)
        if meta is None:
            raise TxnError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"no producer id is known for {tid!r}")
        return meta

    async def _end(self, meta: TransactionMetadata, prepared: TransactionMetadata) -> None:
        """Write Prepare*, every marker, then Complete*. Once Prepare* is durable the outcome is decided: if the
        markers or Complete* fail, they are finished in the background, else the id stayed in Prepare* (every
        InitProducerId answered CONCURRENT_TRANSACTIONS) until this coordinator's partition moved."""
        await self._write(prepared, meta.transactional_id)
        try:
            await self._write_markers(prepared)
            await self._write(st.complete(prepared, now_ms()), meta.transactional_id)
        except (TxnError, KafkaLiteError):
            self._spawn(self._finish_quietly(meta.transactional_id))
            raise

    async def _finish_quietly(self, tid: str) -> None:
        """Markers and Complete* for a Prepare* state, retried until written or until this broker is no longer
        the id's coordinator (the next one loads Prepare* and finishes it).

        The id's lock is held until Complete* is appended, not until it is durable: the next request for the
        id (the producer's next AddPartitionsToTxn, already waiting) appends its state right behind it and is
        answered once both are durable, one replication round instead of two. Nothing is answered earlier than
        before: the markers are durable before Complete* is appended, Complete* before the next state applies."""
        while True:
            async with self._locks[tid]:
                while True:
                    meta = self._current(tid)
                    if meta is None or meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                        return
                    try:
                        await self._write_markers(meta)
                        completed = st.complete(meta, now_ms())
                        durable = self._append(completed, tid)
                        break
                    except (TxnError, KafkaLiteError) as e:
                        if not self._retrying(tid, e):
                            return
                    await asyncio.sleep(MARKER_RETRY_S)
                self._completing[tid] = (completed, durable)
            try:
                await durable
                return
            except (TxnError, KafkaLiteError) as e:
                if not self._retrying(tid, e):
                    return
            finally:
                if tid in self._completing and self._completing[tid][1] is durable:
                    del self._completing[tid]
            await asyncio.sleep(MARKER_RETRY_S)

    def _retrying(self, tid: str, e: Exception) -> bool:
        """Whether completing `tid` is retried after `e`: not once this broker is no longer its coordinator."""
        if self.partition_for(tid) not in self.epochs:
            log.info("completing the transaction of %r is left to the next coordinator: %s", tid, e)
            return False
        log.warning("completing the transaction of %r failed, retrying: %s", tid, e)
        return True

    async def _write_markers(self, meta: TransactionMetadata) -> None:
        """A marker on every partition of the transaction, each through its current leader, until all have one
        (a deleted topic's partitions need none). Leadership of our own partition lost: NOT_COORDINATOR."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        left = set(meta.partitions)
        p = self.partition_for(meta.transactional_id)
        while left:
            if p not in self.epochs:
                raise TxnError(ErrorCode.NOT_COORDINATOR, "lost the coordinator's partition while writing markers")
            image = self._image()
            by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
            for t, q in list(left):
                info = image.topics.get(t)
                ps = info.partitions.get(q) if info is not None else None
                if ps is None:
                    left.discard((t, q))  # the topic is gone: no reader needs its marker
                elif ps.leader >= 0:
                    by_leader[ps.leader].append((t, q))
            done = await asyncio.gather(
                *(self._markers_to(b, tps, meta, commit, self.epochs.get(p, -1)) for b, tps in by_leader.items())
            )
            for written in done:
                left -= written
            if left:
                await asyncio.sleep(MARKER_RETRY_S)

    async def _markers_to(
        self, broker: int, tps: list[tuple[str, int]], meta: TransactionMetadata, commit: bool, coordinator_epoch: int
    ) -> set[tuple[str, int]]:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for t, q in tps:
            by_topic[t].append(q)
        request = WriteTxnMarkersRequest(
            markers=(
                WritableTxnMarker(
                    producer_id=meta.producer_id,
                    producer_epoch=meta.producer_epoch,
                    transaction_result=commit,
                    topics=tuple(
                        WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()
                    ),
                    coordinator_epoch=coordinator_epoch,
                ),
            )
        )
        assert self.send_markers is not None
        try:
            answer = await self.send_markers(broker, request)
        except Exception as e:  # noqa: BLE001 - a broker down or moving: retried through the next leader
            log.debug("WriteTxnMarkers to broker %d failed: %s", broker, e)
            return set()
        # Only a marker appended counts. UNKNOWN_TOPIC_OR_PARTITION is retried, as Kafka's
        # TransactionMarkerRequestCompletionHandler does: a leader restarted and not yet caught up with the metadata
        # knows no topic, and counting its answer as written left the partition's transaction open for good (its
        # last stable offset stuck). A deleted topic is told by this coordinator's own image (_write_markers).
        written: set[tuple[str, int]] = set()
        for m in answer.markers:
            for topic in m.topics:
                for r in topic.partitions:
                    tp = (topic.name, r.partition_index)
                    if r.error_code == 0 and tp in tps:
                        written.add(tp)
        return written

    # --- ticks: timeouts and expiry -------------------------------------------------------------

    def tick(self) -> None:
        now = now_ms()
        if now >= self._next_abort_check:
            self._next_abort_check = now + self.abort_interval_ms
            for meta in list(self.txns.values()):
                if st.timed_out(meta, now):
                    log.info("aborting %r: open for more than %d ms", meta.transactional_id, meta.timeout_ms)
                    self._spawn(self._abort_timed_out(meta.transactional_id))
        if now >= self._next_expire_check:
            self._next_expire_check = now + self.expire_interval_ms
            for meta in list(self.txns.values()):
                if st.expired(meta, now, self.id_expiration_ms):
                    self._spawn(self._expire(meta.transactional_id))

    async def _abort_timed_out(self, tid: str) -> None:
        try:
            async with self._locks[tid]:
                meta = self.txns.get(tid)
                if meta is not None and st.timed_out(meta, now_ms()):
                    await self._end(meta, st.fence_for_abort(meta, now_ms()))
        except (TxnError, KafkaLiteError) as e:
            log.warning("aborting the timed-out transaction of %r failed: %s", tid, e)
        except Exception:
            log.exception("aborting the timed-out transaction of %r failed", tid)
            raise

    async def _expire(self, tid: str) -> None:
        try:
            async with self._locks[tid]:
                meta = self.txns.get(tid)
                if meta is not None and st.expired(meta, now_ms(), self.id_expiration_ms):
                    await self._write(None, tid)
        except (TxnError, KafkaLiteError) as e:
            log.debug("expiring %r failed: %s", tid, e)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for t in [*self._loading.values(), *self._tasks]:
            t.cancel()
