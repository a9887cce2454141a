"""A leader cut off from its in-sync followers (which still reach the controller) asks to shrink its ISR
below min.insync.replicas; the controller moves the leadership to them instead of leaving the partition
refusing acks=all writes for the whole cut (broker/controller/logic.py ControllerLogic._move_isolated_leader,
docs/ELECTION.md section 6). An ordinary shrink, one that keeps min.insync.replicas, or one whose dropped
members could not satisfy it, is unchanged. Only members the leader heard no fetch from count ("silent",
broker/replica/replication.py LeaderState._silent): followers dropped for being slow make an ordinary shrink, as in
Kafka, so an overloaded cluster does not move leaders and truncate acks=1 records."""

from __future__ import annotations

import pytest

from broker.controller.logic import ControllerLogic
from broker.metadata.image import MetadataImage
from broker.metadata.records import MetadataRecord
from net.errors import ErrorCode, KafkaLiteError
from tests.unit.test_controller import apply


def cluster(min_isr: str | None, n: int = 3, default: int = 1, rf: int = 3) -> tuple[MetadataImage, ControllerLogic]:
    image = MetadataImage()
    logic = ControllerLogic(image, min_insync_default=default)
    for b in range(1, n + 1):
        apply(image, logic.register_broker(b, "127.0.0.1", 9000 + b))
    apply(image, logic.create_topic("t", 1, rf, {} if min_isr is None else {"min.insync.replicas": min_isr}))
    return image, logic


def shrink(
    image: MetadataImage, logic: ControllerLogic, isr: list[int], silent: list[int] | None = None
) -> list[MetadataRecord]:
    """The leader's proposal; `silent` defaults to every member it drops (a leader cut off from them)."""
    p = image.topics["t"].partitions[0]
    if silent is None:
        silent = [r for r in p.isr if r not in isr]
    return logic.alter_partition("t", 0, p.leader, p.leader_epoch, p.partition_epoch, isr, silent)


def test_a_leader_cut_from_every_follower_hands_over_leadership():
    image, logic = cluster("2")
    p = image.topics["t"].partitions[0]
    old, followers = p.leader, [r for r in p.isr if r != p.leader]
    records = shrink(image, logic, [old])
    apply(image, records)
    q = image.topics["t"].partitions[0]
    assert q.leader in followers and q.leader_epoch == p.leader_epoch + 1
    assert sorted(q.isr) == sorted(followers)  # the old leader is out until it catches up again
    assert q.partition_epoch == p.partition_epoch + 1
    assert logic.leader_moves == [("t", 0, old, q.leader)]


def test_the_broker_default_applies_to_topics_without_their_own():
    image, logic = cluster(None, default=2)
    old = image.topics["t"].partitions[0].leader
    apply(image, shrink(image, logic, [old]))
    assert image.topics["t"].partitions[0].leader != old


def test_a_shrink_that_keeps_min_insync_is_an_ordinary_shrink():
    image, logic = cluster("2")
    p = image.topics["t"].partitions[0]
    keep = [p.leader, next(r for r in p.isr if r != p.leader)]
    apply(image, shrink(image, logic, keep))
    q = image.topics["t"].partitions[0]
    assert (q.leader, q.leader_epoch, sorted(q.isr)) == (p.leader, p.leader_epoch, sorted(keep))
    assert logic.leader_moves == []


@pytest.mark.parametrize(
    "min_isr, says_silent",
    [
        # Kafka's behaviour, and what min.insync.replicas=1 asks for: the leader alone takes acks=all writes.
        pytest.param("1", True, id="min-insync-1"),
        # A broker from before the field (AlterPartition without "silent"): no evidence of a cut, no move.
        pytest.param("2", False, id="proposer-without-silent"),
    ],
)
def test_the_leader_keeps_leading_alone(min_isr: str, says_silent: bool):
    image, logic = cluster(min_isr)
    p = image.topics["t"].partitions[0]
    if says_silent:
        apply(image, shrink(image, logic, [p.leader]))
    else:
        apply(image, logic.alter_partition("t", 0, p.leader, p.leader_epoch, p.partition_epoch, [p.leader]))
    q = image.topics["t"].partitions[0]
    assert (q.leader, q.isr) == (p.leader, [p.leader]) and logic.leader_moves == []


def test_no_move_when_the_dropped_replicas_are_too_few_to_take_writes():
    image, logic = cluster("2")
    p = image.topics["t"].partitions[0]
    f1, f2 = [r for r in p.isr if r != p.leader]
    apply(image, logic.fence_broker(f2))  # f2 is gone: only f1 would be left, and min.insync.replicas is 2
    p = image.topics["t"].partitions[0]
    assert sorted(p.isr) == sorted([p.leader, f1])
    apply(image, shrink(image, logic, [p.leader]))
    q = image.topics["t"].partitions[0]
    assert (q.leader, q.isr) == (p.leader, [p.leader]) and logic.leader_moves == []


def test_a_stale_request_is_still_refused_before_anything_moves():
    image, logic = cluster("2")
    p = image.topics["t"].partitions[0]
    with pytest.raises(KafkaLiteError) as e:
        logic.alter_partition("t", 0, p.leader, p.leader_epoch, p.partition_epoch - 1, [p.leader])
    assert e.value.code == ErrorCode.INVALID_UPDATE_VERSION and logic.leader_moves == []


@pytest.mark.parametrize(
    "slow",
    [
        pytest.param(2, id="both-dropped-slow"),
        pytest.param(1, id="one-silent-one-slow"),
    ],
)
def test_followers_dropped_for_being_slow_make_an_ordinary_shrink(slow: int):
    # An overloaded cluster: the followers fetch, but fall more than replica.lag.time.max.ms behind. Moving the
    # leadership to one of them would truncate the old leader's acks=1 records it lacks.
    image, logic = cluster("2")
    p = image.topics["t"].partitions[0]
    followers = [r for r in p.isr if r != p.leader]
    apply(image, shrink(image, logic, [p.leader], silent=followers[slow:]))
    q = image.topics["t"].partitions[0]
    assert (q.leader, q.leader_epoch, q.isr) == (p.leader, p.leader_epoch, [p.leader])
    assert q.partition_epoch == p.partition_epoch + 1 and logic.leader_moves == []


def test_leadership_moves_to_a_silent_member_never_to_a_slow_one():
    # RF=4, min.insync.replicas=2: the leader drops all three followers, two silent (cut off) and one slow.
    # The slow one lacks the old leader's latest acks=1 records and is still fetching from it: it neither
    # leads nor stays in the ISR (the leader dropped it).
    for slow_pick in range(3):
        image, logic = cluster("2", n=4, rf=4)
        p = image.topics["t"].partitions[0]
        followers = [r for r in p.isr if r != p.leader]
        slow = followers[slow_pick]
        cut = [r for r in followers if r != slow]
        apply(image, shrink(image, logic, [p.leader], silent=cut))
        q = image.topics["t"].partitions[0]
        assert q.leader in cut and sorted(q.isr) == sorted(cut) and q.leader_epoch == p.leader_epoch + 1
