"""The consumer group protocol (KIP-848) as a sans-IO state machine: epochs, server-side assignment, incremental
reconciliation (revocation before assignment), session expiry, fencing, static members, persistence."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from broker.group.assignors import range_, uniform
from broker.group.consumer_logic import ConsumerGroupConfig, Heartbeat, HeartbeatResult
from broker.group.consumer_state import ConsumerGroupState, MemberState
from broker.group.logic import Append, GroupConfig, GroupCoordinatorLogic, Reply
from broker.group.records import ConsumerGroupKey, OffsetKey
from broker.group.state import GroupState
from net.consumer_protocol import Assignment, Subscription
from net.errors import ErrorCode

P = 3  # the offsets partition of group "g"
TOPICS = {"t": 6, "u": 2, "other": 1}
SESSION = 1000
_tokens = itertools.count()


def logic(**kw) -> GroupCoordinatorLogic:
    cfg = ConsumerGroupConfig(session_timeout_ms=SESSION, heartbeat_interval_ms=100, **kw)
    lg = GroupCoordinatorLogic(GroupConfig(consumer=cfg))
    lg.begin_loading(P)
    lg.load(P, [], 0)
    return lg


@dataclass
class Client:
    """A consumer as the protocol sees it: its member id, epoch, and the partitions it owns right now."""

    member_id: str
    topics: tuple[str, ...] = ("t",)
    epoch: int = 0
    owned: dict[str, frozenset[int]] = field(default_factory=dict)
    history: list[HeartbeatResult] = field(default_factory=list)
    instance_id: str | None = None
    regex: str | None = None
    assignor: str | None = None

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


class Harness:
    def __init__(self, lg: GroupCoordinatorLogic) -> None:
        self.lg = lg
        self.log: list[tuple] = []  # every record written, in order: what a new coordinator replays

    def run(self, outputs, error: int = 0) -> list[Reply]:
        replies = []
        while outputs:
            o = outputs.pop(0)
            if isinstance(o, Append):
                if not error:
                    self.log += o.records
                outputs += self.lg.on_append_done(o.append_id, error, 0)
            else:
                replies.append(o)
        return replies

    def beat(self, c: Client, now: int, epoch: int | None = None, full: bool = False, topics=TOPICS) -> HeartbeatResult:
        e = c.epoch if epoch is None else epoch
        join = e == 0
        hb = Heartbeat(
            "g",
            c.member_id,
            e,
            client_id="cid",
            client_host="/127.0.0.1",
            instance_id=c.instance_id,
            rebalance_timeout_ms=5000 if join or full else -1,
            subscribed_topic_names=c.topics if join or full else None,
            subscribed_topic_regex=c.regex if join else None,
            server_assignor=c.assignor if join else None,
            owned={} if join else dict(c.owned),
        )
        tok = next(_tokens)
        (reply,) = self.run(self.lg.consumer_heartbeat(tok, P, hb, dict(topics), now))
        assert reply.token == tok
        r = reply.body
        c.history.append(r)
        if r.error_code == 0 and e >= 0:
            c.epoch = r.member_epoch
            if r.assignment is not None:
                c.owned = dict(r.assignment)  # the client revokes what is gone and takes what is new
        return r


def no_partition_twice(*clients: Client) -> None:
    seen: set[tuple[str, int]] = set()
    for c in clients:
        assert not (seen & c.partitions()), f"{c.member_id} owns a partition another member owns"
        seen |= c.partitions()


def settle(h: Harness, clients: list[Client], now: int, rounds: int = 6) -> int:
    """Heartbeat each member in turn until the group is stable, checking no partition has two owners."""
    for _ in range(rounds):
        for c in clients:
            now += 10
            r = h.beat(c, now)
            assert r.error_code == 0, r
            no_partition_twice(*clients)
        if h.lg.groups["g"].consumer.state() == ConsumerGroupState.STABLE:
            return now
    raise AssertionError(f"group not stable: {h.lg.groups['g'].consumer}")


def test_one_member_gets_every_partition_at_the_first_epoch():
    h = Harness(logic())
    a = Client("a")
    r = h.beat(a, 0)
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "a", 1, 100)
    assert a.partitions() == {("t", p) for p in range(6)}
    cg = h.lg.groups["g"].consumer
    assert (cg.group_epoch, cg.target_epoch, cg.state()) == (1, 1, ConsumerGroupState.STABLE)
    # An unchanged heartbeat sends no assignment (the member keeps what it has).
    assert h.beat(a, 10).assignment is None


def test_a_second_member_gets_partitions_only_after_the_first_revoked_them():
    h = Harness(logic())
    a, b = Client("a"), Client("b")
    h.beat(a, 0)
    rb = h.beat(b, 10)
    # The group moved to epoch 2; b's half is still a's, so b waits with nothing (unreleased partitions).
    assert rb.member_epoch == 2 and b.owned == {}
    assert h.lg.groups["g"].consumer.members["b"].state == MemberState.UNRELEASED_PARTITIONS
    ra = h.beat(a, 20)
    # a is told to give up three partitions first, staying at epoch 1 until it has.
    assert ra.member_epoch == 1 and len(a.partitions()) == 3
    assert h.lg.groups["g"].consumer.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    assert h.beat(b, 30).assignment is None  # still held by a: not assigned yet
    ra = h.beat(a, 40)  # a reports it owns only its three now
    assert ra.member_epoch == 2 and ra.assignment is None
    rb = h.beat(b, 50)
    assert rb.member_epoch == 2 and len(b.partitions()) == 3
    no_partition_twice(a, b)
    assert a.partitions() | b.partitions() == {("t", p) for p in range(6)}
    assert h.lg.groups["g"].consumer.state() == ConsumerGroupState.STABLE


def test_one_two_three_members_split_the_partitions_without_two_owners():
    h = Harness(logic())
    clients = [Client("a")]
    now = settle(h, clients, 0)
    for name in ("b", "c"):
        clients.append(Client(name))
        now = settle(h, clients, now)
        sizes = sorted(len(c.partitions()) for c in clients)
        assert sum(sizes) == 6 and sizes[-1] - sizes[0] <= 1
    assert [len(c.partitions()) for c in clients] == [2, 2, 2]
    cg = h.lg.groups["g"].consumer
    assert cg.group_epoch == 3 and all(m.member_epoch == 3 for m in cg.members.values())


def test_a_member_that_leaves_hands_its_partitions_over():
    h = Harness(logic())
    a, b = Client("a"), Client("b")
    now = settle(h, [a, b], 0)
    r = h.beat(b, now + 10, epoch=-1)
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert "b" not in h.lg.groups["g"].consumer.members
    b.owned = {}
    settle(h, [a], now + 20)
    assert a.partitions() == {("t", p) for p in range(6)}


def test_a_groups_own_session_timeout_and_heartbeat_interval_apply_to_it_only():
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms set on one group (its GroupConfig, wired in
    by the server) rule its members; another group keeps the broker's group.consumer.*."""
    h = Harness(logic())
    h.lg.consumer.use_group_configs(lambda g: 5 * SESSION if g == "g" else SESSION, lambda g: 250 if g == "g" else 100)
    a, b = Client("a"), Client("b")
    now = settle(h, [a, b], 0)
    assert a.history[-1].heartbeat_interval_ms == 250
    h.beat(a, now + 2 * SESSION)
    h.run(h.lg.tick(now + 2 * SESSION + 20))  # past the broker's 1 s, within the group's 5 s: b is kept
    assert set(h.lg.groups["g"].consumer.members) == {"a", "b"}
    h.beat(a, now + 5 * SESSION)
    h.run(h.lg.tick(now + 5 * SESSION + 20))
    assert set(h.lg.groups["g"].consumer.members) == {"a"}


def test_a_member_whose_session_ends_is_fenced_and_its_partitions_move():
    h = Harness(logic())
    a, b = Client("a"), Client("b")
    now = settle(h, [a, b], 0)
    h.run(h.lg.tick(now + SESSION // 2))
    assert set(h.lg.groups["g"].consumer.members) == {"a", "b"}
    h.beat(a, now + SESSION)  # a keeps its session; b goes silent
    epoch = h.lg.groups["g"].consumer.group_epoch
    h.run(h.lg.tick(now + SESSION + 20))
    cg = h.lg.groups["g"].consumer
    assert set(cg.members) == {"a"} and cg.group_epoch == epoch + 1
    settle(h, [a], now + SESSION + 30)
    assert a.partitions() == {("t", p) for p in range(6)}
    r = h.beat(b, now + SESSION + 100)  # b comes back: it is not a member any more
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced():
    h = Harness(logic())
    a, b = Client("a"), Client("b")
    h.beat(a, 0)
    h.beat(b, 10)
    h.beat(a, 20)  # told to revoke; it never confirms
    assert h.lg.groups["g"].consumer.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    for t in range(100, 5200, 400):  # both keep heartbeating (a's owned set still has the revoked ones)
        h.lg.groups["g"].consumer.members["a"].last_heartbeat_ms = t
        h.lg.groups["g"].consumer.members["b"].last_heartbeat_ms = t
        h.run(h.lg.tick(t))
    assert "a" in h.lg.groups["g"].consumer.members
    h.run(h.lg.tick(5100))
    assert set(h.lg.groups["g"].consumer.members) == {"b"}


def test_epochs_fence_a_member_that_is_ahead_or_behind():
    h = Harness(logic())
    a, b = Client("a"), Client("b")
    now = settle(h, [a, b], 0)
    assert h.beat(a, now + 1, epoch=a.epoch + 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    # Behind, claiming partitions it does not have at its current epoch: not a lost response.
    liar = Client("a", owned={"t": frozenset(range(6))})
    assert h.beat(liar, now + 2, epoch=a.epoch - 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.beat(Client("x"), now + 3, epoch=4).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # A lost response: the previous epoch with no more than it owns now is accepted (and answered the current).
    m = h.lg.groups["g"].consumer.members["a"]
    r = h.beat(a, now + 4, epoch=m.previous_member_epoch)
    assert r.error_code == 0 and r.member_epoch == m.member_epoch
    # A fenced member rejoins with epoch 0 and gets its assignment back.
    owned = a.partitions()
    a.owned = {}
    r = h.beat(a, now + 5, epoch=0)
    assert r.error_code == 0 and a.partitions() == owned


def test_offset_commits_carry_the_member_epoch():
    h = Harness(logic())
    a = Client("a")
    h.beat(a, 0)
    known = dict(TOPICS)

    def commit(member, epoch):
        tok = next(_tokens)
        (r,) = h.run(h.lg.commit(tok, P, "g", epoch, member, {("t", 0): (5, "")}, 10, known))
        return r.body["error_code"] if "error_code" in r.body else r.body["topics"][0][1][0][1]  # refused, or rows

    assert commit("a", a.epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit("a", a.epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit("nobody", a.epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit("", -1) == ErrorCode.NON_EMPTY_GROUP  # an admin's commit waits for an empty group
    assert commit("a", a.epoch) == 0
    assert h.lg.fetch_offsets("g", [("t", 0)])["topics"] == [["t", [[0, 5, "", 0, -1]]]]


def test_a_new_coordinator_loads_the_group_with_its_epochs_and_assignments():
    h = Harness(logic())
    a, b = Client("a"), Client("b")
    now = settle(h, [a, b], 0)
    tok = next(_tokens)
    h.run(h.lg.commit(tok, P, "g", a.epoch, "a", {("t", 0): (7, "m")}, now, dict(TOPICS)))
    keys = {k.record_type for k, _ in h.log if isinstance(k, ConsumerGroupKey)}
    assert keys == {3, 5, 6, 7, 8}  # Kafka's record types of a consumer group
    assert any(isinstance(k, OffsetKey) for k, _ in h.log)
    before = h.lg.groups["g"].consumer
    lg2 = logic()
    lg2.begin_loading(P)
    lg2.load(P, list(h.log), 10_000)
    after = lg2.groups["g"].consumer
    assert (after.group_epoch, after.target_epoch, after.target) == (
        before.group_epoch,
        before.target_epoch,
        before.target,
    )
    for mid, m in before.members.items():
        assert (after.members[mid].member_epoch, after.members[mid].assigned) == (m.member_epoch, m.assigned)
        assert after.members[mid].subscribed_topic_names == m.subscribed_topic_names
    assert lg2.fetch_offsets("g", [("t", 0)])["topics"] == [["t", [[0, 7, "m", 0, -1]]]]
    # Members carry on at the new coordinator without rejoining.
    h2 = Harness(lg2)
    r = h2.beat(a, 10_010)
    assert r.error_code == 0 and r.member_epoch == a.epoch
    lg2.tick(10_000 + SESSION - 1)
    assert set(lg2.groups["g"].consumer.members) == {"a", "b"}


def test_a_static_member_that_comes_back_keeps_its_partitions_without_a_new_epoch():
    h = Harness(logic())
    a, b = Client("a", instance_id="i-a"), Client("b")
    now = settle(h, [a, b], 0)
    owned, epoch = a.partitions(), h.lg.groups["g"].consumer.group_epoch
    r = h.beat(a, now + 10, epoch=-2)
    assert (r.error_code, r.member_epoch) == (0, -2)
    a2 = Client("a2", instance_id="i-a")
    r = h.beat(a2, now + 20)
    assert r.error_code == 0 and a2.partitions() == owned
    assert h.lg.groups["g"].consumer.group_epoch == epoch and "a" not in h.lg.groups["g"].consumer.members
    # The instance id is a2's now: another member cannot take it.
    r = h.beat(Client("a3", instance_id="i-a"), now + 30)
    assert r.error_code == ErrorCode.UNRELEASED_INSTANCE_ID


def test_the_range_assignor_when_members_ask_for_it_and_unknown_assignors_are_refused():
    h = Harness(logic())
    a, b = Client("a", topics=("t", "u"), assignor="range"), Client("b", topics=("t", "u"), assignor="range")
    settle(h, [a, b], 0)
    assert h.lg.groups["g"].consumer.assignor == "range"
    assert a.partitions() == {("t", 0), ("t", 1), ("t", 2), ("u", 0)}
    assert b.partitions() == {("t", 3), ("t", 4), ("t", 5), ("u", 1)}
    r = h.beat(Client("c", assignor="sticky"), 500)
    assert r.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR


def test_regex_subscriptions_and_new_partitions_bump_the_group_epoch():
    h = Harness(logic())
    a = Client("a", topics=(), regex="t|u")
    h.beat(a, 0)
    assert a.partitions() == {("t", p) for p in range(6)} | {("u", 0), ("u", 1)}
    epoch = h.lg.groups["g"].consumer.group_epoch
    h.beat(a, 10, topics=dict(TOPICS, u=3))  # u gained a partition
    assert h.lg.groups["g"].consumer.group_epoch == epoch + 1 and ("u", 2) in a.partitions()
    r = h.beat(Client("b", topics=(), regex="t("), 20)
    assert r.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION and "missing )" in r.error_message
    # RE2's syntax, as Kafka's RE2/J: no backreferences; and a pattern that backtracks exponentially in Python's
    # `re` is matched in linear time (a member cannot stall the coordinator with it).
    assert h.beat(Client("c", topics=(), regex=r"(t)\1"), 30).error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    slow = Client("d", topics=(), regex="(a+)+$")
    t0 = time.monotonic()
    assert h.beat(slow, 40, topics=dict(TOPICS, **{"a" * 40 + "b": 1})).error_code == 0
    assert time.monotonic() - t0 < 1.0 and slow.partitions() == set()


def test_a_regex_members_subscription_and_assignment_survive_a_new_coordinator():
    """The known gap of issue 29: the regex is in ConsumerGroupMemberMetadata (Kafka's SubscribedTopicRegex), so a
    new coordinator keeps assigning what it matches, including a topic created after the failover."""
    h = Harness(logic())
    a = Client("a", topics=(), regex="t|u")
    h.beat(a, 0)
    [(_, value)] = [(k, v) for k, v in h.log if isinstance(k, ConsumerGroupKey) and k.record_type == 5]
    assert value["subscribed_topic_regex"] == "t|u"
    lg2 = logic()
    lg2.begin_loading(P)
    lg2.load(P, list(h.log), 10_000)
    assert lg2.groups["g"].consumer.members["a"].subscribed_topic_regex == "t|u"
    h2 = Harness(lg2)
    r = h2.beat(a, 10_010)
    assert r.error_code == 0 and r.member_epoch == a.epoch and r.assignment is None  # nothing moved
    r = h2.beat(a, 10_020, topics=dict(TOPICS, u=3))  # u grew at the new coordinator: the regex still matches it
    assert r.error_code == 0 and ("u", 2) in a.partitions() and ("other", 0) not in a.partitions()


def test_bad_heartbeats_are_refused_with_kafkas_errors():
    h = Harness(logic())
    tok = next(_tokens)
    hb = Heartbeat("g", "", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned={})
    (r,) = h.run(h.lg.consumer_heartbeat(tok, P, hb, TOPICS, 0))
    assert r.body.error_code == ErrorCode.INVALID_REQUEST
    hb = Heartbeat("g", "m", 0, subscribed_topic_names=("t",), owned={})  # no rebalance timeout on a join
    (r,) = h.run(h.lg.consumer_heartbeat(tok, P, hb, TOPICS, 0))
    assert r.body.error_code == ErrorCode.INVALID_REQUEST
    assert h.beat(Client("a"), 0, epoch=-3).error_code == ErrorCode.INVALID_REQUEST
    lg = logic(max_size=1)
    h = Harness(lg)
    h.beat(Client("a"), 0)
    assert h.beat(Client("b"), 1).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def classic_join(h, member_id, owned=frozenset(), now=0, topics=("t",)):
    """A cooperative classic member's JoinGroup (and SyncGroup): (member id, generation, assignment)."""
    sub = Subscription(tuple(topics), frozenset(owned)).encode()
    lg = h.lg
    tok = next(_tokens)
    out = lg.join(tok, P, "g", member_id, "c", "/h", 10000, 10000, "consumer", [("cooperative-sticky", sub)], now,
                  dict(TOPICS))  # fmt: skip
    replies = h.run(out)
    if not replies:  # a classic group's first join is parked until the rebalance completes
        replies = h.run(lg.tick(now + 10_000))
    (join,) = [r.body for r in replies]
    assert join["error_code"] == 0, join
    mid, gen = join["member_id"], join["generation_id"]
    assignments = {}
    if join["leader"] == mid:  # a classic group: the leader assigns
        assignments = {m: Assignment(frozenset(("t", p) for p in range(6))).encode() for m, *_ in join["members"]}
    (sync,) = [r.body for r in h.run(lg.sync(next(_tokens), "g", gen, mid, assignments, now))]
    assert sync["error_code"] == 0, sync
    return mid, gen, Assignment.decode(sync["assignment"]).partitions


def test_a_consumer_member_upgrades_a_classic_group_online_and_its_leaving_downgrades_it():
    lg = GroupCoordinatorLogic(GroupConfig(initial_rebalance_delay_ms=0, consumer=ConsumerGroupConfig(
        session_timeout_ms=SESSION, heartbeat_interval_ms=100)))  # fmt: skip
    lg.begin_loading(P)
    lg.load(P, [], 0)
    h = Harness(lg)
    cid, gen, owned = classic_join(h, "")
    assert owned == {("t", p) for p in range(6)} and lg.groups["g"].consumer is None
    tok = next(_tokens)
    (r,) = h.run(lg.commit(tok, P, "g", gen, cid, {("t", 0): (3, "")}, 5, dict(TOPICS)))
    assert r.body["topics"][0][1][0][1] == 0
    # A consumer-protocol member joins: the group is a consumer group now, the classic member keeps its six.
    new = Client("new")
    r = h.beat(new, 10)
    cg = lg.groups["g"].consumer
    assert r.error_code == 0 and cg is not None and new.owned == {}
    assert cg.members[cid].assigned == {"t": frozenset(range(6))} and cg.group_epoch == gen + 1
    assert lg.heartbeat("g", gen, cid, 20)["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    # The classic member rejoins owning its six: it is told to keep three (its sync), and revokes the others.
    _, gen2, kept = classic_join(h, cid, owned, now=30)
    assert gen2 == gen and len(kept) == 3 and kept < owned
    assert lg.heartbeat("g", gen2, cid, 40)["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.beat(new, 50).assignment is None  # not released yet
    _, gen3, kept3 = classic_join(h, cid, kept, now=60)  # it owns only those three now
    assert gen3 == cg.target_epoch and kept3 == kept
    assert lg.heartbeat("g", gen3, cid, 70)["error_code"] == 0
    # A new coordinator loads the upgraded group: the classic member is still one, at its epoch.
    mid_way = logic()
    mid_way.begin_loading(P)
    mid_way.load(P, list(h.log), 75)
    loaded = mid_way.groups["g"].consumer.members[cid]
    assert loaded.classic_protocols == cg.members[cid].classic_protocols and loaded.member_epoch == gen3
    assert mid_way.heartbeat("g", gen3, cid, 76)["error_code"] == 0 and mid_way.groups["g"].members == {}
    h.beat(new, 80)
    assert {("t", p) for (p,) in [(p,) for p in new.owned["t"]]} == owned - kept
    # Its commits carry its member epoch as the generation; an old one is ILLEGAL_GENERATION (it knows that one).
    (r,) = h.run(lg.commit(next(_tokens), P, "g", gen3, cid, {("t", 1): (4, "")}, 90, dict(TOPICS)))
    assert r.body["topics"][0][1][0][1] == 0
    assert gen3 == gen + 1
    (r,) = h.run(lg.commit(next(_tokens), P, "g", gen, cid, {("t", 1): (4, "")}, 90, dict(TOPICS)))
    assert r.body["error_code"] == ErrorCode.ILLEGAL_GENERATION
    # The consumer-protocol member leaves: a group of classic members only is a classic group again, rebalancing.
    r = h.beat(new, 100, epoch=-1)
    g = lg.groups["g"]
    assert r.error_code == 0 and g.consumer is None and g.state == GroupState.PREPARING_REBALANCE
    assert set(g.members) == {cid} and g.offsets[("t", 0)].offset == 3
    _, gen4, final = classic_join(h, cid, kept, now=110)
    assert gen4 > gen3 and final == {("t", p) for p in range(6)}
    # The records written replay to the same classic group.
    lg2 = logic()
    lg2.begin_loading(P)
    lg2.load(P, list(h.log), 200)
    assert lg2.groups["g"].consumer is None and set(lg2.groups["g"].members) == {cid}
    assert lg2.groups["g"].offsets[("t", 1)].offset == 4


def test_other_protocol_types_do_not_join_a_consumer_group():
    h = Harness(logic())
    h.beat(Client("a"), 0)
    tok = next(_tokens)
    (r,) = h.run(h.lg.join(tok, P, "g", "", "c", "/h", 10000, 10000, "connect", [("x", b"")], 0))
    assert r.body["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.lg.list_groups() == ([["g", "consumer", "Stable"]], ["consumer"])
    described = h.lg.describe("g")
    assert described["group_type"] == "consumer" and described["members"][0][0] == "a"


def test_the_assignors_balance_and_stick():
    subs = {m: frozenset({"t"}) for m in ("a", "b", "c")}
    first = uniform(subs, {"t": 7}, {})
    assert sorted(sum(len(ps) for ps in tps.values()) for tps in first.values()) == [2, 2, 3]
    # d joins: everyone keeps what it can.
    subs["d"] = frozenset({"t"})
    second = uniform(subs, {"t": 7}, first)
    moved = sum(len(first[m]["t"] - second[m].get("t", frozenset())) for m in first)
    assert moved == 1 and sorted(len(second[m].get("t", ())) for m in subs) == [1, 2, 2, 2]
    # Members subscribe to different topics: only subscribers get a topic's partitions.
    mixed = uniform({"a": frozenset({"t"}), "b": frozenset({"u"})}, {"t": 3, "u": 1}, {})
    assert mixed == {"a": {"t": frozenset({0, 1, 2})}, "b": {"u": frozenset({0})}}
    assert range_({"a": frozenset({"t"}), "b": frozenset({"t"})}, {"t": 5}, {}) == {
        "a": {"t": frozenset({0, 1, 2})},
        "b": {"t": frozenset({3, 4})},
    }
