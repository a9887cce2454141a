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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
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
        coordinator = self.coordinator_of(tid)
        if coordinator < 0:
            return dict.fromkeys(tps, produce_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        by_topic: dict[str, list[int]] = defaultdict(list)
        for t, q in tps:
            by_topic[t].append(q)
        request = AddPartitionsToTxnRequest(
            transactions=(
                AddPartitionsToTxnTransaction(
                    transactional_id=tid,
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=True,
                    topics=tuple(AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                ),
            )
        )
        try:
            answer = await asyncio.wait_for(self._send(coordinator, request), VERIFY_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the coordinator down or unreachable: the producer retries
            log.debug("verifying %r with broker %d failed: %s", tid, coordinator, e)
            return dict.fromkeys(tps, int(ErrorCode.NETWORK_EXCEPTION))
        if answer.error_code:
            return dict.fromkeys(tps, produce_error(answer.error_code))
        codes = dict.fromkeys(tps, int(ErrorCode.INVALID_TXN_STATE))  # a partition not answered is not verified
        for result in answer.results_by_transaction:
            for topic in result.topic_results:
                for r in topic.results_by_partition:
                    if (topic.name, r.partition_index) in codes:
                        codes[(topic.name, r.partition_index)] = produce_error(r.partition_error_code)
        return codes
