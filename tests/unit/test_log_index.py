from __future__ import annotations

import pytest

from broker.log.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_lookup_is_greatest_entry_at_or_below(tmp_path):
    idx = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024)
    assert idx.lookup(150) == (100, 0)  # empty: start of the segment
    for rel, pos in [(9, 0), (19, 4100), (29, 8300)]:
        idx.append(100 + rel, pos)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(108) == (100, 0)
    assert idx.lookup(109) == (109, 0)
    assert idx.lookup(125) == (119, 4100)
    assert idx.lookup(10**9) == (129, 8300)
    assert (tmp_path / "00000000000000000100.index").stat().st_size == 3 * 8
    with pytest.raises(ValueError):
        idx.append(129, 9000)  # offsets must grow
    idx.close()


def test_offset_index_reload_truncate_and_reset(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(path, 0, 1024)
    for i in range(10):
        idx.append(i * 10 + 9, i * 1000)
    idx.close()
    idx = OffsetIndex(path, 0, 1024)
    assert len(idx) == 10 and idx.existed
    assert idx.lookup(55) == (49, 4000)
    idx.truncate_to(49)  # drops the entry for 49 and everything after
    assert len(idx) == 4 and idx.last_entry() == (39, 3000)
    assert path.stat().st_size == 4 * 8
    idx.reset()
    assert len(idx) == 0 and path.stat().st_size == 0
    idx.close()


def test_offset_index_full(tmp_path):
    idx = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 8 * 3)
    for i in range(3):
        assert not idx.is_full
        idx.append(i, i)
    assert idx.is_full
    idx.close()


def test_offset_index_sanity_check(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(path, 0, 1024)
    idx.append(5, 0)
    idx.append(10, 500)
    idx.sanity_check(log_size=1000)
    with pytest.raises(CorruptIndexError, match="beyond log size"):
        idx.sanity_check(log_size=500)
    idx.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00")  # a torn entry
    idx = OffsetIndex(path, 0, 1024)
    with pytest.raises(CorruptIndexError, match="multiple"):
        idx.sanity_check(1000)
    idx.close()
    path.write_bytes(bytes.fromhex("0000000a000001f400000005000001f4"))  # 10 then 5
    idx = OffsetIndex(path, 0, 1024)
    with pytest.raises(CorruptIndexError, match="monotonic"):
        idx.sanity_check(1000)
    idx.close()


def test_time_index_append_lookup_truncate(tmp_path):
    path = tmp_path / "00000000000000000050.timeindex"
    ti = TimeIndex(path, 50, 1024)
    assert ti.lookup(123) == (-1, 50)
    ti.maybe_append(1000, 55)
    ti.maybe_append(1000, 60)  # not larger: ignored
    ti.maybe_append(900, 61)  # smaller: ignored
    ti.maybe_append(2000, 70)
    ti.maybe_append(3000, 80)
    assert len(ti) == 3
    assert ti.lookup(999) == (-1, 50)
    assert ti.lookup(1000) == (1000, 55)
    assert ti.lookup(2500) == (2000, 70)
    assert ti.lookup(10**12) == (3000, 80)
    ti.close()
    ti = TimeIndex(path, 50, 1024)
    assert ti.last_entry() == (3000, 80)
    ti.truncate_to(70)
    assert ti.last_entry() == (1000, 55) and path.stat().st_size == 12
    ti.sanity_check(100)
    ti.close()


def test_time_index_sanity_check(tmp_path):
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(bytes.fromhex("00000000000007d00000000100000000000003e800000002"))
    ti = TimeIndex(path, 0, 1024)
    with pytest.raises(CorruptIndexError, match="monotonic"):
        ti.sanity_check(100)
    ti.delete()
    assert not path.exists()
