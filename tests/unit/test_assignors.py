"""Assignment strategies: coverage, balance, stickiness and the cooperative hand-over."""

from __future__ import annotations

import random

import pytest

from client.assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor, assignors_for
from net.consumer_protocol import Subscription


def subs(n: int, topics=("t",), owned=None) -> dict[str, Subscription]:
    owned = owned or {}
    return {f"m{i}": Subscription(tuple(topics), frozenset(owned.get(f"m{i}", ()))) for i in range(n)}


def flat(a) -> list:
    return sorted(tp for tps in a.values() for tp in tps)


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor()])
@pytest.mark.parametrize("members,partitions", [(1, 3), (3, 3), (2, 5), (5, 3)])
def test_every_partition_once_and_balanced(assignor, members, partitions):
    a = assignor.assign({"t": partitions}, subs(members))
    assert flat(a) == [("t", p) for p in range(partitions)]
    sizes = [len(v) for v in a.values()]
    assert max(sizes) - min(sizes) <= 1
    assert sizes.count(0) == max(0, members - partitions)  # more members than partitions: some idle


def test_range_gives_consecutive_ranges_per_topic():
    a = RangeAssignor().assign({"t": 5}, subs(2))
    assert a == {"m0": {("t", 0), ("t", 1), ("t", 2)}, "m1": {("t", 3), ("t", 4)}}


def test_roundrobin_skips_members_not_subscribed():
    s = {"m0": Subscription(("a", "b")), "m1": Subscription(("b",))}
    a = RoundRobinAssignor().assign({"a": 2, "b": 2}, s)
    assert a["m1"] <= {("b", 0), ("b", 1)} and flat(a) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_cooperative_sticky_keeps_owned_and_withholds_moving_partitions():
    # m0 owned all 6; m1 and m2 join. m0 keeps two, the four that move are withheld this round.
    first = CooperativeStickyAssignor().assign({"t": 6}, subs(3, owned={"m0": [("t", p) for p in range(6)]}))
    assert len(first["m0"]) == 2 and first["m1"] == set() and first["m2"] == set()
    # After m0 revoked them and everyone rejoined, the second round hands them over; m0 keeps its two.
    owned = {m: sorted(tps) for m, tps in first.items()}
    second = CooperativeStickyAssignor().assign({"t": 6}, subs(3, owned=owned))
    assert second["m0"] == first["m0"] and flat(second) == [("t", p) for p in range(6)]
    assert sorted(len(v) for v in second.values()) == [2, 2, 2]


def test_cooperative_sticky_moves_nothing_when_balanced():
    rng = random.Random(3)
    owned = {"m0": [("t", 0), ("t", 3)], "m1": [("t", 1), ("t", 4)], "m2": [("t", 2), ("t", 5)]}
    for _ in range(5):
        a = CooperativeStickyAssignor().assign({"t": 6}, subs(3, owned=owned))
        assert a == {m: set(v) for m, v in owned.items()}
        rng.shuffle(owned["m0"])


def test_unknown_strategy_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown partition.assignment.strategy"):
        assignors_for("sticky-ish")
