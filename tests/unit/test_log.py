from __future__ import annotations

import errno
import os

import pytest

from broker.log.log import Log, UnexpectedAppendOffsetError
from net.batch import CRC_OFFSET, HEADER_SIZE, TIMESTAMP_LOG_APPEND, parse_header, stamp
from net.errors import CorruptMessageError, KafkaStorageError, MessageTooLargeError, OffsetOutOfRangeError
from net.protocol import OffsetSpec
from tests.unit.test_log_support import FakeClock, batch, config, headers


def open_log(tmp_path, clock=None, **kw) -> Log:
    return Log(tmp_path / "topic-a-0", "topic-a", 0, config(**kw), clean_shutdown=True, clock=clock or FakeClock())


def test_append_assigns_offsets_and_stamps_epoch(tmp_path):
    lg = open_log(tmp_path)
    info = lg.append_as_leader(batch(5, ts=1234), leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 4, 5)
    assert (info.max_timestamp, info.log_append_time) == (1234, -1)
    two = batch(2, ts=2000) + batch(3, ts=1500)  # one request, two batches
    info = lg.append_as_leader(two, leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp) == (5, 9, 2000, 6)
    assert info.valid_bytes == len(two) and lg.log_end_offset == 10
    hs = headers(lg.read(0, 10**6))  # CRCs still valid after stamping
    assert [(h.base_offset, h.last_offset, h.leader_epoch) for h in hs] == [(0, 4, 7), (5, 6, 7), (7, 9, 7)]
    lg.close()


def test_log_append_time_rewrites_max_timestamp_and_crc(tmp_path):
    clock = FakeClock(5_000_000)
    lg = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = lg.append_as_leader(batch(3, ts=1), 0)
    assert info.log_append_time == 5_000_000 == info.max_timestamp
    (h,) = headers(lg.read(0, 10**6))  # validates the recomputed CRC
    assert h.max_timestamp == 5_000_000 and h.attributes & TIMESTAMP_LOG_APPEND
    lg.close()


def test_rejects_bad_crc_truncated_and_oversize_batches_atomically(tmp_path):
    lg = open_log(tmp_path, max_message_bytes=2000)
    lg.append_as_leader(batch(2), 0)
    size = lg.size_bytes
    bad = bytearray(batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError, match="CRC"):
        lg.append_as_leader(batch(1) + bytes(bad), 0)  # the good first batch is not appended either
    with pytest.raises(CorruptMessageError, match="truncated"):
        lg.append_as_leader(batch(1) + batch(1)[:40], 0)
    with pytest.raises(MessageTooLargeError, match="max.message.bytes"):
        lg.append_as_leader(batch(1, value=b"x" * 3000), 0)
    assert (lg.log_end_offset, lg.size_bytes) == (2, size)
    assert lg.append_as_leader(b"", 0).record_count == 0
    lg.close()


def test_roll_by_segment_bytes(tmp_path):
    b = batch(10, value=b"x" * 100)
    lg = open_log(tmp_path, segment_bytes=len(b) * 3)
    for _ in range(10):
        lg.append_as_leader(b, 0)
    assert [s.base_offset for s in lg.segments] == [0, 30, 60, 90]
    assert all(s.size <= len(b) * 3 for s in lg.segments)
    assert sorted(p.name for p in lg.dir.glob("*.log"))[1] == "00000000000000000030.log"
    lg.close()


def test_roll_by_segment_ms(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock, segment_ms=1000)
    lg.append_as_leader(batch(1), 0)
    clock.advance(600)
    lg.append_as_leader(batch(1), 0)
    assert len(lg.segments) == 1
    clock.advance(600)  # 1200ms after the first append into the segment
    lg.append_as_leader(batch(1), 0)
    assert [s.base_offset for s in lg.segments] == [0, 2]
    clock.advance(5000)
    lg.roll()  # explicit roll; a second roll of the (now empty) active segment is a no-op
    lg.roll()
    assert [s.base_offset for s in lg.segments] == [0, 2, 3]
    lg.close()


def test_roll_when_index_full(tmp_path):
    lg = open_log(tmp_path, index_interval_bytes=0, segment_index_bytes=8 * 4)
    for _ in range(10):
        lg.append_as_leader(batch(1), 0)
    assert len(lg.segments) > 1
    assert all(len(s.offset_index) <= 4 for s in lg.segments)
    lg.close()


def test_lookups_across_many_segments_and_sparse_indexes(tmp_path):
    lg = open_log(tmp_path, segment_bytes=20_000, index_interval_bytes=1000)
    expected = []
    for i in range(300):
        n = 1 + i % 7
        info = lg.append_as_leader(batch(n, value=b"y" * 40), 0)
        expected.append((info.first_offset, info.last_offset))
    assert len(lg.segments) > 3
    for first, last in expected:
        for off in (first, last):
            h = headers(lg.read(off, 1))[0]  # max_bytes=1: exactly the batch holding `off`
            assert (h.base_offset, h.last_offset) == (first, last)
    lg.close()


def test_read_bounds_and_high_watermark(tmp_path):
    lg = open_log(tmp_path, segment_bytes=500)
    for _ in range(10):
        lg.append_as_leader(batch(2, value=b"z" * 60), 0)
    assert len(lg.segments) > 2
    leo = lg.log_end_offset
    assert lg.read(leo, 10**6) == b""
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(leo + 1, 10**6)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 10**6)
    # a read stays in one segment (0..3 here), like Kafka's
    assert [h.base_offset for h in headers(lg.read(0, 10**6))] == [0, 2]
    # the high watermark stops the read, in the active segment and in earlier ones
    assert [h.base_offset for h in headers(lg.read(4, 10**6, max_offset=6))] == [4]
    assert [h.base_offset for h in headers(lg.read(0, 10**6, max_offset=2))] == [0]
    assert [h.base_offset for h in headers(lg.read(16, 10**6, max_offset=18))] == [16]
    assert lg.read(6, 10**6, max_offset=6) == b""
    assert lg.read(7, 10**6, max_offset=6) == b""
    # a batch that does not fit stops the read; it never skips ahead to the next segment
    assert lg.read(2, 10, min_one_message=False) == b""
    assert headers(lg.read(2, 10))[0].base_offset == 2
    lg.close()


def test_retention_by_time_deletes_only_whole_closed_segments(tmp_path):
    clock = FakeClock(10_000_000)
    lg = open_log(tmp_path, clock, segment_bytes=600, retention_ms=5000)
    now = clock.ms
    for i in range(12):  # timestamps: old ones first
        lg.append_as_leader(batch(2, ts=now - 12_000 + i * 1000, value=b"q" * 100), 0)
    segs = lg.segments
    assert len(segs) >= 4
    expired = [s for s in segs[:-1] if now - s.largest_timestamp > 5000]
    assert 0 < len(expired) < len(segs)
    assert lg.delete_retention_segments(now) == len(expired)
    assert lg.log_start_offset == lg.segments[0].base_offset > 0
    assert not expired[0].path.exists()
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(lg.log_start_offset - 1, 10**6)
    assert headers(lg.read(lg.log_start_offset, 10**6))[0].base_offset == lg.log_start_offset
    # everything expired: still the active segment stays
    assert lg.delete_retention_segments(now + 10**9) > 0
    assert len(lg.segments) == 1 and lg.log_start_offset == lg.segments[0].base_offset
    assert lg.log_end_offset == 24
    lg.close()


def test_retention_by_bytes(tmp_path):
    b = batch(1, value=b"r" * 200)
    lg = open_log(tmp_path, segment_bytes=len(b) * 2, retention_bytes=len(b) * 5, retention_ms=-1)
    for _ in range(11):
        lg.append_as_leader(b, 0)
    assert lg.size_bytes == len(b) * 11 and len(lg.segments) == 6
    assert lg.delete_retention_segments() == 3  # 11 - 3*2 = 5 batches left: within retention.bytes
    assert lg.size_bytes == len(b) * 5 and lg.log_start_offset == 6
    assert lg.delete_retention_segments() == 0
    lg.close()


def test_offset_for_timestamp(tmp_path):
    lg = open_log(tmp_path, segment_bytes=400, index_interval_bytes=100)
    for i in range(30):
        lg.append_as_leader(batch(2, ts=1000 + 10 * i, value=b"t" * 30), 0)
    assert lg.offset_for_timestamp(0) == (0, 1000)
    assert lg.offset_for_timestamp(1055) == (12, 1060)
    assert lg.offset_for_timestamp(1290) == (58, 1290)
    assert lg.offset_for_timestamp(1291) is None
    assert lg.offset_for_timestamp(-2) == (0, -1)
    assert lg.offset_for_timestamp(-1) == (60, -1)
    lg.close()


def test_epoch_cache_and_end_offset_for_epoch(tmp_path):
    lg = open_log(tmp_path)
    for epoch, n in [(1, 3), (1, 2), (3, 4), (5, 1)]:
        lg.append_as_leader(batch(n), epoch)
    assert lg.leader_epoch_entries == [(1, 0), (3, 5), (5, 9)]
    assert lg.latest_epoch == 5
    assert lg.end_offset_for_epoch(5) == (5, 10)
    assert lg.end_offset_for_epoch(3) == (3, 9)
    assert lg.end_offset_for_epoch(1) == (1, 5)
    assert lg.end_offset_for_epoch(2) == (1, 5)  # unknown epoch: the largest smaller one
    assert lg.end_offset_for_epoch(0) == (0, 0)
    assert lg.end_offset_for_epoch(6) == (-1, -1)
    assert (lg.dir / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 5\n5 9\n"
    lg.truncate_to(7)  # inside batch 5..8 of epoch 3: the batch and the epoch go
    assert lg.leader_epoch_entries == [(1, 0)] and lg.log_end_offset == 5
    lg.append_as_leader(batch(4), 3)
    lg.truncate_to(9)
    assert lg.leader_epoch_entries == [(1, 0), (3, 5)]
    lg.close()
    lg = open_log(tmp_path)
    assert lg.leader_epoch_entries == [(1, 0), (3, 5)] and lg.end_offset_for_epoch(3) == (3, 9)
    lg.close()


def test_truncate_to_across_segments_then_append(tmp_path):
    lg = open_log(tmp_path, segment_bytes=600)
    for _ in range(20):
        lg.append_as_leader(batch(3, value=b"w" * 50), 0)
    n_segments = len(lg.segments)
    assert lg.truncate_to(100) is False  # above the end: nothing to do
    assert lg.truncate_to(22)  # inside batch 21..23: the whole batch goes
    assert lg.log_end_offset == 21
    assert len(lg.segments) < n_segments and lg.segments[-1].next_offset == 21
    assert lg.recovery_point <= 21
    assert lg.append_as_leader(batch(1), 0).first_offset == 21
    assert [h.base_offset for h in headers(lg.read(18, 10**6))] == [18, 21]
    lg.truncate_fully_and_start_at(500)
    assert (lg.log_start_offset, lg.log_end_offset, len(lg.segments)) == (500, 500, 1)
    assert lg.append_as_leader(batch(1), 0).first_offset == 500
    lg.close()


def test_append_as_follower_keeps_offsets_and_epochs(tmp_path):
    lg = open_log(tmp_path)
    a = bytearray(batch(3))
    stamp(a, 0, 2)
    b = bytearray(batch(2))
    stamp(b, 3, 4)
    info = lg.append_as_follower(bytes(a + b))
    assert (info.first_offset, info.last_offset, lg.log_end_offset) == (0, 4, 5)
    assert lg.leader_epoch_entries == [(2, 0), (4, 3)]
    gap = bytearray(batch(1))
    stamp(gap, 7, 4)
    with pytest.raises(UnexpectedAppendOffsetError):
        lg.append_as_follower(bytes(gap))
    assert lg.log_end_offset == 5
    lg.close()


def test_enospc_mid_write_leaves_log_unchanged(tmp_path, monkeypatch):
    lg = open_log(tmp_path, index_interval_bytes=0)
    lg.append_as_leader(batch(2), 0)
    size, leo, entries = lg.size_bytes, lg.log_end_offset, len(lg.active_segment.offset_index)
    real_write = os.write

    def half_then_fail(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_fail)
    with pytest.raises(KafkaStorageError, match="disk full"):
        lg.append_as_leader(batch(5, value=b"e" * 500), 0)
    monkeypatch.setattr(os, "write", real_write)
    assert (lg.size_bytes, lg.log_end_offset) == (size, leo)
    assert os.path.getsize(lg.active_segment.path) == size
    assert len(lg.active_segment.offset_index) == entries
    info = lg.append_as_leader(batch(1), 0)
    assert info.first_offset == leo
    assert [h.base_offset for h in headers(lg.read(0, 10**6))] == [0, 2]


def test_enospc_on_index_write_rolls_back_data(tmp_path, monkeypatch):
    lg = open_log(tmp_path, index_interval_bytes=0)
    lg.append_as_leader(batch(2), 0)
    size = lg.size_bytes
    real_write = os.write
    index_file = lg.active_segment.offset_index._handle

    def fail_on_index(fd, data):
        if fd == index_file._fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", fail_on_index)
    with pytest.raises(KafkaStorageError):
        lg.append_as_leader(batch(1), 0)
    monkeypatch.setattr(os, "write", real_write)
    assert lg.size_bytes == size == os.path.getsize(lg.active_segment.path)
    assert lg.append_as_leader(batch(1), 0).first_offset == 2


def test_reads_are_raw_stamped_batches(tmp_path):
    lg = open_log(tmp_path)
    lg.append_as_leader(batch(4), 9)
    data = lg.read(0, 10**6)
    h = parse_header(data)
    assert (h.base_offset, h.leader_epoch, h.record_count) == (0, 9, 4)
    assert len(data) == h.size and h.size > HEADER_SIZE
    assert data[CRC_OFFSET:] == batch(4)[CRC_OFFSET:]  # nothing but offset and epoch changed
    lg.close()


def test_flushed_inactive_segments_give_back_index_fds(tmp_path):
    lg = open_log(tmp_path, segment_bytes=600, index_interval_bytes=0)
    for _ in range(20):
        lg.append_as_leader(batch(3, value=b"w" * 50), 0)
    lg.flush()
    assert lg.recovery_point == lg.log_end_offset
    assert not any(s.offset_index.is_open or s.time_index.is_open for s in lg.segments[:-1])
    assert lg.active_segment.offset_index.is_open
    seg = lg.segments[1]
    assert headers(lg.read(seg.base_offset + 3, 1))[0].base_offset == seg.base_offset + 3  # reads need no fd
    lg.truncate_to(seg.base_offset + 3)  # truncating a released segment reopens its index files
    assert lg.active_segment is seg and lg.log_end_offset == seg.base_offset + 3
    assert seg.offset_index.path.stat().st_size == 8 * len(seg.offset_index) == 8
    assert lg.append_as_leader(batch(1), 0).first_offset == seg.base_offset + 3
    lg.close()
    lg = open_log(tmp_path, segment_bytes=600, index_interval_bytes=0)
    assert not any(s.needs_recovery for s in lg.segments)
    assert [h.base_offset for h in headers(lg.read(seg.base_offset, 10**6))] == [seg.base_offset + i for i in (0, 3)]
    lg.close()


def test_offset_for_max_timestamp_and_the_kip_1005_specs(tmp_path):
    """-3 (KIP-734) answers the first record with the largest timestamp, wherever it is; -4 is the log start
    without tiered storage, and -5 finds nothing."""
    lg = open_log(tmp_path, segment_bytes=400)
    stamps = [1000, 5000, 2000, 5000, 3000]
    for ts in stamps:
        lg.append_as_leader(batch(2, ts=ts, value=b"m" * 30), 0)
    assert len(lg.segments) > 1
    assert lg.offset_for_timestamp(OffsetSpec.MAX_TIMESTAMP) == (2, 5000)
    assert lg.offset_for_timestamp(OffsetSpec.EARLIEST_LOCAL) == lg.offset_for_timestamp(OffsetSpec.EARLIEST) == (0, -1)
    assert lg.offset_for_timestamp(OffsetSpec.LATEST_TIERED) is None
    lg.close()
    assert open_log(tmp_path / "empty").offset_for_timestamp(OffsetSpec.MAX_TIMESTAMP) is None


def test_timestamps_out_of_the_topic_bounds_are_refused_with_nothing_appended(tmp_path):
    from net.errors import InvalidTimestampError

    clock = FakeClock(10_000_000)
    lg = open_log(tmp_path, clock, message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)
    lg.append_as_leader(batch(1, ts=10_000_000 - 1000, max_ts=10_000_000 + 500), 0)  # at both bounds: taken
    with pytest.raises(InvalidTimestampError, match="message.timestamp.before.max.ms=1000"):
        lg.append_as_leader(batch(1, ts=10_000_000 - 1001), 0)
    with pytest.raises(InvalidTimestampError, match="out of range"):
        lg.append_as_leader(batch(1) + batch(1, ts=10_000_000, max_ts=10_000_000 + 501), 0)  # one bad: none in
    assert lg.log_end_offset == 1
    # LogAppendTime topics take any producer timestamp: the broker's replaces it
    lat = open_log(tmp_path / "lat", clock, message_timestamp_type="LogAppendTime", message_timestamp_after_max_ms=0)
    assert lat.append_as_leader(batch(1, ts=10**13), 0).max_timestamp == 10_000_000
    lg.close()
    lat.close()


def test_segment_jitter_rolls_a_segment_before_segment_ms(tmp_path):
    clock = FakeClock()
    plain = open_log(tmp_path / "plain", clock, segment_ms=1000)
    jittered = open_log(tmp_path / "jittered", clock, segment_ms=1000, segment_jitter_ms=1000)
    for lg in (plain, jittered):
        lg.append_as_leader(batch(1), 0)  # segment 0: its jitter is 0; the next one gets one
    clock.advance(1001)
    for lg in (plain, jittered):
        lg.append_as_leader(batch(1), 0)  # both roll at segment.ms: offset 1 starts a segment
    jitter = jittered.config.roll_jitter_ms(1)
    assert 0 < jitter < 1000
    clock.advance(1000 - jitter + 1)  # past segment.ms minus the jitter, not past segment.ms
    for lg in (plain, jittered):
        lg.append_as_leader(batch(1), 0)
    assert [s.base_offset for s in plain.segments] == [0, 1]
    assert [s.base_offset for s in jittered.segments] == [0, 1, 2]
    plain.close()
    jittered.close()


@pytest.mark.parametrize("target", ["zstd", "gzip", "lz4", "snappy", "uncompressed"])
def test_compression_type_recompresses_batches_of_another_codec(tmp_path, target):
    from net.batch import build, iter_records
    from net.compression import CODEC_LZ4, CODEC_ZSTD, CODECS

    lg = open_log(tmp_path, compression_type=target)
    records = [[i, i, b"k%d" % i, b"value-%d" % i * 20, [("h", b"1")]] for i in range(5)]
    produced = [
        build(records, 1000, 1004, CODEC_LZ4 if target != "lz4" else CODEC_ZSTD, 77, 3, 10),
        build(records, 2000, 2004),  # uncompressed
    ]
    lg.append_as_leader(b"".join(produced), leader_epoch=4)
    stored = headers(lg.read(0, 10**6))  # CRCs valid
    want = CODECS["none" if target == "uncompressed" else target]
    assert [h.codec for h in stored] == [want, want]
    first = stored[0]
    assert (first.producer_id, first.producer_epoch, first.base_sequence, first.leader_epoch) == (77, 3, 10, 4)
    assert (first.first_timestamp, first.max_timestamp, first.record_count) == (1000, 1004, 5)
    data = lg.read(0, 10**6)
    got = [(r.key, r.value, r.timestamp) for h in stored for r in iter_records(data, _pos(data, h), h)]
    assert got == [(b"k%d" % i, b"value-%d" % i * 20, base + i) for base in (1000, 2000) for i in range(5)]
    lg.close()


def _pos(data: bytes, h) -> int:
    from net.batch import iter_batches

    return next(p for p, x in iter_batches(data) if x.base_offset == h.base_offset)


def test_compression_type_producer_stores_batches_as_produced(tmp_path):
    from net.batch import build
    from net.compression import CODEC_LZ4

    lg = open_log(tmp_path)
    produced = build([[0, 0, None, b"v" * 100, []]], 1000, 1000, CODEC_LZ4)
    lg.append_as_leader(produced, 0)
    (h,) = headers(lg.read(0, 10**6))
    assert h.codec == CODEC_LZ4 and h.size == len(produced)
    lg.close()
