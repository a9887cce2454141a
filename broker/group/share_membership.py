"""Share group membership at the group coordinator (KIP-932's ShareGroupHeartbeat), sans-IO.

A share group's members heartbeat with the member id they chose and their member epoch (0 to join, -1 to
leave). The coordinator assigns partitions itself (there is no leader member): the simple assignor of a share
group gives every member every partition of the topics it subscribes to, since a share-partition hands each
record to one member at a time whoever fetches it (the partitions' leaders keep that, broker/share/partition.py),
so several members share a partition and none waits for another to give one up. A member's epoch moves to the
group's epoch whenever its assignment changes; there is nothing to revoke first.

The group is durable as a consumer group (KIP-848) is: every change of it (its epoch, a member's subscription or
assignment, its initialized topics) comes out of a heartbeat or a tick as Kafka's share group coordinator records
(records.py: 10, 11, 14, 15), which the group coordinator appends to the group's `__consumer_offsets` partition
before it answers, and which a new coordinator replays (`load_record`, `finish_load`) with the consumer groups'
records of the same partition. So after a coordinator failover the group is listed, described, altered and
deleted as before, and its members heartbeat on in their member epochs (each gets a full session from the load
to reach the new coordinator, as Kafka's members do). Pure heartbeats write nothing. The records' delivery state
does not depend on any of it (it lives with the partitions and the share coordinator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from broker.group.records import (
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    SHARE_GROUP_MEMBER_METADATA,
    SHARE_GROUP_METADATA,
    SHARE_GROUP_STATE_PARTITION_METADATA,
    ConsumerGroupKey,
)
from net.errors import ErrorCode

Records = list[tuple[ConsumerGroupKey, dict[str, Any] | None]]

ASSIGNOR = "simple"  # Kafka's share group assignor name


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int
    subscribed: tuple[str, ...]
    client_id: str
    client_host: str
    rack_id: str | None
    last_heartbeat_ms: int
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)  # topic -> partitions
    # The id of each assigned topic when it was assigned: a topic deleted and created again under its name is
    # another topic (Kafka assigns by topic id), so the member is told its new assignment. Absent: not known (a
    # record written before ids were kept), taken as the current one.
    assignment_ids: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    partition: int = 0  # of __consumer_offsets: the coordinator is its leader
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # Every topic its members subscribed to (and AlterShareGroupOffsets named), less those DeleteShareGroupOffsets
    # removed: an empty group's offsets are described for these (Kafka's initialized topics of the group).
    topics: set[str] = field(default_factory=set)

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState names."""
        return "Stable" if self.members else "Empty"

    def records(self) -> dict[ConsumerGroupKey, dict[str, Any]]:
        """The group as Kafka's coordinator records (their values with Kafka's field names): what a new
        coordinator replays. A change is written as the difference of this before and after it (`changes`)."""
        gid = self.group_id
        out: dict[ConsumerGroupKey, dict[str, Any]] = {}
        for m in self.members.values():
            out[ConsumerGroupKey(SHARE_GROUP_MEMBER_METADATA, gid, m.member_id)] = {
                "rack_id": m.rack_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed),
            }
            out[ConsumerGroupKey(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id)] = {
                "member_epoch": m.epoch,
                "state": "stable",  # Kafka's MemberState: a share member never waits to revoke or for a release
                "assigned_partitions": [
                    [t, list(ps), *([m.assignment_ids[t]] if t in m.assignment_ids else [])]
                    for t, ps in sorted(m.assignment.items())
                ],
            }
        out[ConsumerGroupKey(SHARE_GROUP_METADATA, gid)] = {"epoch": self.epoch}
        out[ConsumerGroupKey(SHARE_GROUP_STATE_PARTITION_METADATA, gid)] = {
            "initializing_topics": [],
            "initialized_topics": [{"topic_name": t} for t in sorted(self.topics)],
            "deleting_topics": [],
        }
        return out


def changes(before: dict[ConsumerGroupKey, dict[str, Any]], after: dict[ConsumerGroupKey, dict[str, Any]]) -> Records:
    """The records that turn `before` into `after`: the changed ones, and tombstones (members' first, so a replay
    never meets a member of a group it already dropped) for the ones gone."""
    out: Records = [(k, None) for k in sorted(before, key=lambda k: k.member is None) if k not in after]
    out += [(k, v) for k, v in after.items() if before.get(k) != v]
    return out


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_epoch: int = -1
    # None: unchanged since the member's last heartbeat (the field stays null in Kafka's answer).
    assignment: dict[str, tuple[int, ...]] | None = None
    # What to write to __consumer_offsets before the answer goes out (empty: nothing changed).
    records: Records = field(default_factory=list)


class ShareGroupMembership:
    """Every share group this coordinator knows, by group id."""

    def __init__(self, session_timeout_ms: int | Callable[[str], int]) -> None:
        # one timeout for all groups, or each group's own (its share.session.timeout.ms)
        self.session_timeout_of = session_timeout_ms if callable(session_timeout_ms) else lambda _g: session_timeout_ms
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(
        self,
        partition: int,
        group_id: str,
        member_id: str,
        member_epoch: int,
        subscribed: tuple[str, ...] | None,
        partitions_of: dict[str, int],
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
        rack_id: str | None = None,
        topic_ids: dict[str, str] | None = None,
    ) -> HeartbeatResult:
        """One ShareGroupHeartbeat on the group's `__consumer_offsets` partition. `partitions_of` is each existing
        topic's partition count, `topic_ids` its id (the image). The result carries the records of what it
        changed."""
        group = self.groups.get(group_id)
        before = group.records() if group is not None else {}
        # the member as it joins (epoch 0), or as the request describes it
        asked = ShareMember(member_id, 0, tuple(subscribed or ()), client_id, client_host, rack_id, now_ms)
        r = self._heartbeat(partition, group_id, member_epoch, subscribed, partitions_of, topic_ids or {}, asked)
        group = self.groups.get(group_id)
        if group is not None:
            r.records = changes(before, group.records())
        return r

    def _heartbeat(
        self,
        partition: int,
        group_id: str,
        member_epoch: int,
        subscribed: tuple[str, ...] | None,
        partitions_of: dict[str, int],
        topic_ids: dict[str, str],
        asked: ShareMember,
    ) -> HeartbeatResult:
        member_id, now_ms = asked.member_id, asked.last_heartbeat_ms
        if not member_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        group = self.groups.get(group_id)
        if member_epoch == -1:  # leaving
            if group is not None and group.members.pop(member_id, None) is not None:
                group.epoch += 1
            return HeartbeatResult(member_epoch=-1)
        if member_epoch == 0:  # joining (or joining again after an error)
            if subscribed is None:
                return HeartbeatResult(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
            group = self.groups.setdefault(group_id, ShareGroup(group_id, partition))
            member = group.members[member_id] = asked
            group.epoch += 1
        else:
            known = group.members.get(member_id) if group is not None else None
            if group is None or known is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group_id}")
            member = known
            if member_epoch != member.epoch:
                return HeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"member epoch {member_epoch} is not the member's current epoch {member.epoch}",
                )
            member.last_heartbeat_ms = now_ms
            if subscribed is not None and tuple(subscribed) != member.subscribed:
                member.subscribed = tuple(subscribed)
                group.epoch += 1
            if asked.rack_id is not None:
                member.rack_id = asked.rack_id
        group.topics.update(member.subscribed)
        target = assign(member.subscribed, partitions_of)
        target_ids = {t: topic_ids[t] for t in target if t in topic_ids}
        same_topics = all(member.assignment_ids.get(t, i) == i for t, i in target_ids.items())
        if target == member.assignment and same_topics and member.epoch > 0:
            return HeartbeatResult(member_epoch=member.epoch)
        # A new assignment (or the first): the member takes the group's epoch with it.
        if member.epoch >= group.epoch:
            group.epoch += 1
        member.epoch = group.epoch
        member.assignment, member.assignment_ids = target, target_ids
        return HeartbeatResult(member_epoch=member.epoch, assignment=target)

    def tick(self, now_ms: int, loaded: set[int] | None = None) -> list[tuple[ShareGroup, Records]]:
        """Members whose session timed out are removed (of the groups on the `loaded` partitions: all without it);
        returns the records of each group that changed."""
        out: list[tuple[ShareGroup, Records]] = []
        for group in self.groups.values():
            if loaded is not None and group.partition not in loaded:
                continue
            timeout = self.session_timeout_of(group.group_id)
            expired = [m for m in group.members.values() if now_ms - m.last_heartbeat_ms > timeout]
            if not expired:
                continue
            before = group.records()
            for m in expired:
                del group.members[m.member_id]
                group.epoch += 1
            out.append((group, changes(before, group.records())))
        return out

    def tombstones(self, group: ShareGroup) -> Records:
        """DeleteGroups: every record of the group goes, so no coordinator loads it again."""
        return changes(group.records(), {})

    # --- the groups of one __consumer_offsets partition: loaded with it, dropped with it ---------------

    def unload(self, partition: int) -> None:
        self.groups = {g: v for g, v in self.groups.items() if v.partition != partition}

    def load_record(self, partition: int, key: ConsumerGroupKey, value: dict[str, Any] | None, now_ms: int) -> None:
        """Replay one of a share group's records (in offset order: the latest per key wins)."""
        gid = key.group
        group = self.groups.get(gid)
        if value is None:
            if group is None:
                return
            if key.record_type == SHARE_GROUP_METADATA:
                del self.groups[gid]  # deleted (DeleteGroups)
            elif key.record_type == SHARE_GROUP_MEMBER_METADATA and key.member is not None:
                group.members.pop(key.member, None)
            return
        # Each value is read whole before anything changes: one that cannot be read (an error out of here) leaves
        # the group as it was.
        if key.record_type == SHARE_GROUP_METADATA:
            epoch = int(value.get("epoch", 0))
            self._loaded_group(gid, partition).epoch = epoch
        elif key.record_type == SHARE_GROUP_STATE_PARTITION_METADATA:
            topics = {str(t["topic_name"]) for t in value.get("initialized_topics") or []}
            self._loaded_group(gid, partition).topics = topics
        elif key.member is not None and key.record_type == SHARE_GROUP_MEMBER_METADATA:
            subscribed = value.get("subscribed_topic_names") or ()
            if isinstance(subscribed, (str, bytes)):
                raise TypeError("subscribed_topic_names is not a list")
            topics_of = tuple(str(t) for t in subscribed)
            client_id, host = str(value.get("client_id") or ""), str(value.get("client_host") or "")
            rack = value.get("rack_id")
            m = self._loaded_member(gid, partition, key.member, now_ms)
            m.subscribed, m.client_id, m.client_host = topics_of, client_id, host
            m.rack_id = rack if isinstance(rack, str) else None
        elif key.member is not None and key.record_type == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            epoch = int(value.get("member_epoch", 0))
            rows = value.get("assigned_partitions") or []
            assigned = {str(row[0]): tuple(int(p) for p in row[1]) for row in rows}
            ids = {str(row[0]): str(row[2]) for row in rows if len(row) > 2}
            m = self._loaded_member(gid, partition, key.member, now_ms)
            m.epoch, m.assignment, m.assignment_ids = epoch, assigned, ids

    def _loaded_group(self, gid: str, partition: int) -> ShareGroup:
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = ShareGroup(gid, partition)
        return group

    def _loaded_member(self, gid: str, partition: int, mid: str, now_ms: int) -> ShareMember:
        group = self._loaded_group(gid, partition)
        m = group.members.get(mid)
        if m is None:
            m = group.members[mid] = ShareMember(mid, 0, (), "", "", None, now_ms)
        return m

    def finish_load(self, partition: int, now_ms: int) -> None:
        """After the replay: each member gets a full session from now to reach the new coordinator."""
        for group in self.groups.values():
            if group.partition == partition:
                for m in group.members.values():
                    m.last_heartbeat_ms = now_ms


def assign(subscribed: tuple[str, ...], partitions_of: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The simple share assignor as used here: every partition of every subscribed topic that exists."""
    return {t: tuple(range(partitions_of[t])) for t in sorted(set(subscribed)) if partitions_of.get(t, 0) > 0}
