"""BrokerServer: wires the log, the controller quorum, the partitions, the apis
and the network together, runs the periodic chores and shuts down cleanly.

A single broker is a cluster of one: the same quorum, metadata log and
replication code run, with this broker as the only voter and replica.

The coordination (who is controller, the committed metadata records) is the
`Coordination` interface of election/coordination.py: the custom quorum by
default, ZooKeeper with coordination=zookeeper. Only `_make_coordination` knows which.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
import uuid
import zlib
from pathlib import Path
from typing import Any, Awaitable, Callable

from broker.controller.channel import ControllerChannel
from broker.controller.heartbeat import HeartbeatBoard, HeartbeatThread
from broker.controller.logic import PartitionLimits
from broker.controller.quorum_driver import QuorumDriver, next_incarnation
from broker.controller.service import ControllerService
from broker.group.api import GroupApis
from broker.group.coordinator import GroupCoordinator
from broker.group.group_configs import GroupConfigs
from broker.log.config import LogConfig, log_config_for
from broker.log.manager import LogManager
from broker.metadata.image import MetadataImage
from broker.metadata.metadata_log import METADATA_TOPIC, DiskMetadataLog
from broker.metadata.propagation import MetadataPropagation
from broker.metadata.records import UserScramCredentialRecord, decode
from broker.metrics.broker_metrics import BrokerMetrics
from broker.metrics.metrics_server import MetricsServer
from broker.network.authenticator import ListenerSecurity
from broker.network.connection_quotas import ConnectionQuotas
from broker.network.peers import BrokerPeers
from broker.network.request_ranges import check_request
from broker.network.server import (
    INTER_BROKER_LISTENER,
    RELAY_LISTENER,
    ConnectionContext,
    ConnectionLimits,
    NativeCodec,
    NetServer,
    WireCodec,
    bind_listener,
    error_body,
)
from broker.quota.client_quota import ClientQuotaManager
from broker.quota.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuota,
)
from broker.replica.alter_partition_manager import AlterPartitionManager
from broker.replica.partition import Partition
from broker.replica.replica_fetcher import ReplicaFetcher
from broker.replica.replica_manager import ReplicaManager
from broker.security.acl import AclAuthorizer
from broker.security.bootstrap import read_bootstrap
from broker.security.config import SECRET_MECHANISM
from broker.security.inter_broker import secret_lookup
from broker.security.listeners import BROKER, KAFKA, NATIVE
from broker.security.request_authorizer import RequestAuthorizer
from broker.security.scram import ScramCredential
from broker.server import dynamic_config
from broker.server.config import BrokerConfig
from broker.server.kafka_apis import KafkaApis
from broker.server.metrics_state import StateCollector
from broker.server.security_api import SecurityApis
from broker.share.api import ShareApis
from broker.transaction.api import TransactionApis
from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.verification import VERIFY_TIMEOUT_S, TransactionVerifier
from broker.utils.long_lived import freeze_long_lived
from election import QuorumConfig
from election.coordination import Coordination
from net.errors import KafkaLiteError, MalformedRequest, error_code_of
from net.protocol import ApiKey
from net.security import uses_sasl, uses_ssl

log = logging.getLogger("kafkalite.broker")
TICK_S = 0.1
METADATA_LOG_CONFIG = {"segment.bytes": "8388608", "retention.ms": "-1", "retention.bytes": "-1"}
# AlterPartition relayed through ZooKeeper (relay_to_controller): from a broker, by the coordination's path.
RELAY_CONTEXT = ConnectionContext("zookeeper", RELAY_LISTENER)
# The transaction coordinator's markers for partitions this broker leads: served in-process, as a broker's.
INTERNAL_CONTEXT = ConnectionContext("local", INTER_BROKER_LISTENER)
ENDPOINT_CHECK_S = 0.5  # how soon a started broker's Kafka listener appears in every broker's Metadata


def _codec(wire: str) -> Callable[[int], WireCodec]:
    if wire == "kafka":
        # Imported for a Kafka listener only: it brings kio (Kafka's message schemas), ~15 ms of every start.
        from broker.network.kafka.codec import KafkaCodec

        return KafkaCodec
    return NativeCodec


LANE_SPAN = 64  # consecutive partitions of a topic that share a replica fetcher lane


def fetcher_lane(topic: str, partition: int, lanes: int) -> int:
    """The replica fetcher lane (of num.replica.fetchers per leader) that follows a partition: a stable hash of its
    topic and its run of LANE_SPAN partitions. A produce on one partition wakes a fetch covering a share of the
    partitions followed from its leader, not all of them (a flood's thousands spread over the lanes); and the
    partitions of a small topic, which a producer's requests and a transaction's markers append to together, share
    one lane: one fetch round carries them all to a follower, where a lane per partition took a round each (and
    each round's acknowledgement) for a transaction's eight partitions."""
    return zlib.crc32(f"{topic}-{partition // LANE_SPAN}".encode()) % lanes


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.log_manager: LogManager | None = None
        self.net: NetServer | None = None
        self.kafka_net: NetServer | None = None
        self.broker_net: NetServer | None = None  # the inter-broker listener
        self.nets: dict[str, NetServer] = {}  # every listener by name (NATIVE, KAFKA, BROKER among them)
        self.metrics_server: MetricsServer | None = None
        self.quorum: Coordination | None = None
        # Made by start(); stop() closes whichever exist (a start can fail part way).
        self.peers: BrokerPeers | None = None
        self.alter_partitions: AlterPartitionManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.share: ShareApis | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self.heartbeat: HeartbeatThread | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}  # (leader, lane): num.replica.fetchers
        self.follower_quota: ReplicationQuota | None = None  # the replica fetchers' throttle, made at start

    async def start(self) -> None:
        """Build every part complete, in dependency order, then open the listeners to requests."""
        cfg = self.config
        for d in cfg.log_dirs:
            Path(d).mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        self.image = MetadataImage()
        self.metrics = BrokerMetrics(cfg.broker_id, cfg.metrics_topic_labels)
        self.log_manager = LogManager(
            [Path(d) for d in cfg.log_dirs],
            cfg.topic_config_defaults(),
            topic_config=self._topic_config_or_none,
            open_files_max=cfg.log_segment_open_files_max,
        )
        # Recovery can read whole segments; keep it off the event loop even though nothing listens yet.
        await loop.run_in_executor(None, self.log_manager.startup)
        # The listeners are bound first: the coordination registers our port (port 0 picks one). They serve
        # nothing until their NetServer starts below, once the handlers exist. What brokers send each other
        # arrives on a listener of its own, BROKER (Kafka's inter.broker.listener.name and
        # controller.listener.names): the client listeners refuse it (broker/server/kafka_apis.py BROKER_LISTENERS).
        self.listeners = cfg.listener_list()
        socks: dict[str, socket.socket] = {}
        for lst in self.listeners:
            try:
                socks[lst.name] = bind_listener(lst.host, lst.port)
            except OSError as e:
                for bound in socks.values():
                    bound.close()
                # kl-broker prints "<reason> (<filename>)": name the listener that could not bind.
                raise OSError(e.errno, e.strerror, f"listener {lst.name} {lst.host}:{lst.port}") from None
        cfg.bind_ports({name: s.getsockname()[1] for name, s in socks.items()})
        broker_sock = socks[BROKER]
        # How this broker connects to the others' inter-broker listener: TLS and/or its SASL login (its own, or
        # the cluster secret's), after asking their native listener for the port.
        self.inter_broker_security = cfg.inter_broker_security()
        self.discovery_security = cfg.native_client_security()
        ib_protocol, by_secret = cfg.broker_protocol()
        mutual_tls = uses_ssl(ib_protocol) and cfg.ssl_client_auth == "required"
        if len(cfg.voters()) > 1 and not by_secret and not uses_sasl(ib_protocol) and not mutual_tls:
            log.warning(
                "the inter-broker listener has no login (no SASL, no inter.broker.secret): anyone who reaches port "
                "%d can act as a broker; set inter.broker.secret.file (kl-cluster up makes one)",
                broker_sock.getsockname()[1],
            )
        # This process's incarnation, above every earlier one of this broker: sent with quorum fetches (or in
        # its ZooKeeper registration) and AlterPartition, so the controller can refuse proposals of a process
        # that has since restarted.
        self.incarnation = next_incarnation(Path(cfg.log_dirs[0]))
        # bootstrap.records holds the records' dicts (JSON): read into their classes, as the log's are.
        bootstrap = [r for r in map(decode, read_bootstrap(Path(cfg.log_dirs[0]))) if r is not None]
        self._bootstrap_credentials = {
            (c.name, c.mechanism): c.credential() for c in bootstrap if isinstance(c, UserScramCredentialRecord)
        }
        # Heartbeats between the quorum's voters, on a thread of their own (custom mode with peers only:
        # ZooKeeper's client pings from its own thread, and a broker alone has nobody to tell).
        heartbeat_sock = None
        self.heartbeat_board = None
        if cfg.coordination == "custom" and len(cfg.voters()) > 1:
            heartbeat_sock = bind_listener(cfg.host, 0)
            self.heartbeat_board = HeartbeatBoard(cfg.broker_id, self.incarnation, cfg.broker_session_timeout_ms)
        self.quorum = self._make_coordination()
        # The liveness rule follows the mode: ZooKeeper's session timeout decides there (registration_expiry).
        session_timeout = (
            cfg.zookeeper_session_timeout_ms if cfg.coordination == "zookeeper" else cfg.broker_session_timeout_ms
        )
        voters = cfg.voters()
        self.controller = ControllerService(
            cfg.broker_id,
            self.image,
            self.quorum,
            voters,
            session_timeout,
            uuid.uuid4().hex[:22],
            # The broker-level default; a topic's own unclean.leader.election.enable overrides it.
            unclean_default=cfg.topic_config_defaults().unclean_leader_election_enable,
            min_insync_default=cfg.topic_config_defaults().min_insync_replicas,
            bootstrap_records=bootstrap,
            rebalance=cfg.rebalance_policy(),
            limits=PartitionLimits(cfg.max_partitions, cfg.max_broker_partitions),
        )
        self.peers = BrokerPeers(
            cfg.broker_id, self._broker_address, self.inter_broker_security, self.discovery_security
        )
        self.channel = ControllerChannel(cfg.broker_id, self.quorum, self.controller, self.peers)
        self.alter_partitions = AlterPartitionManager(cfg.broker_id, self.incarnation, self.channel, self.metrics)
        self.replica_manager = ReplicaManager(
            cfg.broker_id,
            self.log_manager,
            self.topic_config,
            cfg.replica_lag_time_max_ms,
            self.alter_partitions.propose,
            self.metrics,
            cfg.producer_id_expiration_ms,
            cfg.producer_id_expiration_check_interval_ms,
            on_follow=self._follow,
            on_unfollow=self._unfollow,
            on_change=self._on_partition_change,
            replica_silence_time_max_ms=cfg.replica_silence_time_max_ms,
            replica_fetch_wait_max_ms=cfg.replica_fetch_wait_max_ms,
            quorum_commit=cfg.replica_quorum_commit_enable,
        )
        # Replication throttles (KIP-73): the rates are dynamic broker configs read from the metadata image at
        # each check, the throttled replicas the topics' configs.
        self.replica_manager.leader_quota = self._replication_quota(LEADER_RATE, LEADER_REPLICAS)
        self.follower_quota = self._replication_quota(FOLLOWER_RATE, FOLLOWER_REPLICAS)
        self.controller.propagation = MetadataPropagation(
            cfg.broker_id, self.quorum, self.image, self.peers, self.replica_manager.settled
        )
        self.group_coordinator = GroupCoordinator(
            self.replica_manager, cfg.group_config(), cfg.offsets_topic_num_partitions, cfg.offsets_commit_timeout_ms
        )
        # Each group's own configs (IncrementalAlterConfigs on the GROUP resource), else the broker's: read by the
        # consumer protocol's sessions and heartbeats here, and by the share groups below.
        group_configs = GroupConfigs(cfg.to_props(), lambda: self.image.group_configs)
        self.group_coordinator.logic.consumer.use_group_configs(
            group_configs.consumer_session_timeout_ms, group_configs.consumer_heartbeat_interval_ms
        )
        self.txn_coordinator = TransactionCoordinator(
            cfg.broker_id,
            self.replica_manager,
            lambda: self.image,
            cfg.transaction_state_log_num_partitions,
            cfg.transaction_max_timeout_ms,
            cfg.transactional_id_expiration_ms,
            cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
        )
        transactions = TransactionApis(
            self.txn_coordinator, self.replica_manager, lambda: self.image, self.group_coordinator.partition_for
        )
        self.txn_coordinator.send_markers = self._send_markers
        if cfg.transaction_partition_verification_enable:
            transactions.verifier = TransactionVerifier(
                self.replica_manager.partitions,
                lambda: self.image,
                cfg.transaction_state_log_num_partitions,
                self._send_verification,
            )
        self.share = ShareApis(
            cfg,
            group_configs,
            cfg.broker_id,
            self.group_coordinator,
            self.replica_manager,
            lambda: self.image,
            self.peers.call,
            self.channel.create_topic,
            lambda: max(len(cfg.voters()), len(self.image.brokers)),
        )
        self.metrics_server = await MetricsServer.start(
            self.metrics,
            cfg.metrics_host,
            cfg.metrics_port,
            cfg.metrics_basic_auth_users,
            cfg.metrics_ssl_keystore_location,
        )
        acl_authorizer = (
            AclAuthorizer(cfg.super_user_set(), cfg.allow_everyone_if_no_acl_found) if cfg.authorizer == "acl" else None
        )
        self.authz = RequestAuthorizer(acl_authorizer, self.image)
        groups = GroupApis(cfg, self.group_coordinator, self.image, self.channel, self.txn_coordinator.partition_for)
        groups.other_groups.append(self.share.groups.listed)
        self.apis = KafkaApis(
            cfg,
            replica_manager=self.replica_manager,
            image=self.image,
            coordination=self.quorum,
            controller=self.controller,
            channel=self.channel,
            groups=groups,
            transactions=transactions,
            security=SecurityApis(self.image, self.controller, self.channel, self.authz),
            metrics=self.metrics,
            topic_config=self.topic_config,
            authz=self.authz,
            quotas=ClientQuotaManager(
                lambda: self.image.client_quotas, cfg.quota_window_num, cfg.quota_window_size_seconds
            ),
            metrics_port=self.metrics_server.port if self.metrics_server is not None else -1,
            heartbeat_port=heartbeat_sock.getsockname()[1] if heartbeat_sock is not None else -1,
            loop_progress=self.heartbeat_board.progress if self.heartbeat_board is not None else None,
            inter_broker_port=broker_sock.getsockname()[1],
            share=self.share,
        )
        if heartbeat_sock is not None and self.heartbeat_board is not None:
            self.heartbeat = HeartbeatThread(
                self.heartbeat_board,
                voters,
                cfg.broker_heartbeat_interval_ms,
                heartbeat_sock,
                self._listener_security("BROKER"),  # it authenticates as the inter-broker listener does
                self.apis.authorization.broker,  # the table's rule for what only brokers send
                self.inter_broker_security,
                discovery=self.discovery_security,
            )
        limits = ConnectionLimits(
            cfg.queued_max_requests, cfg.socket_partial_request_timeout_ms / 1000, cfg.connections_max_idle_ms / 1000
        )
        conn_quotas = ConnectionQuotas(cfg.max_connections, cfg.max_connections_per_ip)  # every client listener
        for lst in self.listeners:
            self.nets[lst.name] = NetServer(
                self.apis,
                socks[lst.name],
                cfg.socket_request_max_bytes,
                _codec(lst.wire),
                lst.name,
                *self._listener_security(lst.name),
                limits,
                # Not under max.connections: a client flood must not lock brokers out of each other (Kafka
                # exempts the inter-broker listener likewise, KIP-402); a connection that does not log in is closed.
                None if lst.inter_broker else conn_quotas,
                # brokers' independent tasks share a connection on BROKER (broker/network/request_order.py)
                ordered=not lst.inter_broker,
                wire=lst.wire,
            )
        self.net, self.kafka_net, self.broker_net = (self.nets.get(n) for n in (NATIVE, KAFKA, BROKER))
        self.metrics.set_gauges(lambda: float(self.replica_manager.under_replicated()), self._offline_partitions)
        self.metrics.registry.register(
            StateCollector(
                self.quorum,
                self.replica_manager,
                self.group_coordinator,
                self._connection_count,
                cfg.coordination,
                self.metrics.broker_label,
                cfg.metrics_topic_labels,
            )
        )
        for srv in self.nets.values():
            if srv.security.protocol == "SASL_PLAINTEXT" and "PLAIN" in srv.security.mechanisms:
                # PLAIN sends the password itself: over a plaintext listener anyone on the path reads it.
                log.warning(
                    "the %s listener accepts SASL PLAIN without TLS: passwords cross the network in clear "
                    "(use SASL_SSL, or SCRAM only in sasl.enabled.mechanisms)",
                    srv.listener.lower() if srv.listener in (NATIVE, KAFKA) else srv.listener,
                )
        await self.nets[BROKER].start()
        for name, srv in self.nets.items():
            if name != BROKER:
                await srv.start()
        self.quorum.start()
        if self.heartbeat is not None:
            self.heartbeat.start()
        self._tasks = [
            asyncio.create_task(self._every(cfg.log_flush_offset_checkpoint_interval_ms / 1000, self._checkpoint)),
            asyncio.create_task(
                self._every(cfg.replica_high_watermark_checkpoint_interval_ms / 1000, self._checkpoint_high_watermarks)
            ),
            asyncio.create_task(self._every(cfg.log_retention_check_interval_ms / 1000, self._retention)),
            asyncio.create_task(self._every(cfg.log_cleaner_backoff_ms / 1000, self._clean_compacted)),
            asyncio.create_task(self._every(TICK_S, self._tick)),
            asyncio.create_task(self._every(ENDPOINT_CHECK_S, self._register_kafka_endpoint)),
        ]
        freeze_long_lived()  # the recovered logs and everything built above live as long as the broker
        log.info(
            "started on %s:%d, %s coordination, %d configured peers, in %.2fs",
            cfg.host,
            cfg.port,
            cfg.coordination,
            len(voters),
            time.monotonic() - t0,
        )

    def _listener_security(self, listener: str) -> tuple[ListenerSecurity, ssl.SSLContext | None]:
        """What a listener requires: its protocol, SASL mechanisms, credentials, TLS (the same TLS and SASL
        settings for every listener of a protocol).
        BROKER without SASL of its own but with a cluster secret: a SCRAM login over the secret, only."""
        cfg = self.config
        protocol = cfg.listener_protocol(listener)
        lookup: Callable[[str, str], ScramCredential | None] = self._scram_credential
        mechanisms = tuple(cfg.enabled_mechanisms(listener))
        if listener == BROKER:
            protocol, by_secret = cfg.broker_protocol()
            if by_secret:
                mechanisms, lookup = (SECRET_MECHANISM,), secret_lookup(cfg.cluster_secret() or "")
        security = ListenerSecurity(
            protocol,
            mechanisms,
            lookup,
            cfg.connection_failed_authentication_delay_ms / 1000,
            cfg.connections_max_unauthenticated_ms / 1000,
            cfg.sasl_server_max_receive_size,
        )
        return security, cfg.server_ssl_context() if uses_ssl(protocol) else None

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The metadata's credential. Until this broker holds the cluster's metadata (a new cluster forming,
        or a restart before catching up), its own --add-scram records: brokers must log in to each other to
        form the quorum that commits them (Kafka's bootstrap records, KIP-900)."""
        cred = self.image.scram_credentials.get((user, mechanism))
        if cred is None and not self.image.cluster_id:
            cred = self._bootstrap_credentials.get((user, mechanism))
        return cred

    def _make_coordination(self) -> Coordination:
        """The one place that knows which coordination mode runs."""
        cfg = self.config
        assert self.log_manager is not None
        if cfg.coordination == "zookeeper":
            from broker.controller.zk_coordination import ZooKeeperCoordination

            return ZooKeeperCoordination(
                cfg.broker_id,
                (cfg.advertised_host or cfg.host, cfg.port),
                cfg.zookeeper_connect,
                cfg.zookeeper_session_timeout_ms,
                self._on_committed,
                self._on_role,
                self.incarnation,
                peers=cfg.voters() if cfg.peers else {},
                request_handler=self._relayed_alter_partition,
            )
        mlog = self.log_manager.get_or_create_log(METADATA_TOPIC, 0, LogConfig.from_props(METADATA_LOG_CONFIG))
        defaults = QuorumConfig()
        qcfg = QuorumConfig(
            election_timeout_ms=cfg.controller_election_timeout_ms,
            election_jitter_ms=cfg.controller_election_timeout_ms // 4,
            # Held fetches are heartbeats too: a few must fit in the election timeout, however short it is set.
            fetch_max_wait_ms=min(
                defaults.fetch_max_wait_ms,
                (cfg.controller_election_timeout_ms - defaults.fetch_interval_ms) // 4,
            ),
        )
        return QuorumDriver(
            cfg.broker_id,
            cfg.voters(),
            DiskMetadataLog(mlog),
            Path(cfg.log_dirs[0]),
            qcfg,
            self._on_committed,
            self._on_role,
            self.incarnation,
            security=self.inter_broker_security,
            heartbeats=self.heartbeat_board,
            discovery=self.discovery_security,
        )

    # --- metadata ------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        info = self.image.topics.get(topic)
        return log_config_for(self.config.topic_defaults, info.configs if info is not None else None)

    def _topic_config_or_none(self, topic: str) -> LogConfig | None:
        if topic == METADATA_TOPIC:
            return LogConfig.from_props(METADATA_LOG_CONFIG)
        return None  # the image is not loaded yet at startup; apply_image sets the config

    def _on_committed(self, entries: list[tuple[int, int, dict[str, Any]]]) -> None:
        """Publish committed records. The coordination calls this only once the broker has caught up with
        the metadata committed when it started, and with every committed record it holds at once (see
        broker/controller/quorum_driver.py, broker/controller/zk_coordination.py); until then the image stays empty,
        so the broker leads and follows nothing and answers for no partition.
        What the records make of this broker's replicas is broker/metadata/applier.py's to say (the replication
        simulator drives the same unit); the replica manager carries it out."""
        self.replica_manager.publish(self.image, entries)

    def _on_role(self, is_controller: bool, epoch: int, leader: int | None) -> None:
        self.controller.on_role(is_controller, epoch, leader)
        started = self.quorum.election_started_ms if self.quorum is not None else None
        if leader is not None and started is not None:
            self.metrics.elections.inc()
            self.metrics.election_seconds.observe((time.monotonic() * 1000 - started) / 1000)
            self.quorum.election_started_ms = None

    def _offline_partitions(self) -> float:
        return float(sum(1 for t in self.image.topics.values() for p in t.partitions.values() if p.leader < 0))

    # --- replication plumbing -------------------------------------------------

    def _broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """Where another broker's native listener is: as the coordination knows it, else as registered."""
        addr = self.quorum.known_brokers().get(broker_id) if self.quorum is not None else None
        if addr is None and (b := self.image.brokers.get(broker_id)) is not None:
            addr = (b.host, b.port)
        return addr

    def _connection_count(self) -> int:
        return sum(n.connection_count for n in self.nets.values())

    async def _send_markers(self, broker_id: int, request: Any) -> Any:
        """The transaction coordinator's WriteTxnMarkers: served here when this broker leads the partitions,
        else sent to their leader over the inter-broker listener."""
        if broker_id == self.config.broker_id:
            return await self.apis.transactions.write_txn_markers(request, INTERNAL_CONTEXT)
        return await self.peers.call(broker_id, request, 15.0)

    async def _send_verification(self, broker_id: int, request: Any) -> Any:
        """A partition leader's KIP-890 question to a transactional id's coordinator: here, or over the
        inter-broker listener (AddPartitionsToTxn v4+ is a broker's request)."""
        if broker_id == self.config.broker_id:
            return await self.apis.transactions.add_partitions_to_txn(request, INTERNAL_CONTEXT)
        return await self.peers.call(broker_id, request, VERIFY_TIMEOUT_S)

    def _on_partition_change(self, p: Partition, change: str) -> None:
        self.group_coordinator.on_partition_change(p, change)
        if self.share is not None:
            self.share.on_partition_change(p, change)
        if self.txn_coordinator is not None:
            self.txn_coordinator.on_partition_change(p, change)

    def _follow(self, p: Partition) -> None:
        self._unfollow(p)
        lane = fetcher_lane(p.topic, p.partition, self.config.num_replica_fetchers)
        source = p.fetch_source  # the leader, or the replica a recovering new leader fetches from
        f = self._fetchers.get((source, lane))
        if f is None:
            f = self._fetchers[(source, lane)] = ReplicaFetcher(
                self.config.broker_id,
                source,
                self.peers.call,
                self.config.replica_fetch_wait_max_ms,
                self.config.replica_fetch_max_bytes,
                quota=self.follower_quota,
                timeout_ms=self.config.replica_socket_timeout_ms,
            )
        f.add(p)

    def _replication_quota(self, rate_key: str, replicas_key: str) -> ReplicationQuota:
        cfg = self.config
        static = int(getattr(cfg, rate_key.replace(".", "_")))

        def rate() -> int:
            return dynamic_config.effective(self.image.broker_configs, cfg.broker_id, rate_key, static)[0]

        def replicas(topic: str) -> str:
            t = self.image.topics.get(topic)
            return t.configs.get(replicas_key, "") if t is not None else ""

        return ReplicationQuota(
            cfg.broker_id, rate, replicas, cfg.replication_quota_window_num, cfg.replication_quota_window_size_seconds
        )

    def _unfollow(self, p: Partition) -> None:
        for f in self._fetchers.values():
            f.remove(p)

    async def _relayed_alter_partition(self, body: dict[str, Any]) -> dict[str, Any]:
        """The controller's side of relay_to_controller: the same handler as a direct AlterPartition."""
        try:
            check_request(ApiKey.ALTER_PARTITION, body)  # typed as on the wire (broker/network/request_ranges.py)
            return await self.apis.handle_alter_partition(body, RELAY_CONTEXT)
        except MalformedRequest as e:
            return error_body(*error_code_of(e))

    # --- chores ----------------------------------------------------------------

    async def _every(self, interval_s: float, chore: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await chore()
            except Exception:
                log.exception("periodic task %s failed", chore.__name__)

    async def _tick(self) -> None:
        self.controller.tick()
        self.replica_manager.tick()
        self.group_coordinator.tick()
        if self.txn_coordinator is not None:
            self.txn_coordinator.tick()
        if self.share is not None:
            self.share.tick()

    async def _register_kafka_endpoint(self) -> None:
        """Until the cluster metadata names our client listeners as configured, tell the controller (Kafka's
        BrokerRegistration): every broker's Metadata then sends each listener's clients to the right address,
        in both coordination modes. Idempotent; a failed attempt is retried at the next check."""
        me = self.image.brokers.get(self.config.broker_id)
        host, port = self.config.kafka_endpoint() or (None, -1)
        listeners = self.config.advertised_endpoints()
        if me is None or me.fenced or (me.kafka_host, me.kafka_port, me.listeners) == (host, port, listeners):
            return
        controller = self.quorum.controller_id
        if controller is None:
            return
        try:
            await self.channel.register_kafka_endpoint(host, port, listeners)
        except (KafkaLiteError, TimeoutError, OSError) as e:
            # A controller election, a controller not reachable yet: the next check tries again.
            log.debug("listeners not registered yet: %s", e)
            return
        named = ", ".join(f"{n} {h}:{p}" for n, (h, p, _w) in sorted(listeners.items()))
        log.info("registered the listeners %s with controller %d", named, controller)

    async def _checkpoint(self) -> None:
        # fsync can take long on a busy disk: never on the event loop.
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.flush_dirty)

    async def _checkpoint_high_watermarks(self) -> None:
        # Read on the loop that moves them (a consistent snapshot), written and fsynced off it.
        hws = self.replica_manager.high_watermarks()
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.checkpoint_high_watermarks, hws)

    async def _retention(self) -> None:
        deleted = await asyncio.get_running_loop().run_in_executor(None, self.log_manager.cleanup, None)
        if deleted:
            log.info("retention deleted %s segments", deleted)

    async def _clean_compacted(self) -> None:
        # Last stable offsets are read here, on the loop that moves them; the cleaner never cleans past one:
        # a record above the high watermark may still be truncated away, and an open transaction's records
        # may still be aborted (or committed, making its marker's fate unknown).
        bounds = self.replica_manager.last_stable_offsets()
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.clean_compacted_logs, bounds.get)

    async def stop(self) -> None:
        log.info("shutting down")
        for t in self._tasks:
            t.cancel()
        if self.alter_partitions is not None:
            self.alter_partitions.close()
        for f in self._fetchers.values():
            f.stop()
        if self.quorum is not None:
            self.quorum.stop()
        if self.heartbeat is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.heartbeat.stop)
        if self.peers is not None:
            self.peers.close()
        for srv in self.nets.values():
            await srv.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.group_coordinator is not None:
            self.group_coordinator.close()
        if self.share is not None:
            self.share.close()
        if self.txn_coordinator is not None:
            self.txn_coordinator.close()
        if self.log_manager is not None and self.replica_manager is not None:
            hws = self.replica_manager.high_watermarks()
            self.replica_manager.close()
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown, hws)
        log.info("shut down cleanly")
