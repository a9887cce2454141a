from __future__ import annotations

import os

import pytest

from broker.log.loader import RECOVERED_HEADERS
from broker.log.log import Log
from broker.log.segment import LogSegment
from tests.unit.test_log_support import batch, config, headers

CFG = {"segment_bytes": 2000, "index_interval_bytes": 300}


def make_log(tmp_path, n: int = 40) -> tuple[Log, list[tuple[int, int]]]:
    lg = Log(tmp_path / "t-0", "t", 0, config(**CFG), clean_shutdown=True)
    spans = []
    for i in range(n):
        info = lg.append_as_leader(batch(1 + i % 3, ts=1000 + i, value=b"d" * 40), 1 + i // 10)
        spans.append((info.first_offset, info.last_offset))
    assert len(lg.segments) >= 4
    return lg, spans


def reopen(tmp_path, clean: bool = False, recovery_point: int = 0) -> Log:
    return Log(tmp_path / "t-0", "t", 0, config(**CFG), recovery_point=recovery_point, clean_shutdown=clean)


def assert_readable(lg: Log, spans: list[tuple[int, int]]) -> None:
    """Every offset below the log end reads back the batch that holds it; nothing is half a batch."""
    for seg in lg.segments:
        assert os.path.getsize(seg.path) == seg.size
    for first, last in spans:
        if last < lg.log_end_offset:
            h = headers(lg.read(first, 1))[0]
            assert (h.base_offset, h.last_offset) == (first, last)


def test_torn_tail_is_truncated(tmp_path):
    lg, spans = make_log(tmp_path)
    active = lg.active_segment
    lg.close()
    with open(active.path, "r+b") as f:
        f.truncate(active.size - 17)  # mid-way through the last batch
    lg = reopen(tmp_path)
    assert lg.log_end_offset == spans[-1][0]
    assert_readable(lg, spans)
    assert lg.append_as_leader(batch(1), 9).first_offset == spans[-1][0]
    lg.close()


@pytest.mark.parametrize("junk", [os.urandom(200), b"\x00" * 4096, b"\x00" * 30])
def test_garbage_after_the_last_batch_is_truncated(tmp_path, junk):
    lg, spans = make_log(tmp_path)
    leo, path, size = lg.log_end_offset, lg.active_segment.path, lg.active_segment.size
    lg.close()
    with open(path, "ab") as f:
        f.write(junk)
    lg = reopen(tmp_path, recovery_point=leo)
    assert lg.log_end_offset == leo and lg.active_segment.size == size
    assert_readable(lg, spans)
    lg.close()


def test_bad_crc_in_the_middle_drops_everything_after_it(tmp_path):
    lg, spans = make_log(tmp_path)
    victim = lg.segments[1]
    second_batch_pos = headers(victim.read(victim.base_offset, 1))[0].size
    victim_path = victim.path
    later = [s.path for s in lg.segments[2:]]
    lg.close()
    with open(victim_path, "r+b") as f:
        f.seek(second_batch_pos + 70)  # inside the records of the segment's second batch
        b = f.read(1)
        f.seek(second_batch_pos + 70)
        f.write(bytes([b[0] ^ 0xFF]))
    lg = reopen(tmp_path)
    bad_first = next(first for first, _ in spans if first > victim.base_offset)
    assert lg.log_end_offset == bad_first
    assert len(lg.segments) == 2 and not any(p.exists() for p in later)
    assert lg.latest_epoch <= 1 + bad_first // 20  # epochs of dropped batches are gone too
    assert_readable(lg, spans)
    lg.close()


def test_clean_shutdown_skips_recovery(tmp_path, monkeypatch):
    lg, spans = make_log(tmp_path)
    leo, path = lg.log_end_offset, lg.active_segment.path
    lg.close()
    with open(path, "r+b") as f:  # corrupt a record inside a complete batch: only a CRC check sees it
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0xFF]))
    calls = []
    real = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover", lambda self, *a, **k: calls.append(self) or real(self, *a, **k))
    lg = reopen(tmp_path, clean=True)
    assert calls == [] and lg.log_end_offset == leo
    lg.close()
    lg = reopen(tmp_path, clean=False, recovery_point=leo)
    assert len(calls) == 1 and lg.log_end_offset == lg.active_segment.base_offset
    lg.close()


def test_only_segments_from_the_recovery_point_are_recovered(tmp_path, monkeypatch):
    lg, spans = make_log(tmp_path)
    bases = [s.base_offset for s in lg.segments]
    lg.close()
    calls = []
    real = LogSegment.recover
    monkeypatch.setattr(
        LogSegment, "recover", lambda self, *a, **k: calls.append(self.base_offset) or real(self, *a, **k)
    )
    lg = reopen(tmp_path, recovery_point=bases[-2] + 1)
    assert calls == bases[-2:]
    assert_readable(lg, spans)
    lg.close()


@pytest.mark.parametrize("damage", ["delete", "torn", "garbage", "zeros"])
def test_missing_or_corrupt_index_is_rebuilt(tmp_path, damage):
    lg, spans = make_log(tmp_path)
    seg = lg.segments[1]
    path = seg.offset_index.path
    good = [seg.offset_index.lookup(o) for o in range(seg.base_offset, seg.next_offset)]
    assert len(seg.offset_index) > 0
    lg.close()
    size = path.stat().st_size
    if damage == "delete":
        path.unlink()
    elif damage == "torn":
        os.truncate(path, size - 3)
    elif damage == "garbage":
        path.write_bytes(bytes.fromhex("0000000500000fff") * (size // 8))
    else:
        path.write_bytes(b"\x00" * size)
    lg = reopen(tmp_path, clean=True)
    seg = lg.segments[1]
    assert path.exists() and path.stat().st_size % 8 == 0
    assert [seg.offset_index.lookup(o) for o in range(seg.base_offset, seg.next_offset)] == good
    assert_readable(lg, spans)
    lg.close()


def test_leftover_files_are_removed(tmp_path):
    lg, spans = make_log(tmp_path)
    lg.close()
    d = tmp_path / "t-0"
    junk = [
        d / "00000000000000000000.log.deleted",
        d / "00000000000000000000.index.swap",
        d / "00000000000000000000.log.cleaned",
        d / "00000000000000099999.index",
    ]
    for p in junk:
        p.write_bytes(b"junk")
    lg = reopen(tmp_path, clean=True)
    assert not any(p.exists() for p in junk)
    assert_readable(lg, spans)
    lg.close()


def test_epoch_cache_rebuilt_from_batches(tmp_path):
    lg, spans = make_log(tmp_path)
    entries = lg.leader_epoch_entries
    assert len(entries) == 4
    lg.close()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").unlink()
    lg = reopen(tmp_path)
    assert lg.leader_epoch_entries == entries
    lg.close()


def test_recovered_batch_headers_are_handed_to_the_replay_once_and_only_while_they_reach_the_log_end(tmp_path):
    """The recovery's headers (LoadedLog.recovered_batches) spare the producer-state replay a second read of the
    recovered segments: they must be exactly the batches a read from that offset finds, from the first recovered
    segment on, and none once the log changed."""
    lg, spans = make_log(tmp_path)
    first_unflushed = lg.segments[2].base_offset
    lg.close()
    lg = reopen(tmp_path, recovery_point=first_unflushed)  # segments 2.. are recovered, 0-1 kept as they were
    on_disk, offset = [], first_unflushed  # read as the replay reads without them
    while offset < lg.log_end_offset:
        on_disk += headers(lg.read(offset, 10**6))
        offset = on_disk[-1].next_offset
    assert len(on_disk) > 5 and on_disk[-1].next_offset == lg.log_end_offset
    assert lg.take_recovered_batches(first_unflushed - 1) is None  # below the first recovered segment
    lg.close()
    lg = reopen(tmp_path, recovery_point=first_unflushed)
    inside = spans[-3][0] + 1  # within a batch: from the batch holding it, as a read from there
    want = [h for h in on_disk if h.last_offset >= inside]
    got = lg.take_recovered_batches(inside)
    assert got == want and got[0].base_offset == spans[-3][0]
    assert lg.take_recovered_batches(inside) is None  # once
    lg.close()
    lg = reopen(tmp_path, recovery_point=first_unflushed)
    lg.append_as_leader(batch(1), 9)
    assert lg.take_recovered_batches(first_unflushed) is None  # the log moved on: they no longer reach its end
    lg.close()
    assert reopen(tmp_path, clean=True).take_recovered_batches(0) is None  # nothing recovered
    assert RECOVERED_HEADERS.held == 0  # every log gave its share back (taken, changed or closed)


def test_recovered_batch_headers_are_bounded_process_wide(tmp_path, monkeypatch):
    """Thousands of large recovered segments must not all keep their headers until their partitions are made:
    past the budget a log keeps none and its replay reads the segments; a taken or closed log frees its share."""
    lg, _ = make_log(tmp_path)
    lg.close()
    kept = reopen(tmp_path)  # everything recovered: its headers are held
    held = RECOVERED_HEADERS.held
    assert held > 10
    monkeypatch.setattr(RECOVERED_HEADERS, "limit", held + 5)  # room for a few more only
    other = reopen(tmp_path)  # same files, another Log: no room for its headers
    assert other.take_recovered_batches(0) is None and RECOVERED_HEADERS.held == held
    other.close()
    kept.close()  # closed without taking them: the share comes back
    assert RECOVERED_HEADERS.held == 0
    again = reopen(tmp_path)  # room again
    assert again.take_recovered_batches(0) is not None and RECOVERED_HEADERS.held == 0
    again.close()
