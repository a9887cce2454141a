from __future__ import annotations

import logging
import os

from broker.log.checkpoint import read_checkpoint
from broker.log.manager import (
    CLEAN_SHUTDOWN_FILE,
    HW_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
    parse_log_dir_name,
)
from tests.unit.test_log_support import FakeClock, batch, config, headers


def manager(dirs, clock=None, **kw) -> LogManager:
    m = LogManager(list(dirs), config(**kw), clock=clock or FakeClock())
    m.startup()
    return m


def test_parse_log_dir_name_splits_at_last_dash():
    assert parse_log_dir_name("my-topic-12") == ("my-topic", 12)
    assert parse_log_dir_name("orders-0") == ("orders", 0)
    assert parse_log_dir_name("orders") is None
    assert parse_log_dir_name("orders-x") is None
    assert parse_log_dir_name("-3") is None


def test_restart_round_trip_after_clean_shutdown(tmp_path):
    d = tmp_path / "data"
    m = manager([d], segment_bytes=1000)
    a = m.get_or_create_log("my-topic", 0)
    b = m.get_or_create_log("my-topic", 1)
    assert m.get_or_create_log("my-topic", 0) is a
    for _ in range(20):
        a.append_as_leader(batch(2, value=b"a" * 50), 3)
    b.append_as_leader(batch(1), 3)
    expected = a.read(0, 10**6)
    m.shutdown()
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    assert read_checkpoint(d / RECOVERY_POINT_CHECKPOINT) == {("my-topic", 0): 40, ("my-topic", 1): 1}
    assert read_checkpoint(d / LOG_START_OFFSET_CHECKPOINT) == {("my-topic", 0): 0, ("my-topic", 1): 0}

    m = manager([d], segment_bytes=1000)
    assert m.had_clean_shutdown[d] and not (d / CLEAN_SHUTDOWN_FILE).exists()
    assert sorted((lg.topic, lg.partition) for lg in m.all_logs()) == [("my-topic", 0), ("my-topic", 1)]
    a = m.get_log("my-topic", 0)
    assert (a.log_end_offset, a.recovery_point, a.latest_epoch) == (40, 40, 3)
    assert a.read(0, 10**6) == expected
    assert a.append_as_leader(batch(1), 3).first_offset == 40
    m.shutdown()


def test_crash_recovers_from_recovery_point(tmp_path):
    d = tmp_path / "data"
    clock = FakeClock()
    m = manager([d], clock, segment_bytes=1000)
    lg = m.get_or_create_log("t", 0)
    for _ in range(20):
        lg.append_as_leader(batch(2, value=b"c" * 50), 0)
    m.flush_dirty()  # flush.ms not due: only rolled segments are synced
    rp = read_checkpoint(d / RECOVERY_POINT_CHECKPOINT)[("t", 0)]
    assert rp == lg.active_segment.base_offset > 0
    lg.append_as_leader(batch(2, value=b"c" * 50), 0)
    leo, active = lg.log_end_offset, lg.active_segment
    os.truncate(active.path, active.size - 5)  # the process dies mid-write: no clean shutdown marker
    m2 = manager([d], clock, segment_bytes=1000)
    assert not m2.had_clean_shutdown[d]
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset == leo - 2
    assert [h.base_offset for h in headers(lg2.read(leo - 4, 10**6))] == [leo - 4]
    m2.shutdown()


def test_flush_dirty_honours_flush_ms(tmp_path):
    clock = FakeClock()
    m = manager([tmp_path], clock, segment_bytes=1000, flush_ms=5000)
    lg = m.get_or_create_log("t", 0)
    for _ in range(20):
        lg.append_as_leader(batch(2, value=b"f" * 50), 0)
    m.flush_dirty()
    assert 0 < lg.recovery_point == lg.active_segment.base_offset < lg.log_end_offset
    clock.advance(5000)
    m.flush_dirty()
    assert lg.recovery_point == lg.log_end_offset
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("t", 0): lg.log_end_offset}
    m.shutdown()


def test_delete_dirs_and_strays_on_startup(tmp_path, caplog):
    (tmp_path / "old-0.0123abc-delete").mkdir()
    (tmp_path / "old-0.0123abc-delete" / "00000000000000000000.log").write_bytes(b"x")
    (tmp_path / "not_a_partition").mkdir()
    with caplog.at_level(logging.WARNING):
        m = manager([tmp_path])
    assert not (tmp_path / "old-0.0123abc-delete").exists()
    assert m.all_logs() == []
    assert "not_a_partition" in caplog.text
    m.shutdown()


def test_delete_log(tmp_path):
    m = manager([tmp_path])
    lg = m.get_or_create_log("gone", 0)
    lg.append_as_leader(batch(1), 0)
    assert m.delete_log("gone", 0)
    assert not m.delete_log("gone", 0)
    assert m.get_log("gone", 0) is None
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []
    m.checkpoint()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {}
    m.shutdown()


def test_multiple_data_dirs_balance_and_reload(tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    m = manager(dirs)
    for p in range(4):
        m.get_or_create_log("t", p).append_as_leader(batch(p + 1), 0)
    assert [len([x for x in d.iterdir() if x.is_dir()]) for d in dirs] == [2, 2]
    m.shutdown()
    m = manager(dirs)
    assert sorted(lg.log_end_offset for lg in m.all_logs()) == [1, 2, 3, 4]
    assert all(m.had_clean_shutdown[d] for d in dirs)
    m.shutdown()


def test_malformed_checkpoint_means_full_recovery(tmp_path, caplog):
    m = manager([tmp_path])
    m.get_or_create_log("t", 0).append_as_leader(batch(3), 0)
    m.shutdown()
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n5\nt 0\n")
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    with caplog.at_level(logging.WARNING):
        m = manager([tmp_path])
    assert "recovery-point-offset-checkpoint" in caplog.text
    lg = m.get_log("t", 0)
    assert (lg.log_end_offset, lg.recovery_point) == (3, 0)
    m.shutdown()


def test_cleanup_applies_retention_and_checkpoints_log_start(tmp_path):
    clock = FakeClock(10**7)
    m = manager([tmp_path], clock, segment_bytes=600, retention_ms=1000)
    lg = m.get_or_create_log("t", 0)
    for i in range(10):
        lg.append_as_leader(batch(2, ts=10**7 - 5000 + i, value=b"o" * 100), 0)
    n = len(lg.segments)
    assert m.cleanup() == n - 1
    assert lg.log_start_offset == lg.active_segment.base_offset > 0
    m.checkpoint()
    assert read_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("t", 0): lg.log_start_offset}
    m.shutdown()
    m = manager([tmp_path], clock, segment_bytes=600, retention_ms=1000)
    assert m.get_log("t", 0).log_start_offset == lg.log_start_offset
    m.shutdown()


def test_high_watermark_checkpoint_is_capped_at_the_log_end_and_read_back(tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager([d1, d2])
    a = m.get_or_create_log("t", 0)
    b = m.get_or_create_log("t", 1)
    a.append_as_leader(batch(5), 1)
    b.append_as_leader(batch(3), 1)
    where = {lg.partition: lg.dir.parent for lg in (a, b)}
    # Partition 1 heard of a HW above what it holds (a follower can); an unknown partition is left out.
    m.checkpoint_high_watermarks({("t", 0): 4, ("t", 1): 9, ("gone", 0): 7})
    assert read_checkpoint(where[0] / HW_CHECKPOINT) == {("t", 0): 4} | ({("t", 1): 3} if where[1] == where[0] else {})
    assert read_checkpoint(where[1] / HW_CHECKPOINT).get(("t", 1)) == 3
    m.shutdown({("t", 0): 5, ("t", 1): 3})
    m = manager([d1, d2])
    assert m.checkpointed_high_watermarks == {("t", 0): 5, ("t", 1): 3}
