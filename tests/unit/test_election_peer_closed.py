"""The quorum's two early triggers (election/quorum.py), driven by hand: a peer's process reported gone
(PeerClosed, from the driver's refused reconnect) and controller discovery by a node that knows no
controller. Each may only start what a timeout would have started later; a silent peer (paused, or cut
off) still waits for the timeout."""

from __future__ import annotations

import random

import pytest

from election import (
    NOT_CONTROLLER,
    BecameController,
    BeginEpoch,
    ElectionState,
    Evaluation,
    FetchRequest,
    FetchResponse,
    InMemoryLog,
    PeerClosed,
    Persist,
    QuorumConfig,
    QuorumNode,
    Role,
    Send,
    from_wire,
)

CFG = QuorumConfig()


def make(node_id: int, voters=(1, 2, 3), persisted=(1, None), now=0) -> QuorumNode:
    return QuorumNode(node_id, list(voters), InMemoryLog(), CFG, persisted, now, random.Random(node_id))


def follower_of(leader: int, node_id: int = 2, voters=(1, 2, 3), epoch: int = 1, now: int = 0) -> QuorumNode:
    n = make(node_id, voters, persisted=(epoch, leader), now=now)
    n.receive(BeginEpoch(epoch, leader), now)
    assert n.role is Role.FOLLOWER and n.leader_id == leader
    return n


def sent(outs, kind):
    return [o for o in outs if isinstance(o, Send) and isinstance(o.msg, kind)]


def not_controller(epoch: int, sender: int, leader: int | None) -> FetchResponse:
    return FetchResponse(epoch, leader, sender, (), 0, None, None, NOT_CONTROLLER, 0, 0)


def test_controller_closed_starts_the_election_at_once():
    n = follower_of(1)
    outs = n.receive(PeerClosed(1), 10)
    assert outs[0] == Persist(2, None)  # the new epoch is durable before its state goes out
    assert n.role is Role.ELECTING and n.epoch == 2
    assert {o.to for o in sent(outs, ElectionState)} == {1, 3}


def test_a_closed_peer_that_is_not_the_controller_changes_nothing():
    n = follower_of(1)
    assert n.receive(PeerClosed(3), 10) == []
    assert n.role is Role.FOLLOWER and n.leader_id == 1 and n.epoch == 1


def test_a_silent_controller_still_waits_for_the_timeout():
    # A paused or cut-off controller closes nothing: the follower keeps fetching until its timer runs out.
    n = follower_of(1)
    outs = n.tick(CFG.election_timeout_ms - 1)
    assert not any(isinstance(o, Persist) for o in outs) and n.role is Role.FOLLOWER
    outs = n.tick(CFG.election_timeout_ms + CFG.election_jitter_ms)
    assert outs[0] == Persist(2, None) and n.role is Role.ELECTING


def test_a_round_does_not_wait_for_the_state_of_a_closed_voter():
    n = follower_of(1)
    n.receive(PeerClosed(1), 10)
    outs = n.receive(ElectionState(2, 3, 0, 0, 0), 12)  # the other survivor: a majority of states is in
    assert Persist(2, 2) in outs  # voted before the collection window ended
    assert {o.msg.choice for o in sent(outs, Evaluation)} == {2}


def test_without_a_closed_report_the_round_waits_for_the_window():
    n = make(2, persisted=(1, None))
    n.receive(ElectionState(2, 3, 0, 0, 0), 10)  # joins epoch 2
    assert n.role is Role.ELECTING
    assert not any(isinstance(o, Persist) and o.voted_for is not None for o in n.tick(11))
    outs = n.tick(10 + CFG.state_collection_ms)
    assert Persist(2, 2) in outs


def test_a_closed_voter_that_speaks_again_is_waited_for():
    n = make(2, voters=(1, 2, 3, 4, 5), persisted=(1, None))
    n.receive(PeerClosed(5), 5)
    n.receive(ElectionState(1, 5, 0, 0, 0), 6)  # 5 is back (a restarted process)
    n.receive(ElectionState(2, 3, 0, 0, 0), 10)
    outs = n.receive(ElectionState(2, 4, 0, 0, 0), 11)  # a majority of states, 1 and 5 missing
    assert not any(isinstance(o, Persist) and o.voted_for is not None for o in outs)
    outs = n.receive(PeerClosed(1), 12)  # 5 is alive, so still not every missing voter is gone
    assert not any(isinstance(o, Persist) and o.voted_for is not None for o in outs)


def test_the_survivors_elect_without_any_timeout():
    nodes = {i: follower_of(1, node_id=i) for i in (2, 3)}
    queue = [(2, o) for o in nodes[2].receive(PeerClosed(1), 10)]
    queue += [(3, o) for o in nodes[3].receive(PeerClosed(1), 10)]
    won = []
    while queue:
        src, o = queue.pop(0)
        if isinstance(o, BecameController):
            won.append(src)
        if isinstance(o, Send) and o.to in nodes:
            queue += [(o.to, x) for x in nodes[o.to].receive(o.msg, 11)]
    assert won == [2] and nodes[3].leader_id == 2 and nodes[3].epoch == 2


def test_peer_closed_is_never_read_from_the_wire():
    # A hint of the local driver only: a peer cannot make us start elections by sending one.
    with pytest.raises(ValueError):
        from_wire(["pc", 1])


# --- discovery: a node that knows no controller ------------------------------------------------


def test_a_restarted_node_asks_every_voter_and_follows_the_controller_it_is_told_of():
    n = make(3, persisted=(4, 1))  # restarted: sits out epoch 4's election, knows no controller
    outs = n.tick(1)
    assert {o.to for o in sent(outs, FetchRequest)} == {1, 2}
    outs = n.receive(not_controller(4, 2, leader=1), 2)
    assert n.role is Role.FOLLOWER and n.leader_id == 1
    assert [o.to for o in sent(outs, FetchRequest)] == [1]


def test_a_majority_without_a_controller_starts_the_election_before_the_timeout():
    n = make(1, voters=(1, 2, 3, 4, 5), persisted=(4, 1))
    n.tick(1)
    assert n.receive(not_controller(4, 2, leader=None), 2) == []  # two of five know none: not enough
    outs = n.receive(not_controller(4, 3, leader=None), 3)  # three of five
    assert outs[0] == Persist(5, None) and n.role is Role.ELECTING


def test_leaderless_answers_of_an_older_epoch_do_not_count():
    n = make(1, persisted=(4, 1))
    n.tick(1)
    assert n.receive(not_controller(3, 2, leader=None), 2) == []
    assert n.role is Role.FOLLOWER and n.epoch == 4
