"""Producer-state snapshots (Kafka's `<offset>.snapshot`): written at rolls and shutdown, loaded at open and
after truncation, with only the batches after the snapshot replayed; expiry by producer.id.expiration.ms."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.log import Log
from broker.metadata.image import PartitionState
from broker.replica.partition import Partition
from broker.replica.producer_state import ProducerStateManager, snapshot_offsets, snapshot_path
from net.batch import build, parse_header
from net.errors import OutOfOrderSequenceError
from tests.unit.test_log_support import config

NOW = 1_700_000_000_000


def idem(pid: int, seq: int, n: int = 1, ts: int = NOW, value: bytes = b"v" * 200) -> bytes:
    return build(
        [[i, 0, None, value, []] for i in range(n)], ts, ts, producer_id=pid, producer_epoch=0, base_sequence=seq
    )


def open_partition(
    d: Path, segment_bytes: int = 1024, recovery_point: int = 0, clean: bool = False, **kw: int
) -> Partition:
    lg = Log(d, "t", 0, config(segment_bytes=segment_bytes), recovery_point=recovery_point, clean_shutdown=clean)
    p = Partition("t", 0, lg, 1, 1, 30_000, lambda *a: None, **kw)
    p.apply_state(PartitionState(0, 1, 0, [1], [1]), NOW)
    return p


def reopen(p: Partition, clean: bool = False, **kw: int) -> Partition:
    """As after SIGKILL of a broker that flushed its rolled segments (LogManager.flush_dirty): only the active
    segment is recovered; `clean`: after a clean shutdown (take_producer_snapshot first), nothing is."""
    p.log.flush(None if clean else p.log.active_segment.base_offset)
    p.log.close()
    return open_partition(p.log.dir, recovery_point=p.log.recovery_point, clean=clean, **kw)


def test_snapshot_round_trip(tmp_path):
    m = ProducerStateManager(tmp_path)
    for pid in (1, 2):
        for seq in range(7):  # more than the 5 retained
            m.update(parse_header(idem(pid, seq)), 100 * pid + seq)
    m.take_snapshot(42)
    loaded, off = ProducerStateManager.load(tmp_path, 0, 50)
    assert off == 42 and loaded.producer_ids() == {1, 2}
    for pid in (1, 2):
        assert loaded.duplicate_of(parse_header(idem(pid, 6))) == 100 * pid + 6
        assert loaded.duplicate_of(parse_header(idem(pid, 2))) == 100 * pid + 2
        with pytest.raises(OutOfOrderSequenceError):
            loaded.duplicate_of(parse_header(idem(pid, 1)))  # no longer retained: refused, not appended
        assert loaded.duplicate_of(parse_header(idem(pid, 7))) is None


def test_corrupt_or_out_of_range_snapshots_are_skipped(tmp_path):
    m = ProducerStateManager(tmp_path)
    m.update(parse_header(idem(1, 0)), 0)
    m.take_snapshot(10)
    m.update(parse_header(idem(1, 1)), 10)
    m.take_snapshot(20)
    m.take_snapshot(90)
    data = bytearray(snapshot_path(tmp_path, 20).read_bytes())
    data[-1] ^= 0xFF
    snapshot_path(tmp_path, 20).write_bytes(bytes(data))
    loaded, off = ProducerStateManager.load(tmp_path, 0, 50)  # 90 is past the log end, 20 is corrupt
    assert off == 10 and loaded.duplicate_of(parse_header(idem(1, 0))) == 0
    assert snapshot_offsets(tmp_path) == [10]  # both removed
    assert ProducerStateManager.load(tmp_path, 11, 50)[1] == 11  # below the log start: replay from the start


def test_retry_far_back_is_a_duplicate_after_reopen_and_recovery_reads_one_segment(tmp_path):
    p = open_partition(tmp_path / "t-0")
    first = idem(7, 0)
    [base] = p.append_as_leader(first, 1, NOW)
    for i in range(30):  # other producers roll many 1 KiB segments
        p.append_as_leader(idem(100 + i, 0), 1, NOW)
    assert len(p.log.segments) > 10
    assert p.append_as_leader(first, 1, NOW) == [base]
    end = p.log.log_end_offset

    p = reopen(p)  # as after SIGKILL: only the roll snapshots
    assert p.append_as_leader(first, 1, NOW) == [base] and p.log.log_end_offset == end
    assert p.producer_state.replayed_batches <= 2  # the active segment's batches, not the whole log

    p.take_producer_snapshot()  # clean shutdown
    p = reopen(p, clean=True)
    assert p.producer_state.replayed_batches == 0
    assert p.append_as_leader(first, 1, NOW) == [base]
    assert len(p.producer_state) == 31


def test_load_plus_replay_equals_full_replay(tmp_path):
    p = open_partition(tmp_path / "a")
    sent: list[bytes] = []
    next_seq = [0, 0, 0, 0]
    for i in range(40):
        pid, n = i % 4, 1 + i % 3
        sent.append(idem(pid, next_seq[pid], n=n))
        next_seq[pid] += n
        p.append_as_leader(sent[-1], 1, NOW)
    full = ProducerStateManager()
    full.replay(h for h in _headers(p.log))
    p = reopen(p)
    assert p.producer_state.replayed_batches < 40
    for blob in sent:
        h = parse_header(blob)
        try:
            want = full.duplicate_of(h)
        except OutOfOrderSequenceError:
            with pytest.raises(OutOfOrderSequenceError):
                p.producer_state.duplicate_of(h)
            continue
        assert p.producer_state.duplicate_of(h) == want


def test_truncation_drops_newer_snapshots_and_forgets_truncated_batches(tmp_path):
    p = open_partition(tmp_path / "t-0")
    for i in range(20):
        p.append_as_leader(idem(1, i), 1, NOW)
    cut = p.log.segments[3].base_offset
    p.truncate_to(cut)
    assert all(off <= cut for off in snapshot_offsets(p.log.dir))
    # The batch at the cut is gone: its retry is new again; the one before it is still a duplicate.
    assert p.producer_state.duplicate_of(parse_header(idem(1, cut - 1))) == cut - 1
    assert p.producer_state.duplicate_of(parse_header(idem(1, cut))) is None
    p.log.truncate_fully_and_start_at(500)
    p.truncate_to(500)
    assert len(p.producer_state) == 0 and snapshot_offsets(p.log.dir) == []


def test_expiry_forgets_idle_producers(tmp_path):
    p = open_partition(
        tmp_path / "t-0", producer_id_expiration_ms=60_000, producer_id_expiration_check_interval_ms=1_000
    )
    p.append_as_leader(idem(1, 0, ts=NOW - 120_000), 1, NOW)
    p.append_as_leader(idem(2, 0, ts=NOW), 1, NOW)
    # The tick clock is monotonic (it has nothing to do with the wall clock); expiry compares the wall clock.
    p.tick(5_000, wall_ms=NOW)
    p.tick(6_000, wall_ms=NOW + 1_000)
    assert p.producer_state.producer_ids() == {2}


def _headers(lg: Log):
    from net.batch import iter_batches

    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20)
        for _, h in iter_batches(data):
            yield h
            off = h.next_offset


def test_open_and_aborted_transactions_give_the_lso_and_survive_a_snapshot(tmp_path):
    """A transactional producer's first batch opens its transaction (the first unstable offset); a commit marker
    closes it; an abort marker is answered as Kafka's AbortedTxn (first offset, marker, LSO after it) for the
    .txnindex. The open transactions are in the snapshot (version 3), the aborted ones are not."""
    from broker.replica.producer_state import SNAPSHOT_VERSION, AbortedTxn, ProducerStateManager
    from net.batch import build, build_marker, control_record, parse_header

    def data(pid: int, seq: int, base: int):
        raw = build(
            [(0, 0, None, b"v", None)], 1, 1, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
        )
        return parse_header(raw)._replace(base_offset=base)

    def marker(pid: int, commit: bool, base: int):
        raw = build_marker(pid, 0, commit, 3, 1)
        h = parse_header(raw)
        return h._replace(base_offset=base), control_record(raw, 0, h)

    m = ProducerStateManager(tmp_path)
    assert m.update(data(1, 0, 10), 10) is None
    m.update(data(2, 0, 11), 11)
    m.update(data(1, 1, 12), 12)
    assert m.first_unstable_offset() == 10
    h, rec = marker(1, False, 13)
    assert m.check_append([h]) == [None]
    # Producer 2's transaction (from 11) is still open: the LSO after the abort is 11.
    assert m.update(h, 13, rec) == AbortedTxn(1, 10, 13, 11)
    assert m.first_unstable_offset() == 11
    m.take_snapshot(14)
    assert int.from_bytes(snapshot_path(tmp_path, 14).read_bytes()[:2], "big") == SNAPSHOT_VERSION == 3
    loaded, at = ProducerStateManager.load(tmp_path, 0, 14)
    assert at == 14 and loaded.first_unstable_offset() == 11 and loaded.legacy_aborted == []
    h, rec = marker(2, True, 14)
    assert loaded.update(h, 14, rec) is None  # a commit
    assert loaded.first_unstable_offset() is None
    h, rec = marker(2, False, 15)
    assert loaded.update(h, 15, rec) is None  # an abort with no transaction open: nothing was aborted
    loaded.update(data(2, 1, 16), 16)
    h, rec = marker(2, False, 17)
    assert loaded.replay([h._replace(base_offset=17)], {17: rec}) == [AbortedTxn(2, 16, 17, 18)]


def test_version_2_snapshot_is_read_and_hands_over_its_aborted_list(tmp_path):
    """One release on, a version-2 snapshot (aborted transactions inside) still loads; its aborted list is
    handed to the Partition for the .txnindex files, with the LSO unknown (-1)."""
    import msgpack
    from crc32c import crc32c

    from broker.replica.producer_state import AbortedTxn

    body = msgpack.packb({"offset": 20, "producers": [[1, 0, NOW, [[0, 0, 10]], 15]], "aborted": [[2, 3, 9]]})
    snapshot_path(tmp_path, 20).write_bytes((2).to_bytes(2, "big") + crc32c(body).to_bytes(4, "big") + body)
    loaded, at = ProducerStateManager.load(tmp_path, 0, 30)
    assert at == 20 and loaded.first_unstable_offset() == 15
    assert loaded.legacy_aborted == [AbortedTxn(2, 3, 9, -1)]


def test_a_transactions_first_batch_needs_a_current_verification_guard():
    """KIP-890: with guards (verification on), a transactional batch of a producer with no transaction open here is
    appended only with the guard verification_guard gave; a marker in between retires it, the first append makes
    the open transaction vouch for the later batches, and a newer epoch's guard replaces an older one's."""
    from net.batch import build_marker, control_record
    from net.errors import InvalidTxnStateError

    def txn(pid: int, seq: int, epoch: int = 0):
        raw = build([(0, 0, None, b"v", None)], 1, 1, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                    transactional=True)  # fmt: skip
        return parse_header(raw)

    m = ProducerStateManager()
    with pytest.raises(InvalidTxnStateError):  # nothing verified (a request without a transactional id)
        m.check_append([txn(1, 0)], {})
    assert m.check_append([txn(1, 0)]) == [None]  # verification off: the old behaviour
    guard = m.verification_guard(1, 0, now_ms=0)
    assert m.verification_guard(1, 0, now_ms=5) is guard  # produces verifying at once share it
    with pytest.raises(InvalidTxnStateError):
        m.check_append([txn(1, 0)], {1: object()})  # someone else's guard
    assert m.check_append([txn(1, 0), txn(1, 1)], {1: guard}) == [None, None]
    m.update(txn(1, 0), 0)
    assert m.has_ongoing_transaction(1)
    assert m.check_append([txn(1, 1)], {}) == [None]  # the open transaction vouches for its later batches
    # A marker ends the transaction; a verification started before it no longer lets a batch in.
    stale = m.verification_guard(2, 0, now_ms=0)
    marker = build_marker(2, 0, False, 0, 1)
    m.update(parse_header(marker), 1, control_record(marker, 0, parse_header(marker)))
    with pytest.raises(InvalidTxnStateError):
        m.check_append([txn(2, 0)], {2: stale})
    older = m.verification_guard(3, 0, now_ms=0)
    newer = m.verification_guard(3, 1, now_ms=0)
    assert newer is not older and m.verification_guard(3, 0, now_ms=0) is newer
    m.remove_expired(now_ms=10_000, expiration_ms=1_000)  # an unanswered verification is forgotten
    with pytest.raises(InvalidTxnStateError):
        m.check_append([txn(3, 0, epoch=1)], {3: newer})


def test_a_long_replay_is_snapshotted_unless_a_recovery_forced_it(tmp_path):
    """After a lost snapshot the state is replayed once and snapshotted at the log end; after an unclean shutdown
    the replay of the recovered active segment is not: the next unclean start replays it from the segment's base
    again whatever newer snapshot exists, and the snapshot's file (one per partition) held up leadership."""
    p = open_partition(tmp_path / "t-0", segment_bytes=1 << 20)  # one active segment
    for i in range(80):
        p.append_as_leader(idem(1, i), 1, NOW)
    end = p.log.log_end_offset
    assert snapshot_offsets(p.log.dir) == []  # no roll yet

    p = reopen(p)  # unclean: the active segment is recovered and its 80 batches replayed
    assert p.producer_state.replayed_batches == 80
    assert snapshot_offsets(p.log.dir) == []
    assert p.append_as_leader(idem(1, 79), 1, NOW) == [end - 1]  # the replayed state still finds duplicates

    p = reopen(p, clean=True)  # clean but without a shutdown snapshot (as if lost): replayed, then snapshotted
    assert p.producer_state.replayed_batches == 80
    assert snapshot_offsets(p.log.dir) == [end]
    p = reopen(p, clean=True)
    assert p.producer_state.replayed_batches == 0
