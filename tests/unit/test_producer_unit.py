from __future__ import annotations

import pytest

from client.accumulator import RecordAccumulator
from client.cluster import parse_bootstrap
from client.producer import default_partition, parse_acks


def test_key_partitioning_is_stable_across_versions():
    # Pinned: the CRC-32C check value of "123456789" is 0xE3069283 in every implementation, so a key's
    # partition cannot drift between processes, versions or languages.
    assert default_partition(b"123456789", 7) == 0xE3069283 % 7
    assert default_partition(b"123456789", 1000) == 0xE3069283 % 1000
    assert default_partition(b"", 5) == 0


def test_accumulator_closes_batches_at_batch_size():
    closed = []
    acc = RecordAccumulator(batch_size=1000, buffer_memory=10**6)
    acc.on_batch_full = lambda: closed.append(1)
    full = [acc.append("t", 0, 1, None, b"x" * 100, None, None) for _ in range(20)]
    assert full.count(True) == len(closed) >= 2
    q = acc.queues[("t", 0)]
    assert all(b.closed for b in list(q)[:-1])
    batches = acc.drain(("t", 0), now=0, linger=10, force=False)
    assert batches and all(b.closed for b in batches)  # the open one waits for linger
    rest = acc.drain(("t", 0), now=10**9, linger=0.005, force=False)
    assert sum(len(b.records) for b in batches + rest) == 20


def test_taking_a_partitions_batches_closes_its_open_one():
    """An abort takes the queued batches of a partition, the open one too: a record sent afterwards (the next
    transaction) starts a new, queued batch. (Found by the transactional nemesis: left open, the old batch took
    the record into no queue, flush did not wait for it and commit_transaction committed without it.)"""
    acc = RecordAccumulator(batch_size=1000, buffer_memory=10**6)
    acc.append("t", 0, 1, None, b"aborted", None, None)
    taken = acc.take_all(("t", 0))
    assert [r[3] for b in taken for r in b.records] == [b"aborted"] and not acc.has_pending()
    acc.append("t", 0, 2, None, b"next", None, None)
    assert acc.pending_partitions() == [("t", 0)]
    assert [r[3] for b in acc.queues[("t", 0)] for r in b.records] == [b"next"]


def test_parse_acks_and_bootstrap():
    assert [parse_acks(a) for a in ("all", "-1", "0", "1", 1)] == [-1, -1, 0, 1, 1]
    with pytest.raises(ValueError):
        parse_acks("2")
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_bootstrap("nohost")


def test_records_sent_while_metadata_arrives_keep_their_order():
    """Regression: records stashed before the partition count was known were re-sent after newer ones."""
    import threading
    import time

    from client.producer import AsyncProducer

    p = AsyncProducer("127.0.0.1:1", linger_ms=0)  # never started: no I/O, just the send path
    stop = threading.Event()

    def publish_soon():
        time.sleep(0.002)
        p._publish_count("t", 4)
        stop.set()

    t = threading.Thread(target=publish_soon)
    t.start()
    i = 0
    while not stop.is_set() or i < 20000:
        p.send("t", str(i).encode(), key=f"k{i % 7}".encode())
        i += 1
    t.join()
    assert not p._unresolved
    seen: dict[bytes, int] = {}
    for q in p.accumulator.queues.values():
        for b in q:
            for _, _, key, value, _ in b.records:
                n = int(value)
                assert n > seen.get(key, -1), f"record {n} of {key!r} appended after a later one"
                seen[key] = n
    assert len(seen) == 7


def test_keyless_records_move_on_after_batch_size_bytes():
    """KIP-794: a keyless producer stays on one partition for batch.size bytes, then moves on, even when
    every send is its own batch (linger.ms=0), instead of sticking to one partition forever."""
    from client.producer import AsyncProducer

    p = AsyncProducer("127.0.0.1:1", linger_ms=0, batch_size=1000)  # never started: only the send path
    p._publish_count("t", 3)
    for _ in range(60):
        p.send("t", b"x" * 100)
    counts = {tp[1]: sum(len(b.records) for b in q) for tp, q in p.accumulator.queues.items()}
    assert set(counts) == {0, 1, 2}
    # About 10 records (1000 bytes) per turn; a batch closing at batch.size can end a turn a record early.
    assert all(12 <= n <= 28 for n in counts.values()), counts


def test_outcome_rule_per_error_and_acks():
    from client.outcome import proves_not_appended
    from net.errors import ErrorCode, KafkaLiteError, OutOfOrderSequenceError, error_for

    def e(code: ErrorCode) -> KafkaLiteError:
        return error_for(code)

    for code in (
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUIRED_ACKS,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,  # the sequence is checked before the append
        ErrorCode.INVALID_PRODUCER_EPOCH,
    ):
        assert proves_not_appended(e(code), -1) and proves_not_appended(e(code), 1), code
    for code in (
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
    ):
        assert not proves_not_appended(e(code), -1) and not proves_not_appended(e(code), 1), code
    # The leader checks leadership before appending with acks=1, but an acks=all wait can end that way.
    assert proves_not_appended(e(ErrorCode.NOT_LEADER_OR_FOLLOWER), 1)
    assert not proves_not_appended(e(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1)
    assert not proves_not_appended(RuntimeError("cut"), 1)
    assert isinstance(e(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER), OutOfOrderSequenceError)


def test_produce_error_lists_every_record_with_its_outcome():
    from client.outcome import FailedRecord, with_outcome
    from client.producer import ProduceError
    from net.errors import NotEnoughReplicasError, RequestTimedOutError

    timeout = RequestTimedOutError("timed out")
    unknown = with_outcome(NotEnoughReplicasError("isr"), "unknown", timeout)
    refused = with_outcome(NotEnoughReplicasError("isr"), "not_written", None)
    assert isinstance(unknown, NotEnoughReplicasError) and unknown.unknown_cause is timeout
    assert "outcome unknown since an earlier attempt: timed out" in str(unknown)
    err = ProduceError([FailedRecord("t", 0, None, b"a", unknown)] + [FailedRecord("t", 1, None, b"b", refused)] * 2)
    assert (err.not_written, err.unknown, len(err.failures)) == (2, 1, 3)
    assert str(err).startswith("2 records not written, 1 records with unknown outcome")


def test_idempotence_caps_in_flight_batches():
    import pytest

    from client.producer import AsyncProducer

    with pytest.raises(ValueError, match="at most 5"):
        AsyncProducer("127.0.0.1:1", max_in_flight_requests_per_connection=6)
    assert AsyncProducer("127.0.0.1:1", acks=1, max_in_flight_requests_per_connection=6).sender.max_in_flight == 6
