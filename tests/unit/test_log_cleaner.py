"""Log compaction: broker/log/cleaner.py and the log's swap and recovery of cleaned segments."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from crc32c import crc32c

import broker.log.log as log_module
import broker.log.swap as swap_module
from broker.log.checkpoint import read_checkpoint
from broker.log.cleaner import (
    CLEANER_CHECKPOINT,
    CleanerAborted,
    CleanStats,
    HorizonScan,
    LogCleaner,
    rebuild_batch,
)
from broker.log.log import Log
from broker.log.manager import LogManager
from broker.log.segment import LogSegment
from net.batch import (
    CRC_OFFSET,
    CRC_START,
    TIMESTAMP_LOG_APPEND,
    BatchHeader,
    build,
    iter_batches,
    parse_header,
    records_of,
    stamp,
)
from net.compression import CODEC_LZ4, CODEC_ZSTD
from net.errors import CorruptMessageError, InvalidConfigError
from tests.unit.test_log_support import FakeClock, config

TP = ("t", 0)
Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


def kv_batch(pairs: list[tuple[bytes | None, bytes | None]], ts: int = 1000, codec: int = 0) -> bytes:
    """A producer batch of keyed records."""
    return build([[i, i, k, v, []] for i, (k, v) in enumerate(pairs)], ts, ts + len(pairs) - 1, codec)


def open_log(tmp_path: Path, clock: FakeClock, clean: bool = True, **kw: object) -> Log:
    kw = {"cleanup_policy": "compact", "segment_bytes": 400, **kw}
    return Log(tmp_path / "t-0", "t", 0, config(**kw), clean_shutdown=clean, clock=clock)


def clean(cleaner: LogCleaner, lg: Log) -> list[CleanStats]:
    return cleaner.clean_logs({lg.dir.parent: {TP: lg}})


def walk(lg: Log) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """(data, position, header) of every batch from the log start to the end, the way a consumer walks it."""
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, 10**6)
        if not data:
            break
        for pos, h in iter_batches(data, validate_crc=True):
            yield data, pos, h
            offset = h.next_offset


def read_all(lg: Log) -> list[Record]:
    """Every record from the log start to the end."""
    start = lg.log_start_offset  # a batch may begin below it (DeleteRecords)
    return [
        (h.base_offset + r[0], r[2], r[3])
        for data, pos, h in walk(lg)
        for r in records_of(data, pos, h)
        if h.base_offset + r[0] >= start
    ]


def latest_per_key(records: list[Record]) -> list[Record]:
    last = {key: (off, key, value) for off, key, value in records}
    return sorted(last.values())


def fill(lg: Log, n: int, keys: int = 5, start: int = 0) -> list[Record]:
    """`n` single-record appends cycling over `keys` keys; returns them as records."""
    out = []
    for i in range(start, start + n):
        key, value = b"k%d" % (i % keys), b"v%d" % i
        info = lg.append_as_leader(kv_batch([(key, value)]), 3)
        out.append((info.first_offset, key, value))
    return out


def replicate(follower: Log, leader: Log) -> None:
    """Fetch like a follower: from our log end, a batch or so at a time, until we have the leader's end."""
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 100))


def abandon(segments: list[LogSegment]) -> None:
    """Close a crashed log's fds without anything Log.close() would write."""
    for seg in segments:
        for f in (seg._log, seg.offset_index._handle, seg.time_index._handle):
            f.close()


def leftovers(lg: Log) -> list[str]:
    return sorted(p.name for p in lg.dir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted")))


# --- what is kept ------------------------------------------------------------------------


def test_latest_value_per_key_survives_with_its_offset_and_in_order(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    written = fill(lg, 40)
    lg.roll()  # everything written is now in closed segments
    leo, n_segments = lg.log_end_offset, len(lg.segments)
    assert n_segments > 4

    (stats,) = clean(LogCleaner(clock), lg)

    assert read_all(lg) == latest_per_key(written)
    assert (stats.records_read, stats.records_removed) == (40, 35)
    assert lg.log_end_offset == leo and stats.bytes_after < stats.bytes_before
    assert read_checkpoint(tmp_path / CLEANER_CHECKPOINT) == {TP: leo}
    assert leftovers(lg) == []
    lg.close()


def test_active_segment_is_never_cleaned(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, segment_bytes=2000)
    closed = fill(lg, 20)
    lg.roll()
    active_records = fill(lg, 10, start=20)  # the same keys again, in the active segment
    active = lg.active_segment
    active_bytes = active.path.read_bytes()

    clean(LogCleaner(clock), lg)

    assert lg.active_segment is active and active.path.read_bytes() == active_bytes
    # The active segment is not in the offset map either: closed records it supersedes stay for now.
    assert read_all(lg) == latest_per_key(closed) + active_records
    lg.close()


def test_dirty_ratio_below_the_minimum_leaves_the_log_alone(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.5)
    cleaner = LogCleaner(clock)
    fill(lg, 30)
    lg.roll()
    assert len(clean(cleaner, lg)) == 1
    clean_part = cleaner.cleanable(lg, lg.log_end_offset, clock.ms)
    assert clean_part.dirty_bytes == 0

    written = read_all(lg) + fill(lg, 1, start=30)
    lg.roll()
    assert cleaner.cleanable(lg, lg.log_end_offset, clock.ms).dirty_ratio < 0.5
    files = {p.name: p.read_bytes() for p in lg.dir.glob("*.log")}
    assert clean(cleaner, lg) == []
    assert {p.name: p.read_bytes() for p in lg.dir.glob("*.log")} == files

    written += fill(lg, 10, start=31)
    lg.roll()
    assert cleaner.cleanable(lg, lg.log_end_offset, clock.ms).dirty_ratio >= 0.5
    (stats,) = clean(cleaner, lg)
    assert stats.first_dirty == clean_part.ends[-1] and stats.records_removed > 0
    assert read_all(lg) == latest_per_key(written)
    lg.close()


def test_min_compaction_lag_keeps_recent_records(tmp_path):
    clock = FakeClock(10_000)
    lg = open_log(tmp_path, clock, min_compaction_lag_ms=5000)
    old = [
        (lg.append_as_leader(kv_batch([(b"k", b"old%d" % i)], ts=1000), 0).first_offset, b"k", b"old%d" % i)
        for i in range(8)
    ]
    lg.roll()
    recent = [
        (lg.append_as_leader(kv_batch([(b"k", b"new%d" % i)], ts=9000), 0).first_offset, b"k", b"new%d" % i)
        for i in range(8)
    ]
    lg.roll()

    clean(LogCleaner(clock), lg)  # at 10 000: only segments whose newest record is older than 5 000

    assert read_all(lg) == [old[-1], *recent]
    lg.close()


def test_tombstones_stay_for_delete_retention_ms_after_their_first_cleaning(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, delete_retention_ms=10_000, min_cleanable_dirty_ratio=0.01)
    cleaner = LogCleaner(clock)
    lg.append_as_leader(kv_batch([(b"gone", b"v"), (b"kept", b"v")]), 0)
    lg.append_as_leader(kv_batch([(b"gone", None)]), 0)
    lg.roll()

    def next_round(value: bytes) -> None:
        lg.append_as_leader(kv_batch([(value, b"x")]), 0)  # some new dirty data, so that there is a pass
        lg.roll()
        assert len(clean(cleaner, lg)) == 1

    assert len(clean(cleaner, lg)) == 1
    assert read_all(lg) == [(1, b"kept", b"v"), (2, b"gone", None)]  # the old value went, the delete stays
    clock.advance(9_000)
    next_round(b"a")
    assert (2, b"gone", None) in read_all(lg)
    clock.advance(2_000)  # 11 s after the cleaning that first saw the tombstone
    next_round(b"b")
    assert read_all(lg) == [(1, b"kept", b"v"), (3, b"a", b"x"), (4, b"b", b"x")]
    lg.close()


def stored_batches(lg: Log) -> list[tuple[int, int | None, list[tuple[int, bytes | None, int]]]]:
    """(base offset, delete horizon, [(offset, key, timestamp), ...]) of every batch from the log start."""
    return [
        (h.base_offset, h.delete_horizon_ms, [(h.base_offset + r[0], r[2], h.first_timestamp + r[1]) for r in recs])
        for data, pos, h in walk(lg)
        for recs in [records_of(data, pos, h)]
    ]


def test_the_first_cleaning_to_keep_a_tombstone_sets_its_batchs_delete_horizon_once(tmp_path):
    """KIP-534: the batch gets the flag and now + delete.retention.ms as base timestamp, its records keep their
    timestamps; a batch without a tombstone is left as it is; a later cleaning keeps the horizon it finds."""
    clock = FakeClock()
    t0 = clock.ms
    lg = open_log(tmp_path, clock, delete_retention_ms=10_000, min_cleanable_dirty_ratio=0.01)
    cleaner = LogCleaner(clock)
    lg.append_as_leader(kv_batch([(b"gone", b"v"), (b"kept", b"v")], ts=1_000), 0)  # 0, 1
    lg.append_as_leader(kv_batch([(b"gone", None), (b"x", b"1")], ts=2_000), 0)  # 2 (a tombstone), 3
    lg.roll()
    (stats,) = clean(cleaner, lg)
    assert stats.delete_horizon_ms == t0 + 10_000
    assert stored_batches(lg) == [
        (0, None, [(1, b"kept", 1_001)]),
        (2, t0 + 10_000, [(2, b"gone", 2_000), (3, b"x", 2_001)]),
    ]
    clock.advance(5_000)
    lg.append_as_leader(kv_batch([(b"x", b"2")], ts=3_000), 0)  # supersedes x=1: the flagged batch is rebuilt
    lg.roll()
    (stats,) = clean(cleaner, lg)
    assert stored_batches(lg)[1:] == [(2, t0 + 10_000, [(2, b"gone", 2_000)]), (4, None, [(4, b"x", 3_000)])]
    assert stats.delete_horizon_ms == t0 + 10_000
    lg.close()


def test_a_tombstone_goes_when_its_horizon_passes_without_any_new_write(tmp_path):
    """A log whose earliest delete horizon has passed is cleaned though nothing made it dirty, once."""
    clock = FakeClock()
    lg = open_log(tmp_path, clock, delete_retention_ms=10_000, min_cleanable_dirty_ratio=0.5)
    cleaner = LogCleaner(clock)
    lg.append_as_leader(kv_batch([(b"gone", b"v"), (b"kept", b"v")]), 0)
    lg.append_as_leader(kv_batch([(b"gone", None)]), 0)
    lg.roll()
    assert len(clean(cleaner, lg)) == 1
    clock.advance(9_999)
    assert clean(cleaner, lg) == []  # not dirty, and the horizon is 1 ms away
    assert (2, b"gone", None) in read_all(lg)
    clock.advance(1)
    (stats,) = clean(cleaner, lg)
    assert read_all(lg) == [(1, b"kept", b"v")] and stats.records_removed == 1
    assert stats.delete_horizon_ms is None
    clock.advance(10**6)
    assert clean(cleaner, lg) == []  # nothing waits for a time any more: no more passes
    lg.close()


def test_a_follower_keeps_the_delete_horizon_its_leader_wrote(tmp_path):
    """Followers append the leader's bytes, flag included; their own cleaner keeps the horizon it finds (Kafka's
    rule: a batch with one is never given another), so the tombstone goes at the same time on every replica."""
    clock = FakeClock()
    t0 = clock.ms
    leader = open_log(tmp_path / "leader", clock, delete_retention_ms=10_000, min_cleanable_dirty_ratio=0.01)
    leader.append_as_leader(kv_batch([(b"gone", b"v"), (b"kept", b"v")]), 0)
    leader.append_as_leader(kv_batch([(b"gone", None)]), 0)
    leader.roll()
    clean(LogCleaner(clock), leader)
    clock.advance(4_000)
    follower = open_log(tmp_path / "follower", clock, delete_retention_ms=10_000, min_cleanable_dirty_ratio=0.01)
    replicate(follower, leader)
    follower.roll()
    cleaner = LogCleaner(clock)
    (stats,) = clean(cleaner, follower)
    assert stats.delete_horizon_ms == t0 + 10_000
    assert [b[:2] for b in stored_batches(follower)] == [(0, None), (2, t0 + 10_000)]
    clock.advance(6_000)
    assert len(clean(cleaner, follower)) == 1 and read_all(follower) == [(1, b"kept", b"v")]
    for lg in (leader, follower):
        lg.close()


def compacted_manager(d: Path, clock: FakeClock) -> LogManager:
    cfg = config(
        cleanup_policy="compact", segment_bytes=400, delete_retention_ms=10_000, min_cleanable_dirty_ratio=0.01
    )
    m = LogManager([d], cfg, clock=clock, topic_config=lambda topic: cfg)
    m.startup()
    return m


def test_a_tombstones_delete_horizon_survives_a_broker_restart(tmp_path):
    """The horizon is in the batch, so a restart between the first and the second cleaning neither resets it
    (the tombstone is still read until then) nor makes it wait for new writes (it goes at the horizon)."""
    clock = FakeClock()
    t0 = clock.ms
    d = tmp_path / "data"
    m = compacted_manager(d, clock)
    lg = m.get_or_create_log("t", 0)
    lg.append_as_leader(kv_batch([(b"gone", b"v"), (b"kept", b"v")]), 0)
    lg.append_as_leader(kv_batch([(b"gone", None)]), 0)
    lg.roll()
    assert len(m.clean_compacted_logs()) == 1
    assert stored_batches(lg)[1][:2] == (2, t0 + 10_000)
    m.shutdown()

    clock.advance(9_000)
    m = compacted_manager(d, clock)  # a new cleaner: nothing of the first one's memory
    lg = m.get_log("t", 0)
    lg.append_as_leader(kv_batch([(b"more", b"v")]), 0)
    lg.roll()
    assert len(m.clean_compacted_logs()) == 1  # a second cleaning, 1 s before the horizon
    assert read_all(lg) == [(1, b"kept", b"v"), (2, b"gone", None), (3, b"more", b"v")]
    assert stored_batches(lg)[1][:2] == (2, t0 + 10_000)  # kept, not reset
    m.shutdown()

    clock.advance(1_000)
    m = compacted_manager(d, clock)
    lg = m.get_log("t", 0)
    assert len(m.clean_compacted_logs()) == 1  # nothing written: the horizon, read from the batches, passed
    assert read_all(lg) == [(1, b"kept", b"v"), (3, b"more", b"v")]
    assert m.clean_compacted_logs() == []
    m.shutdown()


def test_after_a_restart_the_horizons_are_read_a_budget_of_batches_per_pass(tmp_path):
    """A restarted cleaner reads the headers of a log it knows nothing of a few batches per pass (not all at
    once: a large log would hold the GIL for seconds), and cleans it as soon as what it read is due."""
    clock = FakeClock()
    d = tmp_path / "data"
    m = compacted_manager(d, clock)
    lg = m.get_or_create_log("t", 0)
    for i in range(8):
        lg.append_as_leader(kv_batch([(b"k%d" % i, b"v")]), 0)  # 0-7
    lg.append_as_leader(kv_batch([(b"gone", b"v")]), 0)  # 8, superseded
    lg.append_as_leader(kv_batch([(b"gone", None)]), 0)  # 9, the last batch of 9 kept
    lg.roll()
    assert len(m.clean_compacted_logs()) == 1
    m.shutdown()
    clock.advance(10_000)
    m = compacted_manager(d, clock)
    m.cleaner.scan_batches_per_pass = 3
    assert [len(m.clean_compacted_logs()) for _ in range(3)] == [0, 0, 1]
    assert (9, b"gone", None) not in read_all(m.get_log("t", 0))
    assert m.clean_compacted_logs() == []
    m.shutdown()


def test_after_a_restart_a_flagged_batch_whose_tombstones_went_needs_no_cleaning(tmp_path):
    """Kafka keeps the flag on a batch that lost its tombstones and kept other records; the horizons read after
    a restart skip it, so an idle log is not cleaned again for nothing."""
    clock = FakeClock()
    d = tmp_path / "data"
    m = compacted_manager(d, clock)
    lg = m.get_or_create_log("t", 0)
    lg.append_as_leader(kv_batch([(b"gone", b"v")]), 0)
    lg.append_as_leader(kv_batch([(b"gone", None), (b"kept", b"v")]), 0)
    lg.roll()
    assert len(m.clean_compacted_logs()) == 1
    clock.advance(10_000)
    assert len(m.clean_compacted_logs()) == 1
    assert stored_batches(lg) == [(1, clock.ms, [(2, b"kept", 1_001)])]  # the flag stays, the tombstone went
    m.shutdown()
    clock.advance(10**6)
    m = compacted_manager(d, clock)
    scan = HorizonScan()
    assert scan.advance(m.get_log("t", 0).segments[:-1], 100) == (True, 1) and scan.earliest is None
    assert m.clean_compacted_logs() == []
    m.shutdown()


def test_keyless_records_are_dropped_by_the_cleaner(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, cleanup_policy="delete")  # written before the topic became compacted
    lg.append_as_leader(kv_batch([(None, b"no key"), (b"k", b"v")]), 0)
    lg.roll()
    lg.update_config(config(cleanup_policy="compact", segment_bytes=400))
    clean(LogCleaner(clock), lg)
    assert read_all(lg) == [(1, b"k", b"v")]
    lg.close()


# --- batches and offsets -----------------------------------------------------------------


def make_gappy_log(tmp_path: Path, clock: FakeClock) -> Log:
    """Batches A(0-2) [a b c], B(3-4) [c d], C(5-6) [d e], D(7-8) [d e], then E(9) [f] in the active
    segment. Cleaned: A keeps a, b (its last record goes); B keeps c; C goes entirely."""
    lg = open_log(tmp_path, clock, segment_bytes=10**6)
    for pairs in ([b"a", b"b", b"c"], [b"c", b"d"], [b"d", b"e"], [b"d", b"e"]):
        lg.append_as_leader(kv_batch([(k, k.upper()) for k in pairs]), 5)
    lg.roll()
    lg.append_as_leader(kv_batch([(b"f", b"F")]), 5)
    clean(LogCleaner(clock), lg)
    return lg


def test_batches_keep_their_last_offset_and_fully_removed_batches_disappear(tmp_path):
    lg = make_gappy_log(tmp_path, FakeClock())
    hs = [h for _, h in iter_batches(lg.read(0, 10**6), validate_crc=True)]
    assert [(h.base_offset, h.next_offset, h.record_count, h.leader_epoch) for h in hs] == [
        (0, 3, 2, 5),
        (3, 5, 1, 5),
        (7, 9, 2, 5),
    ]
    assert [r[0] for r in read_all(lg)] == [0, 1, 3, 7, 8, 9]
    lg.close()


def test_a_read_at_a_removed_offset_returns_the_next_batch(tmp_path):
    lg = make_gappy_log(tmp_path, FakeClock())
    assert parse_header(lg.read(5, 10**6)).base_offset == 7  # batch C (5-6) is gone
    assert parse_header(lg.read(6, 10**6)).base_offset == 7
    assert parse_header(lg.read(2, 10**6)).base_offset == 0  # A still spans offset 2: it holds it
    assert parse_header(lg.read(5, 10**6, max_offset=9)).base_offset == 7
    assert lg.read(5, 10**6, max_offset=8) == b""  # D ends above the high watermark
    lg.close()


def test_a_read_skips_segments_emptied_by_compaction(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    fill(lg, 30, keys=1)  # one key: every closed segment but the last loses everything
    lg.roll()
    clean(LogCleaner(clock), lg)
    assert any(s.size == 0 for s in lg.segments[:-1])
    assert parse_header(lg.read(0, 10**6)).base_offset == 29
    assert read_all(lg) == [(29, b"k0", b"v29")]
    lg.close()


def test_a_follower_replicates_a_cleaned_log(tmp_path):
    leader = make_gappy_log(tmp_path / "leader", FakeClock())
    follower = open_log(tmp_path / "follower", FakeClock(), segment_bytes=10**6)
    replicate(follower, leader)
    assert read_all(follower) == read_all(leader)
    assert follower.log_end_offset == leader.log_end_offset == 10
    assert follower.leader_epoch_entries == [(5, 0)]
    # A follower that starts inside a removed range gets the next batch and jumps over the gap.
    late = open_log(tmp_path / "late", FakeClock())
    late.truncate_fully_and_start_at(5)
    replicate(late, leader)
    assert read_all(late) == [r for r in read_all(leader) if r[0] >= 5]
    for lg in (leader, follower, late):
        lg.close()


@pytest.mark.parametrize("codec", [CODEC_ZSTD, CODEC_LZ4])
def test_compressed_batches_are_cleaned_and_stay_compressed(tmp_path, codec):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, segment_bytes=10**6)
    lg.append_as_leader(kv_batch([(b"x", b"1" * 100), (b"y", b"2" * 100), (b"z", b"3" * 100)], codec=codec), 0)
    lg.append_as_leader(kv_batch([(b"y", b"4" * 100)], codec=codec), 0)
    lg.roll()
    clean(LogCleaner(clock), lg)
    h = parse_header(lg.read(0, 10**6))
    assert (h.codec, h.record_count, h.last_offset_delta) == (codec, 2, 2)
    assert read_all(lg) == [(0, b"x", b"1" * 100), (2, b"z", b"3" * 100), (3, b"y", b"4" * 100)]
    lg.close()


def test_rebuilt_batch_keeps_epoch_producer_fields_and_timestamps():
    records = [[0, 0, b"a", b"1", []], [1, 7, b"b", b"2", [["h", b"v"]]], [2, 3, b"c", b"3", []]]
    original = bytearray(build(records, 5000, 5007, 0, 42, 3, 100, 0))
    stamp(original, 60, 9)
    h = parse_header(original)
    out = rebuild_batch(h, [tuple(r) for r in records[1:]])
    new = parse_header(out)
    assert (new.base_offset, new.leader_epoch, new.last_offset_delta, new.record_count) == (60, 9, 2, 2)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (42, 3, 100)
    assert (new.first_timestamp, new.max_timestamp) == (5007, 5007)
    assert [(r[0], new.first_timestamp + r[1]) for r in records_of(out, 0, new)] == [(1, 5007), (2, 5003)]
    assert list(iter_batches(out, validate_crc=True))  # the CRC is right


def test_rebuilt_batch_keeps_log_append_time():
    original = bytearray(build([[0, 0, b"a", b"1", []], [1, 0, b"b", b"2", []]], 10, 10))
    log_module.set_log_append_time(original, 0, parse_header(original), 99_999)
    h = parse_header(original)
    new = parse_header(rebuild_batch(h, [(1, 0, b"b", b"2", [])]))
    assert new.attributes & TIMESTAMP_LOG_APPEND and new.max_timestamp == 99_999


def test_rebuilt_batch_with_a_delete_horizon_keeps_log_append_time_and_create_times():
    original = bytearray(build([[0, 0, b"a", None, []], [1, 4, b"b", b"2", []]], 10, 14))
    log_module.set_log_append_time(original, 0, parse_header(original), 99_999)
    out = rebuild_batch(parse_header(original), [(0, 0, b"a", None, []), (1, 4, b"b", b"2", [])], 500_000)
    new = parse_header(out)
    assert new.attributes & TIMESTAMP_LOG_APPEND and new.max_timestamp == 99_999
    assert new.delete_horizon_ms == 500_000 and [500_000 + r[1] for r in records_of(out, 0, new)] == [10, 14]
    assert list(iter_batches(out, validate_crc=True))


# --- appends -----------------------------------------------------------------------------


def test_keyless_records_are_refused_on_compacted_topics(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    lg.append_as_leader(kv_batch([(b"k", b"v")]), 0)
    for bad in (kv_batch([(b"k", b"v"), (None, b"v")]), kv_batch([(None, b"v")], codec=CODEC_ZSTD)):
        with pytest.raises(CorruptMessageError, match="without a key"):
            lg.append_as_leader(kv_batch([(b"ok", b"v")]) + bad, 0)  # all or nothing
    not_zstd = bytearray(kv_batch([(b"k", b"v")]))
    not_zstd[22] |= CODEC_ZSTD  # says zstd, with a valid CRC, but the records are not compressed
    not_zstd[CRC_OFFSET:CRC_START] = crc32c(bytes(not_zstd[CRC_START:])).to_bytes(4, "big")
    with pytest.raises(CorruptMessageError):
        lg.append_as_leader(bytes(not_zstd), 0)
    assert lg.log_end_offset == 1
    plain = open_log(tmp_path / "plain", clock, cleanup_policy="delete")
    assert plain.append_as_leader(kv_batch([(None, b"v")]), 0).record_count == 1
    lg.close()
    plain.close()


# --- concurrency -------------------------------------------------------------------------


def test_a_read_during_the_swap_sees_the_old_or_the_new_segments(tmp_path, monkeypatch):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    written = fill(lg, 40)
    lg.roll()
    before = read_all(lg)
    seen: list[list[Record]] = []
    real_fsync_dir = swap_module.fsync_dir

    def read_between_commit_and_swap(path):
        real_fsync_dir(path)
        seen.append(read_all(lg))  # the `.swap` files exist, the segment list is not swapped yet

    monkeypatch.setattr(swap_module, "fsync_dir", read_between_commit_and_swap)
    (stats,) = clean(LogCleaner(clock), lg)
    assert len(seen) == stats.groups_swapped > 1
    after = latest_per_key(written)
    assert read_all(lg) == after
    for records in seen:
        # Groups already swapped read new, the rest old: every record read is the old log's, and every
        # key's latest record is there.
        assert set(records) <= set(before) and latest_per_key(records) == after
    lg.close()


def test_concurrent_reads_and_appends_while_cleaning(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    written = fill(lg, 300, keys=7)
    lg.roll()
    old = set(read_all(lg))
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                records = read_all(lg)  # batches are CRC-checked by read_all
                offsets = [r[0] for r in records]
                assert offsets == sorted(set(offsets))
                assert {r for r in records if not r[1].startswith(b"new")} <= old
                reads[0] += 1
        except BaseException as e:  # reported below: an assert in a thread would be lost
            errors.append(e)
            raise

    extra: set[Record] = set()
    t = threading.Thread(target=reader)
    t.start()
    try:
        cleaner = LogCleaner(clock)
        for i in range(20):  # appends to the active segment meanwhile
            key, value = b"new%d" % i, b"x"
            extra.add((lg.append_as_leader(kv_batch([(key, value)]), 3).first_offset, key, value))
            if i == 5:
                clean(cleaner, lg)
    finally:
        stop.set()
        t.join()
    assert not errors and reads[0] > 0
    assert read_all(lg) == latest_per_key(written) + sorted(extra)
    lg.close()


def test_truncation_during_the_swap_aborts_it(tmp_path, monkeypatch):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    fill(lg, 40)
    lg.roll()
    target = lg.segments[2].base_offset
    real_fsync_dir = swap_module.fsync_dir
    truncated = []

    def truncate_meanwhile(path):
        real_fsync_dir(path)
        if not truncated:
            truncated.append(target)
            lg.truncate_to(target)  # a follower told to truncate while the cleaner commits a swap

    monkeypatch.setattr(swap_module, "fsync_dir", truncate_meanwhile)
    cleaner = LogCleaner(clock)
    assert clean(cleaner, lg) == [] and truncated
    monkeypatch.setattr(swap_module, "fsync_dir", real_fsync_dir)
    assert leftovers(lg) == [] and lg.log_end_offset == target
    remaining = read_all(lg)
    assert [r[0] for r in remaining] == list(range(target))  # nothing was swapped in
    assert cleaner.first_dirty_offset(lg) == 0  # and the checkpoint did not move
    assert len(clean(cleaner, lg)) == 1 and read_all(lg) == latest_per_key(remaining)
    lg.close()


def test_a_truncation_after_planning_refuses_the_swap(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    fill(lg, 40)
    lg.roll()
    fill(lg, 2, start=40)
    before = read_all(lg)
    cleaner = LogCleaner(clock)
    plan = cleaner.cleanable(lg, lg.log_end_offset, clock.ms)
    lg.truncate_to(41)  # only the active segment's tail: the closed segments are intact, but who knows
    with pytest.raises(CleanerAborted):
        cleaner.clean(lg, plan, clock.ms)
    assert read_all(lg) == before[:-1] and leftovers(lg) == []
    lg.close()


def test_a_full_offset_map_cleans_up_to_where_it_filled(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.01)
    written = fill(lg, 30, keys=30)  # all keys distinct
    written += fill(lg, 30, keys=30, start=30)  # and all superseded
    lg.roll()
    cleaner = LogCleaner(clock, max_map_keys=10)
    (first,) = clean(cleaner, lg)
    assert 10 <= first.end_offset < 60  # stopped at the end of the segment where the map filled
    assert first.end_offset in [s.base_offset for s in lg.segments]
    assert cleaner.first_dirty_offset(lg) == first.end_offset
    while cleaner.first_dirty_offset(lg) < lg.active_segment.base_offset:
        assert clean(cleaner, lg)
    assert read_all(lg) == latest_per_key(written)
    lg.close()


def test_truncation_below_the_checkpoint_makes_new_data_dirty(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    cleaner = LogCleaner(clock)
    fill(lg, 30)
    lg.roll()
    clean(cleaner, lg)
    assert cleaner.first_dirty_offset(lg) == 30
    lg.truncate_to(27)
    kept, leo = read_all(lg), lg.log_end_offset
    assert leo == 27
    new = fill(lg, 12, start=100)  # new data at offsets the cleaner had counted as clean
    lg.roll()
    (stats,) = clean(cleaner, lg)
    assert stats.first_dirty == leo
    assert read_all(lg) == latest_per_key(kept + new)
    lg.close()


# --- crash safety ------------------------------------------------------------------------


class Crash(BaseException):
    """The process dies: nothing after this point runs, not even `except Exception` handlers."""


# A group of two segments: `.cleaned` -> `.swap` (3 renames), old -> `.deleted` (6), `.swap` -> final (3).
SWAP_RENAMES = 12


def two_segment_group(lg: Log, empty: bool) -> list[Record]:
    """Closed segments A and B (keys k0-k2 each) that fit in one cleaned segment. With `empty`, a third
    closed segment C, too big to join their group, supersedes both: their cleaned segment is empty."""
    written = fill(lg, 3, keys=3)
    lg.roll()
    written += fill(lg, 3, keys=3, start=3)
    lg.roll()
    if empty:
        for i in range(3):
            key, value = b"k%d" % i, b"x" * 200
            written.append((lg.append_as_leader(kv_batch([(key, value)]), 3).first_offset, key, value))
        lg.roll()
    return written


@pytest.mark.parametrize("empty_group", [False, True])
@pytest.mark.parametrize("clean_shutdown", [True, False])
@pytest.mark.parametrize("renames_done", range(SWAP_RENAMES + 1))
def test_a_crash_at_any_step_of_the_swap_loses_and_duplicates_nothing(
    tmp_path, monkeypatch, renames_done, clean_shutdown, empty_group
):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, segment_bytes=1000)
    written = two_segment_group(lg, empty_group)
    before, leo, segments = read_all(lg), lg.log_end_offset, lg.segments
    real_rename, done = os.rename, [0]

    def rename(src, dst):
        if done[0] == renames_done:
            raise Crash
        real_rename(src, dst)
        done[0] += 1
        if done[0] == renames_done:
            raise Crash

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(Crash):
        clean(LogCleaner(clock), lg)
    monkeypatch.setattr(os, "rename", real_rename)
    abandon(segments + lg.segments)  # the process is gone: its files stay as they are

    lg = open_log(tmp_path, clock, clean=clean_shutdown)
    records = read_all(lg)  # offsets strictly increase: read_all follows next offsets
    assert lg.log_end_offset == leo and leftovers(lg) == []
    assert sorted(p.name for p in lg.dir.glob("*.log")) == [s.path.name for s in lg.segments]
    if renames_done < 3:  # `<base>.log.swap` not there yet: the swap never happened
        assert records == before
    elif not empty_group:
        assert records == latest_per_key(written)
    else:
        # Kafka's rule replaces the segments from the swap's base to its end, and an empty segment
        # ends where it starts: B survives if the crash came before its `.log` was renamed. Its
        # records are all superseded, and the next cleaning removes them (the checkpoint did not move).
        assert set(records) <= set(before) and latest_per_key(records) == latest_per_key(written)
        assert (len(records) > 3) == (renames_done < 9)
    clean(LogCleaner(clock), lg)
    assert read_all(lg) == latest_per_key(written)
    lg.close()


def test_recovery_discards_a_swap_above_a_cleaned_file(tmp_path):
    """Kafka's rule: a `.swap` at or above a `.cleaned` file's base is an unfinished rename."""
    clock = FakeClock()
    lg = open_log(tmp_path, clock)
    fill(lg, 20)
    lg.roll()
    before = read_all(lg)
    base = lg.segments[1].base_offset
    lg.close()
    d = tmp_path / "t-0"
    (d / "00000000000000000000.log.cleaned").write_bytes(b"")
    (d / f"{base:020d}.log.swap").write_bytes((d / f"{base:020d}.log").read_bytes()[:100])
    lg = open_log(tmp_path, clock)
    assert read_all(lg) == before and leftovers(lg) == []
    lg.close()


# --- log manager and config ------------------------------------------------------------


def test_log_manager_checkpoints_cleaning_and_bounds_it_by_the_high_watermark(tmp_path):
    clock = FakeClock()
    d = tmp_path / "data"
    m = LogManager([d], config(segment_bytes=400), clock=clock)
    m.startup()
    lg = m.get_or_create_log("t", 0, config(cleanup_policy="compact", segment_bytes=400))
    other = m.get_or_create_log("plain", 0)
    fill(lg, 40)
    fill(other, 40)
    lg.roll()
    other.roll()
    fourth = lg.segments[3].base_offset
    hw = fourth + 1

    (stats,) = m.clean_compacted_logs({("t", 0): hw, ("plain", 0): 40}.get)

    assert stats.end_offset == fourth  # only segments wholly below the high watermark
    assert read_checkpoint(d / CLEANER_CHECKPOINT) == {("t", 0): stats.end_offset}
    assert len(read_all(other)) == 40  # cleanup.policy=delete: never compacted
    assert m.clean_compacted_logs(lambda tp: None) == []  # no high watermark known: left alone
    m.shutdown()

    m = LogManager([d], config(segment_bytes=400), clock=clock)
    m.startup()
    assert m.cleaner.first_dirty_offset(m.get_log("t", 0)) == stats.end_offset
    m.shutdown()


def test_compaction_configs_have_kafka_names_defaults_and_validation():
    props = config().to_props()
    assert props["min.cleanable.dirty.ratio"] == "0.5"
    assert props["delete.retention.ms"] == "86400000"
    assert props["min.compaction.lag.ms"] == "0"
    assert config(min_cleanable_dirty_ratio="0.1").min_cleanable_dirty_ratio == 0.1
    assert config(cleanup_policy="delete,compact").compact_enabled and not config().compact_enabled
    for key, value in (("min.cleanable.dirty.ratio", "1.5"), ("min.cleanable.dirty.ratio", "nan"),
                       ("min.cleanable.dirty.ratio", True), ("delete.retention.ms", "-1")):  # fmt: skip
        with pytest.raises(InvalidConfigError, match=key):
            config(**{key.replace(".", "_"): value})


def test_max_compaction_lag_cleans_an_old_dirty_segment_below_the_dirty_ratio(tmp_path):
    clock = FakeClock(100_000)
    lg = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=50_000)
    for i in range(8):
        lg.append_as_leader(kv_batch([(b"k", b"v%d" % i)], ts=10_000), 0)
    lg.roll()
    lg.append_as_leader(kv_batch([(b"other", b"x")], ts=99_000), 0)  # the active segment: never cleaned
    # dirty ratio 1.0 would pass too: make the ratio miss by asking 0.99 of a log that is not all dirty
    assert clean(LogCleaner(clock), lg), "a dirty segment older than max.compaction.lag.ms is cleaned"
    assert [r[2] for r in read_all(lg)] == [b"v7", b"x"]
    lg.close()


def test_without_max_compaction_lag_the_dirty_ratio_decides(tmp_path):
    clock = FakeClock(100_000)
    lg = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.99)
    cleaner = LogCleaner(clock)
    fill(lg, 30)
    lg.roll()
    assert len(clean(cleaner, lg)) == 1
    fill(lg, 1, start=30)
    lg.roll()
    assert clean(cleaner, lg) == []  # a little dirty: below 0.99, and no lag bound
    clock.advance(10**6)
    with_lag = open_log(tmp_path / "lag", clock, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=1000)
    assert not cleaner.cleanable(lg, lg.log_end_offset, clock.ms).overdue(clock.ms, lg.config)
    assert cleaner.cleanable(lg, lg.log_end_offset, clock.ms).overdue(clock.ms, with_lag.config)
    with_lag.close()
    lg.close()
