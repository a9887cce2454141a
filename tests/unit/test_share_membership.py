"""Share group membership (broker/group/share_membership.py), its coordinator records and their replay, and share
sessions (broker/share/sessions.py)."""

from __future__ import annotations

import pytest

from broker.group.logic import GroupCoordinatorLogic
from broker.group.outputs import Append, Reply
from broker.group.records import ConsumerGroupKey, build_batch, read_records
from broker.group.share_membership import ShareGroupMembership
from broker.share.sessions import SessionError, ShareSessionCache
from net.errors import ErrorCode

TOPICS = {"a": 3, "b": 2}


def test_members_join_share_every_partition_and_leave():
    g = ShareGroupMembership(session_timeout_ms=45_000)
    r1 = g.heartbeat(0, "g", "m1", 0, ("a",), TOPICS, now_ms=0)
    assert r1.error == ErrorCode.NONE and r1.member_epoch >= 1 and r1.assignment == {"a": (0, 1, 2)}
    r2 = g.heartbeat(0, "g", "m2", 0, ("a", "b"), TOPICS, now_ms=0)
    assert r2.assignment == {"a": (0, 1, 2), "b": (0, 1)}
    # m1's assignment is unchanged by m2: a share partition is shared, nothing moves
    again = g.heartbeat(0, "g", "m1", r1.member_epoch, None, TOPICS, now_ms=10)
    assert again.error == ErrorCode.NONE and again.member_epoch == r1.member_epoch and again.assignment is None
    left = g.heartbeat(0, "g", "m1", -1, None, TOPICS, now_ms=20)
    assert left.member_epoch == -1 and set(g.groups["g"].members) == {"m2"}


def test_a_new_partition_or_subscription_bumps_the_member_epoch():
    g = ShareGroupMembership(45_000)
    r = g.heartbeat(0, "g", "m1", 0, ("a", "missing"), TOPICS, now_ms=0)
    assert r.assignment == {"a": (0, 1, 2)}
    grown = g.heartbeat(0, "g", "m1", r.member_epoch, None, {**TOPICS, "missing": 1}, now_ms=1)
    assert grown.member_epoch > r.member_epoch and grown.assignment == {"a": (0, 1, 2), "missing": (0,)}
    changed = g.heartbeat(0, "g", "m1", grown.member_epoch, ("b",), TOPICS, now_ms=2)
    assert changed.member_epoch > grown.member_epoch and changed.assignment == {"b": (0, 1)}


def test_a_topic_deleted_and_created_again_under_its_name_is_assigned_anew():
    """Kafka assigns by topic id: the recreated topic is another topic, so the member gets a new epoch and the
    assignment (with the new id) though no name or partition count changed; confluent-kafka-python's
    test_topic_recreate_resumes_with_fresh_delivery waited for ever on the old id's partitions."""
    g = ShareGroupMembership(45_000)
    r = g.heartbeat(0, "g", "m1", 0, ("a",), TOPICS, now_ms=0, topic_ids={"a": "id-1", "b": "id-b"})
    same = g.heartbeat(0, "g", "m1", r.member_epoch, None, TOPICS, now_ms=1, topic_ids={"a": "id-1"})
    assert same.member_epoch == r.member_epoch and same.assignment is None and not same.records
    again = g.heartbeat(0, "g", "m1", r.member_epoch, None, TOPICS, now_ms=2, topic_ids={"a": "id-2"})
    assert again.member_epoch > r.member_epoch and again.assignment == {"a": (0, 1, 2)}
    # the id is in the member's assignment record, so a new coordinator compares with it too
    [(_, value)] = [(k, v) for k, v in again.records if k.record_type == 14]
    assert value is not None and value["assigned_partitions"] == [["a", [0, 1, 2], "id-2"]]
    loaded = ShareGroupMembership(45_000)
    for k, v in g.groups["g"].records().items():
        loaded.load_record(0, k, v, now_ms=3)
    moved = loaded.heartbeat(0, "g", "m1", again.member_epoch, None, TOPICS, now_ms=4, topic_ids={"a": "id-3"})
    assert moved.member_epoch > again.member_epoch and moved.assignment == {"a": (0, 1, 2)}
    # a record written before ids were kept (no third element) is taken as the current id: no new epoch
    old = ShareGroupMembership(45_000)
    old.load_record(0, ConsumerGroupKey(11, "g"), {"epoch": 4}, now_ms=0)
    old.load_record(
        0, ConsumerGroupKey(14, "g", "m1"), {"member_epoch": 4, "assigned_partitions": [["a", [0, 1, 2]]]}, 0
    )
    old.load_record(0, ConsumerGroupKey(10, "g", "m1"), {"subscribed_topic_names": ["a"]}, now_ms=0)
    kept = old.heartbeat(0, "g", "m1", 4, None, TOPICS, now_ms=1, topic_ids={"a": "id-9"})
    assert kept.error == ErrorCode.NONE and kept.member_epoch == 4 and kept.assignment is None


def test_unknown_members_stale_epochs_and_bad_joins_are_refused():
    g = ShareGroupMembership(45_000)
    assert g.heartbeat(0, "g", "ghost", 3, None, TOPICS, now_ms=0).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.heartbeat(0, "g", "m1", 0, None, TOPICS, now_ms=0).error == ErrorCode.INVALID_REQUEST
    assert g.heartbeat(0, "g", "", 0, ("a",), TOPICS, now_ms=0).error == ErrorCode.INVALID_REQUEST
    r = g.heartbeat(0, "g", "m1", 0, ("a",), TOPICS, now_ms=0)
    assert g.heartbeat(0, "g", "m1", r.member_epoch + 5, None, TOPICS, now_ms=1).error == ErrorCode.FENCED_MEMBER_EPOCH


def test_a_silent_member_is_removed_after_the_session_timeout():
    g = ShareGroupMembership(1000)
    r = g.heartbeat(0, "g", "m1", 0, ("a",), TOPICS, now_ms=0)
    g.heartbeat(0, "g", "m2", 0, ("a",), TOPICS, now_ms=0)
    g.heartbeat(0, "g", "m2", g.groups["g"].members["m2"].epoch, None, TOPICS, now_ms=900)
    [(group, records)] = g.tick(now_ms=1001)
    assert group.group_id == "g" and set(group.members) == {"m2"}
    # the expiry is written: m1's records go, the group's epoch moves
    assert {(k.record_type, k.member) for k, v in records if v is None} == {(10, "m1"), (14, "m1")}
    assert (ConsumerGroupKey(11, "g"), {"epoch": group.epoch}) in records
    assert g.heartbeat(0, "g", "m1", r.member_epoch, None, TOPICS, now_ms=1002).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_share_session_epochs():
    c = ShareSessionCache(max_sessions=2, idle_ms=1000)
    s, old = c.open("g", "m1", now_ms=0)
    assert old is None and s.epoch == 1
    assert c.use("g", "m1", 1, now_ms=1).epoch == 2
    with pytest.raises(SessionError) as e:
        c.use("g", "m1", 1, now_ms=2)  # a replayed epoch
    assert e.value.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    with pytest.raises(SessionError) as e:
        c.use("g", "nobody", 1, now_ms=2)
    assert e.value.code == ErrorCode.SHARE_SESSION_NOT_FOUND
    s2, old = c.open("g", "m1", now_ms=3)  # a member opening again replaces its session
    assert old is s and s2.epoch == 1
    c.open("g", "m2", now_ms=3)
    with pytest.raises(SessionError) as e:
        c.open("g", "m3", now_ms=3)
    assert e.value.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert {x.member_id for x in c.evict_idle(now_ms=5000)} == {"m1", "m2"}
    assert c.sessions == {}


def _replayed(records, partition=0, now_ms=0):
    """A new coordinator's GroupCoordinatorLogic after loading `records` through the log's own bytes."""
    logic = GroupCoordinatorLogic()
    logic.begin_loading(partition)
    data = build_batch(records, now_ms=1)
    logic.load(partition, [(k, v) for _o, k, v in read_records(data)], now_ms)
    return logic


def test_a_share_group_is_written_as_kafkas_records_and_replayed_as_it_was():
    g = ShareGroupMembership(45_000)
    log = []
    r1 = g.heartbeat(0, "g", "m1", 0, ("a",), TOPICS, now_ms=0, client_id="c1", client_host="h1", rack_id="r1")
    log += r1.records
    kinds = {(k.record_type, k.member) for k, _ in r1.records}
    assert kinds == {(10, "m1"), (14, "m1"), (11, None), (15, None)}
    log += g.heartbeat(0, "g", "m2", 0, ("a", "b"), TOPICS, now_ms=0).records
    # a heartbeat that changes nothing writes nothing
    assert g.heartbeat(0, "g", "m1", r1.member_epoch, None, TOPICS, now_ms=5).records == []
    log += g.heartbeat(0, "g", "m2", -1, None, TOPICS, now_ms=6).records  # m2 leaves: its records tombstoned
    logic = _replayed(log, now_ms=100)
    back = logic.share.groups["g"]
    want = g.groups["g"]
    assert (back.epoch, back.topics, set(back.members)) == (want.epoch, {"a", "b"}, {"m1"})
    m = back.members["m1"]
    assert (m.epoch, m.assignment, m.subscribed, m.client_id, m.client_host, m.rack_id) == (
        r1.member_epoch,
        {"a": (0, 1, 2)},
        ("a",),
        "c1",
        "h1",
        "r1",
    )
    assert m.last_heartbeat_ms == 100  # a full session from the load
    # the member heartbeats on in its epoch at the new coordinator, nothing to write
    again = logic.share.heartbeat(0, "g", "m1", r1.member_epoch, None, TOPICS, now_ms=101)
    assert again.error == ErrorCode.NONE and again.member_epoch == r1.member_epoch and again.records == []
    rows, types = logic.list_groups()
    assert rows == [] and types == []  # ListGroups' share rows are ShareGroupApis.listed's


def test_a_deleted_share_group_is_not_loaded_again_and_unload_forgets_only_its_partition():
    g = ShareGroupMembership(45_000)
    log = g.heartbeat(3, "g", "m1", 0, ("a",), TOPICS, now_ms=0).records
    log += g.heartbeat(3, "g", "m1", -1, None, TOPICS, now_ms=1).records
    log += g.tombstones(g.groups["g"])
    logic = _replayed(log, partition=3)
    assert "g" not in logic.share.groups
    logic.share.groups.update(_replayed(log[:2], partition=3).share.groups)
    other = _replayed(ShareGroupMembership(1).heartbeat(4, "h", "m", 0, ("a",), TOPICS, now_ms=0).records, 4)
    logic.share.groups.update(other.share.groups)
    logic.unload(3)
    assert set(logic.share.groups) == {"h"}


def test_share_writes_and_session_expiry_go_through_the_coordinators_appends():
    logic = _replayed([])
    logic.share.session_timeout_of = lambda _g: 1000
    r = logic.share.heartbeat(0, "g", "m1", 0, ("a",), TOPICS, now_ms=0)
    out = logic.write("tok", 0, "g", r.records, {"error_code": 0})
    [append] = out
    assert isinstance(append, Append) and append.partition == 0 and append.records == r.records
    assert logic.on_append_done(append.append_id, 0, now_ms=1) == [Reply("tok", {"error_code": 0})]
    out = logic.write("tok2", 0, "g", r.records, {"error_code": 0})
    [failed] = logic.on_append_done(out[0].append_id, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), now_ms=1)
    assert failed.body["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # the coordinator's tick expires the member and writes it
    appends = [o for o in logic.tick(now_ms=2000) if isinstance(o, Append)]
    assert [(k.record_type, v) for a in appends for k, v in a.records if k.member == "m1"] == [(10, None), (14, None)]
    assert logic.share.groups["g"].members == {}
    # a write still pending when the partition moves away is answered NOT_COORDINATOR
    pending = logic.write("tok3", 0, "g", r.records, {"error_code": 0})
    assert pending
    [moved] = [o for o in logic.unload(0) if isinstance(o, Reply)]
    assert moved.token == "tok3" and moved.body["error_code"] == ErrorCode.NOT_COORDINATOR


def test_a_share_group_record_that_cannot_be_read_is_skipped_not_a_stalled_load():
    g = ShareGroupMembership(45_000)
    good = g.heartbeat(0, "g", "m1", 0, ("a",), TOPICS, now_ms=0).records
    forged = [
        (ConsumerGroupKey(11, "g"), {"epoch": "many"}),
        (ConsumerGroupKey(14, "g", "m1"), {"member_epoch": 99, "assigned_partitions": [["a", "x"]]}),
        (ConsumerGroupKey(15, "g"), {"initialized_topics": [7]}),
        (ConsumerGroupKey(10, "g", "m2"), {"subscribed_topic_names": 5}),
    ]
    logic = _replayed(good + forged)
    assert logic.check_owner(0) is None  # loaded
    back = logic.share.groups["g"]
    assert back.epoch == g.groups["g"].epoch and back.topics == {"a"}
    assert set(back.members) == {"m1"} and back.members["m1"].assignment == {"a": (0, 1, 2)}
    assert back.members["m1"].epoch == g.groups["g"].members["m1"].epoch  # the unreadable value changed nothing
