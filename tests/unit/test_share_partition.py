"""The share-partition state machine (broker/share/partition.py): acquisition, locks, acknowledgements, delivery
counts, members that go away, and the durable snapshot."""

from __future__ import annotations

import uuid
import zlib

import pytest

from broker.share.partition import (
    AcknowledgeError,
    AckType,
    Acquired,
    RecordState,
    SharePartition,
    StateBatch,
)
from broker.share.state_records import ShareSnapshot, build_batch, partition_for, read_records
from net.errors import ErrorCode

LOCK_MS = 30_000
LIMIT = 5


def sp(start: int = 0) -> SharePartition:
    return SharePartition(start, LOCK_MS, LIMIT)


def offsets(acquired: list[Acquired]) -> list[int]:
    return [o for a in acquired for o in range(a.first_offset, a.last_offset + 1)]


def test_each_record_goes_to_one_member_at_a_time():
    p = sp()
    a = p.acquire("m1", list(range(10)), 10, 4, now_ms=0)
    assert a == [Acquired(0, 3, 1)]
    # m2 reads the same log from the first available offset: only the records nobody holds are its
    b = p.acquire("m2", list(range(p.next_fetch_offset(), 10)), 10, 100, now_ms=0)
    assert offsets(b) == list(range(4, 10))
    assert p.acquire("m3", list(range(10)), 10, 100, now_ms=0) == []
    assert p.end_offset == 10 and p.start_offset == 0


def test_accepted_records_move_the_start_offset_and_are_not_delivered_again():
    p = sp()
    p.acquire("m1", list(range(5)), 5, 100, now_ms=0)
    p.acknowledge("m1", 0, 4, [AckType.ACCEPT], now_ms=1)
    assert p.start_offset == 5 and p.records == {}
    assert p.tick(now_ms=LOCK_MS * 2) == 0
    assert p.acquire("m2", list(range(5)), 5, 100, now_ms=2) == []


def test_a_lock_that_runs_out_makes_the_record_available_again_with_its_count():
    p = sp()
    p.acquire("m1", [0, 1, 2], 3, 100, now_ms=0)
    assert p.tick(now_ms=LOCK_MS - 1) == 0  # still locked
    assert p.tick(now_ms=LOCK_MS) == 3
    assert p.next_fetch_offset() == 0
    again = p.acquire("m2", [0, 1, 2], 3, 100, now_ms=LOCK_MS + 1)
    assert again == [Acquired(0, 2, 2)]
    # m1's late acknowledgement of records it no longer holds changes nothing
    with pytest.raises(AcknowledgeError) as e:
        p.acknowledge("m1", 0, 2, [AckType.ACCEPT], now_ms=LOCK_MS + 2)
    assert e.value.code == ErrorCode.INVALID_RECORD_STATE
    assert all(r.state == RecordState.ACQUIRED and r.member_id == "m2" for r in p.records.values())


def test_released_records_are_redelivered_and_rejected_ones_never():
    p = sp()
    p.acquire("m1", [0, 1, 2, 3], 4, 100, now_ms=0)
    p.acknowledge("m1", 0, 3, [AckType.RELEASE, AckType.REJECT, AckType.ACCEPT, AckType.RELEASE], now_ms=1)
    assert p.start_offset == 0
    b = p.acquire("m2", [0, 1, 2, 3], 4, 100, now_ms=2)
    assert offsets(b) == [0, 3] and all(a.delivery_count == 2 for a in b)
    p.acknowledge("m2", 0, 0, [AckType.ACCEPT], now_ms=3)
    p.acknowledge("m2", 3, 3, [AckType.ACCEPT], now_ms=3)
    assert p.start_offset == 4 and p.records == {}


def test_the_delivery_count_limit_archives_a_record():
    p = sp()
    for n in range(1, LIMIT + 1):
        got = p.acquire(f"m{n}", [0], 1, 100, now_ms=n * LOCK_MS)
        assert got == [Acquired(0, 0, n)]
        if n % 2:
            p.acknowledge(f"m{n}", 0, 0, [AckType.RELEASE], now_ms=n * LOCK_MS + 1)
        else:
            assert p.tick(now_ms=(n + 1) * LOCK_MS) == 1  # the lock ran out
    # delivered LIMIT times: archived, the start offset moves past it, nobody gets it again
    assert p.start_offset == 1 and p.records == {}
    assert p.acquire("late", [0], 1, 100, now_ms=LOCK_MS * (LIMIT + 3)) == []


def test_a_member_that_goes_away_releases_what_it_holds():
    p = sp()
    p.acquire("dead", [0, 1, 2], 3, 100, now_ms=0)
    p.acquire("alive", [3, 4], 5, 100, now_ms=0)
    assert p.release_member("dead") == 3
    assert p.release_member("dead") == 0
    got = p.acquire("alive", list(range(p.next_fetch_offset(), 5)), 5, 100, now_ms=1)
    assert got == [Acquired(0, 2, 2)]


def test_renew_extends_the_lock():
    p = sp()
    p.acquire("m1", [0], 1, 100, now_ms=0)
    p.acknowledge("m1", 0, 0, [AckType.RENEW], now_ms=LOCK_MS - 10)
    assert p.tick(now_ms=LOCK_MS + 10) == 0
    assert p.tick(now_ms=2 * LOCK_MS - 10) == 1


def test_a_bad_acknowledgement_changes_nothing():
    p = sp()
    p.acquire("m1", [0, 1], 2, 100, now_ms=0)
    for first, last, types, code in [
        (0, 1, [AckType.ACCEPT, AckType.ACCEPT, AckType.ACCEPT], ErrorCode.INVALID_REQUEST),
        (0, 1, [9], ErrorCode.INVALID_REQUEST),
        (1, 0, [AckType.ACCEPT], ErrorCode.INVALID_REQUEST),
        (0, 2, [AckType.ACCEPT], ErrorCode.INVALID_RECORD_STATE),  # 2 was never acquired
    ]:
        with pytest.raises(AcknowledgeError) as e:
            p.acknowledge("m1", first, last, types, now_ms=1)
        assert e.value.code == code
    with pytest.raises(AcknowledgeError):
        p.acknowledge("m2", 0, 1, [AckType.ACCEPT], now_ms=1)  # another member's records
    assert [r.state for r in p.records.values()] == [RecordState.ACQUIRED] * 2


def test_gaps_and_control_records_are_skipped():
    p = sp()
    # offsets 2-3 are a transaction marker / compacted away: never handed out, never block the start offset
    got = p.acquire("m1", [0, 1, 4], 5, 100, now_ms=0)
    assert offsets(got) == [0, 1, 4]
    p.acknowledge("m1", 0, 1, [AckType.ACCEPT], now_ms=1)
    p.acknowledge("m1", 4, 4, [AckType.ACCEPT], now_ms=1)
    assert p.start_offset == 5
    # a read of only control records moves the end offset on
    assert p.acquire("m1", [], 8, 100, now_ms=2) == []
    assert p.end_offset == 8 and p.start_offset == 8


def test_max_in_flight_bounds_acquisition():
    p = SharePartition(0, LOCK_MS, LIMIT, max_in_flight=3)
    assert offsets(p.acquire("m1", list(range(10)), 10, 100, now_ms=0)) == [0, 1, 2]
    assert p.acquire("m2", list(range(3, 10)), 10, 100, now_ms=0) == []


def test_with_batch_boundaries_the_batch_the_limit_falls_in_goes_whole():
    # Log batches 0-9, 10-19, 20-29; a limit of 12 ends inside the second batch: it is acquired to its end
    # (Kafka's soft MaxRecords), the third is not.
    p = sp()
    a = p.acquire("m1", list(range(30)), 30, 12, now_ms=0, batch_lasts=[9, 19, 29])
    assert offsets(a) == list(range(20))
    # Records of a batch another member holds are skipped; the batch still ends the acquisition.
    q = sp()
    q.acquire("m2", list(range(30)), 30, 6, now_ms=0)
    b = q.acquire("m1", list(range(q.next_fetch_offset(), 30)), 30, 3, now_ms=0, batch_lasts=[9, 19, 29])
    assert offsets(b) == [6, 7, 8, 9]
    # max_in_flight stays a hard limit, inside a batch too
    r = SharePartition(0, LOCK_MS, LIMIT, max_in_flight=15)
    assert offsets(r.acquire("m1", list(range(30)), 30, 12, now_ms=0, batch_lasts=[9, 19, 29])) == list(range(15))
    # a limit of nothing acquires nothing
    assert sp().acquire("m1", list(range(30)), 30, 0, now_ms=0, batch_lasts=[9, 19, 29]) == []


def test_snapshot_and_restore_keep_counts_but_not_locks():
    p = sp(100)
    p.acquire("m1", list(range(100, 106)), 106, 100, now_ms=0)
    p.acknowledge(
        "m1",
        100,
        105,
        [AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.RELEASE, AckType.ACCEPT, AckType.RENEW],
        now_ms=1,
    )
    start, batches = p.snapshot()
    assert start == 101
    assert batches == [
        StateBatch(101, 101, RecordState.AVAILABLE, 1),
        StateBatch(102, 102, RecordState.ARCHIVED, 1),
        StateBatch(103, 103, RecordState.AVAILABLE, 1),
        StateBatch(104, 104, RecordState.ACKNOWLEDGED, 1),
        StateBatch(105, 105, RecordState.AVAILABLE, 1),  # acquired: a lock does not survive its leader
    ]
    q = sp()
    q.restore(start, batches)
    assert q.start_offset == 101 and q.end_offset == 106
    got = q.acquire("m2", list(range(101, 110)), 110, 100, now_ms=5)
    assert got == [Acquired(101, 101, 2), Acquired(103, 103, 2), Acquired(105, 105, 2), Acquired(106, 109, 1)]


def test_the_log_start_moving_past_the_start_offset():
    p = sp()
    p.acquire("m1", [0, 1, 2], 3, 100, now_ms=0)
    p.reset_start(2)
    assert p.start_offset == 2 and set(p.records) == {2}


def test_share_snapshot_records_round_trip_and_the_latest_per_key_wins():
    key = ("g", uuid.uuid4().hex, 3)
    older = ShareSnapshot(1, 10, [StateBatch(10, 12, RecordState.AVAILABLE, 2)])
    newer = ShareSnapshot(2, 13, [StateBatch(14, 14, RecordState.ARCHIVED, 5)], leader_epoch=4)
    data = build_batch(key, older, 1) + build_batch(key, newer, 2) + build_batch(("g", "other", 0), None, 3)
    got = list(read_records(data))
    assert got == [(key, older), (key, newer), (("g", "other", 0), None)]
    # Kafka's key string decides the coordinator: the same in every process, spread over the partitions
    assert partition_for(key, 50) == zlib.crc32(f"g:{key[1]}:3".encode()) % 50
    assert len({partition_for(("g", "t", p), 50) for p in range(100)}) > 20


def test_an_acknowledgement_outside_the_records_in_flight_is_refused_at_once():
    p = sp(10)
    p.acquire("m1", [10, 11], 12, 100, now_ms=0)
    for first, last in [(0, 2**62), (9, 11), (11, 12), (2**62, 2**62)]:
        with pytest.raises(AcknowledgeError) as e:
            p.acknowledge("m1", first, last, [AckType.ACCEPT], now_ms=1)  # a range of 2**62 is not walked
        assert e.value.code == ErrorCode.INVALID_RECORD_STATE
    assert p.acquired_count() == 2
