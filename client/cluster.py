"""The one client core: bootstrap, metadata, a connection per broker, and
request routing to partition leaders. Producer, Consumer and Admin sit on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Iterable

from net.connection import BrokerConnection
from net.errors import ErrorCode, KafkaLiteError, NetworkError, SaslAuthenticationError, error_for, topic_error
from net.protocol import ApiKey
from net.retry import Backoff, retry_until
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from net.schema.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from net.security import ClientSecurity

log = logging.getLogger("kafkalite.client")


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


@dataclass(frozen=True)
class CoordinatorKey:
    """The key of a group coordinator's own connection among a client's connections (by broker id)."""

    broker_id: int


@dataclass(slots=True)
class PartitionMeta:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error: int = 0


@dataclass
class TopicMeta:
    name: str
    error: int
    partitions: dict[int, PartitionMeta] = field(default_factory=dict)
    is_internal: bool = False
    topic_id: str = ""


def metadata_request(topics: list[str] | None, allow_auto_topic_creation: bool = False) -> MetadataRequest:
    """Kafka's Metadata request for `topics` (None: every topic; []: none, the brokers and the controller only).
    Only a producer's (Kafka's allow.auto.create.topics) may create a missing topic."""
    return MetadataRequest(
        topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics),
        allow_auto_topic_creation=allow_auto_topic_creation and bool(topics),
    )


class ClusterMetadata:
    """The client's view of brokers and leaders, refreshed from Metadata responses."""

    def __init__(self) -> None:
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicMeta] = {}
        self.cluster_id = ""
        self.controller_id = -1

    def update(self, answer: MetadataResponse, requested: list[str] | None) -> None:
        self.brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        self.cluster_id = answer.cluster_id or ""
        self.controller_id = answer.controller_id
        seen = set()
        for t in answer.topics:
            if t.name is None:  # an id no topic has: this client asks by name only
                continue
            topic_id = t.topic_id.hex if t.topic_id is not None and t.topic_id.int else ""
            tm = TopicMeta(t.name, t.error_code, is_internal=t.is_internal, topic_id=topic_id)
            old = self.topics.get(tm.name)
            same_topic = old is not None and bool(topic_id) and old.topic_id == topic_id
            for pa in t.partitions:
                p, epoch = pa.partition_index, pa.leader_epoch
                known = old.partitions.get(p) if old is not None and same_topic else None
                if known is not None and epoch < known.leader_epoch:
                    # KIP-320: a broker whose metadata lags names an older leader; it may still think it leads
                    # and answer with its stale high watermark. Keep the newer view.
                    tm.partitions[p] = known
                    continue
                tm.partitions[p] = PartitionMeta(
                    p, pa.leader_id, epoch, list(pa.replica_nodes), list(pa.isr_nodes), pa.error_code
                )
            if tm.error and tm.name in self.topics and tm.error != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue  # keep the last good view through a transient error
            self.topics[tm.name] = tm
            seen.add(tm.name)
        if requested is None:
            for name in list(self.topics):
                if name not in seen:
                    del self.topics[name]

    def partition_count(self, topic: str) -> int | None:
        tm = self.topics.get(topic)
        if tm is None or tm.error:
            return None
        return len(tm.partitions)

    def partitions(self, topic: str, action: str = "use") -> list[int]:
        """The topic's partition ids, or the error that says why there are none, naming the topic."""
        tm = self.topics.get(topic)
        if tm is None or tm.error:
            raise topic_error(tm.error if tm is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic, action)
        return sorted(tm.partitions)

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch this view of the partition is from (-1 if unknown), sent as current_leader_epoch."""
        tm = self.topics.get(topic)
        pm = tm.partitions.get(partition) if tm is not None else None
        return pm.leader_epoch if pm is not None else -1

    def leader(self, topic: str, partition: int) -> int | None:
        tm = self.topics.get(topic)
        if tm is None:
            return None
        pm = tm.partitions.get(partition)
        if pm is None or pm.leader < 0:
            return None
        return pm.leader


class KafkaLiteClient:
    """Async core shared by every client. Not thread-safe: use it from its event loop."""

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        client_id: str = "kafkalite",
        request_timeout_ms: int = 30000,
        metadata_max_age_ms: int = 300000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security or ClientSecurity()
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.metadata = ClusterMetadata()
        self._conns: dict[int | tuple[str, int] | CoordinatorKey, BrokerConnection] = {}
        self._connecting: dict[int | tuple[str, int], asyncio.Task[BrokerConnection]] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._wanted_topics: set[str] = set()
        # Kafka's allow.auto.create.topics: a producer's metadata requests may create missing topics on brokers
        # with auto.create.topics.enable; consumers and admins never do.
        self.allow_auto_topic_creation = False
        self.closed = False

    @classmethod
    def from_config(cls, bootstrap_servers: str | Iterable[str], cfg: Any) -> "KafkaLiteClient":
        """The client of a producer, consumer or admin, from its config (client/config.py)."""
        return cls(
            bootstrap_servers,
            cfg.client_id,
            cfg.request_timeout_ms,
            cfg.metadata_max_age_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            security=cfg.security(),
        )

    def backoff(self) -> Backoff:
        """A fresh retry backoff of this client's retry.backoff.ms / retry.backoff.max.ms (net/retry.py)."""
        return Backoff(self.retry_backoff * 1000, self.retry_backoff_max_ms)

    # --- connections ---------------------------------------------------------

    async def _connect(self, key: Any, host: str, port: int) -> BrokerConnection:
        conn = self._conns.get(key)
        if conn is not None and conn.connected:
            return conn
        task = self._connecting.get(key)
        if task is None:

            async def open_() -> BrokerConnection:
                c = BrokerConnection(host, port, self.client_id, self.security)
                await c.connect(timeout=min(self.request_timeout, 10))
                self._conns[key] = c
                return c

            task = asyncio.ensure_future(open_())
            self._connecting[key] = task
            task.add_done_callback(lambda _: self._connecting.pop(key, None))
        return await asyncio.shield(task)

    async def connection(self, broker_id: int) -> BrokerConnection:
        addr = self.metadata.brokers.get(broker_id)
        if addr is None:
            raise NetworkError(f"broker {broker_id} is not in the cluster metadata")
        return await self._connect(broker_id, *addr)

    async def coordinator_connection(self, broker_id: int) -> BrokerConnection:
        """A connection of its own to a group coordinator, as Kafka's Java client keeps one: a broker handles a
        connection's requests in order, so a JoinGroup parked for a rebalance would hold this client's fetches
        from that broker on a shared connection."""
        addr = self.metadata.brokers.get(broker_id)
        if addr is None:
            raise NetworkError(f"broker {broker_id} is not in the cluster metadata")
        return await self._connect(CoordinatorKey(broker_id), *addr)

    async def any_connection(self, avoid: Collection[int] = ()) -> BrokerConnection:
        """A connection to some broker: a known one (not a coordinator's, where a parked JoinGroup may hold
        what follows), else the bootstrap list in random order. `avoid`: brokers not to ask (one whose answers
        are overdue); their bootstrap addresses may still be tried last."""
        for key, conn in self._conns.items():
            if conn.connected and not isinstance(key, CoordinatorKey) and key not in avoid:
                return conn
        candidates: list[tuple[int | tuple[str, int], tuple[str, int]]] = [
            (b, addr) for b, addr in self.metadata.brokers.items() if b not in avoid
        ]
        random.shuffle(candidates)
        boot = list(self.bootstrap)
        random.shuffle(boot)
        candidates += [(addr, addr) for addr in boot]
        errors = []
        for key, (host, port) in candidates:
            try:
                return await self._connect(key, host, port)
            except SaslAuthenticationError:
                raise  # the same credentials fail everywhere: say so, rather than "no broker reachable"
            except KafkaLiteError as e:
                errors.append(str(e))
        raise NetworkError("no broker reachable: " + "; ".join(dict.fromkeys(errors)))

    async def request(
        self,
        broker_id: int | None,
        api: ApiKey,
        body: dict[str, Any],
        timeout: float | None = None,
        coordinator: bool = False,
    ) -> dict[str, Any]:
        """`api` to `broker_id` (None: any broker); with `coordinator`, on that group coordinator's own
        connection (`coordinator_connection`)."""
        conn = await self._connection_for(broker_id, coordinator)
        answer: dict[str, Any] = await conn.request(api, body, timeout=timeout or self.request_timeout)
        return answer

    async def call(
        self, broker_id: int | None, request: Any, timeout: float | None = None, coordinator: bool = False
    ) -> Any:
        """A typed request (net/schema/) to `broker_id` as `request` sends a map, and its typed answer; a request
        that failed as a whole is raised as its error (BrokerConnection.call)."""
        conn = await self._connection_for(broker_id, coordinator)
        return await conn.call(request, timeout or self.request_timeout)

    async def _connection_for(self, broker_id: int | None, coordinator: bool) -> BrokerConnection:
        if broker_id is None:
            return await self.any_connection()
        return await (self.coordinator_connection(broker_id) if coordinator else self.connection(broker_id))

    # --- metadata ------------------------------------------------------------

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, avoid: Collection[int] = ()
    ) -> ClusterMetadata:
        """Fetch metadata for `topics` (None: all topics). Concurrent callers share one request, except with
        `avoid` (brokers not to ask): the shared one may be waiting on one of them."""
        if topics is not None:
            self._wanted_topics.update(topics)
        if avoid:
            await self._do_refresh(avoid)
            return self.metadata
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(self._do_refresh())
        await asyncio.shield(self._refresh)
        return self.metadata

    async def _do_refresh(self, avoid: Collection[int] = ()) -> None:
        wanted = sorted(self._wanted_topics) if self._wanted_topics else None
        request = metadata_request(wanted, self.allow_auto_topic_creation)

        async def ask() -> Any:
            conn = await self.any_connection(avoid)
            return await conn.call(request, self.request_timeout)

        # Metadata may ask any broker: one whose connection breaks (a broker just killed) is dropped and the next
        # asked, as Kafka's clients do, rather than failing the refresh (a consumer's start, say). A request that
        # failed as a whole is raised as its error (BrokerConnection.call).
        for _ in range(len(self.metadata.brokers) + len(self.bootstrap)):
            try:
                answer = await ask()
                break
            except NetworkError as e:
                log.info("metadata request failed, asking another broker: %s", e)
        else:
            answer = await ask()
        self.metadata.update(answer, wanted)

    async def list_topics(self) -> dict[str, TopicMeta]:
        md = ClusterMetadata()
        md.update(await self.call(None, metadata_request(None)), None)
        return md.topics

    async def leader_for(self, topic: str, partition: int) -> int:
        leader = self.metadata.leader(topic, partition)
        if leader is None:
            await self.refresh_metadata([topic])
            leader = self.metadata.leader(topic, partition)
        if leader is None:
            # e.g. TOPIC_AUTHORIZATION_FAILED: the reason, not "it has 0 partitions"
            partitions = self.metadata.partitions(topic)
            if partition not in partitions:
                raise error_for(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"partition {partition} of topic '{topic}' does not exist (it has {len(partitions)})",
                )
            raise error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
        return leader

    async def list_offsets(
        self, tps: Iterable[tuple[str, int]], timestamp: int, isolation_level: int = 0
    ) -> dict[tuple[str, int], int]:
        """Kafka's ListOffsets, routed to each partition's leader: EARLIEST (-2), LATEST (-1, the high
        watermark; with isolation_level 1, read_committed, the last stable offset) or the first offset at/after a
        timestamp (-1 if none). All or nothing: a partition's error (after `list_offsets_each`'s retries) is
        raised."""
        results = await self.list_offsets_each(tps, timestamp, isolation_level)
        out: dict[tuple[str, int], int] = {}
        for tp, r in results.items():
            if isinstance(r, KafkaLiteError):
                raise r
            out[tp] = r
        return out

    async def list_offsets_each(
        self, tps: Iterable[tuple[str, int]], timestamp: int, isolation_level: int = 0
    ) -> dict[tuple[str, int], int | KafkaLiteError]:
        """`list_offsets` per partition: its offset or its error, as Kafka's Admin.listOffsets answers each
        partition on its own (kafka-get-offsets.sh prints the others and skips one without a leader).

        A retriable error (OFFSET_NOT_AVAILABLE while a new leader's high watermark catches up, KIP-207;
        NOT_LEADER_OR_FOLLOWER or a lost connection after a failover, whose topic's metadata is then asked
        again) is retried with backoff for up to request.timeout.ms, as Kafka's clients do; only the partitions
        that failed are asked again. Other errors, and an unknown topic or partition, are that partition's answer
        at once."""
        pending = list(dict.fromkeys(tps))
        out: dict[tuple[str, int], int | KafkaLiteError] = {}

        def again(e: KafkaLiteError) -> bool:  # a partition that does not exist is said at once
            return e.retriable and e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        async def attempt() -> None:
            nonlocal pending
            answers = await self._list_offsets_once(pending, timestamp, isolation_level)
            out.update(answers)
            failed = {tp: a for tp, a in answers.items() if isinstance(a, KafkaLiteError) and again(a)}
            pending = list(failed)
            if failed:  # those are asked again after a backoff
                raise next(iter(failed.values()))

        with contextlib.suppress(KafkaLiteError):  # out of time: those partitions keep their last error
            deadline = time.monotonic() + self.request_timeout
            await retry_until(attempt, self.backoff(), KafkaLiteError, lambda e: True, deadline=deadline)
        return out

    async def _list_offsets_once(
        self, tps: list[tuple[str, int]], timestamp: int, isolation_level: int = 0
    ) -> dict[tuple[str, int], int | KafkaLiteError]:
        out: dict[tuple[str, int], int | KafkaLiteError] = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in tps:
            try:
                by_leader.setdefault(await self.leader_for(tp[0], tp[1]), []).append(tp)
            except KafkaLiteError as e:  # no leader known (yet), or no such partition
                out[tp] = e
        for leader, group in by_leader.items():
            topics: dict[str, list[ListOffsetsPartition]] = {}
            for t, p in group:
                # With our leader epoch, a leader of another epoch refuses instead of answering (KIP-320).
                epoch = self.metadata.leader_epoch(t, p)
                topics.setdefault(t, []).append(
                    ListOffsetsPartition(partition_index=p, timestamp=timestamp, current_leader_epoch=epoch)
                )
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation_level,
                topics=tuple(ListOffsetsTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()),
            )
            try:
                conn = await self.connection(leader)
                answer = await conn.call(request, timeout=self.request_timeout)
            except KafkaLiteError as e:  # the leader is gone or unreachable, or refused the request as a whole
                if isinstance(e, NetworkError):
                    for t in topics:  # the next attempt asks the metadata again
                        self.invalidate(t)
                out.update(dict.fromkeys(group, e))
                continue
            for topic in answer.topics:
                for part in topic.partitions:
                    tp = (topic.name, part.partition_index)
                    if not part.error_code:
                        out[tp] = part.offset
                        continue
                    err = error_for(part.error_code)
                    if err.retriable and err.code != ErrorCode.OFFSET_NOT_AVAILABLE:
                        # A stale leader (NOT_LEADER_OR_FOLLOWER after a failover): forget it, so the next
                        # attempt asks the metadata again instead of the same broker forever.
                        self.invalidate(topic.name)
                    out[tp] = error_for(part.error_code, f"list offsets for {tp[0]}-{tp[1]}: {err.code.name}")
            for tp in group:  # a leader that left a partition out of its answer
                out.setdefault(
                    tp, error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"list offsets for {tp[0]}-{tp[1]}: no answer")
                )
        return out

    def invalidate(self, topic: str) -> None:
        """Drop what we believe about `topic` (after NOT_LEADER etc.) so the next lookup refreshes."""
        tm = self.metadata.topics.get(topic)
        if tm is not None:
            for pm in tm.partitions.values():
                pm.leader = -1

    async def close(self) -> None:
        self.closed = True
        for c in list(self._conns.values()):
            c.close()
        self._conns.clear()
