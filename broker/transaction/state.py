"""A transactional id's state at its coordinator and the transitions KIP-98 allows, sans-IO (Kafka's
TransactionMetadata and TransactionStateManager rules): requests in, the next metadata (to be written to
`__transaction_state` before it is answered) or an error code out."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from net.errors import ErrorCode

MAX_EPOCH = 32767  # Kafka's Short.MaxValue: at it, InitProducerId gives a new producer id
TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """Kafka's TransactionState names (DescribeTransactions / ListTransactions answer these)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


# A transition in progress: markers being written. Requests meanwhile get CONCURRENT_TRANSACTIONS.
PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)
# No transaction open: a new one may begin, InitProducerId may bump the epoch.
SETTLED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1  # when the ongoing transaction began (-1: none)
    update_ms: int = -1
    last_producer_id: int = -1
    last_producer_epoch: int = -1

    def copy(self, **changes: object) -> "TransactionMetadata":
        changes.setdefault("partitions", set(self.partitions))
        return replace(self, **changes)  # type: ignore[arg-type]


class TxnError(Exception):
    """A request refused with `code` (nothing changes)."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


def check_producer(meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> None:
    """The request's producer is this id's current one (KIP-98 fencing): another producer id is
    INVALID_PRODUCER_ID_MAPPING, an older epoch PRODUCER_FENCED."""
    if producer_id != meta.producer_id:
        raise TxnError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            f"producer id {producer_id} is not {meta.transactional_id!r}'s current one",
        )
    if producer_epoch != meta.producer_epoch:
        raise TxnError(
            ErrorCode.PRODUCER_FENCED,
            f"epoch {producer_epoch} of producer {producer_id} is fenced: the current one is {meta.producer_epoch}",
        )


def init_producer(
    meta: TransactionMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    new_producer_id: int,
    now_ms: int,
    expected: tuple[int, int] = (-1, -1),
) -> TransactionMetadata:
    """InitProducerId on a settled id (the caller aborts an ongoing transaction first): the epoch bumped (a new
    producer id when the epoch is exhausted, or for a new id). `expected` is KIP-360's (producer id, epoch)
    of a client that had one."""
    if meta is None:
        return TransactionMetadata(transactional_id, new_producer_id, 0, timeout_ms, update_ms=now_ms)
    if meta.state in PREPARING or meta.state == TxnState.ONGOING:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} has a transaction being completed")
    pid, epoch = expected
    if pid >= 0 and (pid, epoch) != (meta.producer_id, meta.producer_epoch):
        if (pid, epoch) != (meta.last_producer_id, meta.last_producer_epoch):
            raise TxnError(ErrorCode.PRODUCER_FENCED, f"producer {pid} epoch {epoch} is not the current one")
    nxt = meta.copy(state=TxnState.EMPTY, timeout_ms=timeout_ms, start_ms=-1, update_ms=now_ms, partitions=set())
    nxt.last_producer_id, nxt.last_producer_epoch = meta.producer_id, meta.producer_epoch
    if meta.producer_epoch >= MAX_EPOCH - 1:
        nxt.producer_id, nxt.producer_epoch = new_producer_id, 0
    else:
        nxt.producer_epoch = meta.producer_epoch + 1
    return nxt


def add_partitions(
    meta: TransactionMetadata, producer_id: int, producer_epoch: int, partitions: set[TopicPartition], now_ms: int
) -> TransactionMetadata | None:
    """AddPartitionsToTxn / AddOffsetsToTxn: the next metadata, or None when nothing changes (all added)."""
    check_producer(meta, producer_id, producer_epoch)
    if meta.state in PREPARING:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is being completed")
    if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
        return None
    start = meta.start_ms if meta.state == TxnState.ONGOING else now_ms
    base = meta.partitions if meta.state == TxnState.ONGOING else set()
    return meta.copy(state=TxnState.ONGOING, partitions=base | partitions, start_ms=start, update_ms=now_ms)


def end_transaction(
    meta: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
) -> TransactionMetadata | None:
    """EndTxn: the Prepare* metadata to write, or None for a retry of an end already done (answered as done)."""
    check_producer(meta, producer_id, producer_epoch)
    if meta.state == TxnState.ONGOING:
        return meta.copy(state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, update_ms=now_ms)
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    if meta.state == done:
        return None
    if meta.state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, "the transaction is being completed")
    raise TxnError(
        ErrorCode.INVALID_TXN_STATE,
        f"cannot {'commit' if commit else 'abort'} {meta.transactional_id!r} in state {meta.state.value}",
    )


def fence_for_abort(meta: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """The coordinator aborts an ongoing transaction by itself (timeout, or InitProducerId of a new producer):
    PrepareAbort with the epoch bumped, so the producer that opened it is fenced (Kafka's PrepareEpochFence)."""
    nxt = meta.copy(state=TxnState.PREPARE_ABORT, update_ms=now_ms)
    if meta.producer_epoch < MAX_EPOCH:
        nxt.last_producer_epoch = meta.producer_epoch
        nxt.last_producer_id = meta.producer_id
        nxt.producer_epoch = meta.producer_epoch + 1
    return nxt


def complete(meta: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """Every marker written: CompleteCommit / CompleteAbort, no partitions."""
    state = TxnState.COMPLETE_COMMIT if meta.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return meta.copy(state=state, partitions=set(), start_ms=-1, update_ms=now_ms)


def timed_out(meta: TransactionMetadata, now_ms: int) -> bool:
    return meta.state == TxnState.ONGOING and meta.start_ms >= 0 and now_ms - meta.start_ms > meta.timeout_ms


def expired(meta: TransactionMetadata, now_ms: int, expiration_ms: int) -> bool:
    """transactional.id.expiration.ms: a settled id untouched this long is forgotten."""
    return meta.state in SETTLED and now_ms - meta.update_ms > expiration_ms
