"""bench/group_faults.py's measures of a group through faults: a stall of the brokers, which a consumer in no
group meets too, is not counted as the group's own stop; a stop the control does not share is."""

from __future__ import annotations

from bench.group_faults import (
    longest_gap,
    longest_gap_with_majority,
    longest_unblocked_gap,
    stopped_while_control_read,
)


def every(a: float, b: float, step: float = 0.1) -> list[float]:
    return [round(a + i * step, 3) for i in range(int(round((b - a) / step)) + 1)]


def test_a_stall_the_control_shares_is_not_the_groups_own_stop():
    group = every(0, 2) + every(5.2, 10)  # 3.2 s without a record
    control = every(0, 2) + every(5.0, 10)  # the brokers held everything back: the control waited too
    assert abs(longest_gap(group, 0, 10)[0] - 3.2) < 1e-6
    assert abs(stopped_while_control_read(group, control, 0, 10) - 0.2) < 1e-6  # the group came back 0.2 s later


def test_a_control_that_received_only_at_the_edges_of_the_groups_gap_waited_as_long():
    group = every(0, 2) + every(5.9, 10)
    control = every(0, 2) + [2.05] + every(5.85, 10)  # one record just after the group's last, then a stall
    assert stopped_while_control_read(group, control, 0, 10) < 0.2


def test_a_stop_of_the_group_alone_counts_for_its_whole_length():
    group = every(0, 2) + every(6, 10)  # a rebalance: 4 s without a record
    control = every(0, 10)  # the brokers served all along
    assert abs(stopped_while_control_read(group, control, 0, 10) - 3.9) < 1e-6  # 4 s, less the control's 0.1 s


def test_no_gap_no_stop():
    assert stopped_while_control_read(every(0, 10), every(0, 10), 0, 10) == 0.0


def test_gaps_during_blocked_spans_do_not_count_even_when_the_spans_overlap():
    times = [1, 2, 10]
    # (3, 5) and (4, 4.5) overlap: 2..3 and 5..10 are the unblocked pieces of the gap 2..10
    assert longest_unblocked_gap(times, 0, 12, [(4, 4.5), (3, 5)]) == (5, 5)
    assert longest_unblocked_gap(times, 0, 12, [(2.5, 9)]) == (2, 10)


def test_a_gap_while_the_controller_was_down_counts_only_with_the_controller_up():
    times = [1, 2, 10]
    down = [[1.0, 3.0, 9.0]]  # one broker of three down: a majority up all along
    assert longest_gap_with_majority(times, 0, 12, down) == 8  # 2..10
    assert longest_gap_with_majority(times, 0, 12, down, controller_down=down) == 2  # 10..12 only
    assert longest_gap_with_majority(times, 0, 12, [[1.0, 3.0, 9.0], [2.0, 4.0, 6.0]]) == 4  # 6..10
