"""The transactional producer's state machine (client/transactions.py) and the read_committed filter of the
consumer's fetcher (client/fetcher.py committed_only), without a broker."""

from __future__ import annotations

import pytest

from client.fetcher import committed_only, decode_records
from client.transactions import IllegalTransactionStateError, State, TransactionState
from net import batch as batch_fmt
from net.errors import ErrorCode, KafkaLiteError


def _ready() -> TransactionState:
    s = TransactionState()
    s.init()
    s.initialized()
    return s


def test_calls_out_of_order_are_refused_as_kafka_does() -> None:
    s = TransactionState()
    with pytest.raises(IllegalTransactionStateError, match="begin_transaction in state UNINITIALIZED"):
        s.begin()
    with pytest.raises(IllegalTransactionStateError):
        s.check_send()  # no record outside a transaction
    s = _ready()
    with pytest.raises(IllegalTransactionStateError, match="call begin_transaction"):
        s.check_send()
    with pytest.raises(IllegalTransactionStateError, match="commit_transaction in state READY"):
        s.begin_commit()
    s.begin()
    s.check_send()
    with pytest.raises(IllegalTransactionStateError):
        s.begin()  # no nested transaction
    s.partitions.add(("t", 0))
    s.begin_commit()
    s.begin_commit()  # a retry of a commit that timed out is allowed
    s.completed()
    assert (s.state, s.partitions) == (State.READY, set())


def test_an_error_makes_the_transaction_abortable_and_a_fatal_one_ends_the_producer() -> None:
    s = _ready()
    s.begin()
    s.fail(KafkaLiteError("broker gone", ErrorCode.NOT_ENOUGH_REPLICAS))
    assert s.state == State.ABORTABLE_ERROR
    with pytest.raises(KafkaLiteError, match="broker gone"):
        s.check_send()
    with pytest.raises(IllegalTransactionStateError, match="must be aborted"):
        s.begin_commit()
    s.begin_abort()
    s.completed()
    assert s.state == State.READY

    s.begin()
    s.fail(KafkaLiteError("fenced", ErrorCode.PRODUCER_FENCED))
    assert s.state == State.FATAL_ERROR
    for call in (s.begin_abort, s.begin_commit, s.begin, s.init):
        with pytest.raises(KafkaLiteError) as e:
            call()
        assert e.value.code == ErrorCode.PRODUCER_FENCED


def _txn_batch(pid: int, base: int, values: list[bytes]) -> bytes:
    raw = bytearray(
        batch_fmt.build(
            [(i, 0, None, v, None) for i, v in enumerate(values)],
            1,
            1,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
    )
    batch_fmt.stamp(raw, base, 0)
    return bytes(raw)


def _marker(pid: int, offset: int, commit: bool) -> bytes:
    raw = bytearray(batch_fmt.build_marker(pid, 0, commit, 0, 1))
    batch_fmt.stamp(raw, offset, 0)
    return bytes(raw)


def test_read_committed_drops_aborted_transactions_and_every_marker() -> None:
    # producer 1 aborts offsets 0-1 (marker at 4); producer 2 commits 2-3 (marker at 5); producer 1 then
    # writes 6 in a new transaction, committed at 7.
    data = b"".join(
        [
            _txn_batch(1, 0, [b"a0", b"a1"]),
            _txn_batch(2, 2, [b"c2", b"c3"]),
            _marker(1, 4, commit=False),
            _marker(2, 5, commit=True),
            _txn_batch(1, 6, [b"c6"]),
            _marker(1, 7, commit=True),
        ]
    )
    kept = committed_only(data, [[1, 0]])
    records, nxt = decode_records("t", 0, kept, 0)
    assert [r.value for r in records] == [b"c2", b"c3", b"c6"]
    # read_uncommitted sees the aborted records, never the markers
    records, nxt = decode_records("t", 0, data, 0)
    assert [r.value for r in records] == [b"a0", b"a1", b"c2", b"c3", b"c6"]
    assert nxt == 8
    # an aborted transaction that begins after this fetch's data does not hide anything in it
    assert committed_only(data, [[1, 100]]) != kept
