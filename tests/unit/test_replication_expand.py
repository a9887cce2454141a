"""LeaderState ISR expansion: only a replica that fetches is proposed back in (found by tests/sim/replication_sim.py).

The leader used to judge every follower by the offset of its last fetch, on anyone's fetch and on every ISR
commit. A follower that had stopped fetching was then proposed straight back in right after being dropped
for lagging, whenever another member was no further ahead (so the shrink did not raise the HW above it).
"""

from __future__ import annotations

from broker.replica.replication import LeaderState, ProposeIsr

LAG = 10_000


def proposals(actions) -> list[ProposeIsr]:
    return [a for a in actions if isinstance(a, ProposeIsr)]


def test_a_dropped_replica_that_stopped_fetching_is_not_proposed_back():
    ls = LeaderState(1, [1, 2, 3], [1, 2, 3], 5, 7, 5, 0, LAG, 0)
    ls.on_follower_fetch(2, 5, 5, 0)
    ls.on_follower_fetch(3, 5, 5, 0)  # the last fetch of 3: it dies here
    assert ls.high_watermark == 5
    ls.on_follower_fetch(2, 5, 5, LAG)  # 2 is caught up (the leader has nothing newer)
    ls.on_leader_append(10, LAG + 1)
    assert proposals(ls.tick(LAG + 2, 10)) == [ProposeIsr((1, 2), 7)]  # 3 lags; 2 does not (yet)
    # The shrink does not raise the HW above 3's last offset (2 is at 5 too): 3 still looks eligible,
    # but it has not fetched since it was dropped.
    assert proposals(ls.on_isr_committed([1, 2], 8)) == []
    assert ls.high_watermark == 5
    assert proposals(ls.on_follower_fetch(2, 5, 10, LAG + 3)) == []
    assert ls.maximal_isr == [1, 2]
    # 2 catches up: the HW moves, which it could not while a dead 3 was (again) in the maximal ISR.
    ls.on_follower_fetch(2, 10, 10, LAG + 4)
    assert ls.high_watermark == 10


def test_a_replica_that_fetches_again_is_proposed_on_its_own_fetch():
    ls = LeaderState(1, [1, 2, 3], [1, 2], 5, 7, 10, 10, LAG, 0)
    ls.on_follower_fetch(2, 10, 10, 1)
    assert proposals(ls.on_follower_fetch(3, 4, 10, 2)) == []  # behind the HW
    assert proposals(ls.on_follower_fetch(3, 10, 10, 3)) == [ProposeIsr((1, 2, 3), 7)]


def test_a_replica_caught_up_while_a_proposal_was_pending_joins_on_its_next_fetch():
    ls = LeaderState(1, [1, 2, 3], [1, 2], 5, 7, 10, 10, LAG, 0)
    ls.on_follower_fetch(2, 10, 10, 1)
    assert proposals(ls.remove_replicas([2])) == [ProposeIsr((1,), 7)]
    assert proposals(ls.on_follower_fetch(3, 10, 10, 2)) == []  # one proposal at a time
    assert proposals(ls.on_isr_committed([1], 8)) == []  # waits for 3 to show it is alive
    assert proposals(ls.on_follower_fetch(3, 10, 10, 3)) == [ProposeIsr((1, 3), 8)]
