from __future__ import annotations

import os
import struct

import pytest

from broker.log.segment import LogSegment
from net.batch import CRC_START, TIMESTAMP_LOG_APPEND, build, parse_header, stamp
from tests.unit.test_log_support import batch, headers


def fill(seg: LogSegment, n_batches: int, records: int = 3, ts0: int = 1000) -> list[tuple[int, int, int]]:
    """Append stamped batches; returns (base, last, position) of each."""
    out = []
    offset = seg.next_offset
    for i in range(n_batches):
        data = bytearray(batch(records, ts=ts0 + i, value=b"x" * 50))
        stamp(data, offset, 0)
        pos = seg.size
        seg.append(offset + records - 1, ts0 + i, offset + records - 1, data)
        out.append((offset, offset + records - 1, pos))
        offset += records
    return out


@pytest.fixture
def seg(tmp_path):
    s = LogSegment(tmp_path, 0, index_interval_bytes=500)
    yield s
    s.close()


def test_sparse_index_and_translate_every_offset(seg):
    written = fill(seg, 200)
    assert 0 < len(seg.offset_index) < 200  # sparse
    assert seg.next_offset == 600
    for base, last, pos in written:
        for off in range(base, last + 1):
            found = seg.translate_offset(off)
            assert found is not None and found[0] == pos and found[1].base_offset == base
    assert seg.translate_offset(600) is None


def test_read_starts_at_batch_containing_offset(seg):
    written = fill(seg, 50)
    data = seg.read(31, 10**6)
    hs = headers(data)
    assert hs[0].base_offset == 30 and hs[-1].last_offset == 149
    assert len(data) == seg.size - written[10][2]


def test_read_max_bytes_whole_batches_only(seg):
    fill(seg, 20)
    size = parse_header(seg.read(0, 10**6)).size
    data = seg.read(0, size * 3 + size // 2)
    assert len(data) == 3 * size and len(headers(data)) == 3
    # KIP-74: one batch even if it is larger than max_bytes, unless min_one_message is off
    assert len(seg.read(6, 10)) == size and headers(seg.read(6, 10))[0].base_offset == 6
    assert seg.read(6, 10, min_one_message=False) == b""
    # never past max_position
    assert len(seg.read(0, 10**6, max_position=size * 2)) == size * 2
    assert seg.read(6, 10**6, max_position=size * 2) == b""


def test_recover_rebuilds_identical_index_and_state(seg, tmp_path):
    fill(seg, 100)
    entries = [seg.offset_index.lookup(o) for o in range(300)]
    ts_lookups = [seg.time_index.lookup(t) for t in range(990, 1110, 7)]
    state = (seg.next_offset, seg.max_timestamp, seg.size)
    assert seg.recover() == 0
    assert (seg.next_offset, seg.max_timestamp, seg.size) == state
    assert [seg.offset_index.lookup(o) for o in range(300)] == entries
    # recovery also adds the final max-timestamp entry, so lookups can only get more precise
    for t, (ts, off) in zip(range(990, 1110, 7), ts_lookups, strict=True):
        new_ts, new_off = seg.time_index.lookup(t)
        assert new_ts >= ts and new_off >= off


def test_recovered_index_files_hold_what_memory_holds(seg, tmp_path):
    """Recovery writes its rebuilt entries in one write per index at the end: the files must then read back as
    the entries in memory, and appends after it land behind them."""
    fill(seg, 100)
    torn = seg.size
    with open(seg.path, "ab") as f:
        f.write(b"\x00" * 30)  # a torn tail, truncated by the recovery
    seg.size += 30
    assert seg.recover() == 30 and seg.size == torn
    fill(seg, 5)
    entries = (list(seg.offset_index._rel), list(seg.offset_index._pos))
    times = (list(seg.time_index._ts), list(seg.time_index._rel))
    seg.close()
    again = LogSegment(tmp_path, 0, index_interval_bytes=500)
    try:
        assert (list(again.offset_index._rel), list(again.offset_index._pos)) == entries
        assert (list(again.time_index._ts), list(again.time_index._rel)) == times
        assert len(entries[0]) > 10
    finally:
        again.close()


def test_reopen_restores_state_without_recovery(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=500)
    fill(seg, 40)
    state = (seg.next_offset, seg.max_timestamp, seg.offset_of_max_timestamp, seg.size)
    seg.close()
    seg = LogSegment(tmp_path, 0, index_interval_bytes=500)
    assert not seg.needs_recovery
    assert (seg.next_offset, seg.max_timestamp, seg.offset_of_max_timestamp, seg.size) == state
    seg.close()


def test_find_offset_by_timestamp(seg):
    fill(seg, 100, ts0=5000)  # batch i: offsets 3i..3i+2, max timestamp 5000+i
    assert seg.find_offset_by_timestamp(0) == (0, 5000)
    assert seg.find_offset_by_timestamp(5042) == (126, 5042)
    assert seg.find_offset_by_timestamp(5099) == (297, 5099)
    assert seg.find_offset_by_timestamp(5100) is None
    assert seg.find_offset_by_timestamp(5000, start_offset=4) == (4, 5001)


def test_truncate_to_batch_boundary(seg):
    written = fill(seg, 60)
    removed = seg.truncate_to(100)  # offset 100 is inside batch 99..101: the whole batch goes
    assert seg.next_offset == 99
    assert seg.size == written[33][2] and removed > 0
    assert seg.max_timestamp == 1032
    assert os.path.getsize(seg.path) == seg.size
    for off in (0, 50, 98):
        assert seg.translate_offset(off)[1].last_offset >= off
    assert seg.translate_offset(99) is None
    fill(seg, 1)
    assert headers(seg.read(99, 10**6))[0].base_offset == 99


def test_find_offset_by_timestamp_answers_the_record_not_the_batch(seg):
    """Kafka's answer for records stamped 100, 400, 200 in one batch, asked for 150: the record at 400 (offset 1),
    a pair that is a real record; not the batch's base offset with its max timestamp."""
    records = [[0, 0, None, b"a", []], [1, 300, None, b"b", []], [2, 100, None, b"c", []]]
    data = bytearray(build(records, 100, 400))
    stamp(data, 0, 0)
    seg.append(2, 400, 1, data)
    assert seg.find_offset_by_timestamp(150) == (1, 400)
    assert seg.find_offset_by_timestamp(100) == (0, 100)
    assert seg.find_offset_by_timestamp(401) is None
    assert seg.find_offset_by_timestamp(150, start_offset=2) == (2, 200)
    # A LogAppendTime batch: every record carries the batch's (append) time, so the first record answers.
    data = bytearray(build(records, 100, 900))
    struct.pack_into(">h", data, CRC_START, TIMESTAMP_LOG_APPEND)  # the attributes (CRC not checked here)
    stamp(data, 3, 0)
    seg.append(5, 900, 5, data)
    assert seg.find_offset_by_timestamp(500) == (3, 900)
