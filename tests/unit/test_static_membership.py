"""KIP-345 static membership in the classic group protocol, driven step by step on the sans-IO coordinator.

aiokafka's own suite (test_kip_345_enabled) found that Kafka Lite ignored group.instance.id: a static member that
rejoined after a restart started a rebalance and its peers lost their partitions again.
"""

from __future__ import annotations

from broker.group.logic import Append, GroupConfig, GroupCoordinatorLogic, Reply
from broker.group.records import GroupKey
from net.consumer_protocol import Assignment, Subscription
from net.errors import ErrorCode

P = 7
SUB = Subscription(("t",)).encode()


def logic() -> GroupCoordinatorLogic:
    lg = GroupCoordinatorLogic(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0))
    lg.begin_loading(P)
    lg.load(P, [], 0)
    return lg


def join(lg, token, member_id="", instance=None, now=0, protocols=None, conn=""):
    return lg.join(
        token, P, "g", member_id, "c", "/127.0.0.1", 1000, 5000, "consumer", protocols or [("range", SUB)], now,
        None, conn, instance,
    )  # fmt: skip


def replies(outputs) -> dict:
    return {o.token: o.body for o in outputs if isinstance(o, Reply)}


def appends(outputs) -> list[Append]:
    return [o for o in outputs if isinstance(o, Append)]


def done(lg, outputs, now=0, error=0) -> list:
    out = []
    for a in appends(outputs):
        out += lg.on_append_done(a.append_id, error, now)
    return out


def stable_static_pair(lg, protocols=None):
    """Members "s1" (static, the leader) and "d" (dynamic), each with one partition: their member ids."""
    a = replies(join(lg, "a", instance="s1", conn="c1", protocols=protocols))["a"]
    join(lg, "b", now=1, conn="c2", protocols=protocols)
    r = replies(join(lg, "a2", a["member_id"], instance="s1", now=2, conn="c1", protocols=protocols))
    ma = r["a2"]
    mb = next(v for k, v in r.items() if k == "b")
    assert ma["leader"] == ma["member_id"] and ma["member_id"].startswith("s1-")
    assert {m[2] for m in ma["members"]} == {"s1", None}  # the leader learns each member's instance id
    assign = {
        ma["member_id"]: Assignment(frozenset({("t", 0)})).encode(),
        mb["member_id"]: Assignment(frozenset({("t", 1)})).encode(),
    }
    lg.sync("sb", "g", 2, mb["member_id"], {}, 3)
    done(lg, lg.sync("sa", "g", 2, ma["member_id"], assign, 3, "s1"), 4)
    assert lg.describe("g")["state"] == "Stable"
    return ma["member_id"], mb["member_id"]


def test_a_restarted_static_member_takes_its_place_back_without_a_rebalance():
    lg = logic()
    old, dyn = stable_static_pair(lg)
    out = join(lg, "again", instance="s1", now=10, conn="c9")  # the restarted consumer: no member id
    assert "again" not in replies(out)  # answered once the new id is stored
    (rec,) = appends(out)
    key, value = rec.records[0]
    assert isinstance(key, GroupKey) and list(value["instances"].values()) == ["s1"]
    r = replies(done(lg, out, 11))["again"]
    new = r["member_id"]
    assert new != old and new.startswith("s1-")
    assert r["generation_id"] == 2  # the same generation: no rebalance
    assert r["leader"] == new and r["skip_assignment"] is True  # it was the leader: keep the assignment it made
    # the other member carries on in generation 2, untouched
    assert lg.heartbeat("g", 2, dyn, 12) == {"error_code": 0}
    # the restarted member syncs and gets its partition back
    (s,) = replies(lg.sync("s", "g", 2, new, {}, 12, "s1")).values()
    assert Assignment.decode(s["assignment"]).partitions == {("t", 0)}
    assert lg.describe("g")["state"] == "Stable"


def test_the_replaced_instance_is_fenced_everywhere():
    lg = logic()
    old, _ = stable_static_pair(lg)
    done(lg, join(lg, "again", instance="s1", now=10), 11)
    fenced = int(ErrorCode.FENCED_INSTANCE_ID)
    assert lg.heartbeat("g", 2, old, 12, group_instance_id="s1")["error_code"] == fenced
    assert replies(lg.sync("s", "g", 2, old, {}, 12, "s1"))["s"]["error_code"] == fenced
    assert replies(join(lg, "j", old, instance="s1", now=12))["j"]["error_code"] == fenced
    commit = lg.commit("c", P, "g", 2, old, {("t", 0): (5, "")}, 12, {"t": 2}, "", "s1")
    assert replies(commit)["c"]["error_code"] == fenced
    body, _ = lg.leave("g", [old], 12, ["s1"])
    assert body["members"] == [[old, fenced]]


def test_a_static_member_whose_protocols_change_the_choice_joins_a_rebalance():
    lg = logic()
    stable_static_pair(lg, protocols=[("range", SUB), ("roundrobin", SUB)])
    assert lg.groups["g"].protocol == "range"
    out = join(lg, "again", instance="s1", now=10, protocols=[("roundrobin", SUB)])  # range is no longer common
    assert lg.describe("g")["state"] == "PreparingRebalance" and not appends(out)


def test_a_static_member_leaves_by_instance_id_alone():
    """An admin's removeMembersFromConsumerGroup names the instance, not the member id (LeaveGroup v3+)."""
    lg = logic()
    old, dyn = stable_static_pair(lg)
    body, out = lg.leave("g", [""], 10, ["s1"])
    assert body["members"] == [[old, 0]]
    assert lg.describe("g")["state"] == "PreparingRebalance"
    body, _ = lg.leave("g", [""], 11, ["nobody"])
    assert body["members"] == [["", int(ErrorCode.UNKNOWN_MEMBER_ID)]]


def test_a_new_coordinator_knows_the_static_members_from_the_log():
    lg = logic()
    old, _ = stable_static_pair(lg)
    out = join(lg, "again", instance="s1", now=10)
    (rec,) = appends(out)
    new = replies(done(lg, out, 11))["again"]["member_id"]
    other = GroupCoordinatorLogic(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0))
    other.begin_loading(P)
    other.load(P, [rec.records[0]], 20)
    assert other.heartbeat("g", 2, new, 21, group_instance_id="s1") == {"error_code": 0}
    assert other.heartbeat("g", 2, old, 21, group_instance_id="s1")["error_code"] == ErrorCode.FENCED_INSTANCE_ID
    described = {m[0]: m[5] for m in other.describe("g")["members"]}
    assert described[new] == "s1"


def test_a_failed_store_of_the_new_id_is_an_error_to_the_joiner():
    lg = logic()
    stable_static_pair(lg)
    out = join(lg, "again", instance="s1", now=10)
    r = replies(done(lg, out, 11, error=int(ErrorCode.NOT_ENOUGH_REPLICAS)))["again"]
    assert r["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
