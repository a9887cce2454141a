"""GroupCoordinatorLogic: Kafka's classic consumer-group protocol as a sans-IO state machine.

Requests and timer ticks go in with `now_ms`; replies and appends to `__consumer_offsets` come out.
No sockets, clocks or files: broker/group/coordinator.py drives it (and tests drive it directly), so
every rebalance decision is deterministic. A request that has to wait (JoinGroup until the rebalance
completes, SyncGroup until the leader's assignment is durable, OffsetCommit until its record is
committed) carries a `token` that comes back in the `Reply` that answers it.

State changes that must survive a coordinator move are written before they are acknowledged: the
group's generation and assignment (on SyncGroup), committed offsets (on OffsetCommit), deletions.
Everything else (who is waiting, heartbeat times) is rebuilt: members keep heartbeating the new
coordinator, or rejoin.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

from broker.group.consumer_logic import ConsumerGroupConfig, ConsumerGroupLogic, Heartbeat
from broker.group.migration import downgrade
from broker.group.outputs import Append, Output, Reply
from broker.group.records import SHARE_GROUP_TYPES, ConsumerGroupKey, GroupKey, Key, OffsetKey
from broker.group.share_membership import ShareGroupMembership
from broker.group.state import Group, GroupState, Member, OffsetAndMetadata
from net.consumer_protocol import PROTOCOL_TYPE, Assignment, Subscription
from net.errors import ErrorCode

# Kafka's GroupCoordinator logs the same moments at INFO: a rebalance starting, a generation formed, a member
# timed out. What the logic decides is visible without a clock or a socket.
log = logging.getLogger("kafkalite.group")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's group.* and offsets.* broker settings."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)  # group.consumer.*


PARTITION_LOADING = "loading"
PARTITION_LOADED = "loaded"


def _err(code: ErrorCode, message: str = "", **extra: Any) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message or None, **extra}


@dataclass(slots=True)
class _PendingAppend:
    kind: str  # "sync" | "commit" | "delete" | "delete_offsets" | "expire" | "records" | "static"
    group_id: str
    generation: int = -1
    token: Any = None
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # "records" (a share group's change, `write`): its partition, and the answer once the records are written;
    # "static" (`_rejoin_static`): the static member's new id
    partition: int = -1
    result: Any = None


class GroupCoordinatorLogic:
    def __init__(self, config: GroupConfig | None = None) -> None:
        self.config = config or GroupConfig()
        self.groups: dict[str, Group] = {}
        self.partitions: dict[int, str] = {}  # offsets partition -> loading | loaded
        self._appends: dict[int, _PendingAppend] = {}
        self._ids = itertools.count(1)
        # The consumer group protocol (KIP-848): groups of type "consumer", in the same `groups`.
        self.consumer = ConsumerGroupLogic(self.groups, self._ids, self.config.consumer)
        # Share groups (KIP-932): their own ids (one group type per id), the same records, load and writes.
        # ShareGroupApis sets each group's session timeout (its share.session.timeout.ms).
        self.share = ShareGroupMembership(self.config.consumer.session_timeout_ms)

    # --- partition ownership (the driver follows the leadership of __consumer_offsets) -----------

    def begin_loading(self, partition: int) -> list[Output]:
        out = self.unload(partition)
        self.partitions[partition] = PARTITION_LOADING
        return out

    def load(self, partition: int, records: list[tuple[Key, dict[str, Any] | None]], now_ms: int) -> None:
        """Replay the partition's records in offset order; the latest per key wins."""
        for g in [g for g in self.groups.values() if g.partition == partition]:
            del self.groups[g.group_id]
        self.share.unload(partition)
        for key, value in records:
            if isinstance(key, OffsetKey):
                g = self._group_for_load(key.group, partition, now_ms)
                if value is None:
                    g.offsets.pop((key.topic, key.partition), None)
                else:
                    g.offsets[(key.topic, key.partition)] = OffsetAndMetadata.from_value(value)
            elif isinstance(key, GroupKey):
                if value is None:
                    self.groups.pop(key.group, None)
                else:
                    self._group_for_load(key.group, partition, now_ms).load_value(value, now_ms)
            elif isinstance(key, ConsumerGroupKey) and key.record_type in SHARE_GROUP_TYPES:
                try:
                    self.share.load_record(partition, key, value, now_ms)
                except (TypeError, ValueError, KeyError, AttributeError) as e:
                    # a value this version cannot read: skipped (as an unknown key is), never a load that stalls
                    log.warning("skipped a share group record of %s it cannot read: %r (%s)", key.group, value, e)
            elif isinstance(key, ConsumerGroupKey):
                self.consumer.load_record(self._group_for_load(key.group, partition, now_ms), key, value, now_ms)
        for g in self.groups.values():
            if g.partition == partition:
                self.consumer.finish_load(g, now_ms)
        self.share.finish_load(partition, now_ms)
        self.partitions[partition] = PARTITION_LOADED

    def _group_for_load(self, group_id: str, partition: int, now_ms: int) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id, partition, empty_since_ms=now_ms)
        return g

    def unload(self, partition: int) -> list[Output]:
        """We no longer lead `partition`: drop its groups, and tell parked requests to find the new coordinator."""
        self.partitions.pop(partition, None)
        out: list[Output] = []
        for g in [g for g in self.groups.values() if g.partition == partition]:
            for m in g.members.values():
                for tok in (m.join_token, m.sync_token):
                    if tok is not None:
                        out.append(Reply(tok, _err(ErrorCode.NOT_COORDINATOR, "the group coordinator moved")))
            del self.groups[g.group_id]
        out += self.consumer.unload(partition)
        self.share.unload(partition)
        for pa in list(self._appends.values()):
            if pa.kind == "records" and pa.partition != partition:
                continue  # a share group's write on a partition still ours
            if pa.group_id not in self.groups and pa.token is not None:
                # The append may still commit; the client retries on the new coordinator either way.
                out.append(Reply(pa.token, self._append_failed_body(pa, ErrorCode.NOT_COORDINATOR)))
                pa.token = None
        return out

    def check_owner(self, partition: int) -> dict[str, Any] | None:
        """An error body if requests for groups on `partition` cannot be served here."""
        st = self.partitions.get(partition)
        if st is None:
            return _err(ErrorCode.NOT_COORDINATOR, "this broker is not the group's coordinator")
        if st == PARTITION_LOADING:
            return _err(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the coordinator is loading the group's offsets")
        return None

    # --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------

    def join(
        self,
        token: Any,
        partition: int,
        group_id: str,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        now_ms: int,
        topics: dict[str, int] | None = None,
        conn: str = "",
        group_instance_id: str | None = None,
    ) -> list[Output]:
        """`topics` (topic -> partition count): for a classic member joining a consumer group. `conn` names the
        client connection the request came over (see `_drop_replaced`). `group_instance_id`: a static member
        (KIP-345, JoinGroup v5+; see `_rejoin_static`)."""
        if not group_id:
            return [Reply(token, _err(ErrorCode.INVALID_GROUP_ID, "group id must be a non-empty string"))]
        c = self.config
        if not c.min_session_timeout_ms <= session_timeout_ms <= c.max_session_timeout_ms:
            msg = (
                f"session.timeout.ms={session_timeout_ms} is outside the broker's "
                f"[group.min.session.timeout.ms={c.min_session_timeout_ms}, "
                f"group.max.session.timeout.ms={c.max_session_timeout_ms}]"
            )
            return [Reply(token, _err(ErrorCode.INVALID_SESSION_TIMEOUT, msg))]
        if not protocols:
            return [Reply(token, _err(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "no assignment protocols given"))]
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id, partition, empty_since_ms=now_ms)
        if g.state == GroupState.DEAD:
            return [Reply(token, _err(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group is being deleted"))]
        if g.consumer is not None:
            if g.consumer.members:
                if protocol_type != PROTOCOL_TYPE:
                    msg = f"group {group_id} is a consumer group; protocol type {protocol_type!r} cannot join it"
                    return [Reply(token, _err(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, msg))]
                # A classic member of a consumer group (Kafka 4's online migration, broker/group/migration.py).
                return self.consumer.classic_join(
                    token, g, member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                    protocols, topics or {}, now_ms,
                )  # fmt: skip
            # An empty consumer group becomes a classic one, keeping its offsets (as Kafka's does).
            out0: list[Output] = [self._convert_to_classic(g)]
        else:
            out0 = []
        others = {k: v for k, v in g.members.items() if k != member_id}
        probe = Group(group_id, partition, protocol_type=g.protocol_type, members=others)
        if not probe.supports(protocol_type, protocols):
            msg = f"protocol type {protocol_type!r} or strategies {[n for n, _ in protocols]} match no other member's"
            return [Reply(token, _err(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, msg))]
        out: list[Output] = []
        out += out0
        if group_instance_id:
            fenced = _fenced(g, group_instance_id, member_id) if member_id else None
            if fenced is not None:
                return [Reply(token, fenced)]
            prior = g.static_member(group_instance_id) if not member_id else None
            if prior is not None:
                return out + self._rejoin_static(
                    token, g, prior, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocols,
                    now_ms, conn,
                )  # fmt: skip
        m = g.members.get(member_id) if member_id else None
        if member_id and m is None:
            msg = f"member {member_id} is not in group {group_id} (it was removed); rejoin as a new member"
            return [Reply(token, _err(ErrorCode.UNKNOWN_MEMBER_ID, msg))]
        if m is None:
            out += self._drop_replaced(g, conn)
            member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"  # Kafka names a static member so too
            m = Member(member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocols, now_ms)
            m.group_instance_id = group_instance_id or None
            g.members[member_id] = m
            g.protocol_type = protocol_type
        else:
            if m.join_token is not None:  # a retry of a parked join replaces it
                out.append(Reply(m.join_token, _err(ErrorCode.REBALANCE_IN_PROGRESS, "superseded by a newer join")))
            unchanged = m.protocols == protocols
            m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = (
                protocols,
                session_timeout_ms,
                rebalance_timeout_ms,
            )
            m.last_heartbeat_ms = now_ms
            if g.state == GroupState.STABLE and unchanged and member_id != g.leader:
                m.conn = conn or m.conn
                # Nothing changed for this follower: hand back the current generation (Kafka does the same).
                return out + [Reply(token, self._join_body(g, m))]
        m.join_token = token
        m.conn = conn or m.conn
        if g.state == GroupState.PREPARING_REBALANCE:
            return out + self._maybe_complete_join(g, now_ms)
        return out + self._prepare_rebalance(g, now_ms)

    def sync(
        self,
        token: Any,
        group_id: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
        now_ms: int,
        group_instance_id: str | None = None,
    ) -> list[Output]:
        g = self.groups.get(group_id)
        if g is not None and g.consumer is not None:
            return [Reply(token, self.consumer.classic_sync(g, member_id, generation, now_ms))]
        fenced = _fenced(g, group_instance_id, member_id)
        if fenced is not None:
            return [Reply(token, fenced)]
        m = g.members.get(member_id) if g is not None else None
        if g is None or m is None:
            return [Reply(token, _err(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group_id}"))]
        if generation != g.generation:
            return [Reply(token, self._illegal_generation(g, generation))]
        m.last_heartbeat_ms = now_ms
        if g.state == GroupState.PREPARING_REBALANCE:
            return [Reply(token, _err(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing; rejoin"))]
        if g.state == GroupState.STABLE:
            return [Reply(token, {"error_code": 0, "assignment": m.assignment})]
        if g.state != GroupState.COMPLETING_REBALANCE:
            return [Reply(token, _err(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} is {g.state.value}"))]
        out: list[Output] = []
        if m.sync_token is not None:
            out.append(Reply(m.sync_token, _err(ErrorCode.REBALANCE_IN_PROGRESS, "superseded by a newer sync")))
        m.sync_token = token
        if member_id != g.leader:
            return out
        unknown = [mid for mid in assignments if mid not in g.members]
        if unknown:
            return out + self._fail_syncs(g, ErrorCode.UNKNOWN_MEMBER_ID, f"assignment names unknown members {unknown}")
        for mid, member in g.members.items():
            member.assignment = assignments.get(mid, b"")
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("sync", group_id, g.generation)
        return out + [Append(aid, g.partition, [(GroupKey(group_id), g.to_value())])]

    def heartbeat(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        now_ms: int,
        conn: str = "",
        group_instance_id: str | None = None,
    ) -> dict[str, Any]:
        g = self.groups.get(group_id)
        if g is not None and g.consumer is not None:
            return self.consumer.classic_heartbeat(g, member_id, generation, now_ms)
        fenced = _fenced(g, group_instance_id, member_id)
        if fenced is not None:
            return fenced
        m = g.members.get(member_id) if g is not None else None
        if g is None or m is None:
            return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group_id}")
        m.last_heartbeat_ms = now_ms
        m.conn = conn or m.conn
        if g.state == GroupState.PREPARING_REBALANCE:
            return _err(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing; rejoin")
        if generation != g.generation:
            return self._illegal_generation(g, generation)
        return {"error_code": 0}

    def leave(
        self, group_id: str, member_ids: list[str], now_ms: int, instances: Sequence[str | None] = ()
    ) -> tuple[dict[str, Any], list[Output]]:
        """`instances`: each leaving member's group.instance.id (LeaveGroup v3+), in `member_ids`' order. A static
        member may be named by its instance alone (member id ""), as an admin's removeMembersFromConsumerGroup
        does; a member id that is not the instance's holder is FENCED_INSTANCE_ID, as in Kafka. Rows: [the member
        id, its code], in request order."""
        g = self.groups.get(group_id)
        if g is None:
            return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} has no members"), []
        if g.consumer is not None:
            body, records = self.consumer.classic_leave(g, member_ids, now_ms)
            return body, self._consumer_append(g, records) + self._maybe_downgrade(g, now_ms)
        rows, out = [], []
        for i, mid in enumerate(member_ids):
            instance = instances[i] if i < len(instances) else None
            if instance:
                holder = g.static_member(instance)
                if holder is None:
                    rows.append([mid, int(ErrorCode.UNKNOWN_MEMBER_ID)])
                    continue
                if mid and mid != holder.member_id:
                    rows.append([mid, int(ErrorCode.FENCED_INSTANCE_ID)])
                    continue
                mid = holder.member_id
            if mid in g.members:
                out += self._remove_member(g, mid, now_ms)
                rows.append([mid, 0])
            else:
                rows.append([mid, int(ErrorCode.UNKNOWN_MEMBER_ID)])
        return {"error_code": 0, "members": rows}, out

    # --- the consumer group protocol (KIP-848) ------------------------------------------------------

    def consumer_heartbeat(
        self, token: Any, partition: int, hb: Heartbeat, topics: dict[str, int], now_ms: int
    ) -> list[Output]:
        """ConsumerGroupHeartbeat: broker/group/consumer_logic.py decides; `topics`: topic -> partition count."""
        out = self.consumer.heartbeat(token, partition, hb, topics, now_ms)
        g = self.groups.get(hb.group_id)
        return out + (self._maybe_downgrade(g, now_ms) if g is not None else [])

    def _maybe_downgrade(self, g: Group, now_ms: int) -> list[Output]:
        """The last consumer-protocol member left a group of classic members: it is a classic group again (Kafka
        4's online downgrade), its members keep their partitions until the rebalance that starts now."""
        if not self.consumer.downgrade_due(g):
            return []
        records = ConsumerGroupLogic.tombstones(g)
        downgrade(g, now_ms)
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("convert", g.group_id)
        return [Append(aid, g.partition, [*records, (GroupKey(g.group_id), g.to_value())])] + self._prepare_rebalance(
            g, now_ms
        )

    def _consumer_append(self, g: Group, records: list[tuple[Key, dict[str, Any] | None]]) -> list[Output]:
        if not records:
            return []
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("convert", g.group_id)
        return [Append(aid, g.partition, records)]

    def _convert_to_classic(self, g: Group) -> Append:
        """An empty consumer group joined by a classic member: its consumer records go, its offsets stay."""
        recs = ConsumerGroupLogic.tombstones(g)
        g.consumer = None
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("convert", g.group_id)
        return Append(aid, g.partition, recs)

    def _describe_consumer_group(self, g: Group) -> dict[str, Any]:
        """A consumer group in the native DescribeGroups shape: each member's assignment as the consumer
        protocol's Assignment bytes, so that tools reading classic groups read these too."""
        cg = g.consumer
        assert cg is not None
        members = []
        for m in cg.members.values():
            parts = frozenset((t, p) for t, ps in m.assigned.items() for p in ps)
            members.append([m.member_id, m.client_id, m.client_host, b"", Assignment(parts).encode()])
        return {
            "error_code": 0,
            "group_id": g.group_id,
            "state": cg.state().value,
            "protocol_type": "consumer",
            "protocol": cg.assignor,
            "generation": cg.group_epoch,
            "group_type": "consumer",
            "members": members,
        }

    # --- offsets -------------------------------------------------------------------------------

    def commit(
        self,
        token: Any,
        partition: int,
        group_id: str,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, str] | tuple[int, str, int]],
        now_ms: int,
        known_partitions: dict[str, int],
        conn: str = "",
        group_instance_id: str | None = None,
    ) -> list[Output]:
        """`offsets`: (offset, metadata[, leader epoch (KIP-320, -1 not given)]) per partition. `known_partitions`:
        topic -> partition count, from the broker's metadata."""
        g = self.groups.get(group_id)
        fenced = _fenced(g, group_instance_id, member_id) if g is None or g.consumer is None else None
        if fenced is not None:
            return [
                Reply(token, self._commit_error_body(offsets, ErrorCode.FENCED_INSTANCE_ID, fenced["error_message"]))
            ]
        if g is not None and g.consumer is not None:
            # A consumer-protocol group: `generation` is the member epoch (OffsetCommit v9+), checked as Kafka does.
            refused = self.consumer.validate_offset_request(g, member_id, generation)
            if refused is not None:
                return [Reply(token, self._commit_error_body(offsets, *refused))]
            owned = None  # Kafka checks a consumer-protocol member's epoch, not which partitions it commits
        elif generation < 0 and (not member_id or g is None or not g.members):
            # A commit from outside the group protocol (kl-groups --reset-offsets, manual assignment). Generation -1
            # to a group with no members is one whatever the member id, as Kafka takes it (a "simple group"):
            # librdkafka with group.protocol=consumer sends its own member id (KIP-1082) before it ever subscribed.
            if g is not None and g.members:
                msg = f"group {group_id} has active members ({g.state.value}); stop them before changing its offsets"
                return [Reply(token, self._commit_error_body(offsets, ErrorCode.NON_EMPTY_GROUP, msg))]
            if g is None:
                g = self.groups[group_id] = Group(group_id, partition, empty_since_ms=now_ms)
            owned = None
        else:
            m = g.members.get(member_id) if g is not None else None
            if g is None:
                msg = f"group {group_id} does not exist (generation {generation} is unknown)"
                return [Reply(token, self._commit_error_body(offsets, ErrorCode.ILLEGAL_GENERATION, msg))]
            if m is None:
                msg = f"member {member_id} is not in group {group_id} (it was removed); rejoin"
                return [Reply(token, self._commit_error_body(offsets, ErrorCode.UNKNOWN_MEMBER_ID, msg))]
            if generation != g.generation:
                body = self._illegal_generation(g, generation)
                return [
                    Reply(token, self._commit_error_body(offsets, ErrorCode.ILLEGAL_GENERATION, body["error_message"]))
                ]
            if g.state == GroupState.COMPLETING_REBALANCE:
                msg = "the group is completing a rebalance; commit after it"
                return [Reply(token, self._commit_error_body(offsets, ErrorCode.REBALANCE_IN_PROGRESS, msg))]
            m.last_heartbeat_ms = now_ms
            m.conn = conn or m.conn
            owned = self._committable(g, m)
        rows: dict[tuple[str, int], tuple[int, str | None]] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp, (offset, metadata, *epoch) in offsets.items():
            if tp[0] not in known_partitions or not 0 <= tp[1] < known_partitions[tp[0]]:
                rows[tp] = (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"{tp[0]}-{tp[1]} does not exist")
            elif len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                rows[tp] = (
                    int(ErrorCode.OFFSET_METADATA_TOO_LARGE),
                    f"metadata is longer than offset.metadata.max.bytes={self.config.offset_metadata_max_bytes}",
                )
            elif owned is not None and tp not in owned:
                rows[tp] = (
                    int(ErrorCode.PARTITION_NOT_ASSIGNED),
                    f"{tp[0]}-{tp[1]} is not assigned to member {member_id} in generation {generation}",
                )
            else:
                accepted[tp] = OffsetAndMetadata(offset, metadata, now_ms, epoch[0] if epoch else -1)
        if not accepted:
            return [Reply(token, {"topics": _group_rows(rows)})]
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("commit", group_id, token=(token, rows), offsets=accepted)
        recs: list[tuple[Key, dict[str, Any] | None]] = [
            (OffsetKey(group_id, t, p), om.to_value()) for (t, p), om in accepted.items()
        ]
        return [Append(aid, g.partition, recs)]

    def check_member_epoch(self, group_id: str, member_id: str, member_epoch: int) -> tuple[ErrorCode, str] | None:
        """A consumer-protocol member's epoch on an OffsetFetch v9+ or TxnOffsetCommit (KIP-848); None: fine
        (also for a fetch from outside the group, or of a classic group)."""
        g = self.groups.get(group_id)
        if g is None or g.consumer is None or (member_epoch < 0 and not member_id):
            return None
        return self.consumer.validate_offset_request(g, member_id, member_epoch)

    def fetch_offsets(self, group_id: str, tps: list[tuple[str, int]] | None) -> dict[str, Any]:
        g = self.groups.get(group_id)
        offsets = g.offsets if g is not None else {}
        if tps is None:
            tps = sorted(offsets)
        rows = {}
        for tp in tps:
            om = offsets.get(tp)
            rows[tp] = [-1, "", 0, -1] if om is None else [om.offset, om.metadata, 0, om.leader_epoch]
        by_topic: dict[str, list[Any]] = {}
        for (t, p), row in rows.items():
            by_topic.setdefault(t, []).append([p, *row])
        return {"error_code": 0, "topics": [[t, r] for t, r in by_topic.items()]}

    # --- admin ---------------------------------------------------------------------------------

    def list_groups(self) -> tuple[list[list[Any]], list[str]]:
        """[group id, protocol type, state] of every group served here, and each one's group type ("classic" or
        "consumer", KIP-848) in a list of its own (the rows' shape is what native clients of every version read)."""
        groups = [
            g
            for g in sorted(self.groups.values(), key=lambda g: g.group_id)
            if self.partitions.get(g.partition) == PARTITION_LOADED and g.state != GroupState.DEAD
        ]
        return [[g.group_id, g.protocol_type or "consumer", self._state_name(g)] for g in groups], [
            g.group_type for g in groups
        ]

    @staticmethod
    def _state_name(g: Group) -> str:
        return g.state.value if g.consumer is None else g.consumer.state().value

    def describe(self, group_id: str) -> dict[str, Any]:
        g = self.groups.get(group_id)
        if g is None:
            return {"error_code": 0, "group_id": group_id, "state": GroupState.DEAD.value, "members": []}
        if g.consumer is not None:
            return self._describe_consumer_group(g)
        return {
            "error_code": 0,
            "group_id": group_id,
            "state": g.state.value,
            "protocol_type": g.protocol_type or "",
            "protocol": g.protocol or "",
            "generation": g.generation,
            "members": [
                [m.member_id, m.client_id, m.client_host, m.metadata_for(g.protocol), m.assignment, m.group_instance_id]
                for m in g.members.values()
            ],
        }

    def delete(self, token: Any, group_id: str) -> list[Output]:
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return [Reply(token, _err(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist"))]
        if not g.is_empty():
            n = len(g.members) + len(g.consumer.members if g.consumer else ())
            msg = f"group {group_id} is not empty ({n} members, {self._state_name(g)})"
            return [Reply(token, _err(ErrorCode.NON_EMPTY_GROUP, msg))]
        g.state = GroupState.DEAD
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("delete", group_id, token=token)
        return [Append(aid, g.partition, _tombstones(g))]

    def delete_offsets(self, token: Any, group_id: str, tps: list[tuple[str, int]]) -> list[Output]:
        """Kafka's OffsetDelete: drop committed offsets of partitions whose topic no member subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC for the others); tombstones in __consumer_offsets, answered once written."""
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return [Reply(token, _err(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist"))]
        subscribed: set[str] = set(g.consumer.subscribed_topics()) if g.consumer is not None else set()
        for m in g.members.values():
            with contextlib.suppress(ValueError):
                subscribed |= set(Subscription.decode(m.metadata_for(g.protocol)).topics)
        rows: dict[tuple[str, int], tuple[int, str | None]] = {}
        gone: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp in tps:
            if tp[0] in subscribed:
                rows[tp] = (int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), f"a member of {group_id} subscribes to {tp[0]}")
            elif tp in g.offsets:
                gone[tp] = g.offsets[tp]
            else:
                rows[tp] = (0, None)  # nothing committed: nothing to delete, as Kafka answers
        if not gone:
            return [Reply(token, {"error_code": 0, "topics": _group_rows(rows)})]
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("delete_offsets", group_id, token=(token, rows), offsets=gone)
        return [Append(aid, g.partition, [(OffsetKey(group_id, t, p), None) for t, p in gone])]

    # --- appends and timers -----------------------------------------------------------------------

    def write(
        self,
        token: Any,
        partition: int,
        group_id: str,
        records: Sequence[tuple[Key, dict[str, Any] | None]],
        result: Any,
    ) -> list[Output]:
        """Answer `result` once `records` are written to the partition (at once without records); an error body
        if they could not be (a share group's heartbeat, its initialized topics, its deletion)."""
        if not records:
            return [Reply(token, result)]
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("records", group_id, token=token, partition=partition, result=result)
        return [Append(aid, partition, list(records))]

    def share_tick(self, now_ms: int, loaded: set[int]) -> list[Output]:
        """Share group members whose session ended are removed, and that is written."""
        out: list[Output] = []
        for group, records in self.share.tick(now_ms, loaded):
            out += self.write(None, group.partition, group.group_id, records, None)
        return [o for o in out if isinstance(o, Append)]

    def on_append_done(self, append_id: int, error: int, now_ms: int) -> list[Output]:
        pa = self._appends.pop(append_id, None)
        if pa is None:
            return self.consumer.on_append_done(append_id, error) or []
        if pa.kind == "records":
            if pa.token is None:
                return []
            if error:
                msg = f"the group's state could not be written: {ErrorCode(error).name}"
                return [Reply(pa.token, _err(ErrorCode(error), msg))]
            return [Reply(pa.token, pa.result)]
        g = self.groups.get(pa.group_id)
        if pa.kind == "commit":
            token, rows = pa.token if pa.token is not None else (None, {})
            if not error and g is not None:
                g.offsets.update(pa.offsets)
            for tp in pa.offsets:
                rows[tp] = (error, None if not error else f"offset commit not replicated: {ErrorCode(error).name}")
            return [] if token is None else [Reply(token, {"topics": _group_rows(rows)})]
        if pa.kind == "delete":
            if g is not None and not error:
                del self.groups[pa.group_id]
            elif g is not None:
                g.state = GroupState.EMPTY
            if pa.token is None:
                return []
            return [Reply(pa.token, {"error_code": error, "error_message": None})]
        if pa.kind == "delete_offsets":
            token, rows = pa.token
            for tp, om in pa.offsets.items():
                if not error and g is not None and g.offsets.get(tp) is om:
                    del g.offsets[tp]
                rows[tp] = (error, None if not error else f"offset deletion not replicated: {ErrorCode(error).name}")
            return [Reply(token, {"error_code": 0, "topics": _group_rows(rows)})]
        if pa.kind == "static":
            return self._static_rejoin_stored(pa, g, error, now_ms)
        if pa.kind == "expire":
            if g is not None and not error:
                for tp in pa.offsets:
                    if g.offsets.get(tp) is pa.offsets[tp]:
                        del g.offsets[tp]
            return []
        # sync: the assignment is durable; members may now learn it.
        if g is None or g.generation != pa.generation or g.state != GroupState.COMPLETING_REBALANCE:
            return []
        if error:
            failed = self._fail_syncs(g, ErrorCode.COORDINATOR_NOT_AVAILABLE, "the assignment could not be stored")
            return failed + self._prepare_rebalance(g, now_ms)
        g.state = GroupState.STABLE
        log.info(
            "group %s: generation %d stable; assignment bytes per member: %s",
            g.group_id,
            g.generation,
            ", ".join(f"{mid} {len(m.assignment)}" for mid, m in g.members.items()),
        )
        out: list[Output] = []
        for m in g.members.values():
            if m.sync_token is not None:
                out.append(Reply(m.sync_token, {"error_code": 0, "assignment": m.assignment}))
                m.sync_token = None
        return out

    def tick(self, now_ms: int) -> list[Output]:
        out: list[Output] = []
        for g in list(self.groups.values()):
            if self.partitions.get(g.partition) != PARTITION_LOADED:
                continue
            for m in list(g.members.values()):
                if m.join_token is not None or m.sync_token is not None:
                    continue  # parked: the rebalance's own deadline governs it
                if now_ms - m.last_heartbeat_ms > m.session_timeout_ms:
                    log.info(
                        "group %s: member %s timed out (no heartbeat for %d ms, session.timeout.ms=%d)",
                        g.group_id,
                        m.member_id,
                        now_ms - m.last_heartbeat_ms,
                        m.session_timeout_ms,
                    )
                    out += self._remove_member(g, m.member_id, now_ms)
            if g.state == GroupState.PREPARING_REBALANCE:
                out += self._maybe_complete_join(g, now_ms)
            elif g.state == GroupState.EMPTY and g.is_empty() and g.offsets:
                out += self._maybe_expire(g, now_ms)
        loaded = {p for p, st in self.partitions.items() if st == PARTITION_LOADED}
        out += self.consumer.tick(now_ms, loaded)
        out += self.share_tick(now_ms, loaded)
        for g in list(self.groups.values()):
            if g.consumer is not None and g.partition in loaded:
                out += self._maybe_downgrade(g, now_ms)
        return out

    # --- internals ---------------------------------------------------------------------------------

    def _prepare_rebalance(self, g: Group, now_ms: int) -> list[Output]:
        out: list[Output] = []
        if g.state == GroupState.COMPLETING_REBALANCE:
            out += self._fail_syncs(g, ErrorCode.REBALANCE_IN_PROGRESS, "a member joined or left; rejoin")
        if g.state == GroupState.EMPTY:
            g.join_not_before_ms = now_ms + self.config.initial_rebalance_delay_ms
        else:
            g.join_not_before_ms = now_ms
        if g.state != GroupState.PREPARING_REBALANCE:
            log.info("group %s: preparing to rebalance (generation %d, %s)", g.group_id, g.generation, g.state.value)
        g.state = GroupState.PREPARING_REBALANCE
        g.rebalance_deadline_ms = now_ms + g.rebalance_timeout_ms()
        return out + self._maybe_complete_join(g, now_ms)

    def _maybe_complete_join(self, g: Group, now_ms: int) -> list[Output]:
        if g.all_joined():
            if now_ms < g.join_not_before_ms and now_ms < g.rebalance_deadline_ms:
                return []
        elif now_ms < g.rebalance_deadline_ms:
            return []
        # Members that did not rejoin within the rebalance timeout (max.poll.interval.ms) are out.
        late = [mid for mid, m in g.members.items() if m.join_token is None]
        for mid in late:
            del g.members[mid]
        g.generation += 1
        log.info(
            "group %s: generation %d with %d members%s",
            g.group_id,
            g.generation,
            len(g.members),
            f" ({len(late)} dropped: not rejoined within the rebalance timeout)" if late else "",
        )
        out: list[Output] = []
        if not g.members:
            g.state, g.protocol, g.leader, g.empty_since_ms = GroupState.EMPTY, None, None, now_ms
            aid = next(self._ids)
            self._appends[aid] = _PendingAppend("empty", g.group_id, g.generation)
            return [Append(aid, g.partition, [(GroupKey(g.group_id), g.to_value())])]
        g.protocol = g.select_protocol()
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        # Who leads and who is in it, by client id: when a member is later left without partitions, the log
        # says which client computed the assignment (the leader) and which one got nothing (at the sync).
        log.info(
            "group %s: generation %d uses protocol %s, leader %s; members %s",
            g.group_id,
            g.generation,
            g.protocol,
            g.leader,
            ", ".join(f"{mid} ({m.client_id})" for mid, m in g.members.items()),
        )
        g.state = GroupState.COMPLETING_REBALANCE
        for m in g.members.values():
            m.previous_assignment, m.assignment = m.assignment or m.previous_assignment, b""
            m.last_heartbeat_ms = now_ms
            out.append(Reply(m.join_token, self._join_body(g, m)))
            m.join_token = None
        return out

    def _join_body(self, g: Group, m: Member, skip_assignment: bool = False) -> dict[str, Any]:
        """The join's answer: the leader gets every member's [member id, metadata, group.instance.id]. With
        `skip_assignment` (a static leader back in a stable group, JoinGroup v9's KIP-814 flag), it is told not to
        assign again: the group keeps the assignment it has."""
        members = (
            [[x.member_id, x.metadata_for(g.protocol), x.group_instance_id] for x in g.members.values()]
            if m.member_id == g.leader
            else []
        )
        return {
            "error_code": 0,
            "generation_id": g.generation,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol,
            "leader": g.leader,
            "skip_assignment": skip_assignment,
            "member_id": m.member_id,
            "members": members,
        }

    def _rejoin_static(
        self,
        token: Any,
        g: Group,
        prior: Member,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
        now_ms: int,
        conn: str,
    ) -> list[Output]:
        """KIP-345: a static member back with no member id (a restarted consumer) takes `prior`'s place under a new
        member id; the old id is fenced (its parked requests answered FENCED_INSTANCE_ID, later ones too). In a
        stable group whose protocol it does not change there is no rebalance: once the new id is stored (a
        coordinator taking over from the log must know it) the member gets the current generation and keeps its
        assignment. Otherwise it joins a rebalance, as Kafka's updateStaticMemberAndRebalance does (a completing
        one starts again: the leader's assignment names the old id)."""
        out: list[Output] = []
        for tok in (prior.join_token, prior.sync_token):
            if tok is not None:
                msg = f"instance {prior.group_instance_id} was taken over by a newer member with that instance id"
                out.append(Reply(tok, _err(ErrorCode.FENCED_INSTANCE_ID, msg)))
        prior.join_token = prior.sync_token = None
        old_id = prior.member_id
        del g.members[old_id]
        prior.member_id = f"{prior.group_instance_id}-{uuid.uuid4()}"
        prior.client_id, prior.client_host, prior.conn = client_id, client_host, conn or prior.conn
        prior.session_timeout_ms, prior.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        unchanged = prior.protocols == protocols
        prior.protocols, prior.last_heartbeat_ms = protocols, now_ms
        g.members[prior.member_id] = prior
        if g.leader == old_id:
            g.leader = prior.member_id
        log.info(
            "group %s: static member %s (instance %s) replaced by %s", g.group_id, old_id, prior.group_instance_id,
            prior.member_id,
        )  # fmt: skip
        if g.state == GroupState.STABLE and (unchanged or g.select_protocol() == g.protocol):
            aid = next(self._ids)
            pending = _PendingAppend("static", g.group_id, g.generation, token=token, result=prior.member_id)
            self._appends[aid] = pending
            return out + [Append(aid, g.partition, [(GroupKey(g.group_id), g.to_value())])]
        prior.join_token = token
        if g.state == GroupState.PREPARING_REBALANCE:
            return out + self._maybe_complete_join(g, now_ms)
        return out + self._prepare_rebalance(g, now_ms)

    def _static_rejoin_stored(self, pa: _PendingAppend, g: Group | None, error: int, now_ms: int) -> list[Output]:
        """A static member's new id is stored (`_rejoin_static`): answer its join with the current generation; if
        the group began a rebalance meanwhile, the join waits for it like any other."""
        token, member_id = pa.token, pa.result
        if token is None:  # answered already: the coordinator moved meanwhile (unload)
            return []
        m = g.members.get(member_id) if g is not None else None
        if g is None or m is None:
            msg = f"member {member_id} left the group before its join completed"
            return [Reply(token, _err(ErrorCode.UNKNOWN_MEMBER_ID, msg))]
        if error:
            msg = f"the static member's new id could not be stored: {ErrorCode(error).name}"
            return [Reply(token, _err(ErrorCode.COORDINATOR_NOT_AVAILABLE, msg))]
        if g.state == GroupState.STABLE and g.generation == pa.generation:
            return [Reply(token, self._join_body(g, m, skip_assignment=m.member_id == g.leader))]
        m.join_token = token
        if g.state == GroupState.PREPARING_REBALANCE:
            return self._maybe_complete_join(g, now_ms)
        return self._prepare_rebalance(g, now_ms)

    def _remove_member(self, g: Group, member_id: str, now_ms: int) -> list[Output]:
        m = g.members.pop(member_id)
        out: list[Output] = []
        for tok in (m.join_token, m.sync_token):
            if tok is not None:
                out.append(Reply(tok, _err(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} left the group")))
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            out += self._prepare_rebalance(g, now_ms)
        elif g.state == GroupState.PREPARING_REBALANCE:
            out += self._maybe_complete_join(g, now_ms)
        return out

    def _drop_replaced(self, g: Group, conn: str) -> list[Output]:
        """A new member (no member id) joining over the connection an existing member last used replaces it:
        one client connection is one consumer, and a consumer that rejoins without its member id has given
        that id up (librdkafka does after its own session timeout, any client after UNKNOWN_MEMBER_ID). Left
        in the group, the abandoned member would hold the rebalance until its session times out on this side
        too (seconds of a group consuming nothing, after a coordinator failover most of all); it is dropped
        without a rebalance of its own, since the new member's join starts or joins one."""
        if not conn:
            return []
        out: list[Output] = []
        for old in [x for x in g.members.values() if x.conn == conn]:
            del g.members[old.member_id]
            log.info("group %s: member %s replaced by a new member on its connection", g.group_id, old.member_id)
            for tok in (old.join_token, old.sync_token):
                if tok is not None:
                    msg = f"member {old.member_id} was replaced by a new member on its connection"
                    out.append(Reply(tok, _err(ErrorCode.UNKNOWN_MEMBER_ID, msg)))
        return out

    def _fail_syncs(self, g: Group, code: ErrorCode, message: str) -> list[Output]:
        out: list[Output] = []
        for m in g.members.values():
            if m.sync_token is not None:
                out.append(Reply(m.sync_token, _err(code, message)))
                m.sync_token = None
        return out

    def _maybe_expire(self, g: Group, now_ms: int) -> list[Output]:
        if now_ms - g.empty_since_ms < self.config.offsets_retention_ms:
            return []
        if any(pa.group_id == g.group_id for pa in self._appends.values()):
            return []
        aid = next(self._ids)
        self._appends[aid] = _PendingAppend("expire", g.group_id, offsets=dict(g.offsets))
        return [Append(aid, g.partition, [(OffsetKey(g.group_id, t, p), None) for t, p in g.offsets])]

    @staticmethod
    def _committable(g: Group, m: Member) -> frozenset[tuple[str, int]] | None:
        """What `m` may commit: its partitions, plus those it held in the previous generation that nobody
        holds now (a cooperative member revoking them commits after the new generation began)."""
        now = m.owned(g.protocol_type)
        before = m.owned(g.protocol_type, previous=True)
        if now is None or before is None:
            return None
        taken: set[tuple[str, int]] = set()
        for other in g.members.values():
            if other is not m:
                taken |= other.owned(g.protocol_type) or frozenset()
        return now | (before - taken)

    @staticmethod
    def _illegal_generation(g: Group, generation: int) -> dict[str, Any]:
        msg = f"generation {generation} is not the group's current generation {g.generation}; rejoin"
        return _err(ErrorCode.ILLEGAL_GENERATION, msg)

    @staticmethod
    def _commit_error_body(offsets: dict[tuple[str, int], Any], code: ErrorCode, message: str) -> dict[str, Any]:
        """A commit refused as a whole (the member's generation or epoch, a group with members for an admin's
        reset): the error and its message once, which Kafka's layout puts in every partition's row."""
        return _err(code, message)

    @staticmethod
    def _append_failed_body(pa: _PendingAppend, code: ErrorCode) -> dict[str, Any]:
        if pa.kind == "commit":
            _, rows = pa.token
            for tp in pa.offsets:
                rows[tp] = (int(code), "the group coordinator moved")
            return {"topics": _group_rows(rows)}
        return _err(code, "the group coordinator moved")


def _fenced(g: Group | None, group_instance_id: str | None, member_id: str) -> dict[str, Any] | None:
    """KIP-345: a request naming a group.instance.id that another member id holds now comes from a replaced
    (older) instance of that static member: FENCED_INSTANCE_ID, so that it stops rather than rejoins."""
    if g is None or not group_instance_id:
        return None
    holder = g.static_member(group_instance_id)
    if holder is None or holder.member_id == member_id:
        return None
    msg = f"instance {group_instance_id} is held by member {holder.member_id}; {member_id} was replaced"
    return _err(ErrorCode.FENCED_INSTANCE_ID, msg)


def _tombstones(g: Group) -> list[tuple[Key, dict[str, Any] | None]]:
    recs: list[tuple[Key, dict[str, Any] | None]] = [(OffsetKey(g.group_id, t, p), None) for t, p in g.offsets]
    return recs + ConsumerGroupLogic.tombstones(g) + [(GroupKey(g.group_id), None)]


def _group_rows(rows: dict[tuple[str, int], tuple[int, str | None]]) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for (t, p), (code, msg) in sorted(rows.items()):
        by_topic.setdefault(t, []).append([p, code, msg])
    return [[t, r] for t, r in by_topic.items()]
