"""Online migration between the group protocols, as Kafka 4 does it (`group.consumer.migration.policy`
bidirectional): a consumer-protocol member joining a classic group upgrades it to a consumer group, and the last
consumer-protocol member leaving a group of classic members downgrades it back; the members keep their
partitions and the group its offsets across both.

In a consumer group, a classic member keeps speaking JoinGroup / SyncGroup / Heartbeat: its generation is its
member epoch, a JoinGroup is its reconciliation step (its subscription's owned partitions say what it revoked),
SyncGroup answers its current assignment, and a Heartbeat answers REBALANCE_IN_PROGRESS while it has a step to
take (broker/group/consumer_logic.py).
"""

from __future__ import annotations

from broker.group.consumer_state import ConsumerGroup, ConsumerMember, TopicPartitions
from broker.group.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupKey,
    GroupKey,
    Key,
)
from broker.group.state import Group, GroupState, Member
from net.consumer_protocol import PROTOCOL_TYPE, Assignment, Subscription
from net.errors import ErrorCode

Records = list[tuple[Key, dict | None]]  # type: ignore[type-arg]


class MigrationError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def by_topic(tps: frozenset[tuple[str, int]]) -> TopicPartitions:
    out: dict[str, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def as_assignment(tps: TopicPartitions) -> bytes:
    return Assignment(frozenset((t, p) for t, ps in tps.items() for p in ps)).encode()


def upgrade(g: Group, assignor: str) -> Records:
    """The classic group `g` (with members) as a consumer group: its generation is the group epoch and the target
    assignment epoch, each member's assignment its target and current one. Returns the records to write."""
    if g.protocol_type != PROTOCOL_TYPE:
        msg = f"Cannot upgrade classic group {g.group_id} to consumer group: its protocol type is {g.protocol_type}."
        raise MigrationError(ErrorCode.GROUP_ID_NOT_FOUND, msg)
    if g.state != GroupState.STABLE:
        # Retriable: the member tries again once the classic rebalance is over.
        msg = f"Cannot upgrade classic group {g.group_id} to consumer group while it is {g.state.value}."
        raise MigrationError(ErrorCode.COORDINATOR_NOT_AVAILABLE, msg)
    cg = ConsumerGroup(group_epoch=g.generation, target_epoch=g.generation, assignor=assignor)
    for m in g.members.values():
        try:
            sub = Subscription.decode(m.metadata_for(g.protocol))
            assigned = by_topic(Assignment.decode(m.assignment).partitions)
        except ValueError as e:
            raise MigrationError(ErrorCode.GROUP_ID_NOT_FOUND, f"member {m.member_id}'s metadata: {e}") from None
        cm = ConsumerMember(
            m.member_id,
            m.client_id,
            m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(sub.topics)),
            member_epoch=g.generation,
            previous_member_epoch=g.generation,
            assigned=assigned,
            classic_protocols=list(m.protocols),
            classic_session_timeout_ms=m.session_timeout_ms,
            last_heartbeat_ms=m.last_heartbeat_ms,
        )
        cg.members[cm.member_id] = cm
        cg.target[cm.member_id] = assigned
    cg.rebuild_partition_epochs()
    g.consumer, g.members, g.state, g.leader = cg, {}, GroupState.EMPTY, None
    gid = g.group_id
    records: Records = [(GroupKey(gid), g.to_value())]  # the classic record without members (offsets stay)
    records.append((ConsumerGroupKey(CONSUMER_GROUP_METADATA, gid), {"epoch": cg.group_epoch}))
    for cm in cg.members.values():
        records.append((ConsumerGroupKey(CONSUMER_GROUP_MEMBER_METADATA, gid, cm.member_id), cm.subscription_value()))
        records.append(
            (
                ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, cm.member_id),
                {"topic_partitions": [[t, sorted(ps)] for t, ps in sorted(cm.assigned.items())]},
            )
        )
        records.append(
            (ConsumerGroupKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, cm.member_id), cm.assignment_value())
        )
    records.append(
        (ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gid), {"assignment_epoch": cg.target_epoch})
    )
    return records


def downgrade(g: Group, now_ms: int) -> None:
    """A consumer group whose members all speak the classic protocol, as a classic group at the group epoch,
    each member with its current assignment; the caller writes it and starts a rebalance (the members rejoin
    as classic members of a classic group)."""
    cg = g.consumer
    assert cg is not None and cg.members and all(m.classic_protocols is not None for m in cg.members.values())
    g.members = {
        m.member_id: Member(
            m.member_id,
            m.client_id,
            m.client_host,
            m.classic_session_timeout_ms,
            m.rebalance_timeout_ms,
            list(m.classic_protocols or []),
            now_ms,
            as_assignment(m.assigned),
        )
        for m in cg.members.values()
    }
    g.consumer = None
    g.generation, g.protocol_type = cg.group_epoch, PROTOCOL_TYPE
    g.protocol = g.select_protocol()
    g.leader = next(iter(g.members))
    g.state = GroupState.STABLE
