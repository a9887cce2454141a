"""Unit tests of each rule of the controller quorum (election/), driven by hand, message by message."""

from __future__ import annotations

import random

import msgpack
import pytest

from election import (
    FENCED_EPOCH,
    NOT_CONTROLLER,
    BecameController,
    BecameFollower,
    BeginEpoch,
    Committed,
    ElectionState,
    Evaluation,
    FetchRequest,
    FetchResponse,
    InMemoryLog,
    NotControllerError,
    Persist,
    QuorumConfig,
    QuorumNode,
    Role,
    Send,
    Truncated,
    from_wire,
)
from election.replication import diverging, truncation_offset
from election.vote import choose

CFG = QuorumConfig()
TIMEOUT = CFG.election_timeout_ms + CFG.election_jitter_ms  # past any jittered election timer


def make(node_id: int, voters=(1, 2, 3), log: InMemoryLog | None = None, persisted=(0, None), now=0) -> QuorumNode:
    return QuorumNode(node_id, list(voters), log or InMemoryLog(), CFG, persisted, now, random.Random(node_id))


def sends(outs, kind=None):
    return [o for o in outs if isinstance(o, Send) and (kind is None or isinstance(o.msg, kind))]


def log_of(*epochs: int) -> InMemoryLog:
    log = InMemoryLog()
    for i, e in enumerate(epochs):
        log.append([{"i": i, "e": e}], e)
    return log


class Net:
    """Delivers every Send at once, in order, to live nodes; returns all outputs for inspection."""

    def __init__(self, nodes: dict[int, QuorumNode]) -> None:
        self.nodes = nodes
        self.down: set[int] = set()
        self.outputs: dict[int, list] = {n: [] for n in nodes}

    def run(self, origin: int, outs: list, now: int) -> None:
        queue = [(origin, o) for o in outs]
        while queue:
            src, o = queue.pop(0)
            self.outputs[src].append(o)
            if isinstance(o, Send) and o.to not in self.down:
                queue.extend((o.to, x) for x in self.nodes[o.to].receive(o.msg, now))

    def tick(self, node: int, now: int) -> None:
        self.run(node, self.nodes[node].tick(now), now)


def elect(nodes: dict[int, QuorumNode], first: int, now: int = TIMEOUT) -> Net:
    net = Net(nodes)
    net.tick(first, now)
    for n in nodes:  # step-1 windows close
        net.tick(n, now + CFG.state_collection_ms)
    return net


# --- messages --------------------------------------------------------------------------------------


def test_every_message_survives_msgpack():
    msgs = [
        ElectionState(3, 1, 2, 17, 4),
        Evaluation(3, 2, 1),
        BeginEpoch(3, 1),
        FetchRequest(3, 2, 10, 2),
        FetchResponse(3, 1, 1, ((10, 2, {"a": [1, 2]}), (11, 3, {"b": None})), 9, None, None, None, 10, 2),
        FetchResponse(3, None, 2, (), 0, 1, 5, NOT_CONTROLLER, 7, 2),
    ]
    for m in msgs:
        wire = msgpack.unpackb(msgpack.packb(m.to_wire(), use_bin_type=True), raw=False)
        assert from_wire(wire) == m
    with pytest.raises(ValueError):
        from_wire(["zz", 1])
    with pytest.raises(ValueError):
        from_wire(["ev", 1])


# --- the three steps -------------------------------------------------------------------------------


def test_step1_timeout_persists_epoch_before_announcing_state():
    n = make(1, log=log_of(1, 1), persisted=(1, 2))
    # Before the timeout a node that knows no controller only looks for one (a fetch to every voter).
    early = n.tick(CFG.election_timeout_ms - 1)
    assert [type(o.msg) for o in early] == [FetchRequest, FetchRequest] and n.role is Role.FOLLOWER
    outs = n.tick(TIMEOUT)
    assert outs[0] == Persist(2, None)
    assert n.role is Role.ELECTING and n.epoch == 2
    states = [o.msg for o in sends(outs, ElectionState)]
    assert {s.sender for s in states} == {1} and len(states) == 2
    assert states[0] == ElectionState(2, 1, 1, 2, 0)
    assert BecameFollower(2, None) in outs


def test_step1_joining_on_higher_epoch_state():
    n = make(2)
    outs = n.receive(ElectionState(4, 1, 0, 0, 0), 10)
    assert outs[0] == Persist(4, None)
    assert n.epoch == 4 and n.role is Role.ELECTING
    assert {o.to for o in sends(outs, ElectionState)} == {1, 3}


def test_step2_waits_for_the_window_unless_all_states_are_in():
    n = make(1)
    n.tick(TIMEOUT)
    assert sends(n.receive(ElectionState(1, 2, 0, 0, 0), TIMEOUT + 1), Evaluation) == []
    assert n.tick(TIMEOUT + CFG.state_collection_ms - 1) == []
    outs = n.tick(TIMEOUT + CFG.state_collection_ms)
    assert outs[0] == Persist(1, 1)  # the vote is durable before it is sent
    assert [o.msg for o in sends(outs, Evaluation)] == [Evaluation(1, 1, 1)] * 2
    # All voters' states in: evaluate at once.
    m = make(1)
    m.tick(TIMEOUT)
    m.receive(ElectionState(1, 2, 0, 0, 0), TIMEOUT + 1)
    outs = m.receive(ElectionState(1, 3, 0, 0, 0), TIMEOUT + 2)
    assert outs[0] == Persist(1, 1) and sends(outs, Evaluation)


def test_three_steps_elect_the_most_up_to_date_node():
    p = (1, None)
    nodes = {1: make(1, log=log_of(1), persisted=p), 2: make(2, log=log_of(1, 1), persisted=p), 3: make(3, persisted=p)}
    net = elect(nodes, first=3)
    assert nodes[2].role is Role.CONTROLLER and nodes[2].epoch == 2
    assert all(nodes[n].role is Role.FOLLOWER and nodes[n].leader_id == 2 for n in (1, 3))
    assert BecameController(2) in net.outputs[2]
    assert {o.to for o in sends(net.outputs[2], BeginEpoch)} == {1, 3}
    # The new controller opens its epoch with a record of its own (so older records can commit).
    assert nodes[2].log.last_epoch == 2 and nodes[2].log.read(2, 1)[0][2]["type"] == "leader_change"
    assert nodes[2].voters_seen_in_election(2) == {1, 2, 3}
    assert nodes[2].voters_seen_in_election(1) == frozenset()
    # Every vote went to node 2 and was persisted before being sent.
    for outs in net.outputs.values():
        persists = [o for o in outs if isinstance(o, Persist)]
        assert persists == [Persist(2, None), Persist(2, 2)]
        first_eval = next(i for i, o in enumerate(outs) if isinstance(o, Send) and isinstance(o.msg, Evaluation))
        assert outs.index(Persist(2, 2)) < first_eval


def test_step3_needs_a_majority_of_evaluations():
    voters = (1, 2, 3, 4, 5)
    n = make(1, voters=voters, log=log_of(1))
    n.tick(TIMEOUT)
    assert n.epoch == 2
    for v in (2, 3, 4, 5):
        n.receive(ElectionState(2, v, 0, 0, 0), TIMEOUT + 1)  # all in: votes for itself
    assert n.voted_for == 1 and n.role is Role.ELECTING
    n.receive(Evaluation(2, 2, 1), TIMEOUT + 2)
    n.receive(Evaluation(2, 2, 1), TIMEOUT + 2)  # a duplicate is not a second vote
    n.receive(Evaluation(2, 3, 4), TIMEOUT + 2)  # a vote for someone else
    assert n.role is Role.ELECTING
    outs = n.receive(Evaluation(2, 4, 1), TIMEOUT + 3)
    assert n.role is Role.CONTROLLER and BecameController(2) in outs


def test_no_decision_starts_a_new_epoch():
    n = make(1)
    n.tick(TIMEOUT)
    t = TIMEOUT + CFG.state_collection_ms
    n.tick(t)  # votes for itself, nobody answers
    assert n.tick(t + CFG.evaluation_timeout_ms - 1) == []
    outs = n.tick(t + CFG.evaluation_timeout_ms + CFG.election_jitter_ms)
    assert outs[0] == Persist(2, None) and n.epoch == 2 and n.role is Role.ELECTING


# --- the evaluation rule ---------------------------------------------------------------------------


def test_tie_break_fewest_leaderships_then_lowest_id():
    same = dict(epoch=5, last_log_epoch=4, log_end_offset=10)
    assert choose([ElectionState(sender=1, leaderships=3, **same), ElectionState(sender=2, leaderships=1, **same)]) == 2
    assert choose([ElectionState(sender=3, leaderships=1, **same), ElectionState(sender=2, leaderships=1, **same)]) == 2
    # Leaderships only break ties: a more up-to-date log wins regardless.
    longer = ElectionState(5, 3, 4, 11, 9)
    assert choose([ElectionState(sender=1, leaderships=0, **same), longer]) == 3


def test_last_epoch_beats_a_longer_log():
    # Node 1 holds a long tail from deposed epoch 1; node 2 holds the epoch-2 record that may be committed.
    stale = ElectionState(3, 1, 1, 50, 0)
    fresh = ElectionState(3, 2, 2, 10, 5)
    assert choose([stale, fresh]) == 2
    nodes = {1: make(1, log=log_of(*[1] * 50)), 2: make(2, log=log_of(1, 2)), 3: make(3, log=log_of(1, 2))}
    elect(nodes, first=1)
    assert nodes[2].role is Role.CONTROLLER


def test_a_node_never_votes_for_a_log_behind_its_own():
    n = make(1, log=log_of(1, 2))
    n.receive(ElectionState(3, 2, 1, 40, 0), 0)  # joins epoch 3
    outs = n.receive(ElectionState(3, 3, 1, 40, 0), 1)  # all in
    assert [o.msg.choice for o in sends(outs, Evaluation)] == [1, 1]


def test_one_vote_per_epoch_survives_a_restart():
    log = InMemoryLog()
    n = make(3, log=log)
    n.receive(ElectionState(1, 1, 0, 0, 0), 0)
    outs = n.receive(ElectionState(1, 2, 0, 0, 0), 1)
    persisted = next(o for o in reversed(outs) if isinstance(o, Persist))
    assert persisted == Persist(1, 1)
    restarted = make(3, log=log, persisted=(persisted.epoch, persisted.voted_for), now=5)
    assert restarted.epoch == 1 and restarted.voted_for == 1
    # The election of epoch 1 goes on around it: it neither votes again nor announces a new state.
    for msg in (ElectionState(1, 2, 5, 5, 0), Evaluation(1, 2, 2), ElectionState(1, 1, 0, 0, 0)):
        outs = restarted.receive(msg, 6)
        assert not [o for o in outs if isinstance(o, Persist)]
        assert not sends(outs, Evaluation) and not sends(outs, ElectionState)
    # It still accepts the winner, and takes part in the next epoch.
    restarted.receive(BeginEpoch(1, 1), 7)
    assert restarted.leader_id == 1 and restarted.voted_for == 1
    assert restarted.receive(ElectionState(2, 2, 0, 0, 0), 8)[0] == Persist(2, None)


def test_restart_takes_the_epoch_of_its_log_if_the_persist_was_lost():
    n = make(1, log=log_of(1, 4), persisted=(2, 2))
    assert n.epoch == 4 and n.voted_for is None


# --- stepping down ---------------------------------------------------------------------------------


def controller_of_3(now: int = TIMEOUT) -> tuple[dict[int, QuorumNode], Net]:
    nodes = {1: make(1, log=log_of(1)), 2: make(2), 3: make(3)}
    net = elect(nodes, first=1, now=now)
    assert nodes[1].role is Role.CONTROLLER and nodes[1].epoch == 2
    return nodes, net


def test_stale_controller_steps_down_on_any_higher_epoch():
    for msg in (
        ElectionState(3, 2, 0, 0, 0),
        Evaluation(3, 3, 3),
        BeginEpoch(3, 3),
        FetchRequest(3, 2, 0, 0),
        FetchResponse(3, 3, 3, (), 0, None, None, FENCED_EPOCH, 0, 0),
    ):
        nodes, _ = controller_of_3()
        outs = nodes[1].receive(msg, TIMEOUT + 300)
        assert outs[0] == Persist(3, None), msg
        assert nodes[1].role is not Role.CONTROLLER and nodes[1].epoch == 3
        assert any(isinstance(o, BecameFollower) for o in outs)
        with pytest.raises(NotControllerError):
            nodes[1].propose([{"x": 1}], TIMEOUT + 301)


def test_controller_steps_down_without_fetches_from_a_majority():
    nodes, _ = controller_of_3()
    c = nodes[1]
    t0 = TIMEOUT + CFG.state_collection_ms
    t = t0
    node3_fetched = c.follower_last_fetch_ms(3)  # its fetch right after BeginEpoch
    assert node3_fetched is not None and c.follower_last_fetch_ms(4) is None
    while t < t0 + 3 * CFG.election_timeout_ms:  # node 2 keeps fetching: a majority with us
        t += CFG.fetch_interval_ms
        c.tick(t)
        c.receive(FetchRequest(2, 2, c.log.end_offset, c.log.last_epoch), t)
        assert c.role is Role.CONTROLLER
        assert c.follower_last_fetch_ms(2) == t and c.follower_last_fetch_ms(3) == node3_fetched
    stop = t
    while c.role is Role.CONTROLLER:  # now nobody fetches
        t += CFG.fetch_interval_ms
        outs = c.tick(t)
    assert BecameFollower(2, None) in outs
    assert stop + CFG.election_timeout_ms <= t <= stop + CFG.election_timeout_ms + CFG.fetch_interval_ms
    assert c.follower_last_fetch_ms(2) is None
    # A fetch now gets NOT_CONTROLLER.
    out = c.receive(FetchRequest(2, 2, 0, 0), t + 1)
    assert sends(out, FetchResponse)[0].msg.error == NOT_CONTROLLER


def test_an_older_epoch_is_fenced_and_told_the_newer_one():
    nodes, _ = controller_of_3()
    outs = nodes[1].receive(FetchRequest(0, 2, 0, 0), TIMEOUT + 300)
    resp = sends(outs, FetchResponse)[0].msg
    assert (resp.error, resp.epoch, resp.leader) == (FENCED_EPOCH, 2, 1)
    lagging = make(2)
    outs = lagging.receive(resp, TIMEOUT + 301)
    assert outs[0] == Persist(2, None) and lagging.leader_id == 1
    assert sends(outs, FetchRequest)
    # Older election messages are answered with the current controller.
    outs = nodes[1].receive(ElectionState(0, 3, 0, 0, 0), TIMEOUT + 302)
    assert [o.msg for o in sends(outs)] == [BeginEpoch(2, 1)]


# --- replication -----------------------------------------------------------------------------------


def pump(net: Net, nodes: dict[int, QuorumNode], start: int, until: int, step: int = 10) -> int:
    t = start
    while t < until:
        t += step
        for n in nodes:
            if n not in net.down:
                net.tick(n, t)
    return t


def test_replication_commits_and_followers_learn_the_high_watermark():
    nodes, net = controller_of_3()
    c = nodes[1]
    pump(net, nodes, TIMEOUT + CFG.state_collection_ms, TIMEOUT + 250)  # caught up: their fetches are held
    last, outs = c.propose([{"k": 1}, {"k": 2}], TIMEOUT + 250)
    assert last == c.log.end_offset - 1
    assert not [o for o in outs if isinstance(o, Committed)]  # not committed before a follower has it
    # The held fetches are answered with the new records at once, not at the followers' next poll.
    pushed = {o.to: o.msg.records for o in sends(outs, FetchResponse)}
    assert sorted(pushed) == [2, 3] and all(len(r) == 2 for r in pushed.values())
    # Delivered with no tick at all: the followers fetch on, the commit answers their next held fetches with
    # the new high watermark.
    net.run(1, outs, TIMEOUT + 251)
    assert c.high_watermark == c.log.end_offset
    assert Committed(c.high_watermark) in net.outputs[1]
    for n in (2, 3):
        assert nodes[n].log.read(0, 100) == c.log.read(0, 100)
        assert nodes[n].high_watermark == c.high_watermark


def test_a_caught_up_fetch_is_held_until_the_wait_ends_and_answered_at_once_otherwise():
    nodes, _ = controller_of_3()
    c = nodes[1]
    end, epoch = c.log.end_offset, c.log.last_epoch
    # The election's last fetches, caught up, were held: answered when their wait ends.
    t = TIMEOUT + CFG.state_collection_ms + CFG.fetch_max_wait_ms
    flushed = sends(c.tick(t), FetchResponse)
    assert sorted(o.to for o in flushed) == [2, 3] and all(o.msg.high_watermark == c.high_watermark for o in flushed)
    # A fetch that brings its follower nothing new (it knows this high watermark): held, and the controller's next
    # deadline is its end.
    assert c.receive(FetchRequest(2, 2, end, epoch, max_wait_ms=500), t + 1) == []
    assert c.next_deadline_ms() <= t + 1 + CFG.fetch_max_wait_ms
    assert sends(c.tick(t + CFG.fetch_max_wait_ms), FetchResponse) == []
    answered = sends(c.tick(t + 1 + CFG.fetch_max_wait_ms), FetchResponse)
    assert [(o.to, o.msg.records, o.msg.error) for o in answered] == [(2, (), None)]
    # A follower that does not long-poll (max_wait 0) is answered at every fetch.
    for i in range(3):
        assert len(sends(c.receive(FetchRequest(2, 3, end, epoch), t + 600 + i), FetchResponse)) == 1
    # A forged wait beyond the controller's own is cut to it.
    c.receive(FetchRequest(2, 2, end, epoch, max_wait_ms=2**31 - 1), t + 700)
    assert c.next_deadline_ms() <= t + 700 + CFG.fetch_max_wait_ms
    # A newer fetch from the same follower answers the held one first (the follower gave up waiting).
    outs = c.receive(FetchRequest(2, 2, end, epoch, max_wait_ms=500), t + 800)
    assert [o.to for o in sends(outs, FetchResponse)] == [2]
    # Stepping down drops what it held: no answer in an office it no longer holds.
    outs = c.receive(ElectionState(3, 3, 0, 0, 0), t + 900)
    assert c.role is not Role.CONTROLLER and sends(outs, FetchResponse) == []
    assert sends(c.tick(t + 900 + 2 * CFG.fetch_max_wait_ms), FetchResponse) == []


def test_high_watermark_counts_only_records_of_the_current_epoch():
    # Node 1 leads epoch 3 with records of epoch 1 that node 2 also has.
    log1 = log_of(1, 1, 1)
    c = make(1, log=log1, persisted=(2, None))
    c.receive(ElectionState(3, 2, 1, 3, 0), 0)
    c.receive(ElectionState(3, 3, 0, 0, 0), 1)
    c.receive(Evaluation(3, 2, 1), 2)
    assert c.role is Role.CONTROLLER and c.log.end_offset == 4 and c.log.epoch_of(3) == 3
    # The majority {1, 2} has offsets 0..2 (epoch 1): not enough, they could still be overwritten.
    outs = c.receive(FetchRequest(3, 2, 3, 1), 3)
    assert c.high_watermark == 0 and not [o for o in outs if isinstance(o, Committed)]
    assert sends(outs, FetchResponse)[0].msg.records == ((3, 3, c.log.read(3, 1)[0][2]),)
    # Once the epoch-3 record is on a majority, everything before it commits too.
    outs = c.receive(FetchRequest(3, 2, 4, 3), 4)
    assert c.high_watermark == 4 and Committed(4) in outs


def test_follower_high_watermark_is_capped_by_its_log():
    f = make(2)
    f.receive(BeginEpoch(1, 1), 0)
    rec = (0, 1, {"a": 1})
    outs = f.receive(FetchResponse(1, 1, 1, (rec,), 5, None, None, None, 0, 0), 1)
    assert f.high_watermark == 1 and Committed(1) in outs
    # Fetches on at once after records, asking the controller to hold the fetch when nothing is new.
    assert sends(outs, FetchRequest)[0].msg == FetchRequest(1, 2, 1, 1, max_wait_ms=CFG.fetch_max_wait_ms)


def test_divergence_truncates_the_follower_and_refetches():
    # Controller (epoch 4): epochs 1,1,2,2,4. Follower: 1,1,3,3,3 (a deposed epoch-3 controller's tail).
    leader_log = log_of(1, 1, 2, 2, 4)
    follower_log = log_of(1, 1, 3, 3, 3)
    assert diverging(leader_log, 5, 3) == (2, 4)
    assert truncation_offset(follower_log, 2, 4) == 2  # own records of epochs <= 2 end at 2
    assert diverging(leader_log, 2, 1) is None

    c = make(1, log=leader_log, persisted=(4, 1))
    c.receive(ElectionState(5, 3, 0, 0, 0), 0)  # epoch 5 election; node 1 has the best log
    c.receive(ElectionState(5, 2, 3, 5, 0), 1)
    c.receive(Evaluation(5, 3, 1), 2)
    assert c.role is Role.CONTROLLER
    f = make(2, log=follower_log, persisted=(5, 1))
    net = Net({1: c, 2: f})
    net.run(2, f.receive(BeginEpoch(5, 1), 3), 3)
    assert Truncated(2) in net.outputs[2]
    assert f.log.read(0, 100) == c.log.read(0, 100)


def test_stale_or_duplicate_responses_are_ignored():
    f = make(2, log=log_of(1, 1))
    f.receive(BeginEpoch(1, 1), 0)
    # Answers a state (0, 0) the follower has left: applying it would duplicate offsets.
    outs = f.receive(FetchResponse(1, 1, 1, ((0, 1, {"x": 0}),), 1, None, None, None, 0, 0), 1)
    assert f.log.end_offset == 2 and outs == []
    # A stale divergence answer cannot cut the log either.
    f.receive(FetchResponse(1, 1, 1, (), 0, 0, 0, None, 5, 1), 2)
    assert f.log.end_offset == 2


def test_followers_fetch_on_the_interval_and_elect_when_the_controller_goes_silent():
    f = make(2)
    assert sends(f.receive(BeginEpoch(1, 1), 0), FetchRequest)  # its first fetch goes at once
    # While a fetch is out (the controller may hold it), none other goes until the wait plus an interval.
    resend = CFG.fetch_max_wait_ms + CFG.fetch_interval_ms
    assert f.tick(CFG.fetch_interval_ms) == [] and f.tick(resend - 1) == []
    assert sends(f.tick(resend), FetchRequest)
    # An answer with nothing new: the next fetch one interval later.
    t = resend + 10
    assert f.receive(FetchResponse(1, 1, 1, (), 0, None, None, None, 0, 0), t) == []
    assert f.tick(t + CFG.fetch_interval_ms - 1) == []
    assert sends(f.tick(t + CFG.fetch_interval_ms), FetchRequest)
    outs = f.tick(t + TIMEOUT)
    assert outs[0] == Persist(2, None) and f.role is Role.ELECTING


def test_propose_requires_the_controller():
    with pytest.raises(NotControllerError):
        make(1).propose([{"x": 1}], 0)


def test_single_voter_quorum_commits_alone():
    n = make(1, voters=(1,))
    outs = n.tick(TIMEOUT)
    assert n.role is Role.CONTROLLER and BecameController(1) in outs and n.high_watermark == 1
    last, outs = n.propose([{"x": 1}], TIMEOUT + 1)
    assert last == 1 and outs == [Committed(2)]
