"""The consumer-group requests: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup, OffsetCommit/Fetch,
List/Describe/DeleteGroups. Shapes are checked here; decisions are the GroupCoordinatorLogic's. Authorization
is decided before these run (broker/server/authorization.py): a handler gets the body the table checked, without the
groups and topics it refused."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from broker.group.consumer_group_api import ConsumerGroupApis
from broker.group.coordinator import now_ms
from broker.metadata.naming import OFFSETS_TOPIC, TXN_TOPIC
from broker.network.server import BadRequest, ConnectionContext, as_list
from broker.security.listeners import metadata_listener
from net.errors import ErrorCode, KafkaLiteError, TopicAlreadyExistsError
from net.protocol import ApiKey
from net.schema.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.group.coordinator import GroupCoordinator
    from broker.metadata.image import MetadataImage
    from broker.server.config import BrokerConfig

log = logging.getLogger("kafkalite.group")


def _str(body: dict[str, Any], key: str, default: str | None = None) -> str:
    v = body.get(key, default)
    if not isinstance(v, str):
        raise BadRequest(f"field {key!r} must be a string")
    return v


def _int(body: dict[str, Any], key: str, default: int | None = None) -> int:
    v = body.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise BadRequest(f"field {key!r} must be an integer")
    return v


def _conn(ctx: ConnectionContext) -> str:
    """The request's client connection, as the group logic tells members apart by it (its listener and the
    client's address and port: unique while the connection lives)."""
    return f"{ctx.listener} {ctx.peer}"


class GroupApis:
    def __init__(
        self,
        config: "BrokerConfig",
        coordinator: "GroupCoordinator",
        image: "MetadataImage",
        channel: "ControllerChannel",
        transaction_partition_for: Callable[[str], int] | None = None,
    ) -> None:
        self.config = config
        self.coordinator = coordinator
        # FindCoordinator key_type 1: the __transaction_state partition of a transactional id.
        self.transaction_partition_for = transaction_partition_for
        self.image = image
        self.channel = channel  # creates __consumer_offsets through the active controller
        # The groups of the other group types this broker coordinates, for ListGroups: each gives rows
        # [group_id, protocol_type, state, group_type] (share groups: broker/share/group_api.py).
        self.other_groups: list[Callable[[], list[list[Any]]]] = []
        # ... and their DeleteGroups: (error code, message) for a group of theirs, None for one they do not know
        # (Kafka's GroupCoordinatorService deletes share groups first, then the others).
        self.other_deletes: list[Callable[[str], Awaitable[tuple[int, str | None] | None]]] = []
        self.handlers = {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_DELETE: self.offset_delete,
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
            # The consumer group protocol (KIP-848), typed.
            **ConsumerGroupApis(coordinator, image).handlers,
        }

    # --- finding the coordinator -------------------------------------------------------------

    def find_coordinator(
        self, body: dict[str, Any], ctx: ConnectionContext
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """One key, or with "keys" several (Kafka's FindCoordinator v4+): {"coordinators": [answer + "key"]}.
        The coordinator is named by its endpoint of the request's listener (broker/security/listeners.py)."""
        if "keys" in body:
            keys = as_list(body.get("keys"), "keys")
            answers = [self._find_one(dict(body, key=k), ctx) for k in keys]
            ready = [a for a in answers if isinstance(a, dict)]
            if len(ready) == len(answers):
                return {"coordinators": [dict(a, key=k) for k, a in zip(keys, ready)]}
            return self._gather_coordinators(keys, answers)
        return self._find_one(body, ctx)

    async def _gather_coordinators(self, keys: list[Any], answers: list[Any]) -> dict[str, Any]:
        done = [a if isinstance(a, dict) else await a for a in answers]
        return {"coordinators": [dict(a, key=k) for k, a in zip(keys, done)]}

    def _find_one(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        key = _str(body, "key")
        key_type = _int(body, "key_type", 0)
        if key_type == 1 and self.transaction_partition_for is not None:  # a transactional id's coordinator
            if not key:
                return {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": "transactional id is empty"}
            topic, partition, create = TXN_TOPIC, self.transaction_partition_for(key), self._create_txn_topic
        elif key_type != 0:
            return {
                "error_code": int(ErrorCode.INVALID_REQUEST),
                "error_message": "key_type must be 0 (group) or 1 (transaction)",
            }
        elif not key:
            return {"error_code": int(ErrorCode.INVALID_GROUP_ID), "error_message": "group id must be non-empty"}
        else:
            topic, partition, create = OFFSETS_TOPIC, self.coordinator.partition_for(key), self._create_offsets_topic
        image = self.image
        info = image.topics.get(topic)
        if info is None:
            return create()
        st = info.partitions.get(partition)
        b = image.brokers.get(st.leader) if st is not None else None
        if b is None or b.fenced:
            return _not_available("the group's coordinator partition has no leader yet")
        listener = metadata_listener(body, ctx)  # the coordinator as the clients of this listener reach it
        endpoint = self.config.endpoint_of(b, listener)
        if endpoint is None:
            return _not_available(f"the coordinator, broker {b.id}, has no {listener} listener registered yet")
        return {"error_code": 0, "node_id": b.id, "host": endpoint[0], "port": endpoint[1]}

    async def _create_txn_topic(self) -> dict[str, Any]:
        """Kafka creates __transaction_state on the first FindCoordinator for a transactional id."""
        cfg = self.config
        rf = cfg.transaction_state_log_replication_factor
        if rf < 1:
            rf = min(3, max(len(cfg.voters()), len(self.image.brokers)))
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(cfg.transaction_state_log_segment_bytes),
            "min.insync.replicas": str(min(cfg.transaction_state_log_min_isr, rf)),
        }
        return await self._create_internal(TXN_TOPIC, cfg.transaction_state_log_num_partitions, rf, configs)

    async def _create_offsets_topic(self) -> dict[str, Any]:
        """Kafka creates __consumer_offsets on the first FindCoordinator; the caller retries meanwhile."""
        cfg = self.config
        rf = cfg.offsets_topic_replication_factor
        if rf < 1:
            # The configured peers, or in ZooKeeper mode (where --peers is optional) the registered brokers.
            rf = min(3, max(len(cfg.voters()), len(self.image.brokers)))
        configs = {"cleanup.policy": "compact", "segment.bytes": str(cfg.offsets_topic_segment_bytes)}
        return await self._create_internal(OFFSETS_TOPIC, cfg.offsets_topic_num_partitions, rf, configs)

    async def _create_internal(self, topic: str, n: int, rf: int, configs: dict[str, str]) -> dict[str, Any]:
        """An internal topic made on first use; the caller retries meanwhile (COORDINATOR_NOT_AVAILABLE)."""
        try:
            await self.channel.create_topic(topic, n, rf, configs)
            log.info("created %s with %d partitions, replication factor %d", topic, n, rf)
        except TopicAlreadyExistsError:
            pass
        except KafkaLiteError as e:
            log.warning("cannot create %s yet: %s", topic, e)
            return _not_available(f"{topic} cannot be created yet: {e}")
        return _not_available(f"{topic} is being created")

    # --- transactional offsets ------------------------------------------------------------------

    async def txn_offset_commit(self, req: TxnOffsetCommitRequest, ctx: ConnectionContext) -> TxnOffsetCommitResponse:
        """Kafka's TxnOffsetCommit: the offsets join the producer's transaction (broker/group/coordinator.py)."""
        offsets = {
            (t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "")
            for t in req.topics
            for p in t.partitions
        }
        code = await self.coordinator.txn_offset_commit(
            req.group_id, req.producer_id, req.producer_epoch, req.generation_id, req.member_id, offsets
        )
        return TxnOffsetCommitResponse(
            topics=tuple(
                TxnOffsetCommitResponseTopic(
                    name=t.name,
                    partitions=tuple(
                        TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
                        for p in t.partitions
                    ),
                )
                for t in req.topics
            )
        )

    # --- membership ------------------------------------------------------------------------

    def join_group(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        group_id: Any = body.get("group_id")  # a string once owner_error() passed it
        err = self.coordinator.owner_error(group_id)
        if err:
            return err
        protocols = []
        for entry in as_list(body.get("protocols"), "protocols"):
            if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
                raise BadRequest("each protocols entry must be [name, metadata bytes]")
            protocols.append((entry[0], bytes(entry[1] or b"")))
        return self.coordinator.call(
            self.coordinator.logic.join,
            self.coordinator.partition_for(group_id),
            group_id,
            _str(body, "member_id", ""),
            ctx.client_id or "",
            ctx.member_host,
            _int(body, "session_timeout_ms"),
            _int(body, "rebalance_timeout_ms", _int(body, "session_timeout_ms")),
            _str(body, "protocol_type", "consumer"),
            protocols,
            now_ms(),
            {t: len(info.partitions) for t, info in self.image.topics.items()},  # for a consumer group's member
            _conn(ctx),
        )

    def sync_group(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        group_id: Any = body.get("group_id")  # a string once owner_error() passed it
        err = self.coordinator.owner_error(group_id)
        if err:
            return err
        assignments: dict[str, bytes] = {}
        for entry in as_list(body.get("assignments") or [], "assignments"):
            if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
                raise BadRequest("each assignments entry must be [member_id, assignment bytes]")
            assignments[entry[0]] = bytes(entry[1] or b"")
        return self.coordinator.call(
            self.coordinator.logic.sync,
            group_id,
            _int(body, "generation_id"),
            _str(body, "member_id"),
            assignments,
            now_ms(),
        )

    def heartbeat(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        group_id: Any = body.get("group_id")  # a string once owner_error() passed it
        err = self.coordinator.owner_error(group_id)
        if err:
            return err
        return self.coordinator.logic.heartbeat(
            group_id, _int(body, "generation_id"), _str(body, "member_id"), now_ms(), _conn(ctx)
        )

    def leave_group(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        group_id: Any = body.get("group_id")  # a string once owner_error() passed it
        err = self.coordinator.owner_error(group_id)
        if err:
            return err
        members = as_list(body.get("members"), "members")
        if not all(isinstance(m, str) for m in members):
            raise BadRequest("members must be a list of member ids")
        reply, outputs = self.coordinator.logic.leave(group_id, members, now_ms())
        self.coordinator.run(outputs)
        return reply

    # --- offsets -----------------------------------------------------------------------------

    def offset_commit(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        group_id: Any = body.get("group_id")  # a string once owner_error() passed it
        offsets: dict[tuple[str, int], tuple[int, str]] = {}
        for topic, parts in _topic_rows(body):
            for p in parts:
                if not isinstance(p, list) or len(p) < 2 or not all(isinstance(x, int) for x in p[:2]):
                    raise BadRequest("each offset entry must be [partition, offset, metadata?]")
                meta = p[2] if len(p) > 2 and isinstance(p[2], str) else ""
                offsets[(topic, p[0])] = (p[1], meta)
        err = self.coordinator.owner_error(group_id)
        if err:
            by_topic: dict[str, list[Any]] = {}
            for t, p in offsets:
                by_topic.setdefault(t, []).append([p, err["error_code"], err["error_message"]])
            return {"topics": [[t, rows] for t, rows in by_topic.items()]}
        known = {t: len(info.partitions) for t, info in self.image.topics.items()}
        return self.coordinator.call(
            self.coordinator.logic.commit,
            self.coordinator.partition_for(group_id),
            group_id,
            _int(body, "generation_id", -1),
            _str(body, "member_id", ""),
            offsets,
            now_ms(),
            known,
            _conn(ctx),
        )

    def offset_fetch(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        """One group, or with "groups" several (Kafka's OffsetFetch v8+): {"groups": [answer + "group_id"]}."""
        if "groups" in body:
            out = []
            for entry in as_list(body.get("groups"), "groups"):
                if not isinstance(entry, dict):
                    raise BadRequest("each groups entry must be a map with group_id and topics")
                stable = bool(body.get("require_stable"))
                out.append(dict(self._offset_fetch_one(entry, stable), group_id=entry.get("group_id")))
            return {"error_code": 0, "groups": out}
        return self._offset_fetch_one(body, bool(body.get("require_stable")))

    def _offset_fetch_one(self, body: dict[str, Any], require_stable: bool) -> dict[str, Any]:
        group_id: Any = body.get("group_id")  # a string once owner_error() passed it
        err = self.coordinator.owner_error(group_id)
        if err:
            return err
        tps = None
        if body.get("topics") is not None:
            tps = []
            for topic, parts in _topic_rows(body):
                if not all(isinstance(p, int) for p in parts):
                    raise BadRequest("offset fetch partitions must be integers")
                tps += [(topic, p) for p in parts]
        refused = self.coordinator.logic.check_member_epoch(
            group_id, body.get("member_id") or "", body.get("member_epoch", -1)
        )
        if refused is not None:  # OffsetFetch v9 of a consumer-protocol member (KIP-848): its epoch is checked
            return {"error_code": int(refused[0]), "error_message": refused[1], "topics": []}
        answer = self.coordinator.logic.fetch_offsets(group_id, tps)
        if require_stable:
            # KIP-447: an offset an open transaction is about to replace is not answered; the client retries
            # once the transaction's marker has decided it.
            for topic, rows in answer["topics"]:
                for row in rows:
                    if self.coordinator.has_pending(group_id, [(topic, row[0])]):
                        row[1:] = [-1, "", int(ErrorCode.UNSTABLE_OFFSET_COMMIT)]
        return answer

    # --- admin ------------------------------------------------------------------------------

    def list_groups(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        groups, types = self.coordinator.logic.list_groups()
        for listed in self.other_groups:  # the other group types' coordinators (share groups, KIP-932)
            for *row, group_type in listed():
                groups.append(row)
                types.append(group_type)
        return {"error_code": 0, "groups": groups, "group_types": types}

    def describe_groups(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        out = []
        for group_id in as_list(body.get("groups"), "groups"):
            err = self.coordinator.owner_error(group_id)
            out.append(dict(err, group_id=group_id) if err else self.coordinator.logic.describe(group_id))
        return {"groups": out}

    def offset_delete(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        group_id: Any = body.get("group_id")  # a string once owner_error() passed it
        err = self.coordinator.owner_error(group_id)
        if err:
            return err
        tps = []
        for topic, parts in _topic_rows(body):
            if not all(isinstance(p, int) for p in parts):
                raise BadRequest("offset delete partitions must be integers")
            tps += [(topic, p) for p in parts]
        return self.coordinator.call(self.coordinator.logic.delete_offsets, group_id, tps)

    def delete_groups(self, body: dict[str, Any], ctx: ConnectionContext) -> Awaitable[dict[str, Any]]:
        return self._delete_groups(as_list(body.get("groups"), "groups"), ctx)

    async def _delete_groups(self, groups: list[Any], ctx: ConnectionContext) -> dict[str, Any]:
        results = []
        for group_id in groups:
            err = self.coordinator.owner_error(group_id)
            if err is None:
                for delete in self.other_deletes:
                    done = await delete(group_id)
                    if done is not None:
                        err = {"error_code": done[0], "error_message": done[1]}
                        break
            if err is None:
                err = await self.coordinator.call(self.coordinator.logic.delete, group_id)
            results.append([group_id, err["error_code"], err.get("error_message")])
        return {"results": results}


def _topic_rows(body: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    out = []
    for entry in as_list(body.get("topics"), "topics"):
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
            raise BadRequest("each topics entry must be [topic, [partition entries]]")
        out.append((entry[0], as_list(entry[1], "partitions")))
    return out


def _not_available(message: str) -> dict[str, Any]:
    return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "error_message": message}
