"""The latest offset a client sees never goes back (issue 24): KIP-207 at a new leader, leader-epoch checks on
ListOffsets and consumer fetches (KIP-320), and no follower's high watermark in an error answer.

Real Partitions over real Logs on a scratch directory, driven as replica_manager.py drives them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.metadata.image import PartitionState
from broker.replica.partition import FetchSpec, Partition
from broker.replica.replica_manager import ReplicaManager
from client.cluster import ClusterMetadata
from net import batch as batch_fmt
from net.errors import ErrorCode, OffsetNotAvailableError
from net.protocol import OffsetSpec
from net.schema.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

TOPIC = "t"


def partition(tmp_path: Path, broker_id: int) -> Partition:
    log = Log(tmp_path / f"b{broker_id}" / f"{TOPIC}-0", TOPIC, 0, LogConfig.from_props({}))
    return Partition(TOPIC, 0, log, broker_id, 1, 30_000, propose_isr=lambda *a: None)


def records(n: int) -> bytes:
    return b"".join(batch_fmt.build([(0, 0, None, b"v%d" % i, None)], 0, 0) for i in range(n))


def manager(*parts: Partition) -> ReplicaManager:
    rm = ReplicaManager(parts[0].broker_id, None, None, 30_000, lambda *a: None)  # type: ignore[arg-type]
    rm.partitions = {(p.topic, p.partition): p for p in parts}
    return rm


def follower_then_leader(tmp_path: Path) -> tuple[Partition, Partition]:
    """Leader 1 (epoch 1) commits 5 records and appends 3 more, which follower 2 fetches without learning
    that they committed; then 2 becomes the leader of epoch 2 with its HW at 5 and its log end at 8."""
    p1, p2 = partition(tmp_path, 1), partition(tmp_path, 2)
    p1.apply_state(PartitionState(0, 1, 1, [1, 2], [1, 2], 1), 0)
    p2.apply_state(PartitionState(0, 1, 1, [1, 2], [1, 2], 1), 0)
    p1.append_as_leader(records(5), -1, 0)
    p2.append_as_follower(p1.read_for_follower(FetchSpec((TOPIC, 0), 0, 1 << 20, 1, -1), 2, 0).records, 0)
    p1.read_for_follower(FetchSpec((TOPIC, 0), 5, 1 << 20, 1, 1), 2, 0)  # 2 has 5: HW 5
    assert p1.high_watermark == 5
    p1.append_as_leader(records(3), -1, 0)
    answer = p1.read_for_follower(FetchSpec((TOPIC, 0), 5, 1 << 20, 1, 1), 2, 0)
    p2.append_as_follower(answer.records, answer.high_watermark)
    assert (p2.log.log_end_offset, p2.high_watermark) == (8, 5)
    assert manager(p1).list_offset((TOPIC, 0), OffsetSpec.LATEST) == (0, -1, 5)
    p2.apply_state(PartitionState(0, 2, 2, [1, 2], [1, 2], 2), 0)
    return p1, p2


def test_a_new_leader_does_not_answer_the_latest_offset_until_its_hw_reaches_the_epoch_start(tmp_path):
    p1, p2 = follower_then_leader(tmp_path)
    rm = manager(p2)
    # Before: answered 5 (an old leader may have shown up to 8). KIP-207: not answered until the HW is >= 8.
    assert rm.list_offset((TOPIC, 0), OffsetSpec.LATEST) == (int(ErrorCode.OFFSET_NOT_AVAILABLE), -1, -1)
    with pytest.raises(OffsetNotAvailableError):
        p2.latest_offset()
    # A consumer's fetch is refused the same way, without the lagging HW.
    r = rm.read(FetchSpec((TOPIC, 0), 0, 1 << 20), -1)
    assert (r.error, r.high_watermark, r.records) == (int(ErrorCode.OFFSET_NOT_AVAILABLE), -1, b"")
    # The follower (the old leader, truncated to nothing here) catches up: the HW reaches 8.
    p1.apply_state(PartitionState(0, 2, 2, [1, 2], [1, 2], 2), 0)
    answer = p2.read_for_follower(FetchSpec((TOPIC, 0), 8, 1 << 20, 2, 1), 1, 0)
    assert answer.error == 0 and p2.high_watermark == 8
    assert rm.list_offset((TOPIC, 0), OffsetSpec.LATEST) == (0, -1, 8)
    assert rm.read(FetchSpec((TOPIC, 0), 0, 1 << 20), -1).high_watermark == 8


def test_a_restarted_leader_does_not_answer_its_checkpointed_hw(tmp_path):
    """A broker restarted within the session timeout leads again in the same epoch, its HW from a checkpoint
    up to 5 s old: answered as it was, the latest offset went back on the same leader."""
    p = partition(tmp_path, 1)
    p.apply_state(PartitionState(0, 1, 3, [1, 2], [1, 2], 1), 0)
    p.log.append_as_leader(records(8), 3)
    restarted = Partition(TOPIC, 0, p.log, 1, 1, 30_000, propose_isr=lambda *a: None)
    restarted.high_watermark = 5  # replica_manager.apply_image: the checkpoint's
    restarted.apply_state(PartitionState(0, 1, 3, [1, 2], [1, 2], 1), 0)
    assert manager(restarted).list_offset((TOPIC, 0), OffsetSpec.LATEST)[0] == ErrorCode.OFFSET_NOT_AVAILABLE
    restarted.on_follower_fetch(2, 8, 0)
    assert manager(restarted).list_offset((TOPIC, 0), OffsetSpec.LATEST) == (0, -1, 8)


def test_list_offsets_and_fetch_check_the_clients_leader_epoch(tmp_path):
    p = partition(tmp_path, 1)
    p.apply_state(PartitionState(0, 1, 4, [1], [1], 1), 0)
    p.append_as_leader(records(2), -1, 0)
    rm = manager(p)
    assert rm.list_offset((TOPIC, 0), OffsetSpec.LATEST, 4) == (0, -1, 2)
    assert rm.list_offset((TOPIC, 0), OffsetSpec.LATEST, 3)[0] == ErrorCode.FENCED_LEADER_EPOCH
    # A client that knows a newer epoch than this broker: this broker's metadata lags; it must not answer.
    assert rm.list_offset((TOPIC, 0), OffsetSpec.LATEST, 5)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert rm.read(FetchSpec((TOPIC, 0), 0, 1 << 20, 5), -1).error == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_an_error_answer_carries_no_followers_high_watermark(tmp_path):
    p1, p2 = follower_then_leader(tmp_path)
    p1.apply_state(PartitionState(0, 2, 2, [1, 2], [1, 2], 2), 0)  # 1 follows now, its HW 5
    r = manager(p1).read(FetchSpec((TOPIC, 0), 0, 1 << 20), -1)
    assert r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and r.high_watermark == -1


def _metadata(epoch: int, leader: int, topic_id: int = 1) -> MetadataResponse:
    row = MetadataResponsePartition(leader_id=leader, leader_epoch=epoch, replica_nodes=(1, 2), isr_nodes=(1, 2))
    return MetadataResponse(
        brokers=(
            MetadataResponseBroker(node_id=1, host="h", port=1),
            MetadataResponseBroker(node_id=2, host="h", port=2),
        ),
        topics=(MetadataResponseTopic(name=TOPIC, topic_id=uuid.UUID(int=topic_id), partitions=(row,)),),
    )


def test_client_metadata_never_goes_back_to_an_older_leader_epoch():
    md = ClusterMetadata()
    md.update(_metadata(7, 2), None)
    md.update(_metadata(6, 1), None)  # a broker whose metadata lags names the deposed leader
    assert (md.leader(TOPIC, 0), md.leader_epoch(TOPIC, 0)) == (2, 7)
    md.update(_metadata(8, 1), None)
    assert (md.leader(TOPIC, 0), md.leader_epoch(TOPIC, 0)) == (1, 8)
    md.update(_metadata(0, 2, topic_id=2), None)  # deleted and created again: a new topic
    assert (md.leader(TOPIC, 0), md.leader_epoch(TOPIC, 0)) == (2, 0)
