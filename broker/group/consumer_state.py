"""A consumer group's state as Kafka's consumer group protocol (KIP-848) defines it: the group epoch, the target
assignment and its epoch, and each member's subscription, epoch and current assignment.

Each piece is persisted in `__consumer_offsets` as one of Kafka's coordinator record types (records.py), so
that a new coordinator rebuilds the group from the log: the values here carry Kafka's field names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

TopicPartitions = dict[str, frozenset[int]]  # topic name -> partitions

# Kafka's special member epochs of a ConsumerGroupHeartbeat.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2


class MemberState(StrEnum):
    """Kafka's MemberState: where a member is in its reconciliation towards its target assignment."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # must give up partitions before it moves on
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waits for partitions others still own


class ConsumerGroupState(StrEnum):
    """Kafka's ConsumerGroupState (ListGroups, ConsumerGroupDescribe)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def encode_partitions(tps: TopicPartitions) -> list[list[Any]]:
    return [[t, sorted(ps)] for t, ps in sorted(tps.items()) if ps]


def decode_partitions(rows: Any) -> TopicPartitions:
    return {str(t): frozenset(int(p) for p in ps) for t, ps in rows or [] if ps}


def total(tps: TopicPartitions) -> int:
    return sum(len(ps) for ps in tps.values())


def minus(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def intersect(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: ps & b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def union(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in set(a) | set(b)}
    return {t: ps for t, ps in out.items() if ps}


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    # Reconciliation (Kafka's ConsumerGroupCurrentMemberAssignment)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)
    # A classic-protocol member of a consumer group (Kafka 4's online migration): its JoinGroup protocols and
    # session timeout; it keeps speaking JoinGroup / SyncGroup / Heartbeat (None: a consumer-protocol member).
    classic_protocols: list[tuple[str, bytes]] | None = None
    classic_session_timeout_ms: int = 0
    # Not persisted: the session timer restarts when a coordinator loads the group.
    last_heartbeat_ms: int = 0
    revocation_deadline_ms: int | None = None  # the rebalance timeout, while it has partitions to give up

    def subscription_value(self) -> dict[str, Any]:
        """ConsumerGroupMemberMetadata's value (record type 5)."""
        return {
            "instance_id": self.instance_id,
            "rack_id": self.rack_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "subscribed_topic_names": list(self.subscribed_topic_names),
            "subscribed_topic_regex": self.subscribed_topic_regex,
            "server_assignor": self.server_assignor,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "classic_member_metadata": None
            if self.classic_protocols is None
            else {
                "session_timeout_ms": self.classic_session_timeout_ms,
                "supported_protocols": [[n, m] for n, m in self.classic_protocols],
            },
        }

    def load_subscription(self, v: dict[str, Any]) -> None:
        self.instance_id = v.get("instance_id")
        self.rack_id = v.get("rack_id")
        self.client_id = str(v.get("client_id") or "")
        self.client_host = str(v.get("client_host") or "")
        self.subscribed_topic_names = tuple(v.get("subscribed_topic_names") or ())
        self.subscribed_topic_regex = v.get("subscribed_topic_regex")
        self.server_assignor = v.get("server_assignor")
        self.rebalance_timeout_ms = int(v.get("rebalance_timeout_ms") or 300000)
        classic = v.get("classic_member_metadata")
        if isinstance(classic, dict):
            self.classic_protocols = [(str(n), bytes(m)) for n, m in classic.get("supported_protocols") or []]
            self.classic_session_timeout_ms = int(classic.get("session_timeout_ms") or 0)

    def assignment_value(self) -> dict[str, Any]:
        """ConsumerGroupCurrentMemberAssignment's value (record type 8)."""
        return {
            "member_epoch": self.member_epoch,
            "previous_member_epoch": self.previous_member_epoch,
            "state": self.state.value,
            "assigned_partitions": encode_partitions(self.assigned),
            "partitions_pending_revocation": encode_partitions(self.pending_revocation),
        }

    def load_assignment(self, v: dict[str, Any]) -> None:
        self.member_epoch = int(v.get("member_epoch", 0))
        self.previous_member_epoch = int(v.get("previous_member_epoch", 0))
        self.state = MemberState(v.get("state") or MemberState.STABLE.value)
        self.assigned = decode_partitions(v.get("assigned_partitions"))
        self.pending_revocation = decode_partitions(v.get("partitions_pending_revocation"))


@dataclass(slots=True)
class ConsumerGroup:
    group_epoch: int = 0
    target_epoch: int = 0  # Kafka's target assignment epoch
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, TopicPartitions] = field(default_factory=dict)  # member -> its target assignment
    # What the last target assignment was computed from: a change of it bumps the group epoch.
    subscribed_metadata: tuple[tuple[str, int], ...] = ()
    assignor: str = ""
    # (topic, partition) -> epoch of the member holding it (assigned, or not yet revoked): Kafka's
    # currentPartitionEpoch; a partition is free for its next owner only once it is absent here.
    partition_epochs: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)

    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.target_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.target_epoch or m.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def release(self, m: ConsumerMember) -> None:
        """Forget what `m` holds in the partition epochs (before its assignment changes, or it leaves)."""
        for tps in (m.assigned, m.pending_revocation):
            for t, ps in tps.items():
                for p in ps:
                    if self.partition_epochs.get((t, p), ("",))[0] == m.member_id:
                        del self.partition_epochs[(t, p)]

    def hold(self, m: ConsumerMember) -> None:
        for tps in (m.assigned, m.pending_revocation):
            for t, ps in tps.items():
                for p in ps:
                    self.partition_epochs[(t, p)] = (m.member_id, m.member_epoch)

    def rebuild_partition_epochs(self) -> None:
        self.partition_epochs.clear()
        for m in self.members.values():
            self.hold(m)

    def subscribed_topics(self) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out |= set(m.subscribed_topic_names)
        return out
