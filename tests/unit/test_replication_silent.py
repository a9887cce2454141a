"""LeaderState tells the controller which followers an ISR shrink drops are silent (no fetch received within
replica.lag.time.max.ms) rather than slow (fetching, not caught up): the controller moves the leadership off
a leader cut off from its followers only on silent ones (broker/controller/logic.py _move_isolated_leader,
docs/ELECTION.md section 6)."""

from __future__ import annotations

from broker.replica.replication import LeaderState, ProposeIsr

LAG = 10_000


def proposals(actions) -> list[ProposeIsr]:
    return [a for a in actions if isinstance(a, ProposeIsr)]


def leader() -> LeaderState:
    """Broker 1 leads [1, 2, 3] at LEO 5; both followers caught up at t=0, then a producer appends."""
    ls = LeaderState(1, [1, 2, 3], [1, 2, 3], 5, 7, 5, 0, LAG, 0, min_insync_replicas=2)
    ls.on_follower_fetch(2, 5, 5, 0)
    ls.on_follower_fetch(3, 5, 5, 0)
    ls.on_leader_append(1_000_000, 1)  # far more than the followers can fetch: they fall behind
    return ls


def test_followers_that_keep_fetching_but_lag_are_dropped_as_slow():
    ls = leader()
    for t in range(1_000, LAG + 2_000, 1_000):  # a fetch a second, each a little further, never at the LEO
        ls.on_follower_fetch(2, 5 + t, 1_000_000, t)
        ls.on_follower_fetch(3, 5 + t, 1_000_000, t)
    [p] = proposals(ls.tick(LAG + 2_000, 1_000_000))
    assert p.isr == (1,) and p.silent == ()


def test_followers_that_stopped_fetching_are_dropped_as_silent():
    ls = leader()
    [p] = proposals(ls.tick(LAG + 2, 1_000_000))
    assert p.isr == (1,) and set(p.silent) == {2, 3}


def test_a_shrink_tells_the_two_kinds_apart():
    ls = leader()
    for t in range(1_000, LAG + 2_000, 1_000):
        ls.on_follower_fetch(2, 5 + t, 1_000_000, t)  # 2 fetches; 3 fell silent after t=0
    [p] = proposals(ls.tick(LAG + 2_000, 1_000_000))
    assert p.isr == (1,) and p.silent == (3,)


def test_a_follower_cut_off_while_trailing_by_one_fetch_is_silent():
    # Producers append all along; each fetch reaches the LEO the leader had at the previous one, so the
    # follower counts as caught up as of its previous fetch (t=900), and its last fetch came at t=1000.
    # It is cut off there. The leader drops it lag time after t=900, when it has been quiet for less than
    # the lag time: the shrink must still say it is silent, or a cut under load would never move a leader.
    ls = LeaderState(1, [1, 2, 3], [1, 2, 3], 5, 7, 5, 0, LAG, 0, min_insync_replicas=2)
    leo = 5
    for t in range(100, 1_100, 100):
        for r in (2, 3):
            ls.on_follower_fetch(r, leo, leo + 10, t)
        leo += 10
        ls.on_leader_append(leo, t)
    [p] = proposals(ls.tick(900 + LAG + 1, leo))
    assert p.isr == (1,) and set(p.silent) == {2, 3}


def test_a_follower_that_never_fetched_from_this_leader_is_silent():
    # A new leader cut off from the start: no fetch at all within the lag time.
    ls = LeaderState(1, [1, 2, 3], [1, 2, 3], 5, 7, 5, 0, LAG, 0, min_insync_replicas=2)
    ls.on_leader_append(10, 1)
    [p] = proposals(ls.tick(LAG + 2, 10))
    assert p.isr == (1,) and set(p.silent) == {2, 3}


def test_fenced_members_are_silent():
    ls = leader()
    [p] = proposals(ls.remove_replicas([3]))
    assert p.isr == (1, 2) and p.silent == (3,)
