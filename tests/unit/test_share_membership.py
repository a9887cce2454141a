"""Share group membership (broker/share/membership.py) and share sessions (broker/share/sessions.py)."""

from __future__ import annotations

import pytest

from broker.share.membership import ShareGroupMembership
from broker.share.sessions import SessionError, ShareSessionCache
from net.errors import ErrorCode

TOPICS = {"a": 3, "b": 2}


def test_members_join_share_every_partition_and_leave():
    g = ShareGroupMembership(session_timeout_ms=45_000)
    r1 = g.heartbeat("g", "m1", 0, ("a",), TOPICS, now_ms=0)
    assert r1.error == ErrorCode.NONE and r1.member_epoch >= 1 and r1.assignment == {"a": (0, 1, 2)}
    r2 = g.heartbeat("g", "m2", 0, ("a", "b"), TOPICS, now_ms=0)
    assert r2.assignment == {"a": (0, 1, 2), "b": (0, 1)}
    # m1's assignment is unchanged by m2: a share partition is shared, nothing moves
    again = g.heartbeat("g", "m1", r1.member_epoch, None, TOPICS, now_ms=10)
    assert again.error == ErrorCode.NONE and again.member_epoch == r1.member_epoch and again.assignment is None
    left = g.heartbeat("g", "m1", -1, None, TOPICS, now_ms=20)
    assert left.member_epoch == -1 and set(g.groups["g"].members) == {"m2"}


def test_a_new_partition_or_subscription_bumps_the_member_epoch():
    g = ShareGroupMembership(45_000)
    r = g.heartbeat("g", "m1", 0, ("a", "missing"), TOPICS, now_ms=0)
    assert r.assignment == {"a": (0, 1, 2)}
    grown = g.heartbeat("g", "m1", r.member_epoch, None, {**TOPICS, "missing": 1}, now_ms=1)
    assert grown.member_epoch > r.member_epoch and grown.assignment == {"a": (0, 1, 2), "missing": (0,)}
    changed = g.heartbeat("g", "m1", grown.member_epoch, ("b",), TOPICS, now_ms=2)
    assert changed.member_epoch > grown.member_epoch and changed.assignment == {"b": (0, 1)}


def test_unknown_members_stale_epochs_and_bad_joins_are_refused():
    g = ShareGroupMembership(45_000)
    assert g.heartbeat("g", "ghost", 3, None, TOPICS, now_ms=0).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.heartbeat("g", "m1", 0, None, TOPICS, now_ms=0).error == ErrorCode.INVALID_REQUEST
    assert g.heartbeat("g", "", 0, ("a",), TOPICS, now_ms=0).error == ErrorCode.INVALID_REQUEST
    r = g.heartbeat("g", "m1", 0, ("a",), TOPICS, now_ms=0)
    assert g.heartbeat("g", "m1", r.member_epoch + 5, None, TOPICS, now_ms=1).error == ErrorCode.FENCED_MEMBER_EPOCH


def test_a_silent_member_is_removed_after_the_session_timeout():
    g = ShareGroupMembership(1000)
    r = g.heartbeat("g", "m1", 0, ("a",), TOPICS, now_ms=0)
    g.heartbeat("g", "m2", 0, ("a",), TOPICS, now_ms=0)
    g.heartbeat("g", "m2", g.groups["g"].members["m2"].epoch, None, TOPICS, now_ms=900)
    assert g.tick(now_ms=1001) == [("g", "m1")]
    assert g.heartbeat("g", "m1", r.member_epoch, None, TOPICS, now_ms=1002).error == ErrorCode.UNKNOWN_MEMBER_ID


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
