"""Share group membership at the group coordinator (KIP-932's ShareGroupHeartbeat), sans-IO.

A share group's members heartbeat with the member id they chose and their member epoch (0 to join, -1 to
leave). The coordinator assigns partitions itself (there is no leader member): the simple assignor of a share
group gives every member every partition of the topics it subscribes to, since a share-partition hands each
record to one member at a time whoever fetches it (the partitions' leaders keep that, broker/share/partition.py),
so several members share a partition and none waits for another to give one up. A member's epoch moves to the
group's epoch whenever its assignment changes; there is nothing to revoke first.

Membership is kept in memory: a coordinator that moves (or restarts) knows no member, and each member's next
heartbeat is answered UNKNOWN_MEMBER_ID, on which Kafka's clients join again with epoch 0. The records' state
does not depend on it (it lives with the partitions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from net.errors import ErrorCode

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


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # Every topic its members subscribed to (and AlterShareGroupOffsets named) since this coordinator knows the
    # group, less those DeleteShareGroupOffsets removed: an empty group's offsets are described for these
    # (Kafka's initialized topics of the group).
    topics: set[str] = field(default_factory=set)

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState names."""
        return "Stable" if self.members else "Empty"


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_epoch: int = -1
    # None: unchanged since the member's last heartbeat (the field stays null in Kafka's answer).
    assignment: dict[str, tuple[int, ...]] | None = None


class ShareGroupMembership:
    """Every share group this coordinator knows, by group id."""

    def __init__(self, session_timeout_ms: int | Callable[[str], int]) -> None:
        # one timeout for all groups, or each group's own (its share.session.timeout.ms)
        self.session_timeout_of = session_timeout_ms if callable(session_timeout_ms) else lambda _g: session_timeout_ms
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(
        self,
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
    ) -> HeartbeatResult:
        """One ShareGroupHeartbeat. `partitions_of` is each existing topic's partition count (the image)."""
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
            group = self.groups.setdefault(group_id, ShareGroup(group_id))
            member = ShareMember(member_id, 0, tuple(subscribed), client_id, client_host, rack_id, now_ms)
            group.members[member_id] = member
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
            if rack_id is not None:
                member.rack_id = rack_id
        group.topics.update(member.subscribed)
        target = assign(member.subscribed, partitions_of)
        if target == member.assignment and member.epoch > 0:
            return HeartbeatResult(member_epoch=member.epoch)
        # A new assignment (or the first): the member takes the group's epoch with it.
        if member.epoch >= group.epoch:
            group.epoch += 1
        member.epoch = group.epoch
        member.assignment = target
        return HeartbeatResult(member_epoch=member.epoch, assignment=target)

    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Members whose session timed out are removed; returns them as (group, member)."""
        gone: list[tuple[str, str]] = []
        for group in self.groups.values():
            timeout = self.session_timeout_of(group.group_id)
            for m in list(group.members.values()):
                if now_ms - m.last_heartbeat_ms > timeout:
                    del group.members[m.member_id]
                    group.epoch += 1
                    gone.append((group.group_id, m.member_id))
        return gone

    def forget(self, keep: "set[str] | None" = None) -> None:
        """Drop the groups this broker no longer coordinates (all of them without `keep`)."""
        self.groups = {g: v for g, v in self.groups.items() if keep is not None and g in keep}


def assign(subscribed: tuple[str, ...], partitions_of: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The simple share assignor as used here: every partition of every subscribed topic that exists."""
    return {t: tuple(range(partitions_of[t])) for t in sorted(set(subscribed)) if partitions_of.get(t, 0) > 0}
