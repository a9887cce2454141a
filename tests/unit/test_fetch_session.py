"""Incremental fetch sessions (KIP-227): the leader's cache and the follower's handler, each alone and together."""

from __future__ import annotations

import random

import pytest

from broker.network.native_legacy import LEGACY
from broker.replica.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION,
    FetchSessionCache,
    FetchSessionError,
    FetchSessionHandler,
    next_epoch,
)
from broker.replica.partition import FetchResult, FetchSpec
from net.errors import ErrorCode
from net.protocol import ApiKey
from net.wire_types import INT32_MAX, WireRangeError

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def spec(tp: tuple[str, int], offset: int = 0, epoch: int = 1) -> FetchSpec:
    return FetchSpec(tp, offset, 1024, epoch, epoch, 0)


def result(hw: int = 0, leo: int = 0, records: bytes = b"", error: int = 0) -> FetchResult:
    return FetchResult(error, hw, 0, records, log_end_offset=leo)


def opened(cache: FetchSessionCache, specs: list[FetchSpec], now: float = 0.0, replica: int = 2) -> int:
    ctx = cache.new_context(replica, NO_SESSION, INITIAL_EPOCH, specs, [], now)
    assert ctx.full and ctx.session_id != NO_SESSION
    assert ctx.answer({s.tp: result() for s in specs}).keys() == {s.tp for s in specs}
    return ctx.session_id


def test_a_full_fetch_opens_a_session_whose_answers_carry_only_what_moved() -> None:
    cache = FetchSessionCache()
    sid = opened(cache, [spec(A), spec(B), spec(C)])
    # Epoch 1, nothing named: the leader reads every partition of the session, answers only what changed.
    ctx = cache.new_context(2, sid, 1, [], [], 1.0)
    assert not ctx.full and [s.tp for s in ctx.specs] == [A, B, C]
    answer = ctx.answer({A: result(), B: result(hw=5, leo=5), C: result(leo=3, records=b"x")})
    assert answer.keys() == {B, C}
    assert ctx.session_id == sid
    # The same state again is not repeated; an error always is.
    ctx = cache.new_context(2, sid, 2, [], [], 2.0)
    assert ctx.answer({A: result(), B: result(hw=5, leo=5), C: result(leo=3)}).keys() == set()
    ctx = cache.new_context(2, sid, 3, [], [], 3.0)
    err = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert ctx.answer({A: result(error=err), B: result(hw=5, leo=5), C: result(leo=3)}).keys() == {A}
    ctx = cache.new_context(2, sid, 4, [], [], 4.0)
    assert ctx.answer({A: result(), B: result(hw=5, leo=5), C: result(leo=3)}).keys() == {A}


def test_partitions_with_records_go_to_the_back_so_a_byte_budget_does_not_starve_the_others() -> None:
    cache = FetchSessionCache()
    sid = opened(cache, [spec(A), spec(B), spec(C)])
    ctx = cache.new_context(2, sid, 1, [], [], 1.0)
    ctx.answer({A: result(leo=1, records=b"x"), B: result(), C: result()})
    assert [s.tp for s in cache.new_context(2, sid, 2, [], [], 2.0).specs] == [B, C, A]


def test_an_incremental_fetch_updates_adds_and_forgets_partitions() -> None:
    cache = FetchSessionCache()
    sid = opened(cache, [spec(A), spec(B)])
    ctx = cache.new_context(2, sid, 1, [spec(A, offset=7), spec(C)], [B], 1.0)
    assert {s.tp: s.offset for s in ctx.specs} == {A: 7, C: 0}
    # A new partition is answered whatever its state; one only updated keeps what it was last answered.
    assert ctx.answer({A: result(), C: result()}).keys() == {C}


def test_session_errors_unknown_id_wrong_epoch_and_another_brokers_session() -> None:
    cache = FetchSessionCache()
    sid = opened(cache, [spec(A)])
    with pytest.raises(FetchSessionError) as e:
        cache.new_context(2, sid + 1, 1, [], [], 1.0)
    assert e.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    with pytest.raises(FetchSessionError) as e:
        cache.new_context(3, sid, 1, [], [], 1.0)  # broker 3 cannot use broker 2's session
    assert e.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    for bad in (2, 0x7FFFFFFF, -5):
        with pytest.raises(FetchSessionError) as e:
            cache.new_context(2, sid, bad, [], [], 1.0)
        assert e.value.code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # None of those moved the session: epoch 1 is still the one expected.
    assert cache.new_context(2, sid, 1, [], [], 1.0).session_id == sid


def test_a_full_fetch_closes_the_session_it_names_and_the_final_epoch_opens_none() -> None:
    cache = FetchSessionCache()
    sid = opened(cache, [spec(A)])
    ctx = cache.new_context(3, sid, INITIAL_EPOCH, [spec(B)], [], 1.0)  # another broker cannot close it
    assert sid in cache.sessions and ctx.session_id not in (sid, NO_SESSION)
    new = cache.new_context(2, sid, INITIAL_EPOCH, [spec(A)], [], 1.0)
    assert sid not in cache.sessions and new.session_id in cache.sessions
    final = cache.new_context(2, new.session_id, FINAL_EPOCH, [spec(A)], [], 2.0)
    assert final.session_id == NO_SESSION and new.session_id not in cache.sessions
    assert final.answer({A: result()}).keys() == {A}


def test_slots_are_bounded_and_only_idle_sessions_are_evicted() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1000)
    first = opened(cache, [spec(A)], now=0.0)
    opened(cache, [spec(A)], now=0.5)
    full = cache.new_context(2, NO_SESSION, INITIAL_EPOCH, [spec(A)], [], 0.9)
    assert full.session_id == NO_SESSION and full.answer({A: result()}).keys() == {A}  # no slot: sessionless
    later = cache.new_context(2, NO_SESSION, INITIAL_EPOCH, [spec(A)], [], 1.2)
    assert later.session_id != NO_SESSION and first not in cache.sessions and len(cache.sessions) == 2
    assert FetchSessionCache(max_slots=0).new_context(2, 0, 0, [spec(A)], [], 0.0).session_id == NO_SESSION


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(1) == 2 and next_epoch(INT32_MAX) == 1


def test_the_follower_sends_only_changed_rows_and_starts_over_after_a_reset() -> None:
    h = FetchSessionHandler()
    rows = {A: (0, 1024, 1, 1, 0), B: (0, 1024, 1, 1, 0)}
    f = h.build(rows)
    assert (f.session_id, f.epoch, f.send, f.forgotten) == (NO_SESSION, INITIAL_EPOCH, rows, [])
    h.answered(f, 42)
    f = h.build({A: (5, 1024, 1, 1, 0), C: (0, 1024, 1, 1, 0)})
    assert (f.session_id, f.epoch) == (42, 1)
    assert f.send == {A: (5, 1024, 1, 1, 0), C: (0, 1024, 1, 1, 0)} and f.forgotten == [B]
    h.answered(f, 42)
    assert h.build({A: (5, 1024, 1, 1, 0), C: (0, 1024, 1, 1, 0)}).send == {}
    h.reset()
    f = h.build({A: (5, 1024, 1, 1, 0)})
    assert (f.session_id, f.epoch, list(f.send)) == (42, INITIAL_EPOCH, [A])  # names the old one: closed
    h.answered(f, NO_SESSION)  # the leader had no slot
    assert h.build({A: (5, 1024, 1, 1, 0)}).epoch == INITIAL_EPOCH
    h.answered(h.build({A: (5, 1024, 1, 1, 0)}), 7)
    f = h.build({A: (5, 1024, 1, 1, 0)})
    h.answered(f, 8)  # an answer for another session: trust nothing
    assert h.build({A: (5, 1024, 1, 1, 0)}).epoch == INITIAL_EPOCH


@pytest.mark.parametrize("seed", range(20))
def test_follower_and_leader_agree_on_every_partition_over_random_rounds(seed: int) -> None:
    """Random followed sets and positions, fetches lost on the way (the follower resets), and leader restarts:
    what the leader reads is always exactly what the follower follows, at the positions it asked."""
    rng = random.Random(seed)
    cache, h = FetchSessionCache(max_slots=rng.choice([0, 1, 5])), FetchSessionHandler()
    followed: dict[tuple[str, int], int] = {}
    for now in range(200):
        for tp in [("t", q) for q in range(8)]:
            r = rng.random()
            if r < 0.1:
                followed.pop(tp, None)
            elif r < 0.4:
                followed[tp] = followed.get(tp, 0) + rng.randint(0, 3)
        if rng.random() < 0.03:
            cache = FetchSessionCache()  # the leader restarted
        rows = {tp: (off, 1024, 1, -1, 0) for tp, off in followed.items()}
        f = h.build(rows)
        specs = [FetchSpec(tp, r[0], r[1], r[2], r[3], r[4]) for tp, r in f.send.items()]
        try:
            ctx = cache.new_context(2, f.session_id, f.epoch, specs, f.forgotten, float(now))
        except FetchSessionError:
            h.reset()
            continue
        assert {s.tp: s.offset for s in ctx.specs} == followed
        ctx.answer({s.tp: result(hw=now) for s in ctx.specs})
        if rng.random() < 0.1:
            h.reset()  # the answer was lost
        else:
            h.answered(f, ctx.session_id)


def test_session_fields_are_range_checked_before_any_handler() -> None:
    ok = {"replica_id": 2, "session_id": 5, "session_epoch": 1, "topics": [], "forgotten": [["t", [0, 1]]]}
    read_fetch = LEGACY[ApiKey.FETCH][0]  # Fetch is typed: a native v0 map is checked as it is read
    read_fetch(ok)
    for bad in (
        {**ok, "session_id": 2**31},
        {**ok, "session_epoch": -(2**31) - 1},
        {**ok, "forgotten": [["t", [2**31]]]},
    ):
        with pytest.raises(WireRangeError):
            read_fetch(bad)
