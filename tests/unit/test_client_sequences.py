"""The idempotent producer's sequence bookkeeping (client/sequences.py), sans-IO: numbering per partition,
KIP-360 epoch bumps that restart a broken partition at 0, other partitions moving to the new epoch at 0,
and the exhausted epoch asking for a new producer id."""

from __future__ import annotations

from client.sequences import MAX_EPOCH, Sequences

A, B = ("t", 0), ("t", 1)


def test_sequences_count_records_per_partition():
    s = Sequences()
    s.reset(42, 0)
    assert s.stamp(A, 3) == (0, 0)
    assert s.stamp(A, 2) == (0, 3)
    assert s.stamp(B, 1) == (0, 0)
    assert s.stamp(A, 1) == (0, 5)


def test_restart_bumps_the_epoch_and_numbers_from_zero_everywhere():
    s = Sequences()
    s.reset(42, 0)
    s.stamp(A, 5)
    s.stamp(B, 5)
    s.restart(A)
    assert s.epoch == 1 and not s.bump_requested
    assert not s.stale(A) and s.stale(B)  # B still has batches of epoch 0 to finish
    assert s.stamp(A, 2) == (1, 0)
    assert s.stamp(B, 1) == (1, 0)
    assert not s.stale(B) and s.stamp(B, 1) == (1, 1)


def test_sequences_wrap_like_the_broker():
    s = Sequences()
    s.reset(1, 0)
    s.stamp(A, 2**31 - 1)
    assert s.stamp(A, 1) == (0, 2**31 - 1)
    assert s.stamp(A, 1) == (0, 0)


def test_an_exhausted_epoch_asks_for_a_new_producer_id():
    s = Sequences()
    s.reset(1, MAX_EPOCH)
    s.stamp(A, 1)
    s.restart(A)
    assert s.bump_requested and s.epoch == MAX_EPOCH
    s.reset(2, 0)
    assert not s.bump_requested and s.stamp(A, 1) == (0, 0)
