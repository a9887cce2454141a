"""ControllerLogic's partition reassignments (KIP-455), sans-IO: the records of start, completion and cancel."""

from __future__ import annotations

import pytest

from broker.controller.logic import ControllerLogic
from broker.metadata.image import MetadataImage
from net.errors import ErrorCode, KafkaLiteError
from tests.unit.test_controller import apply, cluster


def logic_with(replicas: list[int]) -> tuple[ControllerLogic, MetadataImage]:
    """Brokers 1-4 alive, topic t with one partition placed on `replicas`."""
    image, logic = cluster(4)
    apply(image, logic.create_topic("t", -1, -1, {}, [[0, replicas]]))
    return logic, image


def test_start_then_completion_when_the_target_is_in_the_isr():
    logic, image = logic_with([1, 2])
    apply(image, logic.reassign("t", 0, [2, 3]))
    p = image.topics["t"].partitions[0]
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr) == ([2, 3, 1], [3], [1], [1, 2])
    assert (p.leader, p.leader_epoch) == (1, 1)
    assert [(t, st.partition) for t, st in logic.list_reassignments(None)] == [("t", 0)]
    # the leader takes 3 into the ISR: that completes it, with a new leader (1 is removed) and epoch
    apply(image, logic.alter_partition("t", 0, 1, 1, p.partition_epoch, [1, 2, 3]))
    p = image.topics["t"].partitions[0]
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.reassigning) == ([2, 3], [2, 3], 2, 2, False)
    assert logic.reassignments_completed == [("t", 0, [2, 3])]


def test_fencing_the_leader_keeps_the_reassignment_and_cancel_reverts():
    logic, image = logic_with([1, 2])
    apply(image, logic.reassign("t", 0, [3, 4]))
    apply(image, logic.fence_broker(1))
    p = image.topics["t"].partitions[0]
    assert p.leader == 2 and (p.adding_replicas, p.removing_replicas) == ([3, 4], [1, 2])
    apply(image, logic.reassign("t", 0, None))
    p = image.topics["t"].partitions[0]
    assert (p.replicas, p.leader, p.reassigning) == ([1, 2], 2, False)
    with pytest.raises(KafkaLiteError) as e:
        logic.reassign("t", 0, None)
    assert e.value.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


@pytest.mark.parametrize(
    ("topic", "partition", "target", "code"),
    [
        ("t", 0, [1, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ("t", 0, [1, 1], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ("t", 0, [], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ("t", 0, "1,2", ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ("t", 3, [1, 2], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 0, [1, 2], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_bad_reassignments_get_kafkas_codes(topic, partition, target, code):
    logic, _ = logic_with([1, 2])
    records, outcomes = logic.alter_reassignments([(topic, partition, target)])
    assert records == [] and outcomes[(topic, partition)].code == code


def test_a_reorder_completes_at_once():
    logic, image = logic_with([1, 2])
    apply(image, logic.reassign("t", 0, [2, 1]))
    p = image.topics["t"].partitions[0]
    assert (p.replicas, p.reassigning, p.leader) == ([2, 1], False, 1)
