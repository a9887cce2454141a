"""KafkaApis: turns decoded requests into ReplicaManager / ControllerService calls
and their results into response bodies. Field layouts are in docs/FORMAT.md.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar, cast

from broker.controller.channel import unwrap
from broker.controller.cluster_apis import ClusterApis
from broker.controller.leader_election_api import LeaderElectionApis
from broker.controller.reassignment_api import ReassignmentApis
from broker.group.api import GroupApis
from broker.metadata.describe_topic_partitions import DescribeTopicPartitionsApi, topic_uuid
from broker.metadata.naming import missing_topic_code, validate_topic_name
from broker.metrics.broker_metrics import package_version
from broker.network.native_legacy import metadata_request, metadata_response
from broker.network.request_ranges import check_request
from broker.network.server import (
    INTER_BROKER_LISTENER,
    RELAY_LISTENER,
    BadRequest,
    ConnectionContext,
    as_list,
    error_body,
)
from broker.quota.client_quota import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, ClientQuotaManager
from broker.quota.mutation_quota import ControllerMutationQuota
from broker.replica.fetch_session import NO_SESSION, FetchContext, FetchSessionCache, FetchSessionError
from broker.replica.partition import FetchSpec, fetch_response
from broker.replica.partition_apis import PartitionApis
from broker.replica.replica_manager import ProduceResult, ReplicaManager, produce_response
from broker.security.listeners import WIRES, metadata_listener, reachable_controller
from broker.security.request_authorizer import RequestAuthorizer
from broker.server.admin_apis import AdminApis
from broker.server.authorization import Authorization
from broker.server.security_api import SecurityApis
from broker.transaction.verification import NO_GUARDS, FirstBatch
from broker.utils.repeated_log import RepeatedConditionLog
from net.errors import (
    ErrorCode,
    KafkaLiteError,
    TopicAlreadyExistsError,
    error_code_of,
)
from net.messages import MessageError
from net.messages import encode as encode_message
from net.protocol import SUPPORTED_VERSIONS, ApiKey
from net.schema.describe_cluster import DescribeClusterBroker, DescribeClusterRequest, DescribeClusterResponse
from net.schema.fetch import FetchRequest, FetchResponse
from net.schema.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from net.schema.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from net.schema.produce import ProduceRequest, ProduceResponse
from net.schema.share_fetch import ShareFetchResponse
from net.wire_types import WireRangeError

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.controller.service import ControllerService
    from broker.log.config import LogConfig
    from broker.metadata.image import MetadataImage
    from broker.metrics.broker_metrics import BrokerMetrics
    from broker.server.config import BrokerConfig
    from broker.share.api import ShareApis
    from broker.transaction.api import TransactionApis
    from election.coordination import Coordination

log = logging.getLogger("kafkalite.api")
# Requests refused at the listener gate, by (api, listener): the first logged, then a count at most every 10 s. Any
# peer that can connect can send them as fast as it likes, and one line each would fill the disk (120,342 lines in
# one kafka-python suite run, before its ListOffsets were served).
_refusals = RepeatedConditionLog(log)
# Only brokers send these (the authorization table asks CLUSTER_ACTION; only the inter-broker listener serves them).
# WriteTxnMarkers is not among them: as in Kafka, an admin with CLUSTER_ACTION may send it on a client listener
# to abort a hanging transaction (Admin.abortTransaction, kl-transactions abort).
BROKER_APIS = frozenset(
    {
        ApiKey.QUORUM,
        ApiKey.ALTER_PARTITION,
        ApiKey.BROKER_REGISTRATION,
        ApiKey.BROKER_HEARTBEAT,
        ApiKey.UPDATE_METADATA,
        ApiKey.ENVELOPE,
        ApiKey.INITIALIZE_SHARE_GROUP_STATE,
        ApiKey.READ_SHARE_GROUP_STATE,
        ApiKey.WRITE_SHARE_GROUP_STATE,
        ApiKey.DELETE_SHARE_GROUP_STATE,
        ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
    }
)
# The typed apis a broker forwards to the controller in an ENVELOPE (ControllerChannel.serve_or_forward_typed);
# an envelope carrying any other api is refused.
FORWARDED_APIS = frozenset(
    {
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        ApiKey.ALTER_CLIENT_QUOTAS,
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
    }
)
# The listeners those arrive on: the inter-broker listener, and AlterPartition relayed through ZooKeeper.
BROKER_LISTENERS = frozenset({INTER_BROKER_LISTENER, RELAY_LISTENER})
_ALLOWED = object()
MAX_FETCH_WAIT_MS = 60_000
_MS = datetime.timedelta(milliseconds=1)
# How long a Kafka client's Metadata waits for a starting broker's first metadata image (see handle_metadata);
# catching up takes well under a second, unless no controller can be reached.
METADATA_CATCH_UP_WAIT_S = 5.0
BROKER_ENDPOINTS = 1  # DescribeCluster's endpoint_type (KIP-919): the brokers'; 2 is the controllers'
T = TypeVar("T")


def _int(body: dict[str, Any], key: str, default: int | None = None) -> int:
    v = body.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise BadRequest(f"field {key!r} must be an integer")
    return v


# The apis a follower sends with its broker id as replica_id (a consumer's is -1, a debugging tool's -2).
# A follower's Fetch (replica_id >= 0: fetch sessions, the follower's state on the leader) is the inter-broker
# listener's. ListOffsets is not, though it carries a replica id too: Kafka serves any id to any client that may
# DESCRIBE the topic (only the answer differs: the log end instead of the high watermark, the isolation level
# ignored), and current clients send ids other than -1 (kafka-python 3.1's ListOffsets v9 sends 0).
_REPLICA_APIS = frozenset({ApiKey.FETCH})


def broker_only(api_key: int, body: dict[str, Any]) -> bool:
    """Only brokers send this: the election, AlterPartition, BrokerRegistration, heartbeats, a follower's
    fetch (replica_id >= 0) and a request forwarded to the controller."""
    if not isinstance(body, dict):  # a typed request: a follower's Fetch and ListOffsets name it by replica_id
        return api_key in BROKER_APIS or (api_key in _REPLICA_APIS and getattr(body, "replica_id", -1) >= 0)
    return api_key in BROKER_APIS or body.get("forwarded") is True


def registered_listeners(rows: object) -> dict[str, tuple[str, int, str]]:
    """A BrokerRegistration's listeners, shape and types checked (a bad one is the sender's INVALID_REQUEST)."""
    out: dict[str, tuple[str, int, str]] = {}
    for row in as_list(rows, "listeners"):
        if not (
            isinstance(row, list)
            and len(row) == 4
            and all(isinstance(row[i], str) for i in (0, 1, 3))
            and isinstance(row[2], int)
            and not isinstance(row[2], bool)
            and 0 <= row[2] <= 65535
            and row[3] in WIRES
        ):
            raise BadRequest("each listeners entry must be [name, host, port 0-65535, native|kafka]")
        out[row[0]] = (row[1], row[2], row[3])
    return out


class KafkaApis:
    """The request handlers of both listeners (Kafka's KafkaApis): each gets the services it uses."""

    def __init__(
        self,
        config: "BrokerConfig",
        *,
        replica_manager: "ReplicaManager",
        image: "MetadataImage",
        coordination: "Coordination",
        controller: "ControllerService",
        channel: "ControllerChannel",
        groups: GroupApis,
        security: SecurityApis,
        transactions: "TransactionApis",
        metrics: "BrokerMetrics",
        topic_config: Callable[[str], "LogConfig"],
        authz: RequestAuthorizer,
        quotas: "ClientQuotaManager",
        metrics_port: int = -1,
        heartbeat_port: int = -1,
        loop_progress: Callable[[int], None] | None = None,
        inter_broker_port: int = -1,
        share: "ShareApis | None" = None,
    ) -> None:
        self.config = config
        # This broker's inter-broker listener (INTER_BROKER_LISTENER), named to peers in ApiVersions.
        self.inter_broker_port = inter_broker_port
        # This broker's heartbeat listener (broker/controller/heartbeat.py; -1: none, ZooKeeper mode or alone).
        self.heartbeat_port = heartbeat_port
        # Told the time (monotonic ms) of every request handled: the heartbeat thread's proof that the loop
        # is alive (broker/controller/heartbeat.py), even while it is too busy to tick.
        self.loop_progress = loop_progress
        self.replica_manager = replica_manager
        self.fetch_sessions = FetchSessionCache(
            config.max_incremental_fetch_session_cache_slots, config.min_incremental_fetch_session_eviction_ms
        )
        self.image = image
        self.coordination = coordination
        self.controller = controller
        self.channel = channel
        self.metrics = metrics
        self.topic_config = topic_config
        self.authz = authz
        # Every request's authorization, decided before its handler runs (broker/server/authorization.py).
        self.authorization = Authorization(authz, config.auto_create_topics_enable)
        self.quotas = quotas
        self.mutation_quota = ControllerMutationQuota(
            quotas, config.controller_quota_window_num, config.controller_quota_window_size_seconds
        )
        self.metrics_port = metrics_port
        self._handlers = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.QUORUM: self.handle_quorum,
            ApiKey.ALTER_PARTITION: self.handle_alter_partition,
            ApiKey.BROKER_REGISTRATION: self.handle_broker_registration,
            ApiKey.BROKER_HEARTBEAT: self.handle_broker_heartbeat,
            ApiKey.UPDATE_METADATA: self.handle_update_metadata,
            ApiKey.ENVELOPE: self.handle_envelope,
        }
        # Group requests also need the connection (client id and host are part of a member's identity).
        elections = LeaderElectionApis(controller, channel)
        reassignments = ReassignmentApis(controller, channel)
        partitions = PartitionApis(replica_manager, image)
        cluster = ClusterApis(config.broker_id, coordination, channel, image)
        topic_partitions = DescribeTopicPartitionsApi(image, config.max_request_partition_size_limit)
        admin = AdminApis(config, image, controller, channel, self.mutation_quota, topic_config)
        self._ctx_handlers = {
            **admin.handlers,
            **groups.handlers,
            **security.handlers,
            **elections.handlers,
            **reassignments.handlers,
            **partitions.handlers,
            **cluster.handlers,
            **topic_partitions.handlers,
            **transactions.handlers,
            **(share.handlers if share is not None else {}),
        }
        if share is not None:
            groups.other_deletes.append(share.offsets.delete_group)  # DeleteGroups of a share group
        self.transactions = transactions
        # Native v0 of these apis is Metadata's map, read here (broker/network/native_legacy.py MAP_FORM_APIS).
        self._map_forms = frozenset({ApiKey.METADATA, ApiKey.DESCRIBE_TOPIC_PARTITIONS})
        self._creating: set[str] = set()  # topics being created automatically (auto.create.topics.enable)

    def handle(self, api_key: int, version: int, body: dict[str, Any], ctx: ConnectionContext) -> Any:
        """Every request is timed per api (Kafka's RequestMetrics); one clock read and one histogram
        observation per request, nothing per record."""
        metrics = self.metrics
        hists = [metrics.request_timer(api_key)]
        if api_key == ApiKey.PRODUCE:
            hists.append(metrics.produce_latency)
        elif api_key == ApiKey.FETCH:
            hists.append(metrics.fetch_latency)
        t0 = time.monotonic()
        if self.loop_progress is not None:
            self.loop_progress(int(t0 * 1000))
        result = self._handle(api_key, version, body, ctx)
        if not inspect.isawaitable(result):
            elapsed = time.monotonic() - t0
            for h in hists:
                h.observe(elapsed)
            return self._throttled(api_key, body, result, ctx, elapsed) if self.quotas.active else result

        async def waited() -> Any:
            try:
                answer = await result
            finally:
                elapsed = time.monotonic() - t0
                for h in hists:
                    h.observe(elapsed)
            return self._throttled(api_key, body, answer, ctx, elapsed) if self.quotas.active else answer

        return waited()

    def _throttled(
        self, api_key: int, body: dict[str, Any], answer: Any, ctx: ConnectionContext, elapsed: float
    ) -> Any:
        """Client quotas (broker/quota/client_quota.py): record this request's bytes and time against its user and
        client id; over a quota, the answer carries throttle_time_ms and the connection is muted as long."""
        user = ctx.principal.partition(":")[2]
        client = ctx.client_id or ""
        now = time.monotonic()
        q = self.quotas
        ms = q.record(user, client, REQUEST_PERCENTAGE, elapsed * 100, now)
        if api_key == ApiKey.PRODUCE:
            produced = cast(ProduceRequest, body)
            sent = sum(len(p.records or b"") for t in produced.topic_data for p in t.partition_data)
            ms = max(ms, q.record(user, client, PRODUCER_BYTE_RATE, sent, now))
        elif (
            api_key == ApiKey.FETCH and isinstance(answer, FetchResponse) and cast(FetchRequest, body).replica_id < 0
        ) or (api_key == ApiKey.SHARE_FETCH and isinstance(answer, ShareFetchResponse)):
            # a share consumer's records count against consumer_byte_rate as a consumer's do (Kafka's fetch quota)
            read = sum(len(p.records or b"") for t in answer.responses for p in t.partitions)
            ms = max(ms, q.record(user, client, CONSUMER_BYTE_RATE, read, now))
        if ms > 0:
            ctx.throttle(ms)
            if isinstance(answer, dict):
                answer = dict(answer, throttle_time_ms=max(ms, answer.get("throttle_time_ms") or 0))
            elif hasattr(answer, "throttle_time"):  # a typed answer (net/schema/): Kafka's field, a duration
                answer.throttle_time = max(answer.throttle_time, datetime.timedelta(milliseconds=ms))
        return answer

    def _handle(self, api_key: int, version: int, body: dict[str, Any], ctx: ConnectionContext) -> Any:
        if isinstance(body, dict) and api_key in self._map_forms:
            return self._metadata_map(body, ctx)
        handler = self._handlers.get(api_key)  # type: ignore[call-overload]
        ctx_handler = self._ctx_handlers.get(api_key)  # type: ignore[call-overload]
        if handler is None and ctx_handler is None:
            return error_body(ErrorCode.UNSUPPORTED_VERSION, f"unknown api key {api_key}")
        lo, hi = SUPPORTED_VERSIONS[api_key]
        if not lo <= version <= hi:
            return error_body(
                ErrorCode.UNSUPPORTED_VERSION,
                f"api {ApiKey(api_key).name} version {version} not in supported range {lo}..{hi}",
            )
        return self._authorized(api_key, body, ctx, handler if handler is not None else ctx_handler)

    def _authorized(self, api_key: int, body: Any, ctx: ConnectionContext, run: Callable[..., Any]) -> Any:
        """`run(body, ctx)` on the body the authorization table shaped."""
        # The one authorization point of both client listeners: the handler gets the body the table shaped
        # and checked, without the items it refused, whose rows the decision adds to the answer. Authorization
        # goes first so a secured cluster answers a user without ClusterAction CLUSTER_AUTHORIZATION_FAILED.
        decision = self.authorization.authorize(api_key, body, ctx)
        if decision.refused:
            return decision.answer
        denied = self._listener_gate(api_key, decision.body, ctx)
        if denied is not _ALLOWED:
            return denied
        if isinstance(decision.body, dict):  # a typed body (net/schema/) was checked field by field when decoded
            try:
                check_request(api_key, decision.body)  # every number fits its Kafka type, before any handler uses it
            except WireRangeError as e:
                raise BadRequest(str(e)) from None
        return decision.complete(run(decision.body, ctx))

    def _listener_gate(self, api_key: int, body: dict[str, Any], ctx: ConnectionContext) -> Any:
        """Kafka's listener split (inter.broker.listener.name, controller.listener.names): a client listener
        never serves what brokers send each other, in any security mode, whoever is logged in."""
        if ctx.listener in BROKER_LISTENERS or not broker_only(api_key, body):
            return _ALLOWED
        name = ApiKey(api_key).name
        _refusals.report(
            (api_key, ctx.listener), logging.WARNING, "refused %s from %s on the %s listener: brokers only", name,
            ctx.peer, ctx.listener,
        )  # fmt: skip
        if api_key == ApiKey.QUORUM:
            return None  # one-way: nothing to answer
        return error_body(ErrorCode.INVALID_REQUEST, f"{name} is served on the inter-broker listener only")

    # --- data path -----------------------------------------------------------

    def handle_produce(
        self, req: ProduceRequest, ctx: ConnectionContext
    ) -> ProduceResponse | Awaitable[ProduceResponse | None] | None:
        """Kafka's Produce, typed on both listeners: each partition's records are appended as the opaque bytes they
        came in (the log checks their batch headers and CRCs and stamps offsets, nothing per record); acks=0 has no
        answer, acks=-1 waits for the ISR up to the request's timeout."""
        acks = req.acks
        timeout_ms = req.timeout // _MS
        entries: dict[tuple[str, int], bytes] = {}
        for t in req.topic_data:
            name = t.name
            for p in t.partition_data:
                entries[(name, p.index)] = p.records or b""  # Kafka's null records: an empty set, refused by the log
        verifier = self.transactions.verifier
        if verifier is None:  # transaction.partition.verification.enable=false
            results, pending = self.replica_manager.append_records(acks, entries)
        else:
            tid = req.transactional_id
            first = verifier.first_batches(tid, entries)
            prior = ctx.appending
            if first or (prior is not None and not prior.done()):
                gate = ctx.appending = asyncio.get_running_loop().create_future()
                return self._verified_produce(ctx, gate, prior, tid, first, acks, entries, timeout_ms)
            results, pending = self.replica_manager.append_records(acks, entries, NO_GUARDS)
        if acks == 0:
            return None  # Kafka sends no response to acks=0
        if pending:
            return self._await_commit(results, pending, timeout_ms)
        return produce_response(results)

    async def _verified_produce(
        self,
        ctx: ConnectionContext,
        gate: "asyncio.Future[None]",
        prior: "asyncio.Future[None] | None",
        tid: str | None,
        first: "dict[tuple[str, int], FirstBatch]",
        acks: int,
        entries: dict[tuple[str, int], bytes],
        timeout_ms: int,
    ) -> ProduceResponse | None:
        """A produce whose transactional first batches the coordinator verifies (KIP-890), or one behind such a
        produce on its connection: appended once verified and once the earlier produce has appended."""
        verifier = self.transactions.verifier
        assert verifier is not None
        try:
            # The question is asked before the earlier produce has appended: the two waits overlap.
            guards, refused = await verifier.verify(tid, first) if first and tid is not None else ({}, {})
            if prior is not None and not prior.done():
                # Waited for only if not appended yet: a wait on a done future still costs loop turns, and the
                # produces of one verification answer (librdkafka's per-partition requests) then appended a turn
                # apart, the first one's replication round answered before the next was in the log.
                await asyncio.wait({prior})  # never cancels it
            kept = {tp: r for tp, r in entries.items() if tp not in refused}
            results, pending = self.replica_manager.append_records(acks, kept, guards)
        finally:
            gate.set_result(None)
            if ctx.appending is gate:
                ctx.appending = None
        for tp, code in refused.items():
            message = "the partition is not part of the producer's ongoing transaction (KIP-890 verification)"
            results[tp] = ProduceResult(code, message=message if code == ErrorCode.INVALID_TXN_STATE else None)
        results = {tp: results[tp] for tp in entries}  # the request's order
        if acks == 0:
            return None
        if pending:
            await self.replica_manager.wait_for_commit(results, pending, max(timeout_ms, 1) / 1000)
        return produce_response(results)

    async def _await_commit(
        self, results: dict[tuple[str, int], ProduceResult], pending: dict[tuple[str, int], int], timeout_ms: int
    ) -> ProduceResponse:
        await self.replica_manager.wait_for_commit(results, pending, max(timeout_ms, 1) / 1000)
        return produce_response(results)

    def handle_fetch(self, req: FetchRequest, ctx: ConnectionContext) -> FetchResponse | Awaitable[FetchResponse]:
        """Kafka's Fetch, typed on both listeners: each partition read as the opaque bytes its log holds, nothing
        per record. A consumer's fetch (replica_id < 0) is sessionless: its session fields are declined with session
        id 0, as every Kafka client accepts; a follower's (replica_id >= 0, only from brokers on the inter-broker
        listener) is in its fetch session (KIP-227), and its isolation is always the whole log."""
        max_wait = min(max(req.max_wait // _MS, 0), MAX_FETCH_WAIT_MS)
        min_bytes = max(req.min_bytes, 0)
        # Kafka reads at least one batch whatever the limits (KIP-74): a limit of 0 or below is as one of 1.
        max_bytes = max(req.max_bytes, 1)
        replica_id = req.replica_id
        if req.isolation_level not in (0, 1):
            raise BadRequest(f"isolation_level {req.isolation_level} is neither 0 (read_uncommitted) nor 1")
        read_committed = req.isolation_level == 1 and replica_id < 0
        specs = [
            FetchSpec(
                (t.topic, p.partition),
                p.fetch_offset,
                p.partition_max_bytes if p.partition_max_bytes > 0 else 1,
                p.current_leader_epoch,
                p.last_fetched_epoch,
                p.log_start_offset,
                read_committed,
            )
            for t in req.topics
            for p in t.partitions
        ]
        if replica_id < 0:
            return self._fetch(FetchContext(specs), max_wait, min_bytes, max_bytes, replica_id)
        # A follower's fetch: in its fetch session (KIP-227, broker/replica/fetch_session.py). A fetch with the final
        # epoch (-1, an older follower's) is sessionless.
        forgotten = [(t.topic, q) for t in req.forgotten_topics_data for q in t.partitions]
        try:
            context = self.fetch_sessions.new_context(
                replica_id, req.session_id, req.session_epoch, specs, forgotten, time.monotonic()
            )
        except FetchSessionError as e:  # Kafka's answer: the top-level error alone, the follower fetches in full
            return FetchResponse(error_code=int(e.code))
        return self._fetch(context, max_wait, min_bytes, max_bytes, replica_id)

    async def _fetch(
        self, context: FetchContext, max_wait: int, min_bytes: int, max_bytes: int, replica_id: int
    ) -> FetchResponse:
        results = await self.replica_manager.fetch_messages(context.specs, max_wait, min_bytes, max_bytes, replica_id)
        return fetch_response(context.answer(results), context.session_id if replica_id >= 0 else NO_SESSION)

    def handle_list_offsets(self, req: ListOffsetsRequest, ctx: ConnectionContext) -> ListOffsetsResponse:
        """Kafka's ListOffsets: per partition, the earliest (-2) or latest (-1) offset or the first at or after a
        timestamp, from its leader; a partition index below 0 names no partition (UNKNOWN_TOPIC_OR_PARTITION). With
        a replica id (>= 0) the latest is the log end offset and the isolation level is ignored, as Kafka's
        fetchOffsetAndTruncate asks of its leader when a fetch was out of range; Kafka answers any client so
        (KafkaApis.handleListOffsetRequest: an isolation level only for replica id -1), and so does this."""
        topics = []
        for t in req.topics:
            rows = []
            for p in t.partitions:
                if p.partition_index < 0:
                    err, ts, off = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1, -1
                else:
                    err, ts, off = self.replica_manager.list_offset(
                        (t.name, p.partition_index),
                        p.timestamp,
                        p.current_leader_epoch,
                        req.isolation_level == 1,
                        follower=req.replica_id >= 0,
                    )
                rows.append(
                    ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=err, timestamp=ts, offset=off
                    )
                )
            topics.append(ListOffsetsTopicResponse(name=t.name, partitions=tuple(rows)))
        return ListOffsetsResponse(topics=tuple(topics))

    # --- metadata and admin --------------------------------------------------

    def handle_api_versions(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "error_code": 0,
            "api_keys": [[k, lo, hi] for k, (lo, hi) in SUPPORTED_VERSIONS.items()],
        }
        if ctx.wire == "native":
            # Where a peer finds this broker's broker-only listeners (broker/network/peers.py listener_ports):
            # port numbers only, a port scan would show them too; connecting there needs a broker's login.
            answer["inter_broker_port"] = self.inter_broker_port
            answer["heartbeat_port"] = self.heartbeat_port
        return answer

    def handle_metadata(
        self, req: MetadataRequest, ctx: ConnectionContext
    ) -> MetadataResponse | Awaitable[MetadataResponse]:
        """Kafka's Metadata, typed, on both listeners: the brokers of the request's listener, the controller, the
        cluster id and the topics asked (nil: every one; the authorization table leaves out those the principal
        may not describe, resolves topic ids to names and fills in the authorized operations when asked). A Kafka
        client waits for the first published image (`_once_published`)."""
        listener = metadata_listener({}, ctx)
        if ctx.wire == "kafka" and self.image.offset < 0:
            return self._once_published(lambda: self._metadata(req, ctx, listener))
        return self._metadata(req, ctx, listener)

    def _metadata_map(self, body: dict[str, Any], ctx: ConnectionContext) -> Any:
        """Native v0 of Metadata (and of DescribeTopicPartitions, which was a Metadata request), for one more
        release: the map typed, authorized and answered as a typed Metadata, then written back as the map, with
        what the typed message has no field for: the listener the map may name ("listener": "kafka", the Kafka
        endpoints, for tools that print them) and the answering broker's own facts ("broker_info", for
        kl-dashboard). docs/COMPATIBILITY.md says why these stay in the map."""
        try:
            req = metadata_request(body)
        except MessageError as e:
            raise BadRequest(str(e)) from None
        listener = metadata_listener(body, ctx)
        answer = self._authorized(ApiKey.METADATA, req, ctx, lambda r, c: self._metadata(r, c, listener))
        if isinstance(answer, dict):  # refused or failed as a whole: the native error map already
            return answer
        return dict(metadata_response(answer), broker_info=self._broker_info())

    async def _once_published(self, answer: Callable[[], T]) -> T:
        """A Kafka client's Metadata (or DescribeCluster) to a broker that has not published its first image yet (it
        listens while it catches up with the metadata log; Kafka opens its client listeners only after that
        catch-up) waits for it, at most METADATA_CATCH_UP_WAIT_S. The empty image would name no broker and no
        topic, and librdkafka decommissions every broker a Metadata answer leaves out: a transactional producer
        whose group coordinator it forgot that way hangs in send_offsets_to_transaction (librdkafka issue 5511)."""
        deadline = time.monotonic() + METADATA_CATCH_UP_WAIT_S
        while self.image.offset < 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return answer()

    def handle_describe_cluster(
        self, req: DescribeClusterRequest, ctx: ConnectionContext
    ) -> DescribeClusterResponse | Awaitable[DescribeClusterResponse]:
        """Kafka's DescribeCluster (KIP-700), typed: the brokers of the request's listener, the controller a client
        of it can reach, the cluster id; `cluster_authorized_operations` is filled by the authorization table when
        asked. A Kafka client waits for the first published image, as for Metadata."""
        if ctx.wire == "kafka" and self.image.offset < 0:
            return self._once_published(lambda: self._describe_cluster(req, ctx))
        return self._describe_cluster(req, ctx)

    def _describe_cluster(self, req: DescribeClusterRequest, ctx: ConnectionContext) -> DescribeClusterResponse:
        if req.endpoint_type != BROKER_ENDPOINTS:  # KIP-919's controller endpoints: a controller's own listener
            return DescribeClusterResponse(
                error_code=int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
                error_message="a broker describes the brokers' endpoints only (endpoint_type 1)",
                endpoint_type=req.endpoint_type,
            )
        listed = [
            DescribeClusterBroker(broker_id=broker_id, host=host, port=port)
            for broker_id, host, port in self._brokers(metadata_listener({}, ctx), ctx.wire == "kafka")
        ]
        controller = reachable_controller(
            self.coordination.controller_id, {b.broker_id for b in listed}, self.config.broker_id
        )
        return DescribeClusterResponse(
            cluster_id=self.image.cluster_id or "", controller_id=controller, brokers=tuple(listed)
        )

    def _metadata(self, req: MetadataRequest, ctx: ConnectionContext, listener: str) -> MetadataResponse:
        image = self.image
        names = sorted(image.topics) if req.topics is None else [t.name for t in req.topics]
        topics = []
        auto_create = req.allow_auto_topic_creation and self.config.auto_create_topics_enable
        for i, name in enumerate(names):
            if name is None:  # named by an id no topic has (the table resolved the known ones to their names)
                topic_id = req.topics[i].topic_id if req.topics is not None else None
                if topic_id is not None and topic_id.int:
                    # name null, as Kafka answers an unknown id (v12+, where ids are asked for, may say null)
                    topics.append(
                        MetadataResponseTopic(error_code=int(ErrorCode.UNKNOWN_TOPIC_ID), topic_id=topic_id, name=None)
                    )
                continue  # neither a name nor an id asks for nothing (Kafka's MetadataRequest.topicIds)
            info = image.topics.get(name)
            if info is None:
                code = missing_topic_code(name)
                if auto_create:  # CREATE was checked by the table
                    code = self._auto_create(name)
                topics.append(MetadataResponseTopic(error_code=code, name=name))
                continue
            partitions = tuple(
                MetadataResponsePartition(
                    error_code=int(ErrorCode.LEADER_NOT_AVAILABLE) if st.leader < 0 else 0,
                    partition_index=st.partition,
                    leader_id=st.leader,
                    leader_epoch=st.leader_epoch,
                    replica_nodes=tuple(st.replicas),
                    isr_nodes=tuple(st.isr),
                )
                for st in sorted(info.partitions.values(), key=lambda st: st.partition)
            )
            topics.append(
                MetadataResponseTopic(
                    name=name,
                    topic_id=topic_uuid(info.topic_id),
                    is_internal=name.startswith("__"),
                    partitions=partitions,
                )
            )
        as_kafka = ctx.wire == "kafka"
        brokers = tuple(
            MetadataResponseBroker(node_id=broker_id, host=host, port=port)
            for broker_id, host, port in self._brokers(listener, as_kafka)
        )
        controller = self.coordination.controller_id
        if as_kafka:  # one a Kafka client can reach (native clients and kl-dashboard are told the active one)
            controller = reachable_controller(controller, {b.node_id for b in brokers}, self.config.broker_id)
        return MetadataResponse(
            brokers=brokers,
            cluster_id=image.cluster_id,
            controller_id=controller if controller is not None else -1,
            topics=tuple(topics),
        )

    def _auto_create(self, name: str) -> int:
        """Kafka's auto.create.topics.enable: start creating `name` (num.partitions, default.replication.factor)
        and answer LEADER_NOT_AVAILABLE, which clients retry, as Kafka does; an invalid name is refused."""
        try:
            validate_topic_name(name)
        except KafkaLiteError as e:
            return int(e.code)
        if name not in self._creating:
            self._creating.add(name)
            task = asyncio.ensure_future(self._create_automatically(name))
            task.add_done_callback(lambda _t: self._creating.discard(name))
        return int(ErrorCode.LEADER_NOT_AVAILABLE)

    async def _create_automatically(self, name: str) -> None:
        rf = min(self.config.default_replication_factor, max(1, len(self.image.live_brokers())))
        try:
            await self.channel.create_topic(name, self.config.num_partitions, rf, {})
            log.info("created topic %s automatically (%d partitions, RF %d)", name, self.config.num_partitions, rf)
        except TopicAlreadyExistsError:
            pass
        except KafkaLiteError as e:
            log.info("could not create topic %s automatically yet: %s", name, e)

    def _brokers(self, listener: str, as_kafka: bool) -> list[list[Any]]:
        """Brokers as [id, host, port] of the listener the request came in on (Kafka's rule: brokers without that
        listener are left out). Kafka clients get Kafka's list (MetadataImage.listed_brokers: a broker fenced
        less than a session timeout ago is still named, as Kafka names a crashed broker until its session
        expires); native clients get the unfenced brokers only, which is how they (and kl-cluster) tell that a
        restarted broker is back."""
        cfg = self.config
        if as_kafka:
            session_ms = (
                cfg.zookeeper_session_timeout_ms if cfg.coordination == "zookeeper" else cfg.broker_session_timeout_ms
            )
            listed = self.image.listed_brokers(session_ms / 1000)
        else:
            listed = sorted((b for b in self.image.brokers.values() if not b.fenced), key=lambda b: b.id)
        return [[b.id, *ep] for b in listed if (ep := cfg.endpoint_of(b, listener)) is not None]

    def _broker_info(self) -> dict[str, Any]:
        return {
            "broker_id": self.config.broker_id,
            "metrics_port": self.metrics_port,
            "version": package_version(),
            "coordination": self.config.coordination,
            "controller_epoch": self.coordination.controller_epoch,
            "rack": None,
        }

    # --- broker to broker ------------------------------------------------------

    def handle_quorum(self, body: dict[str, Any], ctx: ConnectionContext) -> None:
        msg = body.get("m")
        if not isinstance(msg, list):
            raise BadRequest("quorum message must be a list")
        self.coordination.receive(msg)
        return None

    def handle_broker_heartbeat(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        """Heartbeats are not taken here (this loop may be the busy one): the answer names the heartbeat
        listener, served by a thread of its own (broker/controller/heartbeat.py)."""
        if self.heartbeat_port < 0:
            return error_body(ErrorCode.UNSUPPORTED_VERSION, "this broker takes no heartbeats (not a quorum voter)")
        return {"error_code": 0, "heartbeat_port": self.heartbeat_port}

    async def handle_update_metadata(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        """The controller asks whether this broker has applied the metadata below `applied` (within
        `timeout_ms`); the answer says how far it got (broker/metadata/propagation.py)."""
        propagation = self.controller.propagation
        if propagation is None:
            return error_body(ErrorCode.BROKER_NOT_AVAILABLE, "this broker is still starting")
        wait_s = min(_int(body, "timeout_ms"), MAX_FETCH_WAIT_MS) / 1000
        return {"error_code": 0, "applied": await propagation.applied_here(_int(body, "applied"), wait_s)}

    def handle_envelope(self, body: dict[str, Any], ctx: ConnectionContext) -> Awaitable[dict[str, Any]]:
        """A client's typed request another broker forwarded to this controller (KIP-590): served by the api's
        own handler as that client, its answer sent back typed. The forwarding broker authorized it."""
        try:
            request, forwarded = unwrap(body, ctx)
        except MessageError as e:
            raise BadRequest(str(e)) from None
        api = type(request).API_KEY
        if api not in FORWARDED_APIS:
            raise BadRequest(f"api {api} is not forwarded to the controller")
        run = cast(Callable[..., Any], self._ctx_handlers[ApiKey(api)])  # the forwarded apis take the context
        return self._enveloped(run(request, forwarded))

    @staticmethod
    async def _enveloped(result: Any) -> dict[str, Any]:
        answer = await result if inspect.isawaitable(result) else result
        return answer if isinstance(answer, dict) else {"error_code": 0, "response": encode_message(answer)}

    def handle_alter_partition(self, body: dict[str, Any], ctx: ConnectionContext) -> Awaitable[dict[str, Any]]:
        isr = body.get("isr")
        if not isinstance(isr, list) or not all(isinstance(x, int) for x in isr):
            raise BadRequest("isr must be a list of broker ids")
        silent = body.get("silent")
        if silent is not None and (not isinstance(silent, list) or not all(isinstance(x, int) for x in silent)):
            raise BadRequest("silent must be a list of broker ids")
        args = (
            body.get("topic"),
            _int(body, "partition"),
            _int(body, "leader"),
            _int(body, "leader_epoch"),
            _int(body, "partition_epoch"),
            isr,
            # The proposer's process and request number, optional (brokers from before they existed send
            # neither): the controller refuses requests of a restarted process and overtaken ones.
            None if body.get("incarnation") is None else _int(body, "incarnation"),
            None if body.get("seq") is None else _int(body, "seq"),
            # The dropped members the leader heard no fetch from within the lag time, optional too (None:
            # a proposer from before it existed; the controller then moves no leadership, see
            # ControllerLogic._move_isolated_leader).
            silent,
        )
        return self._alter_partition(args)

    def handle_broker_registration(self, body: dict[str, Any], ctx: ConnectionContext) -> Awaitable[dict[str, Any]]:
        """A broker tells the controller where clients reach it (Kafka's BrokerRegistration, listeners part):
        kafka_port -1 = no Kafka listener; "listeners" [[name, host, port, wire], ...] its client listeners
        (absent from brokers older than named listeners)."""
        host = body.get("kafka_host")
        if host is not None and not isinstance(host, str):
            raise BadRequest("kafka_host must be a string or nil")
        listeners = None if body.get("listeners") is None else registered_listeners(body["listeners"])
        return self._controller_call(
            self.controller.set_kafka_endpoint(_int(body, "broker_id"), host, _int(body, "kafka_port"), listeners)
        )

    async def _controller_call(self, call: Awaitable[None]) -> dict[str, Any]:
        try:
            await call
            return {"error_code": 0}
        except Exception as e:
            return error_body(*error_code_of(e))

    async def _alter_partition(self, args: tuple[Any, ...]) -> dict[str, Any]:
        return await self._controller_call(self.controller.alter_partition(*args))
