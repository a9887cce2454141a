"""Idempotent sequence and epoch rules (Kafka's ProducerAppendInfo), sans-IO on ProducerStateManager:
last + 1 within an epoch, a new epoch starts at 0, an older epoch is fenced, an unknown producer starts
anywhere, retained retries are duplicates, and batches of one append see each other."""

from __future__ import annotations

import pytest

from broker.replica.producer_state import ProducerStateManager
from net.batch import BatchHeader, build, parse_header
from net.errors import InvalidProducerEpochError, OutOfOrderSequenceError

NOW = 1_700_000_000_000
MAX_SEQ = 2**31 - 1


def batch(seq: int, n: int = 1, epoch: int = 0, pid: int = 9) -> BatchHeader:
    records = [[i, 0, None, b"v", []] for i in range(n)]
    return parse_header(build(records, NOW, NOW, producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def state_after(*appended: tuple[BatchHeader, int]) -> ProducerStateManager:
    m = ProducerStateManager()
    for h, offset in appended:
        m.update(h, offset)
    return m


def test_next_sequence_is_accepted_and_a_gap_is_refused():
    m = state_after((batch(0, n=5), 0))
    assert m.check_append([batch(5)]) == [None]
    with pytest.raises(OutOfOrderSequenceError, match="sequence 6 does not follow the last appended 4"):
        m.check_append([batch(6)])
    with pytest.raises(OutOfOrderSequenceError):
        m.check_append([batch(100)])


def test_the_issue_case_sequence_0_then_5():
    m = state_after((batch(0), 0))
    with pytest.raises(OutOfOrderSequenceError):
        m.check_append([batch(5)])


def test_retained_retry_is_a_duplicate_and_an_older_unretained_one_is_refused():
    m = state_after(*((batch(s), 10 + s) for s in range(7)))  # 5 retained: sequences 2..6
    assert m.check_append([batch(4)]) == [14]
    assert m.check_append([batch(6)]) == [16]
    with pytest.raises(OutOfOrderSequenceError):
        m.check_append([batch(1)])


def test_a_retry_must_match_the_retained_range_exactly():
    m = state_after((batch(0, n=3), 0))
    with pytest.raises(OutOfOrderSequenceError):
        m.check_append([batch(0, n=2)])


def test_new_epoch_must_start_at_zero():
    m = state_after((batch(0, n=3), 0))
    assert m.check_append([batch(0, epoch=1)]) == [None]
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 1 must start at sequence 0"):
        m.check_append([batch(3, epoch=1)])


def test_older_epoch_is_fenced_even_for_a_former_duplicate():
    old = batch(0, epoch=0)
    m = state_after((old, 0), (batch(0, epoch=1), 1))
    with pytest.raises(InvalidProducerEpochError):
        m.check_append([old])
    with pytest.raises(InvalidProducerEpochError):
        m.check_append([batch(1, epoch=0)])


def test_unknown_producer_may_start_at_any_sequence():
    m = state_after((batch(0, pid=1), 0))
    assert m.check_append([batch(57, pid=2)]) == [None]
    assert m.check_append([batch(3, epoch=4, pid=3)]) == [None]


def test_sequence_wraps_at_int32_max():
    m = state_after((batch(MAX_SEQ), 0))
    assert m.check_append([batch(0)]) == [None]
    with pytest.raises(OutOfOrderSequenceError):
        m.check_append([batch(1)])


def test_batches_of_one_append_are_checked_against_each_other():
    m = state_after((batch(0, n=2), 0))
    assert m.check_append([batch(2, n=3), batch(5), batch(6, n=2)]) == [None, None, None]
    with pytest.raises(OutOfOrderSequenceError):
        m.check_append([batch(2, n=3), batch(6)])  # the gap is inside the append
    # A new epoch's first batch, then that epoch's next: both in one append.
    assert m.check_append([batch(0, epoch=1), batch(1, epoch=1)]) == [None, None]
    # Another producer's batches in the same append do not interfere.
    assert m.check_append([batch(2), batch(0, pid=5), batch(3), batch(1, pid=5)]) == [None] * 4


def test_a_retry_followed_by_new_batches_in_one_append():
    m = state_after((batch(0), 0), (batch(1), 1))
    assert m.check_append([batch(1), batch(2)]) == [1, None]


def test_non_idempotent_batches_are_never_checked():
    plain = parse_header(build([[0, 0, None, b"v", []]], NOW, NOW))
    assert ProducerStateManager().check_append([plain, plain]) == [None, None]


def test_an_unknown_producer_may_not_skip_a_sequence_refused_here():
    """Requests pipelined to a leader: the first refused (ISR below min.insync.replicas), the next accepted once
    the ISR grew. The next may not be appended past the refused one's sequences: librdkafka would count the
    refused batch as written (its implicit ack) and lose it. The refused batch itself is still welcome."""
    m = ProducerStateManager()
    m.note_refused([batch(0, n=3)])
    with pytest.raises(OutOfOrderSequenceError, match="sequence 3 skips 0, which was refused here"):
        m.check_append([batch(3)])
    assert m.check_append([batch(0, n=3), batch(3)]) == [None, None]  # the retry, and what follows it, in one append
    m.update(batch(0, n=3), 0)
    assert m.check_append([batch(3)]) == [None]


def test_a_refusal_binds_only_its_producer_and_epoch_and_the_lowest_sequence_counts():
    m = ProducerStateManager()
    m.note_refused([batch(4, pid=9), batch(2, pid=9), batch(7, pid=9)])
    with pytest.raises(OutOfOrderSequenceError, match="skips 2"):
        m.check_append([batch(4, pid=9)])
    assert m.check_append([batch(2, pid=9)]) == [None]
    assert m.check_append([batch(50, pid=10)]) == [None]  # another producer
    assert m.check_append([batch(0, epoch=1, pid=9)]) == [None]  # a new epoch starts afresh at 0


def test_refusals_are_forgotten_oldest_first_past_the_bound():
    from broker.replica.producer_state import MAX_REFUSED_PRODUCERS

    m = ProducerStateManager()
    for pid in range(MAX_REFUSED_PRODUCERS + 1):
        m.note_refused([batch(0, pid=pid)])
    assert m.check_append([batch(5, pid=0)]) == [None]  # forgotten: an unknown producer again
    with pytest.raises(OutOfOrderSequenceError):
        m.check_append([batch(5, pid=1)])
