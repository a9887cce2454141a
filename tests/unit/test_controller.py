from __future__ import annotations

import pytest

from broker.controller.logic import AlterPartitionError, ControllerLogic
from broker.metadata.image import MetadataImage
from broker.metadata.records import MetadataRecord
from net.errors import (
    ErrorCode,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaLiteError,
    TopicAlreadyExistsError,
)


def cluster(n: int = 3) -> tuple[MetadataImage, ControllerLogic]:
    image = MetadataImage()
    logic = ControllerLogic(image)
    for b in range(1, n + 1):
        apply(image, logic.register_broker(b, "127.0.0.1", 9000 + b))
    return image, logic


def apply(image: MetadataImage, records: list[MetadataRecord]) -> None:
    """Commit the controller's records as the log does: each written as its dict, applied in order."""
    for rec in records:
        image.apply(image.offset + 1, rec.to_dict())


def test_create_spreads_leaders_and_replicas():
    image, logic = cluster(3)
    apply(image, logic.create_topic("t", 6, 3, {}))
    parts = image.topics["t"].partitions
    assert sorted(p.leader for p in parts.values()) == [1, 1, 2, 2, 3, 3]
    assert all(sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas for p in parts.values())
    with pytest.raises(TopicAlreadyExistsError):
        logic.create_topic("t", 1, 1, {})
    with pytest.raises(InvalidReplicationFactorError):
        logic.create_topic("u", 1, 4, {})


def test_fencing_moves_leadership_to_isr_with_bumped_epoch_and_fewest_leaderships():
    image, logic = cluster(3)
    apply(image, logic.create_topic("t", 3, 3, {}))
    led_by_1 = [p for p in image.topics["t"].partitions.values() if p.leader == 1]
    before = {p.partition: p.leader_epoch for p in led_by_1}
    apply(image, logic.fence_broker(1))
    for p in image.topics["t"].partitions.values():
        assert 1 not in p.isr and p.leader != 1
        if p.partition in before:
            assert p.leader_epoch == before[p.partition] + 1
    assert image.brokers[1].fenced
    # 3 partitions over brokers 2 and 3: the tie-break keeps them balanced (2 and 1, not 3 and 0)
    counts = sorted(image.leaderships(b) for b in (2, 3))
    assert counts == [1, 2]


def test_last_isr_member_stays_in_isr_and_unclean_election():
    image, logic = cluster(2)
    apply(image, logic.create_topic("t", 1, 2, {}))
    p = image.topics["t"].partitions[0]
    apply(image, logic.alter_partition("t", 0, p.leader, p.leader_epoch, p.partition_epoch, [p.leader]))
    leader = p.leader
    other = 3 - leader
    apply(image, logic.fence_broker(leader))
    p = image.topics["t"].partitions[0]
    assert p.leader == -1 and p.isr == [leader], "no clean leader: the partition is offline, ISR kept"
    # the out-of-sync replica may lead only with unclean.leader.election.enable
    apply(image, logic.set_configs("t", {"unclean.leader.election.enable": "true"}))
    apply(image, logic.register_broker(other, "127.0.0.1", 9000 + other))
    p = image.topics["t"].partitions[0]
    assert p.leader == other and p.isr == [other]


def test_returning_broker_regains_an_offline_partition():
    image, logic = cluster(1)
    apply(image, logic.create_topic("t", 1, 1, {}))
    apply(image, logic.fence_broker(1))
    assert image.topics["t"].partitions[0].leader == -1
    apply(image, logic.register_broker(1, "127.0.0.1", 9001))
    p = image.topics["t"].partitions[0]
    assert p.leader == 1 and p.leader_epoch == 2


def test_alter_partition_is_fenced_by_leader_and_partition_epoch():
    image, logic = cluster(3)
    apply(image, logic.create_topic("t", 1, 3, {}))
    p = image.topics["t"].partitions[0]
    with pytest.raises(AlterPartitionError):
        logic.alter_partition("t", 0, p.leader, p.leader_epoch - 1, p.partition_epoch, [p.leader])
    with pytest.raises(AlterPartitionError):
        logic.alter_partition("t", 0, p.leader, p.leader_epoch, p.partition_epoch + 5, [p.leader])
    not_leader = next(r for r in p.replicas if r != p.leader)
    with pytest.raises(AlterPartitionError):
        logic.alter_partition("t", 0, not_leader, p.leader_epoch, p.partition_epoch, [not_leader])
    apply(image, logic.alter_partition("t", 0, p.leader, p.leader_epoch, p.partition_epoch, [p.leader]))
    assert image.topics["t"].partitions[0].isr == [p.leader]


def test_manual_replica_assignments_place_replicas_as_asked_or_are_refused_as_kafka_refuses_them():
    image, logic = cluster(3)
    apply(image, logic.fence_broker(3))
    apply(image, logic.create_topic("manual", -1, -1, {}, [[1, [3, 1]], [0, [2, 3]]]))
    parts = image.topics["manual"].partitions
    # The first live replica leads; a fenced one is a replica outside the ISR until it is back.
    assert (parts[0].replicas, parts[0].leader, parts[0].isr) == ([2, 3], 2, [2])
    assert (parts[1].replicas, parts[1].leader, parts[1].isr) == ([3, 1], 1, [1])
    refused = {
        "counts given too": (dict(num_partitions=2, replication_factor=-1), [[0, [1, 2]], [1, [2, 1]]]),
        "a gap in the partitions": ({}, [[0, [1, 2]], [2, [2, 1]]]),
        "a partition twice": ({}, [[0, [1, 2]], [0, [2, 1]]]),
        "a broker twice": ({}, [[0, [1, 1]]]),
        "an unknown broker": ({}, [[0, [1, 7]]]),
        "two replication factors": ({}, [[0, [1, 2]], [1, [2]]]),
        "only fenced brokers": ({}, [[0, [3]]]),
        "not broker ids": ({}, [[0, ["1"]]]),
        "no replicas": ({}, [[0, []]]),
        "not rows": ({}, [7]),
    }
    for what, (counts, assignments) in refused.items():
        args = {"num_partitions": -1, "replication_factor": -1, **counts}
        with pytest.raises(KafkaLiteError) as e:
            logic.create_topic("t", args["num_partitions"], args["replication_factor"], {}, assignments)
        want = (
            ErrorCode.INVALID_REQUEST
            if what in ("counts given too", "not rows")
            else ErrorCode.INVALID_REPLICA_ASSIGNMENT
        )
        assert e.value.code == want, what
    assert "t" not in image.topics


def test_manual_assignments_of_new_partitions():
    image, logic = cluster(3)
    apply(image, logic.create_topic("grow", 1, 2, {}))
    with pytest.raises(InvalidReplicaAssignmentError, match="2 partitions .* 1 replica assignments"):
        logic.create_partitions("grow", 3, [[1, 2]])
    with pytest.raises(InvalidReplicaAssignmentError, match="has 3 replicas"):
        logic.create_partitions("grow", 2, [[1, 2, 3]])
    apply(image, logic.create_partitions("grow", 3, [[3, 1], [2, 3]]))
    parts = image.topics["grow"].partitions
    assert [(parts[p].replicas, parts[p].leader) for p in (1, 2)] == [([3, 1], 3), ([2, 3], 2)]


def test_a_fenced_broker_stays_listed_for_a_session_timeout_but_leads_nothing(monkeypatch):
    """Kafka listeners' Metadata keeps naming a broker fenced less than a session timeout ago (as Kafka, whose
    clients see a crashed broker until its session expires), so a client never forgets a broker that restarts at
    once."""
    import broker.metadata.image as image_module

    clock = [1000.0]
    monkeypatch.setattr(image_module.time, "monotonic", lambda: clock[0])
    image, logic = cluster(3)
    apply(image, logic.create_topic("t", 3, 3, {}))
    apply(image, logic.fence_broker(2))
    assert image.live_brokers() == [1, 3]
    assert [b.id for b in image.listed_brokers(9.0)] == [1, 2, 3]
    assert all(p.leader != 2 for p in image.topics["t"].partitions.values())
    clock[0] += 9.5
    assert [b.id for b in image.listed_brokers(9.0)] == [1, 3]
    apply(image, logic.register_broker(2, "127.0.0.1", 9002))  # back: live and listed again
    assert image.live_brokers() == [1, 2, 3]
    apply(image, logic.fence_broker(2))
    clock[0] += 1.0
    assert [b.id for b in image.listed_brokers(9.0)] == [1, 2, 3]  # a new fencing starts a new timeout
