"""Liveness on a starved machine: the heartbeat thread's watchdog (broker/controller/heartbeat.py: a broker
whose loop shows no progress for longer than the session timeout stops heartbeating; a request handled is
progress, as a quorum tick is), and the controller's own pauses (election/coordination.py LocalPauses)."""

from __future__ import annotations

from broker.controller.heartbeat import HeartbeatBoard
from election.coordination import LocalPauses, fetch_liveness_expiry


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


def test_local_pauses_extend_a_silent_brokers_session_by_the_judges_own_stalls():
    """A controller that did not run for 4 s cannot have read what a broker sent meanwhile: that broker's
    session runs 4 s longer. A broker silent with the controller running is fenced on time."""
    pauses = LocalPauses(threshold_ms=1000)
    for t in range(0, 3000, 50):  # ticking every 50 ms: no pause
        pauses.observe(t)
    pauses.observe(7000)  # a 4 s stall, from 2950
    pauses.observe(7050)
    assert pauses.after(0) == 4050
    assert pauses.after(5000) == 2000  # only what came after the sign counts
    last_fetch = 1000
    plain = fetch_liveness_expiry(last_fetch, True, 0, 9000)
    assert plain == 10_000
    assert fetch_liveness_expiry(last_fetch, True, 0, 9000, own_pauses=pauses) == 10_000 + 4050
    # A process seen gone is fenced at once, pauses or not.
    assert fetch_liveness_expiry(last_fetch, True, 0, 9000, closed_at_ms=1500, own_pauses=pauses) == 1500


def test_local_pauses_forget_old_stalls_and_ignore_short_gaps():
    pauses = LocalPauses(threshold_ms=1000, keep_ms=10_000)
    pauses.observe(0)
    pauses.observe(900)  # below the threshold
    assert pauses.after(0) == 0
    pauses.observe(3000)  # 2.1 s
    assert pauses.after(0) == 2100
    pauses.observe(20_000)  # another, and the first is older than keep_ms
    assert pauses.after(0) == 17_000
