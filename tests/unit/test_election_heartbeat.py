"""Heartbeats as the quorum node and the liveness rule see them (election/quorum.py, election/coordination.py):
`Heartbeat` inputs, fed by the driver from its heartbeat thread, move timers only, as a fetch at that moment
would have; they never change an epoch, a role or the log. A paused peer sends none and is still judged by
the timeouts."""

from __future__ import annotations

import random

from election import (
    BecameController,
    ElectionState,
    Evaluation,
    Heartbeat,
    InMemoryLog,
    Persist,
    QuorumConfig,
    QuorumNode,
    Role,
)
from election.coordination import LocalPauses, fetch_liveness_expiry
from tests.unit.test_election_peer_closed import follower_of

CFG = QuorumConfig()
T = CFG.election_timeout_ms + CFG.election_jitter_ms  # the latest a silent controller can be noticed


def controller(now: int = 0) -> QuorumNode:
    """Node 1, elected controller of epoch 2 by nodes 2 and 3 at `now`."""
    n = QuorumNode(1, [1, 2, 3], InMemoryLog(), CFG, (1, None), now, random.Random(1))
    n.tick(now + T)
    n.receive(ElectionState(2, 2, 0, 0, 0), now + T)
    outs = n.receive(ElectionState(2, 3, 0, 0, 0), now + T)
    outs += n.receive(Evaluation(2, 2, 1), now + T)
    assert any(isinstance(o, BecameController) for o in outs) and n.role is Role.CONTROLLER
    return n


def test_a_controller_that_answers_heartbeats_is_not_replaced_while_its_fetches_are_late():
    n = follower_of(1)
    # No fetch answer for several election timeouts (its loop, or ours, is busy), but its heartbeat thread
    # answers every 2 s: no election.
    for at in range(2000, 5 * T, 2000):
        assert n.receive(Heartbeat(1, 1, 1, at), at + 50) == []
        assert not any(isinstance(o, Persist) for o in n.tick(at + 100))
    assert n.role is Role.FOLLOWER and n.leader_id == 1 and n.epoch == 1
    # When the heartbeats stop too (paused, cut off), the timer runs out as before.
    last = at
    assert not any(isinstance(o, Persist) for o in n.tick(last + CFG.election_timeout_ms - 1))
    assert n.tick(last + T)[0] == Persist(2, None) and n.role is Role.ELECTING


def test_heartbeats_that_do_not_confirm_our_controller_move_nothing():
    n = follower_of(1)
    # From another voter; from the controller but naming another leader or epoch (it moved on): no credit.
    n.receive(Heartbeat(3, 1, 1, T - 10), T - 5)
    n.receive(Heartbeat(1, 2, 3, T - 10), T - 5)
    n.receive(Heartbeat(1, 1, None, T - 10), T - 5)
    assert n.tick(T)[0] == Persist(2, None)


def test_a_heartbeat_recorded_long_ago_gives_no_more_than_a_fetch_then_would_have():
    n = follower_of(1)
    # Fed late (our loop was stalled) but taken at 100: the deadline is 100 + the timeout, not now + it.
    n.receive(Heartbeat(1, 1, 1, 100), T - 10)
    assert n.tick(100 + T)[0] == Persist(2, None)


def test_check_quorum_counts_heartbeats_of_followers_of_our_epoch():
    n = controller()
    start = T
    # No fetches at all, but both followers heartbeat in epoch 2 naming us: the controller stays.
    for at in range(start + 1000, start + 4 * T, 1000):
        n.receive(Heartbeat(2, 2, 1, at), at)
        n.receive(Heartbeat(3, 2, 1, at), at)
        n.tick(at)
    assert n.role is Role.CONTROLLER
    # Heartbeats from followers of an older epoch do not count: it steps down after the timeout.
    at += 1
    for later in range(at, at + 2 * CFG.election_timeout_ms, 500):
        n.receive(Heartbeat(2, 1, 3, later), later)
        n.receive(Heartbeat(3, 1, 3, later), later)
        n.tick(later)
    assert n.role is Role.FOLLOWER and n.leader_id is None and n.epoch == 2


def test_liveness_rule_counts_heartbeats():
    session = 9000
    # Fetches stopped at 1000 (a busy loop), heartbeats went on until 20000: alive until 29000.
    assert fetch_liveness_expiry(1000, True, 0, session, last_heartbeat_ms=20000) == 29000
    # A closed connection after the last heartbeat: dead from then.
    assert fetch_liveness_expiry(1000, True, 0, session, closed_at_ms=21000, last_heartbeat_ms=20000) == 21000
    # Not seen in our election (won at 50000): a heartbeat within the recent window means a busy broker,
    # an older one means the controller that died (fenced at once).
    assert fetch_liveness_expiry(None, False, 50000, session, None, 48000, 3000) == 57000
    assert fetch_liveness_expiry(None, False, 50000, session, None, 44000, 3000) == 50000
    # Seen in the election: never earlier than a session timeout after the win.
    assert fetch_liveness_expiry(None, True, 50000, session, None, 44000, 3000) == 59000


def test_a_follower_resumed_after_a_pause_reads_its_sockets_before_it_elects():
    """A pause of ours (SIGSTOP, a starved machine) longer than the election timeout: the controller's answers
    wait unread in our sockets, so the first tick after it starts no election (on_local_pause, fed by the
    driver's LocalPauses). The election runs only if the controller stays silent for the timeout after it."""
    paused = 3 * T
    n = follower_of(1)
    n.on_local_pause(paused)
    assert not any(isinstance(o, Persist) for o in n.tick(paused))
    assert n.role is Role.FOLLOWER and n.epoch == 1
    assert n.tick(paused + T)[0] == Persist(2, None) and n.role is Role.ELECTING
    # Without the report the same tick starts an election at once: what deposed a healthy controller.
    m = follower_of(1)
    assert m.tick(paused)[0] == Persist(2, None)


def test_a_local_pause_is_measured_between_turns_of_the_timer():
    pauses = LocalPauses(threshold_ms=1000)
    assert pauses.observe(0) == 0 and pauses.observe(400) == 0
    assert pauses.observe(9400) == 9000 and pauses.after(0) == 9000
