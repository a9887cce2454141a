"""DeleteRecords below the handler (issue 27 §2): the log start offset moves up only, survives a reopen through the
checkpoint LogManager writes, is refused past the log end; on a leader Partition, -1 means the high watermark and
anything else outside [0, HW] is OFFSET_OUT_OF_RANGE; the low watermark waits for the in-sync followers' log
starts, which they report in their fetches and take from the leader's answers (handle_fetch_row); and
OffsetForLeaderEpoch answers where an epoch ends. Real Partitions over real Logs, driven as the broker drives them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.manager import LOG_START_OFFSET_CHECKPOINT, LogManager
from broker.metadata.image import PartitionState
from broker.replica.partition import FetchSpec, Partition
from broker.replica.replica_fetcher import handle_fetch_row
from net.errors import NotLeaderOrFollowerError, OffsetOutOfRangeError
from tests.unit.test_latest_offset import partition, records
from tests.unit.test_log_support import batch, config

TOPIC = "t"


def test_the_log_start_moves_up_only_and_not_past_the_end(tmp_path):
    lg = Log(tmp_path / f"{TOPIC}-0", TOPIC, 0, config(segment_bytes=200, retention_ms=-1))
    for _ in range(10):
        lg.append_as_leader(batch(1, value=b"x" * 60), 0)
    assert lg.maybe_increment_log_start_offset(4) and lg.log_start_offset == 4
    assert not lg.maybe_increment_log_start_offset(3) and lg.log_start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        lg.maybe_increment_log_start_offset(11)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(3, 1 << 20)
    assert lg.offset_for_timestamp(-2) == (4, -1)
    # whole segments below it go at the next retention pass; the one holding offset 4 stays
    assert lg.delete_retention_segments() > 0
    assert lg.segments[0].base_offset <= 4 < lg.segments[0].next_offset
    lg.close()


def test_the_log_start_survives_a_restart_through_the_checkpoint(tmp_path):
    lm = LogManager([tmp_path], LogConfig.from_props({}))
    lm.startup()
    lg = lm.get_or_create_log(TOPIC, 0, LogConfig.from_props({}))
    lg.append_as_leader(records(6), 0)
    lg.maybe_increment_log_start_offset(5)
    lm.checkpoint()  # what DeleteRecords does before answering
    assert (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text().splitlines()[-1] == f"{TOPIC} 0 5"
    # a crash: nothing more is written (no shutdown checkpoint, no clean-shutdown marker)
    lm.cleaner.shutdown()
    lm.file_creator.shutdown()
    lg.close()
    again = LogManager([tmp_path], LogConfig.from_props({}))
    again.startup()
    assert again.get_or_create_log(TOPIC, 0, LogConfig.from_props({})).log_start_offset == 5
    again.shutdown()


def leader_and_follower(tmp_path: Path) -> tuple[Partition, Partition]:
    """Leader 1 and follower 2 (ISR [1, 2]), 8 records committed on both."""
    p1, p2 = partition(tmp_path, 1), partition(tmp_path, 2)
    for p in (p1, p2):
        p.apply_state(PartitionState(0, 1, 1, [1, 2], [1, 2], 1), 0)
    p1.append_as_leader(records(8), -1, 0)
    fetch(p1, p2)
    fetch(p1, p2)  # the second fetch tells the leader the follower has 8: HW 8
    assert p1.high_watermark == 8 and p2.log.log_end_offset == 8
    return p1, p2


def fetch(leader: Partition, follower: Partition) -> None:
    """One follower fetch, answered and handled as the replica fetcher does."""
    fs = follower.follower_state
    assert fs is not None
    offset, last_epoch, epoch = fs.next_fetch()
    spec = FetchSpec((TOPIC, 0), offset, 1 << 20, epoch, last_epoch, follower.log.log_start_offset)
    handle_fetch_row(follower, 1, leader.read_for_follower(spec, follower.broker_id, 0).typed(follower.partition))


def test_delete_records_on_the_leader_and_the_low_watermark(tmp_path):
    p1, p2 = leader_and_follower(tmp_path)
    with pytest.raises(OffsetOutOfRangeError):
        p1.delete_records(9)  # above the high watermark
    with pytest.raises(OffsetOutOfRangeError):
        p1.delete_records(-2)
    with pytest.raises(NotLeaderOrFollowerError):
        p2.delete_records(1)
    assert p1.delete_records(3) == 3 and p1.log.log_start_offset == 3
    assert p1.low_watermark() == 0  # the follower still starts at 0
    fetch(p1, p2)  # the answer carries 3: the follower takes it
    assert p2.log.log_start_offset == 3
    fetch(p1, p2)  # its next fetch reports it
    assert p1.low_watermark() == 3
    assert p1.delete_records(-1) == 8  # -1: the high watermark

    async def wait() -> int:
        waiting = asyncio.ensure_future(p1.wait_for_low_watermark(8, 5))
        await asyncio.sleep(0)
        assert not waiting.done()
        fetch(p1, p2)
        fetch(p1, p2)
        return await waiting

    assert asyncio.run(wait()) == 8 and p2.log.log_start_offset == 8

    async def timeout() -> None:
        p1.append_as_leader(records(1), -1, 0)
        fetch(p1, p2)
        fetch(p1, p2)
        p1.delete_records(9)
        await p1.wait_for_low_watermark(9, 0.05)  # the follower does not fetch: not reached

    with pytest.raises(TimeoutError):
        asyncio.run(timeout())


def test_offset_for_leader_epoch_on_the_leader(tmp_path):
    p1, p2 = leader_and_follower(tmp_path)
    assert p1.last_offset_for_leader_epoch(1, 1) == (1, 8)  # the current epoch ends at the log end
    # epoch 0, older than any here: itself and where the first known epoch (1) starts, as Kafka's cache answers
    assert p1.last_offset_for_leader_epoch(-1, 0) == (0, 0)
    assert p1.last_offset_for_leader_epoch(-1, -1) == (-1, -1)
    p1.apply_state(PartitionState(0, 1, 3, [1, 2], [1, 2], 3), 0)  # leader again in epoch 3
    p1.append_as_leader(records(2), -1, 0)
    assert p1.last_offset_for_leader_epoch(3, 1) == (1, 8)  # epoch 1's records end where epoch 3's begin
    assert p1.last_offset_for_leader_epoch(3, 2) == (1, 8)  # no epoch 2 here: the largest below it
    assert p1.last_offset_for_leader_epoch(3, 3) == (3, 10)
    with pytest.raises(Exception, match="older"):
        p1.last_offset_for_leader_epoch(1, 1)  # a client with older metadata is fenced
