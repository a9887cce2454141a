"""ConsumerGroupLogic: Kafka's consumer group protocol (KIP-848) as a sans-IO state machine.

The classic protocol stops the world: every member rejoins and the leader assigns. Here the coordinator
assigns (a server-side assignor, broker/group/assignors.py) and each member moves towards its target
assignment on its own, one heartbeat at a time, without the others stopping:

- A change of the group (a member joins, leaves or changes its subscription; a subscribed topic gains
  partitions) bumps the group epoch. The next heartbeat computes a new target assignment for that epoch.
- A member whose epoch is behind the target epoch is reconciled (Kafka's CurrentAssignmentBuilder): it is
  first told to give up the partitions it keeps no longer (UNREVOKED_PARTITIONS, same epoch); once it says
  it no longer owns them it moves to the target epoch and gets the partitions that are free. Partitions still
  owned by another member (not yet revoked there) are withheld until they are released
  (UNRELEASED_PARTITIONS), so a partition never has two owners.
- A member that misses heartbeats for the session timeout, or does not revoke within its rebalance timeout,
  is fenced: removed, and its partitions go to the others with the next group epoch.

Requests and ticks go in with `now_ms`; Reply and Append come out (broker/group/outputs.py). The classic
logic (broker/group/logic.py) owns the groups, one per id of either kind, and routes to this. Every state
change is written to __consumer_offsets as Kafka's coordinator records (records.py) before the heartbeat that
caused it is answered, so a new coordinator loads the group with its epochs and assignments, and members
carry on without rejoining.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import re2  # type: ignore[import-untyped]  # google-re2: KIP-848's regexes are RE2's, matched in linear time

from broker.group.assignors import ASSIGNORS, assignor_name
from broker.group.consumer_state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicPartitions,
    decode_partitions,
    encode_partitions,
    intersect,
    minus,
    union,
)
from broker.group.migration import MigrationError, as_assignment, by_topic, upgrade
from broker.group.outputs import Append, Output, Reply
from broker.group.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupKey,
    Key,
)
from broker.group.state import Group, GroupState
from net.consumer_protocol import Subscription
from net.errors import ErrorCode

Records = list[tuple[Key, dict[str, Any] | None]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """Kafka's group.consumer.* broker settings."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default


@dataclass(slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat, with topics by name (the API layer maps Kafka's topic ids)."""

    group_id: str
    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1  # -1: unchanged
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None  # None: unchanged since the last heartbeat
    member_id_from_client: bool = True  # v1+ (KIP-1082); v0 lets the coordinator make one


@dataclass(slots=True)
class HeartbeatResult:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: not sent (unchanged)


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class _PendingAppend:
    token: Any
    partition: int
    result: HeartbeatResult | dict[str, Any] | None = field(default=None)  # a classic JoinGroup's: a dict


def _classic_err(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message}


def _key(record_type: int, group: str, member: str | None = None) -> ConsumerGroupKey:
    return ConsumerGroupKey(record_type, group, member)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is the member's error (INVALID_REGULAR_EXPRESSION), not a log line


class ConsumerGroupLogic:
    def __init__(self, groups: dict[str, Group], ids: Iterator[int], config: ConsumerGroupConfig) -> None:
        self.groups = groups  # shared with the classic logic: one group per id, of either kind
        self.config = config
        self._ids = ids
        self._appends: dict[int, _PendingAppend] = {}
        self._regexes: dict[str, Any] = {}  # pattern -> compiled RE2
        # Each group's consumer.session.timeout.ms / consumer.heartbeat.interval.ms (its GroupConfig), else the
        # broker's group.consumer.* (the server wires the group configs in: `use_group_configs`).
        self.session_timeout_of: Callable[[str], int] = lambda _g: config.session_timeout_ms
        self.heartbeat_interval_of: Callable[[str], int] = lambda _g: config.heartbeat_interval_ms

    def use_group_configs(
        self, session_timeout_of: Callable[[str], int], heartbeat_interval_of: Callable[[str], int]
    ) -> None:
        self.session_timeout_of, self.heartbeat_interval_of = session_timeout_of, heartbeat_interval_of

    # --- ConsumerGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(
        self, token: Any, partition: int, hb: Heartbeat, topics: Mapping[str, int], now_ms: int
    ) -> list[Output]:
        """`topics`: every topic's partition count, from the broker's metadata."""
        records: Records = []
        try:
            result = self._heartbeat(partition, hb, topics, now_ms, records)
        except HeartbeatError as e:
            result = HeartbeatResult(int(e.code), str(e), hb.member_id or None, -1 if e.code else 0)
        if not records:
            return [Reply(token, result)]
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend(token, partition, result)
        return [Append(aid, partition, records)]

    def _heartbeat(
        self, partition: int, hb: Heartbeat, topics: Mapping[str, int], now_ms: int, records: Records
    ) -> HeartbeatResult:
        self._validate(hb)
        gid = hb.group_id
        g = self._group(partition, gid, hb.member_epoch, now_ms, records)
        cg = g.consumer
        assert cg is not None
        if hb.member_epoch == LEAVE_EPOCH or hb.member_epoch == LEAVE_STATIC_EPOCH:
            return self._leave(g, hb, now_ms, records)
        bump = False
        if hb.member_epoch == JOIN_EPOCH:
            m, bump = self._join(g, hb, now_ms, records)
        else:
            known = cg.members.get(hb.member_id)
            if known is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {hb.member_id} is not in group {gid}")
            m = known
            if hb.instance_id is not None and m.instance_id not in (None, hb.instance_id):
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID, f"instance {hb.instance_id} is another member's")
            self._check_epoch(m, hb)
        m.last_heartbeat_ms = now_ms
        bump |= self._update_subscription(g, m, hb, records, bump)
        before = self._advance(g, m, bump, hb.owned, topics, now_ms, records)
        full = hb.member_epoch == JOIN_EPOCH or (
            hb.rebalance_timeout_ms != -1 and hb.subscribed_topic_names is not None and hb.owned is not None
        )
        return HeartbeatResult(
            member_id=m.member_id,
            member_epoch=m.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_of(g.group_id),
            assignment=dict(m.assigned) if full or before != m.assigned else None,
        )

    def _advance(
        self,
        g: Group,
        m: ConsumerMember,
        bump: bool,
        owned: TopicPartitions | None,
        topics: Mapping[str, int],
        now_ms: int,
        records: Records,
    ) -> TopicPartitions:
        """A new group epoch if asked or if a subscribed topic appeared, went or gained partitions; a new target
        assignment if the epoch moved; then `m` one step towards its target. Returns what `m` had before."""
        cg = g.consumer
        assert cg is not None
        metadata = self._subscribed_metadata(cg, topics)
        if metadata != cg.subscribed_metadata:
            cg.subscribed_metadata = metadata
            bump = True
        if bump:
            cg.group_epoch += 1
            records.append((_key(CONSUMER_GROUP_METADATA, g.group_id), self._metadata_value(cg)))
        if cg.group_epoch > cg.target_epoch:
            self._assign(g, topics, records)
        before = (m.member_epoch, m.state, m.assigned, m.pending_revocation)
        self._reconcile(g, m, owned, now_ms)
        if before != (m.member_epoch, m.state, m.assigned, m.pending_revocation):
            key = _key(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id)
            records.append((key, m.assignment_value()))
        return before[2]

    def _validate(self, hb: Heartbeat) -> None:
        """Kafka's checks of a heartbeat's fields (INVALID_REQUEST and the others it names)."""
        if not hb.group_id:
            raise HeartbeatError(ErrorCode.INVALID_GROUP_ID, "group id must be a non-empty string")
        if hb.instance_id is not None and not hb.instance_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
        if hb.member_epoch < LEAVE_STATIC_EPOCH:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, f"MemberEpoch {hb.member_epoch} is invalid.")
        if not hb.member_id and (hb.member_epoch != JOIN_EPOCH or hb.member_id_from_client):
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if hb.rebalance_timeout_ms < -1 or hb.rebalance_timeout_ms == 0:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, f"RebalanceTimeoutMs {hb.rebalance_timeout_ms} is invalid.")
        if hb.owned is not None and any(p < 0 for ps in hb.owned.values() for p in ps):
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "TopicPartitions names a negative partition.")
        if hb.member_epoch == LEAVE_STATIC_EPOCH and hb.instance_id is None:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be null when leaving as a static member.")
        if hb.member_epoch == JOIN_EPOCH:
            if hb.rebalance_timeout_ms == -1:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if hb.owned is None or hb.owned:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
                msg = "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, msg)
        if hb.subscribed_topic_regex is not None:
            self._regex(hb.subscribed_topic_regex)
        if hb.server_assignor is not None and (
            assignor_name(hb.server_assignor) is None
            or assignor_name(hb.server_assignor) not in (assignor_name(a) for a in self.config.assignors)
        ):
            msg = (
                f"ServerAssignor {hb.server_assignor} is not supported. Supported: {', '.join(self.config.assignors)}."
            )
            raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR, msg)

    def _group(self, partition: int, gid: str, member_epoch: int, now_ms: int, records: Records) -> Group:
        g = self.groups.get(gid)
        if g is not None and g.state == GroupState.DEAD:
            raise HeartbeatError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group is being deleted")
        if g is not None and g.consumer is None:
            if g.members and member_epoch == JOIN_EPOCH:
                # Kafka 4's online upgrade: the classic members become members of a consumer group and keep
                # their partitions; they go on speaking the classic protocol.
                try:
                    records += upgrade(g, self.config.assignors[0])
                except MigrationError as e:
                    raise HeartbeatError(e.code, str(e)) from None
                return g
            if g.members:
                msg = f"Group {gid} is not a consumer group (it has classic-protocol members)."
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, msg)
            if member_epoch != JOIN_EPOCH:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {gid} has no consumer-protocol members")
        if g is None:
            if member_epoch != JOIN_EPOCH:
                # The group is gone (deleted): the member rejoins as a new one.
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {gid} does not exist")
            g = self.groups[gid] = Group(gid, partition, empty_since_ms=now_ms)
        if g.consumer is None:
            # An empty classic group (offsets only) becomes a consumer group, keeping its offsets, as Kafka's does.
            g.consumer = ConsumerGroup(assignor=self.config.assignors[0])
            records.append((_key(CONSUMER_GROUP_METADATA, gid), self._metadata_value(g.consumer)))
        return g

    def _join(self, g: Group, hb: Heartbeat, now_ms: int, records: Records) -> tuple[ConsumerMember, bool]:
        cg = g.consumer
        assert cg is not None
        if hb.instance_id is not None:
            prior = next((x for x in cg.members.values() if x.instance_id == hb.instance_id), None)
            if prior is not None and prior.member_id != hb.member_id:
                if prior.member_epoch != LEAVE_STATIC_EPOCH:
                    msg = (
                        f"Static member {prior.member_id} with instance id {hb.instance_id} "
                        f"is still in group {g.group_id}."
                    )
                    raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID, msg)
                return self._replace_static(g, prior, hb, now_ms, records), False
        m = cg.members.get(hb.member_id) if hb.member_id else None
        if m is not None:
            return m, False  # rejoining with epoch 0 (a lost response, or after fencing itself): it keeps its place
        if len(cg.members) >= self.config.max_size:
            msg = f"The consumer group has reached its maximum capacity of {self.config.max_size} members."
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED, msg)
        m = ConsumerMember(hb.member_id or str(uuid.uuid4()), hb.client_id, hb.client_host, hb.instance_id)
        cg.members[m.member_id] = m
        return m, True

    def _replace_static(
        self, g: Group, prior: ConsumerMember, hb: Heartbeat, now_ms: int, records: Records
    ) -> ConsumerMember:
        """A static member back within its session: the new member id takes the old one's place, epoch and
        partitions, without a new group epoch (Kafka's static membership)."""
        cg = g.consumer
        assert cg is not None
        cg.release(prior)
        del cg.members[prior.member_id]
        records += self._member_tombstones(g.group_id, prior.member_id)
        m = ConsumerMember(hb.member_id or str(uuid.uuid4()), hb.client_id, hb.client_host, hb.instance_id)
        m.load_subscription(prior.subscription_value())
        m.client_id, m.client_host = hb.client_id, hb.client_host
        m.member_epoch = m.previous_member_epoch = prior.previous_member_epoch
        m.state, m.assigned, m.pending_revocation = prior.state, prior.assigned, prior.pending_revocation
        cg.members[m.member_id] = m
        cg.hold(m)
        if prior.member_id in cg.target:
            cg.target[m.member_id] = cg.target.pop(prior.member_id)
            records.append(self._target_record(g.group_id, m.member_id, cg.target[m.member_id]))
        records.append((_key(CONSUMER_GROUP_MEMBER_METADATA, g.group_id, m.member_id), m.subscription_value()))
        records.append((_key(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id), m.assignment_value()))
        return m

    @staticmethod
    def _check_epoch(m: ConsumerMember, hb: Heartbeat) -> None:
        """Kafka's throwIfMemberEpochIsInvalid: a member ahead of us, or behind without the excuse of a lost
        response (its previous epoch, owning no more than it has now), is fenced and must rejoin."""
        if hb.member_epoch > m.member_epoch:
            msg = (
                f"The consumer group member has a greater member epoch ({hb.member_epoch}) than the one known "
                f"by the group coordinator ({m.member_epoch}). The member must abandon all its partitions and rejoin."
            )
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, msg)
        if hb.member_epoch < m.member_epoch:
            lost_response = hb.member_epoch == m.previous_member_epoch and (
                hb.owned is not None and not minus(hb.owned, m.assigned)
            )
            if not lost_response:
                msg = (
                    f"The consumer group member has a smaller member epoch ({hb.member_epoch}) than the one known "
                    f"by the group coordinator ({m.member_epoch}). The member must abandon all its partitions "
                    "and rejoin."
                )
                raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, msg)

    def _update_subscription(self, g: Group, m: ConsumerMember, hb: Heartbeat, records: Records, new: bool) -> bool:
        """Take the heartbeat's changed fields; True if the subscription changed (a new group epoch)."""
        before = m.subscription_value()
        changed = False
        if (
            hb.subscribed_topic_names is not None
            and tuple(sorted(hb.subscribed_topic_names)) != m.subscribed_topic_names
        ):
            m.subscribed_topic_names = tuple(sorted(hb.subscribed_topic_names))
            changed = True
        if hb.subscribed_topic_regex is not None and hb.subscribed_topic_regex != (m.subscribed_topic_regex or ""):
            m.subscribed_topic_regex = hb.subscribed_topic_regex or None
            changed = True
        if hb.server_assignor is not None and hb.server_assignor != m.server_assignor:
            m.server_assignor = hb.server_assignor
            changed = True
        if hb.rebalance_timeout_ms != -1:
            m.rebalance_timeout_ms = hb.rebalance_timeout_ms
        if hb.rack_id is not None:
            m.rack_id = hb.rack_id
        if hb.instance_id is not None:
            m.instance_id = hb.instance_id
        if hb.client_id:
            m.client_id = hb.client_id
        if hb.client_host:
            m.client_host = hb.client_host
        if m.subscription_value() != before or new:
            records.append((_key(CONSUMER_GROUP_MEMBER_METADATA, g.group_id, m.member_id), m.subscription_value()))
        return changed

    def _leave(self, g: Group, hb: Heartbeat, now_ms: int, records: Records) -> HeartbeatResult:
        cg = g.consumer
        assert cg is not None
        m = cg.members.get(hb.member_id)
        if m is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {hb.member_id} is not in group {g.group_id}")
        if hb.member_epoch == LEAVE_STATIC_EPOCH:
            # A static member going away for a while: its partitions wait for it (or for its session to end).
            m.previous_member_epoch, m.member_epoch = m.member_epoch, LEAVE_STATIC_EPOCH
            m.last_heartbeat_ms = now_ms
            records.append(
                (_key(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id), m.assignment_value())
            )
        else:
            records += self._remove(g, m, now_ms)
        return HeartbeatResult(member_id=m.member_id, member_epoch=hb.member_epoch)

    # --- classic members of a consumer group (online migration, broker/group/migration.py) -----------

    def classic_join(
        self,
        token: Any,
        g: Group,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
        topics: Mapping[str, int],
        now_ms: int,
    ) -> list[Output]:
        """A classic member's JoinGroup to a consumer group: one step of its reconciliation, answered at once with
        its member epoch as the generation (it leads nobody: the coordinator assigns)."""
        cg = g.consumer
        assert cg is not None
        m = cg.members.get(member_id) if member_id else None
        if member_id and m is None:
            msg = f"member {member_id} is not in group {g.group_id} (it was removed); rejoin as a new member"
            return [Reply(token, _classic_err(ErrorCode.UNKNOWN_MEMBER_ID, msg))]
        if m is not None and m.classic_protocols is None:
            msg = f"member {member_id} uses the consumer group protocol; it cannot JoinGroup"
            return [Reply(token, _classic_err(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, msg))]
        try:
            sub = Subscription.decode(protocols[0][1])
        except ValueError as e:
            return [Reply(token, _classic_err(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"subscription: {e}"))]
        records: Records = []
        new = m is None
        if m is None:
            if len(cg.members) >= self.config.max_size:
                msg = f"The consumer group has reached its maximum capacity of {self.config.max_size} members."
                return [Reply(token, _classic_err(ErrorCode.GROUP_MAX_SIZE_REACHED, msg))]
            m = ConsumerMember(f"{client_id}-{uuid.uuid4()}", client_id, client_host)
            cg.members[m.member_id] = m
        changed = tuple(sorted(sub.topics)) != m.subscribed_topic_names
        m.subscribed_topic_names = tuple(sorted(sub.topics))
        m.classic_protocols, m.classic_session_timeout_ms = list(protocols), session_timeout_ms
        m.rebalance_timeout_ms, m.last_heartbeat_ms = rebalance_timeout_ms, now_ms
        records.append((_key(CONSUMER_GROUP_MEMBER_METADATA, g.group_id, m.member_id), m.subscription_value()))
        # An eager member revoked everything before it rejoined; a cooperative one names what it still owns.
        self._advance(g, m, new or changed, by_topic(sub.owned), topics, now_ms, records)
        body = {
            "error_code": 0,
            "generation_id": m.member_epoch,
            "protocol_type": "consumer",
            "protocol_name": protocols[0][0],
            "leader": "",
            "member_id": m.member_id,
            "members": [],
        }
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend(token, g.partition, body)
        return [Append(aid, g.partition, records)]

    def classic_sync(self, g: Group, member_id: str, generation: int, now_ms: int) -> dict[str, Any]:
        """A classic member's SyncGroup: the partitions it may own now (never one another member still owns)."""
        m = self._classic_member(g, member_id, generation)
        if isinstance(m, dict):
            return m
        m.last_heartbeat_ms = now_ms
        return {"error_code": 0, "assignment": as_assignment(m.assigned)}

    def classic_heartbeat(self, g: Group, member_id: str, generation: int, now_ms: int) -> dict[str, Any]:
        """REBALANCE_IN_PROGRESS while the member has a reconciliation step to take (it rejoins to take it)."""
        m = self._classic_member(g, member_id, generation)
        if isinstance(m, dict):
            return m
        m.last_heartbeat_ms = now_ms
        cg = g.consumer
        assert cg is not None
        if cg.group_epoch != cg.target_epoch or m.member_epoch != cg.target_epoch or m.state != MemberState.STABLE:
            return _classic_err(ErrorCode.REBALANCE_IN_PROGRESS, "the group's assignment changed; rejoin")
        return {"error_code": 0}

    def classic_leave(self, g: Group, member_ids: list[str], now_ms: int) -> tuple[dict[str, Any], Records]:
        cg = g.consumer
        assert cg is not None
        rows, records = [], []
        for mid in member_ids:
            m = cg.members.get(mid)
            if m is None:
                rows.append([mid, int(ErrorCode.UNKNOWN_MEMBER_ID)])
            else:
                records += self._remove(g, m, now_ms)
                rows.append([mid, 0])
        return {"error_code": 0, "members": rows}, records

    @staticmethod
    def _classic_member(g: Group, member_id: str, generation: int) -> ConsumerMember | dict[str, Any]:
        cg = g.consumer
        assert cg is not None
        m = cg.members.get(member_id)
        if m is None or m.classic_protocols is None:
            return _classic_err(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not a classic member of {g.group_id}"
            )
        if generation != m.member_epoch:
            msg = f"generation {generation} is not member {member_id}'s epoch {m.member_epoch}; rejoin"
            return _classic_err(ErrorCode.ILLEGAL_GENERATION, msg)
        return m

    def downgrade_due(self, g: Group) -> bool:
        """Whether the group's members all speak the classic protocol now (Kafka 4 makes it classic again)."""
        cg = g.consumer
        return cg is not None and bool(cg.members) and all(m.classic_protocols is not None for m in cg.members.values())

    # --- assignment and reconciliation ------------------------------------------------------------

    def _regex(self, pattern: str) -> Any:
        """KIP-848's regexes are RE2/J's, as Kafka matches them: RE2 (google-re2) reads the same syntax (no
        backreferences or lookarounds) and matches in time linear in the topic name, so a member's pattern cannot
        stall the coordinator."""
        rx = self._regexes.get(pattern)
        if rx is None:
            try:
                rx = re2.compile(pattern, _RE2_OPTIONS)
            except re2.error as e:
                why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
                raise HeartbeatError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {why}.",
                ) from None
            if len(self._regexes) > 1000:
                self._regexes.clear()
            self._regexes[pattern] = rx
        return rx

    def _subscribed(self, m: ConsumerMember, topics: Mapping[str, int]) -> frozenset[str]:
        """The existing topics a member subscribes to: by name, and by regex (internal topics never match)."""
        names = {t for t in m.subscribed_topic_names if t in topics}
        if m.subscribed_topic_regex:
            rx = self._regex(m.subscribed_topic_regex)
            names |= {t for t in topics if not t.startswith("__") and rx.fullmatch(t)}
        return frozenset(names)

    def _subscribed_metadata(self, cg: ConsumerGroup, topics: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
        subscribed: set[str] = set()
        for m in cg.members.values():
            subscribed |= self._subscribed(m, topics)
        return tuple(sorted((t, topics[t]) for t in subscribed))

    def _assign(self, g: Group, topics: Mapping[str, int], records: Records) -> None:
        """A new target assignment for the group epoch, with the assignor most members ask for (else the
        configured default)."""
        cg = g.consumer
        assert cg is not None
        votes: dict[str, int] = {}
        for m in cg.members.values():
            if m.server_assignor:
                name = assignor_name(m.server_assignor) or ""
                votes[name] = votes.get(name, 0) + 1
        default = assignor_name(self.config.assignors[0]) or "uniform"
        cg.assignor = max(sorted(votes), key=lambda n: votes[n]) if votes else default
        subs = {mid: self._subscribed(m, topics) for mid, m in cg.members.items()}
        counts = {t: topics[t] for s in subs.values() for t in s}
        target = ASSIGNORS[cg.assignor](subs, counts, cg.target)
        for mid, tps in target.items():
            if cg.target.get(mid) != tps:
                records.append(self._target_record(g.group_id, mid, tps))
        cg.target = target
        cg.target_epoch = cg.group_epoch
        records.append(
            (_key(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, g.group_id), {"assignment_epoch": cg.target_epoch})
        )

    def _reconcile(self, g: Group, m: ConsumerMember, owned: TopicPartitions | None, now_ms: int) -> None:
        """Kafka's CurrentAssignmentBuilder: move `m` one step towards its target assignment."""
        cg = g.consumer
        assert cg is not None
        if m.member_epoch == LEAVE_STATIC_EPOCH:
            return
        if m.state == MemberState.STABLE and m.member_epoch == cg.target_epoch:
            return
        if m.state == MemberState.UNREVOKED_PARTITIONS and self._still_owns(owned, m.pending_revocation):
            return
        target = cg.target.get(m.member_id, {})
        keep = intersect(m.assigned, target)
        revoke = minus(m.assigned, target)
        wanted = minus(target, m.assigned)
        free: dict[str, set[int]] = {}
        unreleased = False
        for t, ps in wanted.items():
            for p in ps:
                holder = cg.partition_epochs.get((t, p))
                if holder is None or holder[0] == m.member_id:
                    free.setdefault(t, set()).add(p)
                else:
                    unreleased = True
        cg.release(m)
        m.previous_member_epoch = m.member_epoch
        if revoke and self._still_owns(owned, revoke):
            # Give these up first, at the same epoch; the next epoch comes once they are revoked.
            m.state, m.assigned, m.pending_revocation = MemberState.UNREVOKED_PARTITIONS, keep, revoke
            m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
        else:
            m.assigned = union(keep, {t: frozenset(ps) for t, ps in free.items()})
            m.pending_revocation = {}
            m.member_epoch = cg.target_epoch
            m.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
            m.revocation_deadline_ms = None
        cg.hold(m)

    @staticmethod
    def _still_owns(owned: TopicPartitions | None, revoked: TopicPartitions) -> bool:
        """Whether the member may still own partitions it must give up (unknown: it did not say)."""
        if owned is None:
            return True
        return bool(intersect(owned, revoked))

    # --- removal, timers --------------------------------------------------------------------------

    def _remove(self, g: Group, m: ConsumerMember, now_ms: int) -> Records:
        """Fence or remove a member: its records go, and the group gets a new epoch (its partitions move)."""
        cg = g.consumer
        assert cg is not None
        cg.release(m)
        cg.members.pop(m.member_id, None)
        cg.target.pop(m.member_id, None)
        cg.group_epoch += 1
        if not cg.members:
            g.empty_since_ms = now_ms
        return [
            *self._member_tombstones(g.group_id, m.member_id),
            (_key(CONSUMER_GROUP_METADATA, g.group_id), self._metadata_value(cg)),
        ]

    @staticmethod
    def _member_tombstones(gid: str, mid: str) -> Records:
        return [
            (_key(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, mid), None),
            (_key(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, mid), None),
            (_key(CONSUMER_GROUP_MEMBER_METADATA, gid, mid), None),
        ]

    def tick(self, now_ms: int, loaded: set[int]) -> list[Output]:
        """Fence members whose session ended (no heartbeat for group.consumer.session.timeout.ms) or that did
        not revoke within their rebalance timeout."""
        out: list[Output] = []
        for g in list(self.groups.values()):
            cg = g.consumer
            if cg is None or g.partition not in loaded:
                continue
            records: Records = []
            group_session = self.session_timeout_of(g.group_id)
            for m in list(cg.members.values()):
                session = m.classic_session_timeout_ms if m.classic_protocols is not None else None
                expired = now_ms - m.last_heartbeat_ms > (session or group_session)
                stuck = m.revocation_deadline_ms is not None and now_ms > m.revocation_deadline_ms
                if expired or stuck:
                    records += self._remove(g, m, now_ms)
            if records:
                aid = next(self._ids)
                self._appends[aid] = _PendingAppend(None, g.partition)
                out.append(Append(aid, g.partition, records))
        return out

    def on_append_done(self, append_id: int, error: int) -> list[Output] | None:
        """None: not one of ours."""
        pa = self._appends.pop(append_id, None)
        if pa is None:
            return None
        if pa.token is None:
            return []
        if error:
            # The state may not be durable: the member retries (the coordinator may have moved).
            msg = f"the group's state could not be written: {ErrorCode(error).name}"
            body = _classic_err(ErrorCode(error), msg) if isinstance(pa.result, dict) else HeartbeatResult(error, msg)
            return [Reply(pa.token, body)]
        return [Reply(pa.token, pa.result)]

    def unload(self, partition: int) -> list[Output]:
        """Heartbeats of the partition's groups waiting for their writes: told to find the new coordinator (the
        write may still land; the member's next heartbeat there says)."""
        out: list[Output] = []
        for pa in self._appends.values():
            if pa.partition == partition and pa.token is not None:
                msg = "the group coordinator moved"
                code = ErrorCode.NOT_COORDINATOR
                body = _classic_err(code, msg) if isinstance(pa.result, dict) else HeartbeatResult(int(code), msg)
                out.append(Reply(pa.token, body))
                pa.token = None
        return out

    # --- offsets of consumer-protocol members -----------------------------------------------------

    @staticmethod
    def validate_offset_request(g: Group, member_id: str, member_epoch: int) -> tuple[ErrorCode, str] | None:
        """Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch: a member commits (and fetches)
        with its current member epoch; STALE_MEMBER_EPOCH otherwise. None: allowed."""
        cg = g.consumer
        assert cg is not None
        if member_epoch < 0 and not member_id:
            if cg.members:
                return (
                    ErrorCode.NON_EMPTY_GROUP,
                    f"group {g.group_id} has active members; stop them before changing its offsets",
                )
            return None
        m = cg.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {g.group_id}"
        if member_epoch != m.member_epoch and m.classic_protocols is not None:
            # A classic member's generation is its member epoch; it knows ILLEGAL_GENERATION (it rejoins).
            return ErrorCode.ILLEGAL_GENERATION, f"generation {member_epoch} is not the member's epoch {m.member_epoch}"
        if member_epoch != m.member_epoch:
            return (
                ErrorCode.STALE_MEMBER_EPOCH,
                f"The received member epoch {member_epoch} does not match the expected member epoch {m.member_epoch}.",
            )
        return None

    # --- loading ----------------------------------------------------------------------------------

    def load_record(self, g: Group, key: ConsumerGroupKey, value: dict[str, Any] | None, now_ms: int) -> None:
        """Replay one of a consumer group's records (in offset order: the latest per key wins)."""
        if key.record_type == CONSUMER_GROUP_METADATA:
            if value is None:
                g.consumer = None
                return
            if g.consumer is None:
                g.consumer = ConsumerGroup(assignor=self.config.assignors[0])
            g.consumer.group_epoch = int(value.get("epoch", 0))
            g.consumer.subscribed_metadata = tuple((str(t), int(n)) for t, n in value.get("subscribed_metadata") or [])
            return
        if g.consumer is None:
            if value is None:
                return  # a tombstone of a group that is not a consumer group (any more)
            g.consumer = ConsumerGroup(assignor=self.config.assignors[0])
        cg = g.consumer
        if key.record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            cg.target_epoch = int((value or {}).get("assignment_epoch", 0))
            return
        mid = key.member or ""
        if key.record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                cg.target.pop(mid, None)
            else:
                cg.target[mid] = decode_partitions(value.get("topic_partitions"))
            return
        if value is None:
            if key.record_type == CONSUMER_GROUP_MEMBER_METADATA:
                cg.members.pop(mid, None)
            return
        m = cg.members.get(mid)
        if m is None:
            m = cg.members[mid] = ConsumerMember(mid, last_heartbeat_ms=now_ms)
        if key.record_type == CONSUMER_GROUP_MEMBER_METADATA:
            m.load_subscription(value)
        elif key.record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            m.load_assignment(value)

    @staticmethod
    def finish_load(g: Group, now_ms: int) -> None:
        """After the replay: members get a full session from now to reach us, and the partition owners
        are rebuilt from the members' current assignments."""
        cg = g.consumer
        if cg is None:
            return
        for m in cg.members.values():
            m.last_heartbeat_ms = now_ms
            if m.state == MemberState.UNREVOKED_PARTITIONS:
                m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
        cg.rebuild_partition_epochs()
        if cg.members:
            g.empty_since_ms = now_ms

    # --- records ----------------------------------------------------------------------------------

    @staticmethod
    def _metadata_value(cg: ConsumerGroup) -> dict[str, Any]:
        """ConsumerGroupMetadata's value (type 3): the epoch, and what its assignment was computed from."""
        return {"epoch": cg.group_epoch, "subscribed_metadata": [list(x) for x in cg.subscribed_metadata]}

    @staticmethod
    def _target_record(gid: str, mid: str, tps: TopicPartitions) -> tuple[Key, dict[str, Any] | None]:
        return (
            _key(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, mid),
            {"topic_partitions": encode_partitions(tps)},
        )

    @staticmethod
    def tombstones(g: Group) -> Records:
        """A deleted group's records (its offsets are the caller's)."""
        cg = g.consumer
        if cg is None:
            return []
        out: Records = []
        for mid in cg.members:
            out += ConsumerGroupLogic._member_tombstones(g.group_id, mid)
        out.append((_key(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, g.group_id), None))
        out.append((_key(CONSUMER_GROUP_METADATA, g.group_id), None))
        return out
