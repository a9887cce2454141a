"""replica.silence.time.max.ms: a follower that owes its leader a fetch leaves the ISR at once while a majority of
the replicas stays in it (LeaderState.on_followers_silent), and FollowerSilence says which followers owe one."""

from __future__ import annotations

import pytest

from broker.replica.replication import FollowerSilence, HighWatermarkAdvanced, LeaderState, ProposeIsr

LAG = 30_000


def proposals(actions) -> list[ProposeIsr]:
    return [a for a in actions if isinstance(a, ProposeIsr)]


def leader(replicas=(1, 2, 3), min_isr=2) -> LeaderState:
    """Broker 1 leads at LEO 5, every follower caught up at t=0; then a producer appends to 10."""
    ls = LeaderState(1, list(replicas), list(replicas), 5, 7, 5, 5, LAG, 0, min_insync_replicas=min_isr)
    for r in replicas[1:]:
        ls.on_follower_fetch(r, 5, 5, 0)
    ls.on_leader_append(10, 1)
    return ls


def test_a_silent_follower_that_lags_is_proposed_out_and_named_silent():
    ls = leader()
    ls.on_follower_fetch(2, 10, 10, 2)  # 2 caught up; 3 is away
    [p] = proposals(ls.on_followers_silent({3}))
    assert p.isr == (1, 2) and p.silent == (3,) and p.partition_epoch == 7
    assert ls.high_watermark == 5  # only once committed: the HW counts the committed ISR
    assert ls.on_isr_committed([1, 2], 8) == [HighWatermarkAdvanced(10)]


def test_a_silent_follower_that_has_everything_stays():
    ls = leader()
    ls.on_follower_fetch(3, 10, 10, 2)  # 3 went quiet with nothing left to fetch: it holds nothing back
    assert ls.on_followers_silent({3}) == []


def test_no_quick_shrink_below_a_majority_of_the_replicas():
    ls = leader()
    assert ls.on_followers_silent({2, 3}) == []  # the leader alone is not a majority of three
    ls5 = leader((1, 2, 3, 4, 5), min_isr=1)
    [p] = proposals(ls5.on_followers_silent({4, 5}))
    assert p.isr == (1, 2, 3)  # three of five stay
    assert leader((1, 2, 3, 4, 5), min_isr=1).on_followers_silent({3, 4, 5}) == []


def test_no_quick_shrink_below_min_insync_replicas():
    ls = leader((1, 2, 3), min_isr=3)
    assert ls.on_followers_silent({3}) == []


def test_two_replicas_never_shrink_quickly():
    ls = leader((1, 2), min_isr=1)
    assert ls.on_followers_silent({2}) == []  # one of two is not a majority: the lag time decides, as in Kafka


def test_one_proposal_at_a_time():
    ls = leader((1, 2, 3, 4, 5), min_isr=1)
    assert proposals(ls.on_followers_silent({5}))
    assert ls.on_followers_silent({4, 5}) == []  # the first is still in flight


def test_the_lag_time_still_applies_to_followers_that_fetch():
    ls = leader()
    ls.on_follower_fetch(2, 10, 10, 2)
    assert ls.on_followers_silent(set()) == []  # not silent: nothing quick, however far behind
    [p] = proposals(ls.tick(LAG + 10, 10))
    assert p.isr == (1, 2)


def test_follower_silence_counts_from_the_last_fetch_that_arrived():
    s = FollowerSilence()
    assert s.silent(10_000, 1000) == frozenset()  # never heard from: not judged
    s.on_fetch_received(2, 0)
    s.on_fetch_received(3, 0)
    s.on_fetch_received(3, 600)  # 3's next fetch (its last was held, then answered)
    assert s.silent(1000, 1000) == frozenset()  # exactly the timeout: not yet
    assert s.silent(1001, 1000) == {2}
    assert s.silent(1601, 1000) == {2, 3}
    s.on_fetch_received(2, 1700)  # 2 is back
    assert s.silent(2000, 1000) == {3}
    assert s.silent(5000, 0) == frozenset()  # 0: off


def test_a_follower_sent_records_owes_its_next_fetch_at_once():
    """Records sent end the part of the timeout a leader may hold a fetch (fetch_wait_ms): a paused follower is
    judged from the answer it never acknowledged, not from its last fetch, which arrived while it had everything."""
    s = FollowerSilence()
    s.on_fetch_received(2, 0)
    s.on_fetch_received(3, 0)
    s.on_records_sent(2, 300)  # 2's fetch, held since 0, answered with records at 300: 2 owes a fetch from 300
    assert s.silent(800, 1000, 500) == frozenset()  # 500 ms owed: exactly the margin, not yet
    assert s.silent(801, 1000, 500) == {2}  # 3's fetch is still held: it owes nothing yet
    s.on_records_sent(2, 700)  # a second lane's answer: the first unacknowledged one counts
    assert s.silent(801, 1000, 500) == {2}
    s.on_fetch_received(2, 850)  # it fetched: acknowledged
    assert s.silent(1000, 1000, 500) == frozenset()
    assert s.silent(1001, 1000, 500) == {3}  # 3: a second since its last fetch arrived, as before
    assert s.silent(1001, 1000) == {3}  # no fetch wait given: the whole timeout from the records too
    s.forget(2)
    s.on_records_sent(2, 2000)  # forgotten: no clock starts on an answer alone
    assert 2 not in s.silent(9000, 1000, 500)


def test_a_follower_never_heard_from_owes_a_fetch_from_the_leadership_on():
    s = FollowerSilence()
    s.expect([2, 3], 100)  # this broker became leader at t=100; neither follower fetched from it yet
    s.on_fetch_received(2, 900)
    s.expect([2, 3], 1000)  # another leadership later: 2's history stands, 3 still owes from t=100
    assert s.silent(1101, 1000) == {3}
    assert s.silent(1901, 1000) == {2, 3}


def test_the_silence_time_must_exceed_the_fetch_wait():
    from broker.server.config import BrokerConfig
    from net.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match="replica.silence.time.max.ms"):
        BrokerConfig.from_props({"replica.silence.time.max.ms": "500"})
    BrokerConfig.from_props({"replica.silence.time.max.ms": "0"})


def test_a_forgotten_follower_is_judged_again_once_it_fetches_or_is_expected():
    s = FollowerSilence()
    s.on_fetch_received(2, 0)
    s.forget(2)
    assert s.silent(5000, 1000) == frozenset()
    s.expect([2], 6000)
    assert s.silent(7001, 1000) == {2}


def test_the_replica_manager_asks_only_partitions_led_here_and_forgets_followers_of_none():
    from types import SimpleNamespace

    from broker.replica.replica_manager import ReplicaManager

    asked: list[tuple[str, frozenset[int]]] = []

    def partition(name: str, isr: list[int], leads: bool) -> SimpleNamespace:
        return SimpleNamespace(
            leader_state=object() if leads else None,
            isr=isr,
            on_followers_silent=lambda silent, name=name: asked.append((name, silent)),
        )

    rm = SimpleNamespace(
        partitions={
            ("t", 0): partition("led, 2 in its ISR", [1, 2, 3], True),
            ("t", 1): partition("followed", [2, 1, 3], False),
            ("t", 2): partition("led, 2 not in its ISR", [1, 3], True),
        },
        follower_silence=FollowerSilence(),
        replica_silence_time_max_ms=1000,
        replica_fetch_wait_max_ms=500,
        _silent_logged=frozenset(),
    )
    rm.follower_silence.on_fetch_received(2, 0)
    rm.follower_silence.on_fetch_received(4, 0)  # a broker that follows nothing led here
    ReplicaManager._drop_silent_followers(rm, 1001)  # type: ignore[arg-type]
    assert asked == [("led, 2 in its ISR", frozenset({2, 4}))]
    assert rm._silent_logged == {2}
    assert rm.follower_silence.silent(1002, 1000) == {2}  # 4 is forgotten: no pass over the partitions for it
