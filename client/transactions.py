"""A transactional producer's side of KIP-98: Kafka's Java TransactionManager.

`TransactionState` is the state machine alone (sans-IO: calls in, the next state or an error out), so its rules
are unit-tested without a broker. `TransactionManager` drives it for an AsyncProducer: it finds the transaction
coordinator (FindCoordinator key_type 1), gets the producer id and epoch for the transactional.id
(InitProducerId, which fences older producers with the same id), adds each partition to the transaction before
its first batch (AddPartitionsToTxn), adds a consumer group's offsets (AddOffsetsToTxn, then TxnOffsetCommit to
the group's coordinator) and ends the transaction (EndTxn). Retriable answers are retried until the producer's
max.block.ms; fatal ones (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED) leave
the producer unusable, as Kafka's do.

`end_transaction` ends a transaction another process left open, knowing its transactional.id, producer id and
epoch (Flink's resumed transactions): the Spark sink's tasks write, its driver commits.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from net.errors import ErrorCode, KafkaLiteError, error_for
from net.schema.add_offsets_to_txn import AddOffsetsToTxnRequest
from net.schema.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from net.schema.describe_transactions import DescribeTransactionsRequest
from net.schema.end_txn import EndTxnRequest
from net.schema.find_coordinator import FindCoordinatorRequest
from net.schema.init_producer_id import InitProducerIdRequest
from net.schema.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

if TYPE_CHECKING:
    from client.cluster import KafkaLiteClient

log = logging.getLogger("kafkalite.producer")

TopicPartition = tuple[str, int]

# FindCoordinator's key types (Kafka's CoordinatorType).
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

# Answers after which the same request is sent again (after a backoff); the coordinator ones find it first.
_RETRY = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
    }
)
_REFIND = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
# Answers after which this producer can do nothing more (Kafka's fatal errors).
FATAL = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
    }
)


class IllegalTransactionStateError(KafkaLiteError):
    """A transactional call out of order (begin without init, commit without begin, ...): Kafka's
    IllegalStateException. Nothing was sent."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionAbortedError(KafkaLiteError):
    """A record of a transaction that was aborted before it was sent: it is not in the log."""

    code = ErrorCode.INVALID_TXN_STATE


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


# Kafka's TransactionManager.State.isTransitionValid, source state -> the states it may move to.
_NEXT: dict[State, frozenset[State]] = {
    State.UNINITIALIZED: frozenset({State.INITIALIZING}),
    State.INITIALIZING: frozenset({State.READY, State.UNINITIALIZED}),
    State.READY: frozenset({State.IN_TRANSACTION, State.INITIALIZING}),
    State.IN_TRANSACTION: frozenset({State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION, State.ABORTABLE_ERROR}),
    State.COMMITTING_TRANSACTION: frozenset({State.READY, State.ABORTABLE_ERROR}),
    State.ABORTING_TRANSACTION: frozenset({State.READY, State.INITIALIZING}),
    State.ABORTABLE_ERROR: frozenset({State.ABORTING_TRANSACTION, State.ABORTABLE_ERROR}),
    State.FATAL_ERROR: frozenset(),
}


class TransactionState:
    """The producer's transaction state and the partitions of the ongoing transaction, sans-IO."""

    def __init__(self) -> None:
        self.state = State.UNINITIALIZED
        self.partitions: set[TopicPartition] = set()  # added to the ongoing transaction
        self.groups: set[str] = set()  # groups whose offsets were added (AddOffsetsToTxn)
        self.last_error: KafkaLiteError | None = None  # why the state is ABORTABLE_ERROR or FATAL_ERROR
        self.commit_pending = False  # EndTxn(commit) sent: a retry of commit_transaction() resends it

    def _move(self, to: State, action: str) -> None:
        if self.state == State.FATAL_ERROR:
            raise self._fatal(action)
        if to not in _NEXT[self.state]:
            if self.state == State.ABORTABLE_ERROR and self.last_error is not None:
                raise IllegalTransactionStateError(
                    f"cannot {action}: the transaction must be aborted after {self.last_error}"
                )
            raise IllegalTransactionStateError(f"cannot {action} in state {self.state.value}")
        self.state = to

    def _fatal(self, action: str) -> KafkaLiteError:
        err = self.last_error or IllegalTransactionStateError("fatal error")
        return error_for(err.code, f"cannot {action}: the producer hit a fatal error: {err}")

    def init(self) -> None:
        self._move(State.INITIALIZING, "init_transactions")

    def initialized(self) -> None:
        self.partitions.clear()
        self.groups.clear()
        self._move(State.READY, "init_transactions")

    def begin(self) -> None:
        self._move(State.IN_TRANSACTION, "begin_transaction")

    def check_send(self) -> None:
        """A record may join the transaction only while it is in progress (Kafka: send outside one fails)."""
        if self.state == State.IN_TRANSACTION:
            return
        if self.state in (State.ABORTABLE_ERROR, State.FATAL_ERROR) and self.last_error is not None:
            raise error_for(self.last_error.code, f"the transaction cannot take records: {self.last_error}")
        raise IllegalTransactionStateError(f"cannot send in state {self.state.value}: call begin_transaction() first")

    def check_in_transaction(self, action: str) -> None:
        if self.state != State.IN_TRANSACTION:
            raise IllegalTransactionStateError(f"cannot {action} in state {self.state.value}")

    def begin_commit(self) -> None:
        if self.state == State.COMMITTING_TRANSACTION:  # a retry after a timeout: send EndTxn again
            return
        self._move(State.COMMITTING_TRANSACTION, "commit_transaction")

    def begin_abort(self) -> None:
        if self.state == State.ABORTING_TRANSACTION:
            return
        self._move(State.ABORTING_TRANSACTION, "abort_transaction")

    def completed(self) -> None:
        self.partitions.clear()
        self.groups.clear()
        self.commit_pending = False
        self._move(State.READY, "end the transaction")

    def fail(self, err: KafkaLiteError) -> None:
        """An error answer: fatal ones end the producer, others make the transaction abortable only."""
        self.last_error = err
        if err.code in FATAL:
            self.state = State.FATAL_ERROR
        elif self.state != State.FATAL_ERROR:
            self.state = State.ABORTABLE_ERROR

    @property
    def in_transaction(self) -> bool:
        return self.state == State.IN_TRANSACTION


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """What send_offsets_to_transaction needs of a consumer (Kafka's ConsumerGroupMetadata)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


async def find_coordinator(client: "KafkaLiteClient", key: str, key_type: int) -> int:
    """The broker id coordinating `key` (a group or a transactional.id); its address joins the metadata."""
    return await find_coordinator_within(client, key, key_type, None)


async def find_coordinator_within(client: "KafkaLiteClient", key: str, key_type: int, timeout: float | None) -> int:
    """`find_coordinator`, its request answered within `timeout` s (default request.timeout.ms)."""
    answer = await client.call(None, FindCoordinatorRequest(key=key, key_type=key_type), timeout)
    if answer.error_code:
        raise error_for(answer.error_code, answer.error_message or f"coordinator of {key!r}")
    client.metadata.brokers.setdefault(answer.node_id, (answer.host, answer.port))
    node: int = answer.node_id
    return node


class TransactionManager:
    """Drives `TransactionState` with the coordinator; one per transactional producer, on its event loop."""

    def __init__(
        self,
        client: "KafkaLiteClient",
        transactional_id: str,
        transaction_timeout_ms: int,
        max_block_ms: int,
    ) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = transaction_timeout_ms
        self.max_block = max_block_ms / 1000
        self.state = TransactionState()
        self.producer_id = -1
        self.producer_epoch = -1
        self.coordinator: int | None = None
        # A batch of this transaction failed after it was numbered: the partition's sequences have a hole, so
        # the abort asks the coordinator for a new epoch too (KIP-360), as Kafka's producer does.
        self.epoch_bump_needed = False

    # --- requests to the coordinator, retried ------------------------------------------------------

    async def _coordinator(self) -> int:
        if self.coordinator is None:
            self.coordinator = await find_coordinator(self.client, self.transactional_id, KEY_TYPE_TRANSACTION)
        return self.coordinator

    async def _call(self, request: Any, action: str, broker: int | None = None) -> Any:
        """`request` to the transaction coordinator (or `broker`) until an answer that is not retriable,
        within max.block.ms. Returns the answer; its error code is the caller's to read."""
        deadline = time.monotonic() + self.max_block
        backoff = self.client.backoff()
        attempt = 0
        while True:
            attempt += 1
            code: ErrorCode
            try:
                node = broker if broker is not None else await self._coordinator()
                conn = await self.client.coordinator_connection(node)
                answer = await conn.call(request, timeout=self.client.request_timeout)
                code = _known(_error_code(answer))
                if code not in _RETRY and code not in _REFIND:
                    return answer
            except KafkaLiteError as e:
                if not (e.retriable or e.code in _RETRY):
                    raise
                code = e.code
            if code in _REFIND or code == ErrorCode.NETWORK_EXCEPTION:
                self.coordinator = None
            if time.monotonic() >= deadline:
                raise error_for(
                    code, f"{action} timed out after {self.max_block * 1000:.0f} ms (max.block.ms): {code.name}"
                )
            log.debug("%s: %s, retrying", action, code.name)
            await asyncio.sleep(backoff.delay(attempt))

    def _raise(self, code: int, action: str) -> None:
        err = error_for(code, f"{action} for transactional.id {self.transactional_id!r}: {_known(code).name}")
        self.state.fail(err)
        raise err

    # --- the producer's calls ------------------------------------------------------------------------

    async def init(self) -> tuple[int, int]:
        """InitProducerId: this transactional.id's producer id and a new epoch, which fences every older
        producer with the id and aborts a transaction it left open. Returns (producer id, epoch)."""
        if self.state.state != State.ABORTING_TRANSACTION:  # the abort's epoch bump re-initializes in place
            self.state.init()
        else:
            self.state.state = State.INITIALIZING
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout=datetime.timedelta(milliseconds=self.timeout_ms),
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
        )
        try:
            answer = await self._call(request, "init_transactions")
        except KafkaLiteError:
            self.state.state = State.UNINITIALIZED  # nothing changed: init_transactions may be called again
            raise
        if answer.error_code:
            self.state.state = State.UNINITIALIZED
            err = error_for(answer.error_code, f"init_transactions: {_known(answer.error_code).name}")
            if err.code in FATAL:
                self.state.fail(err)
            raise err
        self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch
        self.state.initialized()
        return self.producer_id, self.producer_epoch

    def begin(self) -> None:
        self.state.begin()

    def needs(self, tp: TopicPartition) -> bool:
        return tp not in self.state.partitions

    async def add_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn for partitions about to get their first batch of this transaction."""
        new = sorted(set(tps) - self.state.partitions)
        if not new:
            return
        if self.state.state not in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION):
            raise self.state.last_error or IllegalTransactionStateError(
                f"cannot add partitions in state {self.state.state.value}"
            )
        by_topic: dict[str, list[int]] = {}
        for t, p in new:
            by_topic.setdefault(t, []).append(p)
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=tuple(
                AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )
        answer = await self._call(request, "AddPartitionsToTxn")
        if getattr(answer, "error_code", 0):
            self._raise(answer.error_code, "AddPartitionsToTxn")
        for topic in answer.results_by_topic_v3_and_below:
            for part in topic.results_by_partition:
                if part.partition_error_code and part.partition_error_code != ErrorCode.OPERATION_NOT_ATTEMPTED:
                    self._raise(part.partition_error_code, f"AddPartitionsToTxn {topic.name}-{part.partition_index}")
        self.state.partitions.update(new)

    async def send_offsets(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator: the offsets are committed with
        the transaction, or not at all."""
        self.state.check_in_transaction("send_offsets_to_transaction")
        add = AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            group_id=group.group_id,
        )
        answer = await self._call(add, "AddOffsetsToTxn")
        if answer.error_code:
            self._raise(answer.error_code, "AddOffsetsToTxn")
        self.state.groups.add(group.group_id)  # the coordinator now holds a transaction: it must be ended
        by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=off))
        commit = TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group.group_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            generation_id=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=tuple(TxnOffsetCommitRequestTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        group_coordinator: int | None = None
        deadline = time.monotonic() + self.max_block
        while True:
            if group_coordinator is None:
                group_coordinator = await find_coordinator(self.client, group.group_id, KEY_TYPE_GROUP)
            answer = await self._call(commit, "TxnOffsetCommit", broker=group_coordinator)
            codes = {_known(p.error_code) for t in answer.topics for p in t.partitions if p.error_code}
            if not codes:
                return
            if codes & (_REFIND | _RETRY) and time.monotonic() < deadline:
                group_coordinator = None if codes & _REFIND else group_coordinator
                await asyncio.sleep(self.client.retry_backoff)
                continue
            self._raise(next(iter(codes)), "TxnOffsetCommit")

    async def end(self, commit: bool) -> None:
        """EndTxn once every batch of the transaction has its answer (the producer flushes first)."""
        if commit:
            self.state.begin_commit()
        else:
            self.state.begin_abort()
        if not self.state.partitions and not self.state.groups and not self.state.commit_pending:
            # Nothing was added: the coordinator holds no transaction (Kafka's producer sends no EndTxn).
            self.state.completed()
            return
        self.state.commit_pending = True
        answer = await self._call(
            EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                committed=commit,
            ),
            "commit_transaction" if commit else "abort_transaction",
        )
        if answer.error_code:
            self._raise(answer.error_code, "EndTxn")
        self.state.completed()


async def end_transaction(
    client: "KafkaLiteClient",
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    timeout_s: float = 60.0,
) -> None:
    """End, from any process, the transaction that (transactional_id, producer_id, producer_epoch) left open:
    EndTxn to its coordinator, retried until `timeout_s`. A transaction that already ended the same way is
    answered as done by the coordinator (a repeated commit), so a retry after a crash is safe."""
    manager = TransactionManager(client, transactional_id, 60_000, int(timeout_s * 1000))
    manager.producer_id, manager.producer_epoch = producer_id, producer_epoch
    manager.state.state = State.IN_TRANSACTION
    manager.state.commit_pending = True
    await manager.end(commit)


async def transaction_state(client: "KafkaLiteClient", transactional_id: str, timeout_s: float = 60.0) -> str | None:
    """The coordinator's state of `transactional_id` (Kafka's names: Empty, Ongoing, PrepareCommit,
    CompleteCommit, ...) from DescribeTransactions, or None for an id it does not know."""
    manager = TransactionManager(client, transactional_id, 60_000, int(timeout_s * 1000))
    answer = await manager._call(DescribeTransactionsRequest(transactional_ids=(transactional_id,)), "describe")
    for st in answer.transaction_states:
        if st.transactional_id != transactional_id:
            continue
        if st.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            return None
        if st.error_code:
            raise error_for(st.error_code, f"describe transactional.id {transactional_id!r}")
        return str(st.transaction_state)
    return None


def _error_code(answer: Any) -> int:
    """A typed answer's top-level error code (0 where the api has none there)."""
    return int(getattr(answer, "error_code", 0) or 0)


def _known(code: int) -> ErrorCode:
    return ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR
