"""The sans-IO group coordinator: rebalances, generations, fencing and offsets, driven step by step."""

from __future__ import annotations

from broker.group.logic import Append, GroupConfig, GroupCoordinatorLogic, Reply
from broker.group.records import GroupKey, OffsetKey
from net.consumer_protocol import Assignment, Subscription
from net.errors import ErrorCode

P = 7  # the offsets partition these groups live on
SUB = Subscription(("t",)).encode()


def logic(**kw) -> GroupCoordinatorLogic:
    lg = GroupCoordinatorLogic(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0, **kw))
    lg.begin_loading(P)
    lg.load(P, [], 0)
    return lg


def join(lg, token, member_id="", now=0, session=1000, rebalance=5000, protocols=None):
    return lg.join(
        token, P, "g", member_id, "c", "/127.0.0.1", session, rebalance, "consumer", protocols or [("range", SUB)], now
    )


def replies(outputs) -> dict:
    return {o.token: o.body for o in outputs if isinstance(o, Reply)}


def complete_appends(lg, outputs, now=0, error=0) -> list:
    out = []
    for o in outputs:
        if isinstance(o, Append):
            out += lg.on_append_done(o.append_id, error, now)
    return out


def stable_group_of_two(lg):
    a = replies(join(lg, "a"))["a"]
    assert a["generation_id"] == 1 and a["leader"] == a["member_id"]
    out = join(lg, "b", now=1)  # a new member: rebalance; a must rejoin
    assert "b" not in replies(out)
    out = join(lg, "a2", a["member_id"], now=2)
    r = replies(out)
    ma, mb = r["a2"], r["b"]
    assert ma["generation_id"] == mb["generation_id"] == 2
    assert len(ma["members"]) == 2 and mb["members"] == []
    assign = {
        ma["member_id"]: Assignment(frozenset({("t", 0)})).encode(),
        mb["member_id"]: Assignment(frozenset({("t", 1)})).encode(),
    }
    assert replies(lg.sync("sb", "g", 2, mb["member_id"], {}, 3)) == {}  # parked until the leader syncs
    out = lg.sync("sa", "g", 2, ma["member_id"], assign, 3)
    appends = [o for o in out if isinstance(o, Append)]
    assert appends and isinstance(appends[0].records[0][0], GroupKey)
    done = replies(complete_appends(lg, out, 4))
    assert Assignment.decode(done["sa"]["assignment"]).partitions == {("t", 0)}
    assert Assignment.decode(done["sb"]["assignment"]).partitions == {("t", 1)}
    return ma["member_id"], mb["member_id"]


def test_two_members_join_sync_and_get_their_assignments():
    lg = logic()
    stable_group_of_two(lg)
    assert lg.describe("g")["state"] == "Stable"


def test_stale_generation_heartbeat_and_commit_are_fenced():
    lg = logic()
    a, b = stable_group_of_two(lg)
    assert lg.heartbeat("g", 1, a, 5)["error_code"] == ErrorCode.ILLEGAL_GENERATION
    out = lg.commit("c", P, "g", 1, a, {("t", 0): (5, "")}, 5, {"t": 2})
    refused = replies(out)["c"]  # refused as a whole: the code once, with why
    assert refused["error_code"] == ErrorCode.ILLEGAL_GENERATION and "generation 1" in refused["error_message"]


def test_commit_for_a_partition_not_assigned_is_refused():
    lg = logic()
    a, b = stable_group_of_two(lg)
    out = lg.commit("c", P, "g", 2, a, {("t", 0): (5, ""), ("t", 1): (9, "")}, 5, {"t": 2})
    appends = [o for o in out if isinstance(o, Append)]
    assert [k for k, _ in appends[0].records] == [OffsetKey("g", "t", 0)]
    body = replies(complete_appends(lg, out, 6))["c"]
    rows = {p: code for p, code, _ in body["topics"][0][1]}
    assert rows == {0: 0, 1: ErrorCode.PARTITION_NOT_ASSIGNED}
    assert lg.fetch_offsets("g", [("t", 0), ("t", 1)])["topics"] == [["t", [[0, 5, "", 0, -1], [1, -1, "", 0, -1]]]]


def test_any_int64_offset_is_stored_as_committed_and_only_metadata_is_validated():
    """Kafka stores -1, -2 or past-the-end offsets as given (kafkajs's resetOffsets commits -2, a consumer
    recovering from OFFSET_OUT_OF_RANGE commits -1): consumers apply auto.offset.reset to them."""
    lg = logic(offset_metadata_max_bytes=4)
    a, _ = stable_group_of_two(lg)
    for offset in (-1, -2, -(2**63), 2**63 - 1, 0):
        out = lg.commit("c", P, "g", 2, a, {("t", 0): (offset, "m")}, 5, {"t": 2})
        assert replies(complete_appends(lg, out, 6))["c"]["topics"][0][1][0][1] == 0, offset
        assert lg.fetch_offsets("g", [("t", 0)])["topics"] == [["t", [[0, offset, "m", 0, -1]]]]
    out = lg.commit("c", P, "g", 2, a, {("t", 0): (-1, "12345")}, 5, {"t": 2})
    assert replies(out)["c"]["topics"][0][1][0][1] == ErrorCode.OFFSET_METADATA_TOO_LARGE


def test_offsets_are_visible_only_once_durable():
    lg = logic()
    a, _ = stable_group_of_two(lg)
    out = lg.commit("c", P, "g", 2, a, {("t", 0): (5, "")}, 5, {"t": 2})
    assert lg.fetch_offsets("g", [("t", 0)])["topics"][0][1][0][1] == -1
    body = replies(complete_appends(lg, out, 6, error=ErrorCode.COORDINATOR_NOT_AVAILABLE))["c"]
    assert body["topics"][0][1][0][1] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert lg.fetch_offsets("g", [("t", 0)])["topics"][0][1][0][1] == -1


def test_session_timeout_removes_a_silent_member_and_rebalances():
    lg = logic()
    a, b = stable_group_of_two(lg)
    lg.heartbeat("g", 2, a, 900)
    lg.tick(1500)  # b last heard at 4: past its 1000 ms session
    assert b not in lg.groups["g"].members
    assert lg.describe("g")["state"] == "PreparingRebalance"
    assert lg.heartbeat("g", 2, a, 1501)["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    r = replies(join(lg, "a3", a, now=1502))["a3"]
    assert r["generation_id"] == 3 and [m[0] for m in r["members"]] == [a]


def test_member_that_does_not_rejoin_within_rebalance_timeout_is_dropped():
    lg = logic()
    a, b = stable_group_of_two(lg)
    join(lg, "a3", a, now=10, rebalance=500)  # a rejoins; b (rebalance timeout 5000) keeps heartbeating only
    for now in range(500, 5001, 500):
        assert lg.heartbeat("g", 2, b, now)["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        assert lg.tick(now) == []
    out = replies(lg.tick(5011))
    assert out["a3"]["generation_id"] == 3 and b not in lg.groups["g"].members


def test_leave_rebalances_and_empty_group_can_be_reset_and_deleted():
    lg = logic()
    a, b = stable_group_of_two(lg)
    body, out = lg.leave("g", [a, b, "nobody"], 10)
    assert [c for _, c in body["members"]] == [0, 0, ErrorCode.UNKNOWN_MEMBER_ID]
    complete_appends(lg, out, 10)
    assert lg.describe("g")["state"] == "Empty"
    out = lg.commit("r", P, "g", -1, "", {("t", 1): (0, "")}, 11, {"t": 2})
    assert replies(complete_appends(lg, out, 12))["r"]["topics"][0][1][0][1] == 0
    out = lg.delete("d", "g")
    assert {k for k, _ in out[0].records} == {OffsetKey("g", "t", 1), GroupKey("g")}
    assert all(v is None for _, v in out[0].records)
    assert replies(complete_appends(lg, out, 13))["d"]["error_code"] == 0
    assert lg.describe("g")["state"] == "Dead"
    assert replies(lg.delete("d2", "g"))["d2"]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


def test_generation_minus_one_commits_to_a_group_without_members_whatever_the_member_id():
    """Kafka's simple group: librdkafka with group.protocol=consumer names its own member id (KIP-1082) in a commit
    with generation -1 before it ever subscribed (confluent-kafka-python's test_consumer_topicpartition_metadata)."""
    lg = logic()
    out = lg.commit("new", P, "nobody-yet", -1, "client-made-id", {("t", 0): (3, "m")}, 5, {"t": 2})
    assert replies(complete_appends(lg, out, 6))["new"]["topics"][0][1][0][1] == 0  # the group is made, as Kafka's
    out = lg.commit("again", P, "nobody-yet", -1, "client-made-id", {("t", 0): (4, "")}, 7, {"t": 2})
    assert replies(complete_appends(lg, out, 8))["again"]["topics"][0][1][0][1] == 0  # an empty group: the same
    assert lg.fetch_offsets("nobody-yet", [("t", 0)])["topics"][0][1][0][1] == 4
    stable_group_of_two(lg)  # a group with members: a member id outside it is still refused
    body = replies(lg.commit("out", P, "g", -1, "client-made-id", {("t", 0): (0, "")}, 9, {"t": 2}))["out"]
    assert body["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_reset_and_delete_refused_while_the_group_has_members():
    lg = logic()
    stable_group_of_two(lg)
    body = replies(lg.commit("r", P, "g", -1, "", {("t", 0): (0, "")}, 5, {"t": 2}))["r"]
    assert body["error_code"] == ErrorCode.NON_EMPTY_GROUP and "active members" in body["error_message"]
    assert replies(lg.delete("d", "g"))["d"]["error_code"] == ErrorCode.NON_EMPTY_GROUP


def test_a_new_coordinator_rebuilds_groups_and_offsets_from_the_log():
    lg = logic()
    a, b = stable_group_of_two(lg)
    out = lg.commit("c", P, "g", 2, a, {("t", 0): (42, "m")}, 5, {"t": 2})
    records = [r for o in out if isinstance(o, Append) for r in o.records]
    complete_appends(lg, out, 6)
    group_record = (GroupKey("g"), lg.groups["g"].to_value())
    other = GroupCoordinatorLogic(GroupConfig(min_session_timeout_ms=100))
    other.begin_loading(P)
    assert other.check_owner(P)["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    other.load(P, [group_record, *records], 100)
    assert other.describe("g")["state"] == "Stable" and other.describe("g")["generation"] == 2
    assert other.heartbeat("g", 2, b, 101)["error_code"] == 0
    assert other.fetch_offsets("g", [("t", 0)])["topics"][0][1][0][:3] == [0, 42, "m"]


def test_unload_answers_parked_requests_with_not_coordinator():
    lg = logic()
    a = replies(join(lg, "a"))["a"]["member_id"]
    join(lg, "b", now=1)
    out = replies(lg.unload(P))
    assert out["b"]["error_code"] == ErrorCode.NOT_COORDINATOR
    assert lg.check_owner(P)["error_code"] == ErrorCode.NOT_COORDINATOR
    assert a


def test_bad_input_is_a_clear_error():
    lg = logic()
    assert replies(join(lg, "x", session=10))["x"]["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    assert replies(join(lg, "x", member_id="ghost"))["x"]["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    replies(join(lg, "a"))
    mismatch = replies(join(lg, "y", protocols=[("roundrobin", SUB)]))["y"]
    assert mismatch["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert lg.heartbeat("nope", 1, "m", 0)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_protocol_is_chosen_by_vote_among_common_ones():
    lg = logic()
    a = replies(join(lg, "a", protocols=[("cooperative-sticky", SUB), ("range", SUB)]))["a"]
    assert a["protocol_name"] == "cooperative-sticky"
    join(lg, "b", now=1, protocols=[("range", SUB)])
    r = replies(join(lg, "a2", a["member_id"], now=2, protocols=[("cooperative-sticky", SUB), ("range", SUB)]))
    assert r["a2"]["protocol_name"] == "range"


def test_initial_rebalance_delay_waits_for_more_members():
    lg = GroupCoordinatorLogic(GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=300))
    lg.begin_loading(P)
    lg.load(P, [], 0)
    assert replies(join(lg, "a", now=0)) == {}
    assert replies(join(lg, "b", now=100)) == {}
    out = replies(lg.tick(301))
    assert set(out) == {"a", "b"} and out["a"]["generation_id"] == 1


def test_revoking_member_may_commit_what_it_gave_up_but_not_what_another_owns():
    lg = logic()
    a, b = stable_group_of_two(lg)  # generation 2: a owns t-0, b owns t-1
    # Generation 3 (cooperative first round): t-0 is withheld from everyone, b keeps t-1.
    join(lg, "a3", a, now=10)
    r = replies(join(lg, "b3", b, now=11))
    assert r["a3"]["generation_id"] == 3
    assign = {a: Assignment(frozenset()).encode(), b: Assignment(frozenset({("t", 1)})).encode()}
    lg.sync("sb", "g", 3, b, {}, 12)
    complete_appends(lg, lg.sync("sa", "g", 3, a, assign, 12), 13)
    out = lg.commit("c", P, "g", 3, a, {("t", 0): (7, ""), ("t", 1): (9, "")}, 14, {"t": 2})
    body = replies(complete_appends(lg, out, 15))["c"]
    rows = {p: code for p, code, _ in body["topics"][0][1]}
    assert rows == {0: 0, 1: ErrorCode.PARTITION_NOT_ASSIGNED}


def test_a_new_member_on_an_existing_members_connection_replaces_it_without_waiting_for_its_session():
    # A consumer that gave its member id up (librdkafka after its own session timeout: a coordinator out of
    # reach for a while) rejoins without it over the same connection. The group must not wait the abandoned
    # member's session timeout on the coordinator's side before it forms the next generation.
    lg = logic()
    a, b = stable_group_of_two(lg)
    assert lg.heartbeat("g", 2, a, 10, conn="kafka 10.0.0.1:50001")["error_code"] == 0
    assert lg.heartbeat("g", 2, b, 10, conn="kafka 10.0.0.2:50002")["error_code"] == 0
    out = lg.join(
        "n", P, "g", "", "c", "/10.0.0.1", 1000, 5000, "consumer", [("range", SUB)], 20, conn="kafka 10.0.0.1:50001"
    )
    assert a not in lg.groups["g"].members  # replaced at once, not after 1000 ms
    assert "n" not in replies(out)  # b is still to rejoin
    assert lg.heartbeat("g", 2, b, 30)["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    r = replies(join(lg, "b2", b, now=40))
    assert r["n"]["generation_id"] == r["b2"]["generation_id"] == 3  # 20 ms after the join, not a session later
    assert {r["n"]["member_id"], b} == set(lg.groups["g"].members)


def test_a_new_member_on_another_connection_replaces_nobody():
    lg = logic()
    a, b = stable_group_of_two(lg)
    assert lg.heartbeat("g", 2, a, 10, conn="kafka 10.0.0.1:50001")["error_code"] == 0
    out = lg.join(
        "n", P, "g", "", "c", "/10.0.0.1", 1000, 5000, "consumer", [("range", SUB)], 20, conn="kafka 10.0.0.1:50009"
    )
    assert replies(out) == {} and {a, b} < set(lg.groups["g"].members)
    # a stays until it rejoins or its session (1000 ms) runs out
    assert replies(lg.tick(500)) == {}
    assert a in lg.groups["g"].members


def test_a_committed_leader_epoch_is_kept_and_loaded_back():
    """KIP-320: OffsetCommit v6+ / TxnOffsetCommit v2+ carry the leader epoch of the record before the offset, and
    OffsetFetch v5+ answers it, so a consumer resuming there can detect a truncation (kafka-python's
    test_transactional_producer_offsets expects it back). Not given (-1): none is stored, and the record keeps the
    shape earlier releases wrote."""
    lg = logic()
    a = replies(join(lg, "a"))["a"]["member_id"]
    done = complete_appends(lg, lg.sync("s", "g", 1, a, {a: Assignment(frozenset({("t", 0), ("t", 1)})).encode()}, 1))
    assert replies(done)["s"]["error_code"] == 0
    out = lg.commit("c", P, "g", 1, a, {("t", 0): (5, "m", 3), ("t", 1): (9, "")}, 5, {"t": 2})
    records = dict(next(o for o in out if isinstance(o, Append)).records)
    assert records[OffsetKey("g", "t", 0)]["leader_epoch"] == 3
    assert "leader_epoch" not in records[OffsetKey("g", "t", 1)]
    complete_appends(lg, out, 6)
    assert lg.fetch_offsets("g", [("t", 0), ("t", 1)])["topics"] == [["t", [[0, 5, "m", 0, 3], [1, 9, "", 0, -1]]]]
    other = logic()
    other.load(P, list(records.items()), 10)  # a new coordinator, from the log
    assert other.fetch_offsets("g", [("t", 0)])["topics"] == [["t", [[0, 5, "m", 0, 3]]]]
