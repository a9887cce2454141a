"""A consumer group's state as Kafka's classic group protocol defines it (GroupMetadata, MemberMetadata)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from broker.group.consumer_state import ConsumerGroup
from net.consumer_protocol import PROTOCOL_TYPE, Assignment


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str
    commit_ts: int
    # KIP-320: the leader epoch of the record before the offset, as the committing consumer saw it (-1: not given);
    # a consumer resuming from the offset checks its log against it (OffsetForLeaderEpoch) to find a truncation.
    leader_epoch: int = -1

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"offset": self.offset, "metadata": self.metadata, "commit_ts": self.commit_ts}
        if self.leader_epoch >= 0:  # only when given: the record stays what earlier releases wrote and read
            value["leader_epoch"] = self.leader_epoch
        return value

    @classmethod
    def from_value(cls, v: dict[str, Any]) -> OffsetAndMetadata:
        return cls(
            int(v["offset"]),
            str(v.get("metadata") or ""),
            int(v.get("commit_ts", 0)),
            int(v.get("leader_epoch", -1)),
        )


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    last_heartbeat_ms: int
    assignment: bytes = b""
    # The assignment of the generation before: a cooperative member commits the partitions it gives up
    # after it learned the new generation (which withholds them from everyone), so those stay its to commit.
    previous_assignment: bytes = b""
    # Requests parked until the rebalance step completes (tokens are the driver's, opaque here).
    join_token: Any = None
    sync_token: Any = None
    # The client connection its latest join, heartbeat or commit came over (the driver's opaque name for it,
    # "" unknown: loaded from the log). Never stored: a new coordinator learns it from the next request.
    conn: str = ""
    # KIP-345's group.instance.id: a static member, whose restart (a join with no member id and this instance
    # id) takes its place back without a rebalance. Stored with the group (Group.to_value's "instances").
    group_instance_id: str | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def owned(self, protocol_type: str | None, previous: bool = False) -> frozenset[tuple[str, int]] | None:
        """The partitions this member's (current or previous) assignment gives it; None if the assignment
        is not ours to read."""
        if protocol_type != PROTOCOL_TYPE:
            return None
        try:
            return Assignment.decode(self.previous_assignment if previous else self.assignment).partitions
        except ValueError:
            return None

    def to_row(self) -> list[Any]:
        return [
            self.member_id,
            self.client_id,
            self.client_host,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            [[n, m] for n, m in self.protocols],
            self.assignment,
        ]

    @classmethod
    def from_row(cls, row: list[Any], now_ms: int) -> "Member":
        mid, cid, host, st, rt, protocols, assignment = row
        return cls(mid, cid, host, st, rt, [(n, m) for n, m in protocols], now_ms, assignment)


@dataclass(slots=True)
class Group:
    group_id: str
    partition: int  # of __consumer_offsets: the coordinator is its leader
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    rebalance_deadline_ms: int = 0
    # group.initial.rebalance.delay.ms: the first rebalance of an empty group waits for more members.
    join_not_before_ms: int = 0
    empty_since_ms: int = 0
    # Set when the group speaks the consumer group protocol (KIP-848): its members are there, not in
    # `members` (Kafka's group type "consumer"); the offsets are the group's either way.
    consumer: ConsumerGroup | None = None

    @property
    def group_type(self) -> str:
        return "classic" if self.consumer is None else "consumer"

    def is_empty(self) -> bool:
        return not self.members and (self.consumer is None or not self.consumer.members)

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "generation": self.generation,
            "leader": self.leader,
            "members": [m.to_row() for m in self.members.values()],
        }
        # Static members' instance ids by member id, a key of its own: a member row keeps its seven fields, which
        # a broker of an earlier release reads when it loads the group during a rolling upgrade.
        instances = {m.member_id: m.group_instance_id for m in self.members.values() if m.group_instance_id}
        if instances:
            value["instances"] = instances
        return value

    def static_member(self, group_instance_id: str) -> Member | None:
        """The member holding `group_instance_id` (KIP-345), if any."""
        return next((m for m in self.members.values() if m.group_instance_id == group_instance_id), None)

    def load_value(self, value: dict[str, Any], now_ms: int) -> None:
        """Take over a group from its record: members keep their generation and must heartbeat us within
        their session timeout, counted from the load (as Kafka's coordinator does after a move)."""
        self.protocol_type = value.get("protocol_type")
        self.protocol = value.get("protocol")
        self.generation = int(value.get("generation", 0))
        self.leader = value.get("leader")
        self.members = {row[0]: Member.from_row(row, now_ms) for row in value.get("members") or []}
        for member_id, instance in (value.get("instances") or {}).items():
            if member_id in self.members:
                self.members[member_id].group_instance_id = instance
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.empty_since_ms = now_ms

    def all_joined(self) -> bool:
        return all(m.join_token is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all members support (Kafka's rule)."""
        members = list(self.members.values())
        common = set(n for n, _ in members[0].protocols)
        for m in members[1:]:
            common &= {n for n, _ in m.protocols}
        votes: dict[str, int] = {}
        for m in members:
            choice = next(n for n, _ in m.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        order = [n for n, _ in members[0].protocols]
        return max(votes, key=lambda n: (votes[n], -order.index(n)))

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        common = {n for n, _ in protocols}
        for m in self.members.values():
            common &= {n for n, _ in m.protocols}
        return bool(common)
