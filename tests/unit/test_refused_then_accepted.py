"""A leader refuses a produce before writing it (the ISR below min.insync.replicas, or not the leader yet), then
accepts a request pipelined behind it once the cause has passed: the second may not be appended past the first's
sequences when the producer has no state here (ci97, seed 962: librdkafka counted the refused batch as written
when the later one succeeded, and it was lost). Real Partitions over real Logs, driven as the broker drives them."""

from __future__ import annotations

import pytest

from broker.metadata.image import PartitionState
from net import batch as batch_fmt
from net.errors import NotEnoughReplicasError, NotLeaderOrFollowerError, OutOfOrderSequenceError
from tests.unit.test_latest_offset import partition


def idempotent(seq: int, n: int = 1, pid: int = 7) -> bytes:
    records = [(i, 0, None, b"r%d" % (seq + i), None) for i in range(n)]
    return batch_fmt.build(records, 0, 0, producer_id=pid, producer_epoch=0, base_sequence=seq)


def test_a_request_behind_one_refused_for_the_isr_is_out_of_order(tmp_path):
    p = partition(tmp_path, 1)
    p.min_insync_replicas = 2
    p.apply_state(PartitionState(0, 1, 1, [1, 2], [1], 1), 0)  # ISR [1]: below min.insync.replicas
    with pytest.raises(NotEnoughReplicasError):
        p.append_as_leader(idempotent(0, n=2), -1, 0)
    p.apply_state(PartitionState(0, 1, 1, [1, 2], [1, 2], 2), 0)  # the follower caught up meanwhile
    with pytest.raises(OutOfOrderSequenceError):
        p.append_as_leader(idempotent(2), -1, 0)
    assert p.log.log_end_offset == 0
    assert p.append_as_leader(idempotent(0, n=2), -1, 0) == [0]  # the retry of the refused batch
    assert p.append_as_leader(idempotent(2), -1, 0) == [2]


def test_a_request_behind_one_refused_before_leadership_is_out_of_order(tmp_path):
    p = partition(tmp_path, 1)
    p.apply_state(PartitionState(0, 2, 1, [1, 2], [1, 2], 1), 0)  # broker 2 leads, 1 follows
    with pytest.raises(NotLeaderOrFollowerError):
        p.append_as_leader(idempotent(0), -1, 0)
    p.apply_state(PartitionState(0, 1, 2, [1, 2], [1, 2], 2), 0)  # 1 leads now
    with pytest.raises(OutOfOrderSequenceError):
        p.append_as_leader(idempotent(1), 1, 0)
    assert p.append_as_leader(idempotent(0), 1, 0) == [0]
