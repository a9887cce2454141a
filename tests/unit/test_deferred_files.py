"""Logs whose files are created later (broker/log/deferred_files.py, issue 25 §4): a partition of a flood is
served at once without a directory, gets its files from the creator thread or at its first write, survives a
restart, and leaves nothing behind when deleted before it had files."""

from __future__ import annotations

import os
import stat

from broker.log.checkpoint import read_checkpoint
from broker.log.log import Log
from broker.log.manager import RECOVERY_POINT_CHECKPOINT, LogManager
from broker.metadata.image import PartitionState
from broker.replica.partition import FetchSpec, Partition
from broker.replica.replica_manager import ReplicaManager
from net.errors import ErrorCode
from tests.unit.test_log_support import FakeClock, batch, config, headers

SEGMENT_FILES = ["00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]


def manager(d, clock=None) -> LogManager:
    m = LogManager([d], config(segment_bytes=1000), clock=clock or FakeClock())
    m.startup()
    return m


def test_a_deferred_log_serves_an_empty_log_without_touching_the_disk(tmp_path):
    d = tmp_path / "t-0"
    lg = Log(d, "t", 0, config(), clean_shutdown=True, clock=FakeClock(), defer_files=True)
    assert not lg.on_disk and not d.exists()
    assert (lg.log_start_offset, lg.log_end_offset, lg.recovery_point) == (0, 0, 0)
    assert lg.read(0, 1000) == b""
    assert lg.offset_for_timestamp(-2) == (0, -1) and lg.offset_for_timestamp(-1) == (0, -1)
    assert lg.offset_for_timestamp(0) is None
    assert lg.end_offset_for_epoch(0) == (-1, -1)
    assert lg.truncate_to(0) is False
    assert lg.roll() is lg.active_segment
    lg.flush()
    assert lg.delete_retention_segments() == 0
    lg.close()
    assert not d.exists()  # nor does closing it create anything


def test_the_first_append_creates_the_files_and_the_data_survives_a_restart(tmp_path):
    d = tmp_path / "data"
    m = manager(d)
    m.file_creator.shutdown()  # no creator: the append must create them itself
    lg = m.get_or_create_log("t", 0, defer_files=True)
    assert not (d / "t-0").exists()
    assert lg.append_as_leader(batch(3), 5).first_offset == 0
    assert lg.on_disk and sorted(os.listdir(d / "t-0")) == [*SEGMENT_FILES, "leader-epoch-checkpoint"]
    expected = lg.read(0, 10**6)
    assert [h.record_count for h in headers(expected)] == [3]
    m.shutdown()

    m = manager(d)
    again = m.get_log("t", 0)
    assert again is not None and again.on_disk
    assert (again.log_end_offset, again.latest_epoch) == (3, 5)
    assert again.read(0, 10**6) == expected
    m.shutdown()


def test_a_follower_append_and_a_full_truncation_create_the_files(tmp_path):
    leader = Log(tmp_path / "leader", "t", 0, config(), clock=FakeClock())
    leader.append_as_leader(batch(2), 1)
    follower = Log(tmp_path / "f", "t", 0, config(), clean_shutdown=True, clock=FakeClock(), defer_files=True)
    follower.append_as_follower(leader.read(0, 10**6))
    assert follower.on_disk and follower.log_end_offset == 2 and follower.read(0, 10**6) == leader.read(0, 10**6)

    behind = Log(tmp_path / "b", "t", 0, config(), clean_shutdown=True, clock=FakeClock(), defer_files=True)
    behind.truncate_fully_and_start_at(7)
    assert behind.on_disk and (behind.log_start_offset, behind.log_end_offset) == (7, 7)
    assert (tmp_path / "b" / "00000000000000000007.log").exists()


def test_the_creator_thread_makes_the_same_files_with_the_owner_only_modes(tmp_path):
    d = tmp_path / "data"
    old = os.umask(0o077)  # the broker's (broker/security/file_modes.py)
    try:
        m = manager(d)
        eager = m.get_or_create_log("t", 0)
        lazy = [m.get_or_create_log("t", p, defer_files=True) for p in range(1, 20)]
        assert m.file_creator.wait_idle(30)
    finally:
        os.umask(old)
    assert all(lg.on_disk for lg in lazy)
    for p in range(20):
        pd = d / f"t-{p}"
        assert sorted(os.listdir(pd)) == sorted(os.listdir(eager.dir)) == SEGMENT_FILES
        assert stat.S_IMODE(pd.stat().st_mode) == 0o700
        assert all(stat.S_IMODE((pd / f).stat().st_mode) == 0o600 for f in SEGMENT_FILES)
    assert lazy[0].append_as_leader(batch(1), 0).first_offset == 0  # the files it had replaced the placeholder
    assert headers(lazy[0].read(0, 10**6))[0].record_count == 1
    m.shutdown()


def test_a_deferred_log_deleted_before_it_had_files_leaves_nothing(tmp_path):
    d = tmp_path / "data"
    m = manager(d)
    m.file_creator.shutdown()  # the creator never gets to it
    m.get_or_create_log("gone", 0, defer_files=True)
    assert m.delete_log("gone", 0) is True
    assert m.get_log("gone", 0) is None
    assert not [n for n in os.listdir(d) if n.startswith("gone")]
    # and a creation asked for after the delete does nothing
    lg = Log(tmp_path / "x-0", "x", 0, config(), clean_shutdown=True, clock=FakeClock(), defer_files=True)
    lg.close()
    assert lg.create_files() is False and not (tmp_path / "x-0").exists()
    m.shutdown()


def test_a_restart_before_the_files_existed_recreates_the_partition_empty(tmp_path):
    d = tmp_path / "data"
    m = manager(d)
    m.file_creator.shutdown()
    m.get_or_create_log("t", 0, defer_files=True)
    m.shutdown()
    assert read_checkpoint(d / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 0}  # harmless: no directory to load
    m = manager(d)
    assert m.get_log("t", 0) is None  # the metadata creates it again, empty
    lg = m.get_or_create_log("t", 0, defer_files=True)
    assert m.file_creator.wait_idle(30) and lg.on_disk
    m.shutdown()


def test_a_partition_on_a_deferred_log_answers_fetch_and_list_offsets_then_takes_a_produce(tmp_path):
    m = manager(tmp_path / "data")
    m.file_creator.shutdown()  # the files come with the produce
    lg = m.get_or_create_log("t", 0, defer_files=True)
    rm = ReplicaManager(1, m, lambda t: config(), 10_000, lambda *a: None)
    part = Partition("t", 0, lg, 1, 1, 10_000, lambda *a: None)
    part.apply_state(PartitionState(0, 1, 0, [1], [1]), 0)
    rm.partitions[("t", 0)] = part
    assert rm.list_offset(("t", 0), -2) == (0, -1, 0) and rm.list_offset(("t", 0), -1) == (0, -1, 0)
    assert rm.list_offset(("t", 0), 1000) == (0, -1, -1)
    r = rm.read(FetchSpec(("t", 0), 0, 1000), -1)
    assert (r.error, r.high_watermark, r.records) == (0, 0, b"")
    assert rm.read(FetchSpec(("t", 0), 1, 1000), -1).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert not lg.on_disk
    results, _ = rm.append_records(1, {("t", 0): batch(2)})
    assert results[("t", 0)].error == 0 and lg.on_disk
    r = rm.read(FetchSpec(("t", 0), 0, 10**6), -1)
    assert [h.record_count for h in headers(r.records)] == [2] and r.high_watermark == 2
    m.shutdown()
