"""The heartbeat thread's watchdog (broker/controller/heartbeat.py): a broker whose loop shows no progress for
longer than the session timeout stops heartbeating; a request handled is progress, as a quorum tick is."""

from __future__ import annotations

from broker.controller.heartbeat import HeartbeatBoard


def test_a_loop_silent_past_the_limit_gives_no_view():
    board = HeartbeatBoard(1, 7, stall_limit_ms=9000)
    board.publish(3, 2, at_ms=1000)
    assert board.own_view(9000) == (3, 2)
    assert board.own_view(10_001) is None
    assert board.loop_stalled_ms(10_001) == 9001


def test_a_request_handled_is_progress_between_ticks():
    """Under CPU starvation one pass of the loop handles requests for seconds before its next tick: the
    requests keep the broker alive; the epoch and controller stay the last tick's."""
    board = HeartbeatBoard(1, 7, stall_limit_ms=9000)
    board.publish(3, 2, at_ms=1000)
    board.progress(8000)
    assert board.own_view(16_000) == (3, 2)
    assert board.own_view(17_001) is None  # and nothing at all since: silent again
