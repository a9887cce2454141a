"""Preferred leaders: the automatic rebalance's decision (broker/controller/leader_balance.py) and ElectLeaders'
outcomes
(ControllerLogic.elect_leaders), on metadata images built by the real controller logic."""

from __future__ import annotations

import pytest

from broker.controller.leader_balance import RebalancePolicy, imbalance_by_broker, rebalance_candidates
from broker.controller.logic import ControllerLogic
from broker.metadata.image import NO_LEADER, MetadataImage, PartitionState, TopicInfo
from broker.server.config import BrokerConfig
from net.errors import ErrorCode, InvalidConfigError
from net.protocol import ElectionType
from tests.unit.test_controller import apply

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


def cluster(n: int = 3) -> tuple[MetadataImage, ControllerLogic]:
    image = MetadataImage()
    logic = ControllerLogic(image)
    for b in range(1, n + 1):
        apply(image, logic.register_broker(b, "127.0.0.1", 9000 + b))
    return image, logic


def live(image: MetadataImage) -> set[int]:
    return set(image.live_brokers())


def rejoin(image: MetadataImage, logic: ControllerLogic, broker: int) -> None:
    """A restarted broker registers, catches up and is added back to every ISR by the partitions' leaders."""
    apply(image, logic.register_broker(broker, "127.0.0.1", 9000 + broker))
    for t in image.topics.values():
        for p in list(t.partitions.values()):
            if broker in p.replicas and broker not in p.isr:
                isr = p.isr + [broker]
                apply(
                    image, logic.alter_partition(t.name, p.partition, p.leader, p.leader_epoch, p.partition_epoch, isr)
                )


def topic(name: str, leaders_and_replicas: list[tuple[int, list[int]]], isr: list[int] | None = None) -> TopicInfo:
    parts = {
        i: PartitionState(i, leader, 0, replicas, list(isr if isr is not None else replicas))
        for i, (leader, replicas) in enumerate(leaders_and_replicas)
    }
    return TopicInfo(name, name, parts)


def test_a_restarted_broker_gets_its_leaderships_back_once_it_is_in_the_isr():
    image, logic = cluster(3)
    apply(image, logic.create_topic("orders", 6, 3, {}))
    assert rebalance_candidates(image.topics.values(), live(image), 10) == []  # balanced from creation
    preferred_by_1 = sorted(
        ("orders", p.partition) for p in image.topics["orders"].partitions.values() if p.replicas[0] == 1
    )
    apply(image, logic.fence_broker(1))
    assert image.leaderships(1) == 0
    assert imbalance_by_broker(image.topics.values())[1].ratio == 1.0
    # fenced, then registered but not caught up: its replicas are not in the ISR, so it may not lead yet
    assert rebalance_candidates(image.topics.values(), live(image), 10) == []
    apply(image, logic.register_broker(1, "127.0.0.1", 9001))
    assert rebalance_candidates(image.topics.values(), live(image), 10) == []
    rejoin(image, logic, 1)
    due = rebalance_candidates(image.topics.values(), live(image), 10)
    assert due == preferred_by_1
    before = {p: image.topics["orders"].partitions[p].leader_epoch for _, p in due}
    records, outcomes = logic.elect_leaders(PREFERRED, due)
    assert outcomes == {tp: None for tp in due}
    apply(image, records)
    for _, p in due:
        state = image.topics["orders"].partitions[p]
        assert state.leader == 1 and state.leader_epoch == before[p] + 1 and sorted(state.isr) == [1, 2, 3]
    assert sorted(image.leaderships(b) for b in (1, 2, 3)) == [2, 2, 2]
    assert rebalance_candidates(image.topics.values(), live(image), 10) == []


@pytest.mark.parametrize(
    "elsewhere, percentage, moved",
    [(1, 10, 0), (2, 10, 2), (1, 0, 1), (10, 100, 0), (10, 99, 10)],
)
def test_the_imbalance_must_be_above_the_percentage_per_broker(elsewhere, percentage, moved):
    """Broker 1 is the preferred leader of 10 partitions; `elsewhere` of them are led by broker 2. Kafka moves
    them only when elsewhere / 10 is strictly above the percentage."""
    rows = [(2 if i < elsewhere else 1, [1, 2]) for i in range(10)]
    t = topic("t", rows)
    assert imbalance_by_broker([t])[1].ratio == elsewhere / 10
    assert len(rebalance_candidates([t], {1, 2}, percentage)) == moved


def test_the_ratio_is_per_broker_not_cluster_wide():
    """Broker 3 leads 1 of its 2 preferred partitions (50%) while the cluster as a whole is 1 in 10 off: only
    broker 3's partition moves, and broker 1 (balanced) keeps all of its own."""
    rows = [(1, [1, 2, 3])] * 8 + [(3, [3, 1, 2]), (1, [3, 1, 2])]
    t = topic("t", rows)
    assert rebalance_candidates([t], {1, 2, 3}, 10) == [("t", 9)]


def test_no_move_to_a_preferred_replica_that_is_dead_or_out_of_the_isr():
    t = topic("t", [(2, [1, 2]), (2, [1, 2])], isr=[2])
    assert rebalance_candidates([t], {1, 2}, 0) == []  # alive, out of the ISR
    u = topic("u", [(2, [1, 2])])
    assert rebalance_candidates([u], {2}, 0) == []  # in the ISR, not alive
    assert rebalance_candidates([u], {1, 2}, 0) == [("u", 0)]


def test_preferred_election_outcomes_have_kafkas_codes():
    image, logic = cluster(3)
    apply(image, logic.create_topic("t", 3, 3, {}))
    led = {p.partition: p.replicas[0] for p in image.topics["t"].partitions.values()}
    _, outcomes = logic.elect_leaders(PREFERRED, [("t", 0), ("t", 3), ("t", -1), ("nope", 0)])
    codes = {tp: e.code if e else 0 for tp, e in outcomes.items()}
    assert codes == {
        ("t", 0): ErrorCode.ELECTION_NOT_NEEDED,
        ("t", 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", -1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    # the preferred leader of partition 0 is fenced: PREFERRED_LEADER_NOT_AVAILABLE, and nothing is proposed
    apply(image, logic.fence_broker(led[0]))
    records, outcomes = logic.elect_leaders(PREFERRED, [("t", 0)])
    assert records == [] and outcomes[("t", 0)].code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    # back, but not in the ISR yet: still not available
    apply(image, logic.register_broker(led[0], "127.0.0.1", 9000 + led[0]))
    records, outcomes = logic.elect_leaders(PREFERRED, [("t", 0), ("t", 0)])
    assert records == [] and outcomes[("t", 0)].code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert "not in the ISR" in str(outcomes[("t", 0)])
    rejoin(image, logic, led[0])
    records, outcomes = logic.elect_leaders(PREFERRED, [("t", 0), ("t", 0)])  # asked twice, elected once
    assert outcomes == {("t", 0): None} and len(records) == 1 and records[0].leader == led[0]


def test_all_partitions_leaves_out_those_led_as_asked():
    image, logic = cluster(3)
    apply(image, logic.create_topic("t", 3, 3, {}))
    assert logic.elect_leaders(PREFERRED, None) == ([], {})
    apply(image, logic.fence_broker(2))
    rejoin(image, logic, 2)
    records, outcomes = logic.elect_leaders(PREFERRED, None)
    moved = {("t", p.partition) for p in image.topics["t"].partitions.values() if p.replicas[0] == 2}
    assert set(outcomes) == moved and all(e is None for e in outcomes.values()) and len(records) == len(moved)


def test_unclean_election_only_for_a_partition_without_a_leader():
    image, logic = cluster(2)
    apply(image, logic.create_topic("t", 1, 2, {}))
    p = image.topics["t"].partitions[0]
    leader, other = p.leader, 3 - p.leader
    _, outcomes = logic.elect_leaders(UNCLEAN, [("t", 0)])
    assert outcomes[("t", 0)].code == ErrorCode.ELECTION_NOT_NEEDED
    # the follower falls out of the ISR, then the leader dies: the partition is offline
    apply(image, logic.alter_partition("t", 0, leader, p.leader_epoch, p.partition_epoch, [leader]))
    apply(image, logic.fence_broker(leader))
    assert image.topics["t"].partitions[0].leader == NO_LEADER
    # a preferred election cannot help (the ISR member is dead); an unclean one takes the live replica
    assert logic.elect_leaders(PREFERRED, [("t", 0)])[1][("t", 0)] is not None
    records, outcomes = logic.elect_leaders(UNCLEAN, [("t", 0)])
    assert outcomes == {("t", 0): None}
    assert logic.unclean_elections == [("t", 0, other, [leader])]  # reported, so the driver logs the loss
    apply(image, records)
    state = image.topics["t"].partitions[0]
    assert state.leader == other and state.isr == [other]
    # nobody alive at all: ELIGIBLE_LEADERS_NOT_AVAILABLE
    apply(image, logic.fence_broker(other))
    _, outcomes = logic.elect_leaders(UNCLEAN, [("t", 0)])
    assert outcomes[("t", 0)].code == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_broker_configs_have_kafkas_names_and_defaults():
    cfg = BrokerConfig()
    assert cfg.rebalance_policy() == RebalancePolicy(True, 10, 300_000)
    props = {
        "auto.leader.rebalance.enable": "false",
        "leader.imbalance.per.broker.percentage": "25",
        "leader.imbalance.check.interval.seconds": "2",
    }
    assert BrokerConfig.from_props(props).rebalance_policy() == RebalancePolicy(False, 25, 2000)
    for bad in ({"leader.imbalance.per.broker.percentage": "101"}, {"leader.imbalance.check.interval.seconds": "0"}):
        with pytest.raises(InvalidConfigError, match=next(iter(bad))):
            BrokerConfig.from_props(bad)


def test_the_controller_checks_on_its_ticks_first_after_5_s_then_every_interval(monkeypatch):
    """ControllerService runs the decision from its ticks: the first check 5 s after it becomes the active
    controller (as Kafka's), then one per check interval; never with the rebalance off."""
    import asyncio

    from broker.controller import service as controller_service
    from broker.controller.service import ControllerService
    from tests.unit.test_alter_partition import FakeQuorum

    clock = [1_000_000]
    monkeypatch.setattr(controller_service, "_now_ms", lambda: clock[0])

    def unbalanced() -> MetadataImage:
        image, logic = cluster(3)
        image.cluster_id = "c"  # formed: the tick proposes no cluster record
        apply(image, logic.create_topic("t", 6, 3, {}))
        apply(image, logic.fence_broker(1))
        rejoin(image, logic, 1)
        assert image.leaderships(1) == 0
        return image

    async def ticks(policy: RebalancePolicy, at: list[int]) -> list[int]:
        """Tick at each offset (ms after winning); the leaderships of broker 1 after each."""
        image = unbalanced()
        service = ControllerService(1, image, FakeQuorum(image), {}, 2000, "c", rebalance=policy)
        start = clock[0]
        service.on_role(True, 1, 1)
        seen = []
        for offset in at:
            clock[0] = start + offset
            service.tick()
            await asyncio.sleep(0.01)  # the proposal task
            seen.append(image.leaderships(1))
            if image.leaderships(1):  # moved back: broker 1 restarts again, for the next check to find
                apply(image, ControllerLogic(image).fence_broker(1))
                rejoin(image, ControllerLogic(image), 1)
        return seen

    policy = RebalancePolicy(True, 10, 60_000)
    seen = asyncio.run(ticks(policy, [4_999, 5_000, 64_999, 65_000]))
    assert seen == [0, 2, 0, 2]
    seen = asyncio.run(ticks(RebalancePolicy(False, 10, 60_000), [0, 5_000, 600_000]))
    assert seen == [0, 0, 0]
    seen = asyncio.run(ticks(RebalancePolicy(True, 10, 2_000), [1_999, 2_000]))  # interval below 5 s: first at it
    assert seen == [0, 2]
