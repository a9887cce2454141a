"""The aborted-transaction index (`<base>.txnindex`, Kafka's TransactionIndex): its bytes, written at each abort
marker into the marker's segment, read by read_committed fetches, truncated and deleted with its segment, and
rebuilt when its segment is recovered."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker.log.index import CorruptIndexError
from broker.log.log import Log
from broker.log.txn_index import AbortedTxn, TransactionIndex, decode_entries
from broker.metadata.image import PartitionState
from broker.replica.partition import Partition
from net.batch import build, build_marker

NOW = 1_700_000_000_000


def txn_data(pid: int, seq: int, n: int = 1, value: bytes = b"v" * 300) -> bytes:
    return build(
        [(i, 0, b"k%d" % i, value, None) for i in range(n)],
        NOW,
        NOW,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        transactional=True,
    )


def open_partition(d: Path, recovery_point: int = 0, clean: bool = False) -> Partition:
    from tests.unit.test_log_support import config

    lg = Log(d, "t", 0, config(segment_bytes=1024), recovery_point=recovery_point, clean_shutdown=clean)
    p = Partition("t", 0, lg, 1, 1, 30_000, lambda *a: None)
    p.apply_state(PartitionState(0, 1, 0, [1], [1]), NOW)
    return p


def end_txn(p: Partition, pid: int, commit: bool) -> int:
    [off] = p.append_as_leader(build_marker(pid, 0, commit, 1, NOW), 1, NOW, markers=True)
    return off


def txn_files(d: Path) -> dict[str, list[AbortedTxn]]:
    return {f.name: decode_entries(f.read_bytes()) for f in sorted(d.glob("*.txnindex"))}


def test_entry_bytes_are_kafkas_layout(tmp_path):
    """34 bytes: version int16 0, producerId, firstOffset, lastOffset, lastStableOffset, all int64, big-endian."""
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    assert not idx.path.exists() and idx.entries == []  # created at the first abort, as Kafka's
    assert idx.append(AbortedTxn(0x0102030405060708, 5, 9, 10))
    version, pid, first, last, lso = (
        "0000",
        "0102030405060708",
        "0000000000000005",
        "0000000000000009",
        "000000000000000a",
    )
    assert idx.path.read_bytes() == bytes.fromhex(version + pid + first + last + lso)
    assert idx.append(AbortedTxn(7, 11, 20, 12))
    assert not idx.append(AbortedTxn(7, 11, 20, 12))  # at or before the last entry: a replay's, ignored
    assert idx.path.stat().st_size == 68
    again = TransactionIndex(idx.path, 0)
    assert again.entries == [AbortedTxn(0x0102030405060708, 5, 9, 10), AbortedTxn(7, 11, 20, 12)]
    # Kafka's collectAbortedTxns: ends at or after the fetch offset, begins before the upper bound; complete
    # once an entry's LSO reaches the upper bound.
    assert again.collect(10, 30) == ([AbortedTxn(7, 11, 20, 12)], False)
    assert again.collect(0, 10) == ([AbortedTxn(0x0102030405060708, 5, 9, 10)], True)
    again.truncate_to(20)
    assert again.entries == [AbortedTxn(0x0102030405060708, 5, 9, 10)] and again.path.stat().st_size == 34
    again.truncate_to(9)
    assert not again.path.exists()
    idx.path.write_bytes(b"\0" * 35)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(idx.path, 0).sanity_check()
    idx.path.write_bytes(struct.pack(">hqqqq", 1, 1, 1, 1, 1))
    with pytest.raises(CorruptIndexError, match="version 1"):
        TransactionIndex(idx.path, 0).sanity_check()


def aborted_history(p: Partition) -> tuple[list[int], list[AbortedTxn]]:
    """Producer 1 commits, producer 2 aborts while 3 is open, 3 aborts later, over several 1 KiB segments."""
    p.append_as_leader(txn_data(1, 0), 1, NOW)
    end_txn(p, 1, True)
    [first2] = p.append_as_leader(txn_data(2, 0), 1, NOW)
    [first3] = p.append_as_leader(txn_data(3, 0), 1, NOW)
    p.append_as_leader(txn_data(2, 1, n=3), 1, NOW)
    abort2 = end_txn(p, 2, False)
    p.append_as_leader(txn_data(3, 1, n=3), 1, NOW)  # rolls: the second abort marker is in another segment
    abort3 = end_txn(p, 3, False)
    return [first2, first3], [AbortedTxn(2, first2, abort2, first3), AbortedTxn(3, first3, abort3, abort3 + 1)]


def test_aborts_go_to_the_markers_segments_and_fetches_collect_them(tmp_path):
    p = open_partition(tmp_path / "t-0")
    _, expected = aborted_history(p)
    assert len(p.log.segments) > 3
    files = txn_files(p.log.dir)
    for txn in expected:  # each in the file of the segment holding its marker
        seg = max((s for s in p.log.segments if s.base_offset <= txn.last_offset), key=lambda s: s.base_offset)
        assert txn in files[seg.txn_index.path.name]
    assert len(files) == 2 and sum(files.values(), []) == expected
    assert p.log.collect_aborted_txns(0, p.log.log_end_offset) == expected
    # A fetch of [0, 3): only producer 2's transaction (from offset 2) began in it; its marker is segments later.
    assert expected[0].first_offset == 2 and expected[1].first_offset == 3
    assert p.log.collect_aborted_txns(0, 3) == expected[:1]
    assert p.log.collect_aborted_txns(3, 4) == expected  # both overlap offset 3
    assert p.log.collect_aborted_txns(expected[0].last_offset + 1, p.log.log_end_offset) == expected[1:]
    assert p.log.collect_aborted_txns(expected[1].last_offset + 1, p.log.log_end_offset) == []


def test_truncation_and_retention_remove_entries_and_files(tmp_path):
    p = open_partition(tmp_path / "t-0")
    _, expected = aborted_history(p)
    p.truncate_to(expected[1].last_offset)  # the second abort marker goes
    assert p.log.collect_aborted_txns(0, p.log.log_end_offset) == expected[:1]
    assert sum(txn_files(p.log.dir).values(), []) == expected[:1]
    # The transaction is open again (its marker is gone) and aborts again later: a new entry.
    abort = end_txn(p, 3, False)
    assert p.log.collect_aborted_txns(0, p.log.log_end_offset) == [expected[0], expected[1]._replace(last_offset=abort)]
    # DeleteRecords past everything and retention: every segment below the log start goes with its .txnindex.
    p.log.roll()
    p.advance_log_start_offset(p.log.log_end_offset)
    p.log.delete_retention_segments()
    assert txn_files(p.log.dir) == {} and len(p.log.segments) == 1


@pytest.mark.parametrize("how", ["unclean shutdown", "deleted txnindex and index"])
def test_txnindex_is_rebuilt_when_its_segment_is_recovered(tmp_path, how):
    """Kafka's recoverSegment: a recovered segment's aborts are found again by the producer-state replay (from a
    snapshot at or below the segment) and written back, with the same LSO."""
    p = open_partition(tmp_path / "t-0")
    _, expected = aborted_history(p)
    before = txn_files(p.log.dir)
    p.log.flush(p.log.active_segment.base_offset)
    point = p.log.recovery_point
    p.log.close()
    d = p.log.dir
    if how == "unclean shutdown":
        for f in d.glob("*.txnindex"):
            f.write_bytes(b"garbage")  # whatever was there: recovery rebuilds it (recovery point 0: everything)
        p = open_partition(d, recovery_point=0)
    else:
        # One closed segment loses its .txnindex and its offset index: it is recovered (Kafka's rule for a
        # missing index) and its .txnindex rebuilt; the others are trusted.
        victim = sorted(before)[0]
        (d / victim).unlink()
        (d / victim.replace(".txnindex", ".index")).unlink()
        p = open_partition(d, recovery_point=point)
    assert txn_files(d) == before
    assert p.log.collect_aborted_txns(0, p.log.log_end_offset) == expected


def test_clean_restart_reads_the_files_and_a_v2_snapshot_list_moves_to_them(tmp_path):
    import msgpack
    from crc32c import crc32c

    from broker.replica.producer_state import snapshot_offsets, snapshot_path

    p = open_partition(tmp_path / "t-0")
    _, expected = aborted_history(p)
    p.take_producer_snapshot()
    p.log.flush()
    p.log.close()
    d = p.log.dir
    p = open_partition(d, recovery_point=p.log.recovery_point, clean=True)
    assert p.producer_state.replayed_batches == 0
    assert p.log.collect_aborted_txns(0, p.log.log_end_offset) == expected
    end = p.log.log_end_offset
    p.log.close()

    # A data dir of the previous release: no .txnindex files, the aborted list in a version-2 snapshot.
    for f in d.glob("*.txnindex"):
        f.unlink()
    for off in snapshot_offsets(d):
        snapshot_path(d, off).unlink()
    body = msgpack.packb({"offset": end, "producers": [], "aborted": [list(t[:3]) for t in expected]})
    snapshot_path(d, end).write_bytes((2).to_bytes(2, "big") + crc32c(body).to_bytes(4, "big") + body)
    p = open_partition(d, recovery_point=end, clean=True)
    migrated = [t._replace(last_stable_offset=-1) for t in expected]  # their LSO was not kept: unknown
    assert p.log.collect_aborted_txns(0, end) == migrated
    assert sum(txn_files(d).values(), []) == migrated


# --- the log cleaner and transactions (Kafka's CleanedTransactionMetadata) ----------------------------------


def compacted_partition(d: Path, clock) -> Partition:  # type: ignore[no-untyped-def]
    from tests.unit.test_log_support import config

    cfg = config(cleanup_policy="compact", delete_retention_ms=10_000, min_cleanable_dirty_ratio=0.01)
    p = Partition("t", 0, Log(d, "t", 0, cfg, clean_shutdown=True, clock=clock), 1, 1, 30_000, lambda *a: None)
    p.apply_state(PartitionState(0, 1, 0, [1], [1]), NOW)
    return p


def kv(key: bytes, value: bytes, pid: int = -1, seq: int = -1) -> bytes:
    return build([(0, 0, key, value, None)], NOW, NOW, producer_id=pid, producer_epoch=0, base_sequence=seq,
                 transactional=pid >= 0)  # fmt: skip


def contents(p: Partition) -> list[tuple[int, object, object]]:
    """(offset, key, value) of every record from the log start, markers as (offset, "COMMIT"/"ABORT", pid)."""
    from net.batch import control_record, iter_batches, records_of

    out: list[tuple[int, object, object]] = []
    offset = p.log.log_start_offset
    while offset < p.log.log_end_offset:
        data = p.log.read(offset, 10**6)
        if not data:
            break
        for pos, h in iter_batches(data, validate_crc=True):
            if h.is_control:
                m = control_record(data, pos, h)
                out.append((h.base_offset, "COMMIT" if m and m.commit else "ABORT", h.producer_id))
            else:
                out += [(h.base_offset + r[0], r[2], r[3]) for r in records_of(data, pos, h)]
            offset = h.next_offset
    return out


def test_cleaner_drops_aborted_records_keeps_markers_until_delete_retention_and_open_transactions(tmp_path):
    from broker.log.cleaner import LogCleaner
    from tests.unit.test_log_support import FakeClock

    clock = FakeClock(NOW)
    p = compacted_partition(tmp_path / "t-0", clock)
    cleaner = LogCleaner(clock)

    def step(*batches: bytes, marker: tuple[int, bool] | None = None) -> None:
        for b in batches:
            p.append_as_leader(b, 1, NOW)
        if marker is not None:
            end_txn(p, *marker)
        p.log.roll()

    def clean() -> None:
        assert len(cleaner.clean_logs({p.log.dir.parent: {("t", 0): p.log}}, lambda tp: p.last_stable_offset)) == 1

    step(kv(b"a", b"1"))  # 0
    step(kv(b"a", b"aborted", 2, 0), kv(b"b", b"aborted", 2, 1), marker=(2, False))  # 1, 2, abort at 3
    step(kv(b"c", b"committed", 3, 0), marker=(3, True))  # 4, commit at 5
    step(kv(b"d", b"open", 4, 0))  # 6: producer 4's transaction stays open: the LSO is 6
    step(kv(b"a", b"2"))  # 7, above the LSO: not cleanable yet, so it cannot supersede a=1
    assert p.last_stable_offset == 6
    clean()
    assert contents(p) == [
        (0, b"a", b"1"),  # an aborted a=aborted never supersedes it
        (3, "ABORT", 2),  # its transaction's batches went in this cleaning: kept
        (4, b"c", b"committed"),
        (5, "COMMIT", 3),
        (6, b"d", b"open"),
        (7, b"a", b"2"),
    ]
    assert sum(txn_files(p.log.dir).values(), []) == [AbortedTxn(2, 1, 3, 4)]  # kept with its marker
    assert p.log.collect_aborted_txns(0, 8) == [AbortedTxn(2, 1, 3, 4)]

    end_txn(p, 4, True)  # 8: the LSO moves to the end
    step(kv(b"c", b"plain"))  # 9: c's committed record is superseded
    clean()  # the abort marker is alone now: delete.retention.ms starts; c=committed goes
    assert contents(p) == [(3, "ABORT", 2), (5, "COMMIT", 3), (6, b"d", b"open"), (7, b"a", b"2"), (8, "COMMIT", 4),
                           (9, b"c", b"plain")]  # fmt: skip
    clock.advance(9_000)
    step(kv(b"x", b"1"))
    clean()  # 9 s: both still there (the commit marker's transaction emptied only in the last cleaning)
    assert [r[0] for r in contents(p)][:2] == [3, 5]
    clock.advance(2_000)
    step(kv(b"y", b"1"))
    clean()  # 11 s after the abort marker was found alone, 2 s after the commit marker was
    assert [r[0] for r in contents(p)][:2] == [5, 6]
    assert txn_files(p.log.dir) == {} and p.log.collect_aborted_txns(0, 20) == []
    clock.advance(9_000)
    step(kv(b"z", b"1"))
    clean()
    assert [r[0] for r in contents(p)][:1] == [6]  # the transaction of 4 still has d=open: its marker stays
    assert (8, "COMMIT", 4) in contents(p)


def test_a_lone_markers_delete_horizon_is_in_its_batch_and_survives_a_restart(tmp_path):
    """The cleaning that first finds a marker alone flags its control batch (KIP-534: base timestamp = now +
    delete.retention.ms, its record's timestamp unchanged); a cleaner started afresh keeps that horizon, and
    removes the marker once it has passed without any new write."""
    from broker.log.cleaner import LogCleaner
    from net.batch import iter_batches
    from tests.unit.test_log_support import FakeClock

    clock = FakeClock(NOW)
    d = tmp_path / "t-0"
    p = compacted_partition(d, clock)

    def clean(cleaner: LogCleaner, p: Partition) -> int:
        return len(cleaner.clean_logs({d.parent: {("t", 0): p.log}}, lambda tp: p.last_stable_offset))

    def marker_batch(p: Partition) -> tuple[int, int | None, int] | None:
        """(offset, delete horizon, record timestamp) of the control batch, if it is still there."""
        for _, h in iter_batches(p.log.read(0, 10**6), validate_crc=True):
            if h.is_control:
                return h.base_offset, h.delete_horizon_ms, h.max_timestamp
        return None

    p.append_as_leader(kv(b"a", b"aborted", 2, 0), 1, NOW)  # 0
    end_txn(p, 2, False)  # 1
    p.append_as_leader(kv(b"b", b"1"), 1, NOW)  # 2
    p.log.roll()
    first = LogCleaner(clock)
    assert clean(first, p) == 1  # the aborted record goes; its marker stays for it, not flagged yet
    assert [r[0] for r in contents(p)] == [1, 2] and marker_batch(p) == (1, None, NOW)
    clock.advance(1_000)
    p.append_as_leader(kv(b"c", b"1"), 1, NOW)
    p.log.roll()
    assert clean(first, p) == 1  # alone now: flagged
    assert marker_batch(p) == (1, NOW + 1_000 + 10_000, NOW)
    p.log.close()

    clock.advance(9_000)
    p = compacted_partition(d, clock)  # a restart: a new partition, log and cleaner
    second = LogCleaner(clock)
    p.append_as_leader(kv(b"d", b"1"), 1, NOW)
    p.log.roll()
    assert clean(second, p) == 1  # 1 s before the horizon: kept, and the horizon with it
    assert marker_batch(p) == (1, NOW + 11_000, NOW)
    assert [r[0] for r in contents(p)][:1] == [1]
    clock.advance(1_000)
    assert clean(second, p) == 1  # nothing written: the horizon passed
    assert marker_batch(p) is None and [r[0] for r in contents(p)] == [2, 3, 4]
    assert clean(second, p) == 0
    p.log.close()


def test_a_committed_transactional_batch_stays_transactional_when_the_cleaner_rebuilds_it():
    from broker.log.cleaner import rebuild_batch
    from net.batch import parse_header

    raw = build([(0, 0, b"a", b"1", None), (1, 0, b"b", b"2", None)], NOW, NOW, producer_id=5, producer_epoch=1,
                base_sequence=0, transactional=True)  # fmt: skip
    h = parse_header(raw)
    out = parse_header(rebuild_batch(h, [(1, 0, b"b", b"2", None)]))
    assert out.is_transactional and not out.is_control and (out.producer_id, out.last_offset_delta) == (5, 1)


def test_retention_by_time_deletes_a_segment_with_its_txnindex(tmp_path):
    from tests.unit.test_log_support import config

    p = open_partition(tmp_path / "t-0")
    _, expected = aborted_history(p)
    p.log.update_config(config(segment_bytes=1024, retention_ms=1000))
    p.log.roll()
    assert len(txn_files(p.log.dir)) == 2
    closed = len(p.log.segments) - 1
    assert p.log.delete_retention_segments(now_ms=NOW + 2000) == closed
    assert txn_files(p.log.dir) == {} and list(p.log.dir.glob("*.txnindex*")) == []
    assert p.log.collect_aborted_txns(0, p.log.log_end_offset) == []


def test_an_entry_past_its_segments_data_is_dropped_at_load(tmp_path):
    """A truncation whose .txnindex rewrite was lost (power loss) leaves an abort whose marker is gone: it must
    never be served (it would hide the producer's later batches), so the segment's load drops it."""
    p = open_partition(tmp_path / "t-0")
    _, expected = aborted_history(p)
    p.take_producer_snapshot()
    p.log.flush()
    p.log.close()
    seg = p.log.segments[-1]
    stale = AbortedTxn(9, seg.next_offset - 1, seg.next_offset + 5, seg.next_offset + 6)
    with open(seg.txn_index.path, "ab") as f:
        f.write(stale.to_bytes())
    p = open_partition(p.log.dir, recovery_point=p.log.recovery_point, clean=True)
    assert p.log.collect_aborted_txns(0, p.log.log_end_offset + 10) == expected
    assert stale not in sum(txn_files(p.log.dir).values(), [])
