"""KIP-890 part 1: a partition leader verifies a transaction's first batch on a partition with its coordinator.

Without it a produce that arrives late (its transaction aborted by timeout meanwhile, or a client that never added
the partition) would open a transaction on the partition that no coordinator will ever end: a hanging transaction,
whose first offset holds the last stable offset (and every read_committed consumer) back for good.

So, with `transaction.partition.verification.enable` (Kafka's name, default true), when a produce carries a
transactional batch of a producer with no transaction open on the partition, the leader first asks the coordinator
of the request's transactional id (the leader of its `__transaction_state` partition) with AddPartitionsToTxn v4+
`verify_only`, a broker's request, whether the partition is in that producer's ongoing transaction. Only a yes lets
the batch be appended; otherwise the produce is answered as Kafka answers it (INVALID_TXN_STATE; a fenced epoch
INVALID_PRODUCER_EPOCH; a coordinator moving or busy NOT_ENOUGH_REPLICAS, which every producer retries).

Once the first batch is appended the open transaction vouches for the later ones, so only the first batch of a
transaction per partition pays the round trip. Between the question and the append, a marker may end the
transaction: the producer state's verification guard (Kafka's VerificationStateEntry) is retired by the marker,
and an append holding a retired guard is refused (broker/replica/producer_state.py check_append).

The questions for one coordinator asked in the same turn of the event loop go in one request (Kafka's
AddPartitionsToTxnManager batches them per coordinator node likewise): librdkafka sends a ProduceRequest per
partition, so a transaction's first batches reach a leader as several requests at once, and each asking on its own
cost the coordinator one round trip per partition and kept the leader's appends apart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from broker.metadata.naming import TXN_TOPIC
from broker.transaction.records import partition_for
from net import batch as batch_fmt
from net.errors import ErrorCode
from net.schema.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)

if TYPE_CHECKING:
    from broker.metadata.image import MetadataImage
    from broker.replica.partition import Partition

log = logging.getLogger("kafkalite.transaction")
TopicPartition = tuple[str, int]
# The coordinator of a transactional id answers AddPartitionsToTxn: in-process when it is this broker.
SendVerify = Callable[[int, AddPartitionsToTxnRequest], Awaitable[AddPartitionsToTxnResponse]]
VERIFY_TIMEOUT_S = 10.0
# A produce's guards when none of its batches was verified (verification on: transactional batches must then
# belong to a transaction already open on their partition).
NO_GUARDS: Mapping[TopicPartition, Mapping[int, object]] = MappingProxyType({})
# What a producer cannot act on, translated as Kafka's ReplicaManager does: a coordinator that moves, loads or is
# completing the previous transaction is worth a retry, which every producer does for NOT_ENOUGH_REPLICAS.
_RETRIABLE = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


@dataclass(slots=True)
class FirstBatch:
    """A partition's transactional batch of a producer with no transaction open there: to be verified."""

    producer_id: int
    producer_epoch: int
    guard: object


def produce_error(code: int) -> int:
    """The produce answer for a coordinator's verification error (Kafka's AddPartitionsToTxnManager and
    ReplicaManager translations)."""
    if code == ErrorCode.PRODUCER_FENCED:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)  # what producers expect from a produce
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return int(ErrorCode.INVALID_TXN_STATE)  # a client is never shown the brokers' authorization
    if code in _RETRIABLE:
        return int(ErrorCode.NOT_ENOUGH_REPLICAS)
    return code


class TransactionVerifier:
    def __init__(
        self,
        partitions: Mapping[TopicPartition, "Partition"],
        image: Callable[[], "MetadataImage"],
        num_txn_partitions: int,
        send: SendVerify,
    ) -> None:
        self._partitions = partitions
        self._image = image
        self.num_txn_partitions = num_txn_partitions
        self._send = send
        # Questions of this loop turn, per coordinator, sent together at its end (_flush): per transaction
        # (id, producer id, epoch), the partitions asked and the futures of their askers.
        self._pending: dict[int, dict[tuple[str, int, int], _Question]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def first_batches(
        self, transactional_id: str | None, entries: Mapping[TopicPartition, bytes]
    ) -> dict[TopicPartition, FirstBatch]:
        """The partitions of a produce whose transactional batch needs the coordinator's word, each with the
        guard it will hold. A request without a transactional id verifies nothing: its transactional batches
        are refused at the append unless their transaction is already open (Kafka's sentinel guard)."""
        if transactional_id is None:
            return {}
        out: dict[TopicPartition, FirstBatch] = {}
        for tp, records in entries.items():
            p = self._partitions.get(tp)
            if p is None or p.leader_state is None or len(records) < batch_fmt.HEADER_SIZE:
                continue  # the append answers NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION / CORRUPT_MESSAGE
            # The first batch's header only: a producer's batches in one produce are all of one producer, and a
            # transactional batch after a non-transactional one finds no guard at the append and is refused.
            h = batch_fmt.parse_header(records)
            if not h.is_transactional or h.is_control:
                continue
            state = p.producer_state
            if not state.has_ongoing_transaction(h.producer_id):
                now = int(time.time() * 1000)  # wall clock, as producer expiry (Partition.tick) compares it
                guard = state.verification_guard(h.producer_id, h.producer_epoch, now)
                out[tp] = FirstBatch(h.producer_id, h.producer_epoch, guard)
        return out

    async def verify(
        self, transactional_id: str, batches: Mapping[TopicPartition, FirstBatch]
    ) -> tuple[dict[TopicPartition, dict[int, object]], dict[TopicPartition, int]]:
        """Ask the coordinator: (the guards of the verified partitions, the produce error of the others)."""
        by_producer: dict[tuple[int, int], list[TopicPartition]] = defaultdict(list)
        for tp, b in batches.items():
            by_producer[(b.producer_id, b.producer_epoch)].append(tp)
        if len(by_producer) == 1:  # the usual case: awaited here, not in a task of its own (a loop turn later)
            [((pid, epoch), tps)] = by_producer.items()
            answers = [await self._ask(transactional_id, pid, epoch, tps)]
        else:
            answers = await asyncio.gather(
                *(self._ask(transactional_id, pid, epoch, tps) for (pid, epoch), tps in by_producer.items())
            )
        guards: dict[TopicPartition, dict[int, object]] = {}
        refused: dict[TopicPartition, int] = {}
        for codes in answers:
            for tp, code in codes.items():
                if code:
                    refused[tp] = code
                else:
                    guards[tp] = {batches[tp].producer_id: batches[tp].guard}
        return guards, refused

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker leading the id's __transaction_state partition, -1 if none (or no such topic yet: then no
        transaction was ever begun)."""
        info = self._image().topics.get(TXN_TOPIC)
        if info is None:
            return -1
        state = info.partitions.get(partition_for(transactional_id, self.num_txn_partitions))
        return state.leader if state is not None else -1

    async def _ask(self, tid: str, pid: int, epoch: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The coordinator's answer for `tps` of (tid, pid, epoch): a produce error code per partition (0: verified).
        Joins the question to the others of this loop turn for the same coordinator (one request at its end)."""
        coordinator = self.coordinator_of(tid)
        if coordinator < 0:
            return dict.fromkeys(tps, produce_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        pending = self._pending.get(coordinator)
        if pending is None:
            pending = self._pending[coordinator] = {}
            asyncio.get_running_loop().call_soon(self._flush, coordinator)
        question = pending.get((tid, pid, epoch))
        if question is None:
            question = pending[(tid, pid, epoch)] = _Question()
        question.partitions.update(tps)
        fut: asyncio.Future[dict[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        question.askers.append(fut)
        codes = await fut
        return {tp: codes[tp] for tp in tps}

    def _flush(self, coordinator: int) -> None:
        """Send this turn's questions to `coordinator`: one request per distinct transactional id in it (an id asked
        for two producers or epochs at once, a zombie and its successor, goes in a second request: the answers are
        told apart by transactional id)."""
        pending = self._pending.pop(coordinator, {})
        requests: list[dict[str, tuple[int, int, _Question]]] = []
        for (tid, pid, epoch), question in pending.items():
            for request in requests:
                if tid not in request:
                    request[tid] = (pid, epoch, question)
                    break
            else:
                requests.append({tid: (pid, epoch, question)})
        for request in requests:
            task = asyncio.ensure_future(self._send_one(coordinator, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send_one(self, coordinator: int, questions: dict[str, tuple[int, int, "_Question"]]) -> None:
        """One AddPartitionsToTxn `verify_only` request to `coordinator`; each asker gets its partitions' codes."""
        transactions = []
        for tid, (pid, epoch, question) in questions.items():
            by_topic: dict[str, list[int]] = defaultdict(list)
            for t, q in sorted(question.partitions):
                by_topic[t].append(q)
            transactions.append(
                AddPartitionsToTxnTransaction(
                    transactional_id=tid,
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=True,
                    topics=tuple(AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                )
            )
        # Unanswered (the coordinator down or unreachable, or this broker stopping): the producer retries.
        answer = AddPartitionsToTxnResponse(error_code=int(ErrorCode.NETWORK_EXCEPTION))
        try:
            async with asyncio.timeout(VERIFY_TIMEOUT_S):  # not wait_for: no task of its own, a turn sooner
                answer = await self._send(coordinator, AddPartitionsToTxnRequest(transactions=tuple(transactions)))
        except Exception as e:  # noqa: BLE001
            log.debug("verifying %s with broker %d failed: %s", sorted(questions), coordinator, e)
        finally:  # every asker is answered, whatever happened to the request
            for tid, (_pid, _epoch, question) in questions.items():
                codes = _codes(answer, tid, question.partitions)
                for fut in question.askers:
                    if not fut.done():
                        fut.set_result(codes)


@dataclass(slots=True)
class _Question:
    """The partitions of one transaction (id, producer id, epoch) asked about in a loop turn, and who asked."""

    partitions: set[TopicPartition] = field(default_factory=set)
    askers: list["asyncio.Future[dict[TopicPartition, int]]"] = field(default_factory=list)


def _codes(answer: AddPartitionsToTxnResponse, tid: str, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
    """The produce error per partition of `tps` in the coordinator's answer for `tid` (0: verified)."""
    if answer.error_code:
        return dict.fromkeys(tps, produce_error(answer.error_code))
    codes = dict.fromkeys(tps, int(ErrorCode.INVALID_TXN_STATE))  # a partition not answered is not verified
    for result in answer.results_by_transaction:
        if result.transactional_id != tid:
            continue
        for topic in result.topic_results:
            for r in topic.results_by_partition:
                if (topic.name, r.partition_index) in codes:
                    codes[(topic.name, r.partition_index)] = produce_error(r.partition_error_code)
    return codes
