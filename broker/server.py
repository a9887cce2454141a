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
import time
import uuid
from pathlib import Path
from typing import Any

from broker.api import KafkaApis
from broker.config import BrokerConfig
from broker.controller import BrokerInfo, MetadataImage
from broker.controller_service import ControllerService
from broker.group_coordinator import GroupCoordinator
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.metadata_log import METADATA_TOPIC, DiskMetadataLog
from broker.metrics import BrokerMetrics
from broker.metrics_server import MetricsServer
from broker.network.kafka.codec import KafkaCodec
from broker.partition import Partition
from broker.repeated_log import RepeatedConditionLog
from broker.replica_fetcher import ReplicaFetcher
from broker.replica_manager import ReplicaManager
from broker.replication import AlterOutcome, alter_partition_outcome, alter_partition_retry_wanted
from election import QuorumConfig
from election.coordination import Coordination
from net.errors import ErrorCode, KafkaLiteError, error_for
from net.peers import PeerChannel
from net.protocol import ApiKey
from net.quorum_driver import QuorumDriver, next_incarnation
from net.retry import Backoff
from net.server import BadRequest, NetServer

log = logging.getLogger("kafkalite.broker")
TICK_S = 0.1
METADATA_LOG_CONFIG = {"segment.bytes": "8388608", "retention.ms": "-1", "retention.bytes": "-1"}
ALTER_PARTITION_TIMEOUT_S = 10.0
ENDPOINT_CHECK_S = 0.5  # how soon a started broker's Kafka listener appears in every broker's Metadata
# Backoff between AlterPartition attempts that got no verdict (Kafka's AlterPartitionManager backs off too):
# "no controller" and "unreachable" come back at once, and must not spin while an election runs.
ALTER_RETRY_BACKOFF_S = (0.05, 1.0)


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # ISR proposals retried or refused over and over under a fault: one line per partition per 10 s.
        self._alter_log = RepeatedConditionLog(log)
        self.log_manager: LogManager | None = None
        self.net: NetServer | None = None
        self.quorum: Coordination | None = None
        self._tasks: list[asyncio.Task] = []
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._data_peers: dict[int, PeerChannel] = {}
        self._stopped = asyncio.Event()
        self._stopping = False
        self._alter_tasks: set[asyncio.Task] = set()
        self._alter_seq = 0  # numbers this process's AlterPartition requests (the controller drops overtaken ones)

    async def start(self) -> None:
        cfg = self.config
        for d in cfg.log_dirs:
            Path(d).mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        self.image = MetadataImage()
        self.metrics = BrokerMetrics(cfg.broker_id)
        self.log_manager = LogManager(
            [Path(d) for d in cfg.log_dirs], cfg.topic_config_defaults(), topic_config=self._topic_config_or_none
        )
        # Recovery can read whole segments; keep it off the event loop even though nothing listens yet.
        await loop.run_in_executor(None, self.log_manager.startup)
        self.replica_manager = ReplicaManager(
            cfg.broker_id,
            self.log_manager,
            self.topic_config,
            cfg.replica_lag_time_max_ms,
            self._propose_isr,
            self.metrics,
            cfg.producer_id_expiration_ms,
            cfg.producer_id_expiration_check_interval_ms,
        )
        self.replica_manager.on_follow = self._follow
        self.replica_manager.on_unfollow = self._unfollow
        self.group_coordinator = GroupCoordinator(
            self.replica_manager, cfg.group_config(), cfg.offsets_topic_num_partitions, cfg.offsets_commit_timeout_ms
        )
        self.replica_manager.on_change = self.group_coordinator.on_partition_change
        self.net = NetServer(None, cfg.host, cfg.port, cfg.socket_request_max_bytes)  # type: ignore[arg-type]
        await self.net.start()
        cfg.port = self.net.port
        voters = cfg.voters()
        # This process's incarnation, above every earlier one of this broker: sent with quorum fetches (or in
        # its ZooKeeper registration) and AlterPartition, so the controller can refuse proposals of a process
        # that has since restarted.
        self.incarnation = next_incarnation(Path(cfg.log_dirs[0]))
        self.quorum = self._make_coordination()
        # The liveness rule follows the mode: ZooKeeper's session timeout decides there (registration_expiry).
        session_timeout = (
            cfg.zookeeper_session_timeout_ms if cfg.coordination == "zookeeper" else cfg.broker_session_timeout_ms
        )
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
        )
        self.apis = KafkaApis(cfg, self)
        self.net._handler = self.apis
        self.quorum.request_handler = self._relayed_alter_partition
        self.kafka_net: NetServer | None = None
        if cfg.kafka_port >= 0:
            # Kafka's protocol: a second codec in front of the same handlers (broker/network/kafka/).
            self.kafka_net = NetServer(
                self.apis, cfg.kafka_host or cfg.host, cfg.kafka_port, cfg.socket_request_max_bytes, KafkaCodec, "kafka"
            )
            await self.kafka_net.start()
            cfg.kafka_port = self.kafka_net.port
        self.metrics.set_gauges(lambda: float(self.replica_manager.under_replicated()), self._offline_partitions)
        self.metrics.watch(self)
        self.metrics_server = await MetricsServer.start(self.metrics, cfg.host, cfg.metrics_port)
        self.quorum.start()
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
        log.info(
            "started on %s:%d, %s coordination, %d configured peers, in %.2fs",
            cfg.host,
            self.net.port,
            cfg.coordination,
            len(voters),
            time.monotonic() - t0,
        )

    def _make_coordination(self) -> Coordination:
        """The one place that knows which coordination mode runs."""
        cfg = self.config
        assert self.log_manager is not None and self.net is not None
        if cfg.coordination == "zookeeper":
            from net.zk_coordination import ZooKeeperCoordination

            return ZooKeeperCoordination(
                cfg.broker_id,
                (cfg.advertised_host or cfg.host, self.net.port),
                cfg.zookeeper_connect,
                cfg.zookeeper_session_timeout_ms,
                self._on_committed,
                self._on_role,
                self.incarnation,
                peers=cfg.voters() if cfg.peers else {},
            )
        mlog = self.log_manager.get_or_create_log(METADATA_TOPIC, 0, LogConfig.from_props(METADATA_LOG_CONFIG))
        qcfg = QuorumConfig(
            election_timeout_ms=cfg.controller_election_timeout_ms,
            election_jitter_ms=cfg.controller_election_timeout_ms // 4,
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
        )

    # --- metadata ------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        info = self.image.topics.get(topic)
        base = self.config.topic_config_defaults()
        return base if info is None else base.merged(info.configs)

    def _topic_config_or_none(self, topic: str) -> LogConfig | None:
        if topic == METADATA_TOPIC:
            return LogConfig.from_props(METADATA_LOG_CONFIG)
        return None  # the image is not loaded yet at startup; apply_image sets the config

    def _on_committed(self, entries: list[tuple[int, int, dict[str, Any]]]) -> None:
        """Publish committed records. The coordination calls this only once the broker has caught up with
        the metadata committed when it started, and with every committed record it holds at once (see
        net/quorum_driver.py, net/zk_coordination.py); until then the image stays empty, so the broker leads
        and follows nothing and answers for no partition. tests/sim/replication_sim.py's _on_meta_records
        mirrors this."""
        changed: set[str] = set()
        brokers_changed = False
        for offset, _epoch, record in entries:
            self.image.apply(offset, record)
            brokers_changed |= record.get("type") == "broker"
            name = record.get("topic") or (
                record.get("name") if record.get("type") in ("topic", "remove_topic") else None
            )
            if name:
                changed.add(name)
        if changed:
            self.replica_manager.apply_image(self.image, changed)
        if brokers_changed:
            # Leaders must not wait for, or re-admit into an ISR, a broker the controller fenced.
            self.replica_manager.fence_replicas({b.id for b in self.image.brokers.values() if b.fenced})

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

    def _data_peer(self, broker_id: int) -> PeerChannel:
        ch = self._data_peers.get(broker_id)
        if ch is None:
            addr = self.quorum.known_brokers().get(broker_id) if self.quorum is not None else None
            if addr is None and (b := self.image.brokers.get(broker_id)) is not None:
                addr = (b.host, b.port)
            if addr is None:
                raise KafkaLiteError(f"no address known for broker {broker_id}", ErrorCode.BROKER_NOT_AVAILABLE)
            host, port = addr
            ch = self._data_peers[broker_id] = PeerChannel(self.config.broker_id, broker_id, host, port)
        return ch

    async def peer_request(self, broker_id: int, api: ApiKey, body: dict, timeout: float) -> dict:
        return await self._data_peer(broker_id).request(api, body, timeout)

    def kafka_endpoint(self, b: "BrokerInfo") -> tuple[str, int] | None:
        """Where Kafka clients reach broker `b`: ours as configured now, the others as registered."""
        if b.id == self.config.broker_id:
            return self.config.kafka_endpoint()
        return (b.kafka_host, b.kafka_port) if b.kafka_port >= 0 and b.kafka_host is not None else None

    async def create_topic_via_controller(self, name: str, partitions: int, rf: int, configs: dict[str, str]) -> None:
        """Create a topic on behalf of a request served here (__consumer_offsets on the first FindCoordinator,
        an automatically created topic): by the active controller, this broker or another. Raises the
        controller's error (TopicAlreadyExistsError included)."""
        if self.controller.ready:
            await self.controller.create_topic(name, partitions, rf, configs)
            return
        controller = self.quorum.controller_id
        if controller is None:
            raise KafkaLiteError("no active controller (an election may be running)", ErrorCode.NOT_CONTROLLER)
        topic = {"name": name, "num_partitions": partitions, "replication_factor": rf, "configs": configs}
        resp = await self.peer_request(controller, ApiKey.CREATE_TOPICS, {"topics": [topic]}, 10)
        _, code, msg = resp["topics"][0]
        if code:
            raise error_for(code, msg or "")

    def _follow(self, p: Partition) -> None:
        self._unfollow(p)
        f = self._fetchers.get(p.leader)
        if f is None:
            f = self._fetchers[p.leader] = ReplicaFetcher(
                self.config.broker_id, p.leader, self.peer_request, self.config.replica_fetch_wait_max_ms
            )
        f.add(p)

    def _unfollow(self, p: Partition) -> None:
        for f in self._fetchers.values():
            f.remove(p)

    def _propose_isr(self, p: Partition, isr: list[int], partition_epoch: int) -> None:
        if self._stopping:
            return
        task = asyncio.ensure_future(self._alter_partition(p, isr, partition_epoch))
        self._alter_tasks.add(task)
        task.add_done_callback(self._alter_tasks.discard)

    async def _alter_partition(self, p: Partition, isr: list[int], partition_epoch: int) -> None:
        """Carry one ISR proposal to the controller until it has a verdict (Kafka's rule; the simulator's
        _on_alter_result and _alter_timed_out do the same with the same helpers). Forgetting a proposal the
        controller did commit would let the HW pass a replica the controller counts in the ISR, so only a
        refusal proving it was not applied resets it: see broker/replication.py alter_partition_outcome."""
        leader_epoch = p.leader_epoch
        retry = Backoff(ALTER_RETRY_BACKOFF_S[0] * 1000, ALTER_RETRY_BACKOFF_S[1] * 1000)
        while True:
            code, message = await self._send_alter_partition(p, leader_epoch, isr, partition_epoch)
            outcome = alter_partition_outcome(code)
            if outcome is AlterOutcome.COMMITTED:
                grew = len(isr) > len(p.isr)
                (self.metrics.isr_expands if grew else self.metrics.isr_shrinks).inc()
                self._alter_log.clear((p.topic, p.partition), how="ISR change committed")
                log.info("%s-%d: ISR change to %s committed", p.topic, p.partition, isr)
                return
            if outcome is AlterOutcome.AWAIT_METADATA:
                # Maybe our own change, committed without its answer reaching us: it keeps bounding the HW
                # until metadata brings the newer state (LeaderState.on_isr_committed settles it).
                self._alter_log.report(
                    (p.topic, p.partition),
                    logging.INFO,
                    "%s-%d: ISR change to %s refused against a newer state: %s",
                    p.topic,
                    p.partition,
                    isr,
                    message,
                )
                return
            if outcome is AlterOutcome.REJECTED:
                self._alter_log.report(
                    (p.topic, p.partition),
                    logging.WARNING,
                    "%s-%d: ISR change to %s not committed: %s",
                    p.topic,
                    p.partition,
                    isr,
                    message,
                )
                if p.leader_state is not None:
                    p._handle(p.leader_state.on_isr_rejected(isr, partition_epoch))
                return
            # No verdict: it may or may not have been applied. Ask again while the same leadership still
            # waits for it; a retry of an applied change is refused as stale (INVALID_UPDATE_VERSION).
            self._alter_log.report(
                (p.topic, p.partition),
                logging.INFO,
                "%s-%d: ISR change to %s, no verdict (%s); retrying",
                p.topic,
                p.partition,
                isr,
                message,
            )
            await asyncio.sleep(retry.next())
            if self._stopping or not alter_partition_retry_wanted(p.leader_state, leader_epoch, isr, partition_epoch):
                return

    async def _send_alter_partition(
        self, p: Partition, leader_epoch: int, isr: list[int], partition_epoch: int
    ) -> tuple[int, str]:
        """One attempt: (error code, message), 0 if committed. Every failure to get an answer is a code too."""
        self._alter_seq += 1
        seq = self._alter_seq
        try:
            controller = self.quorum.controller_id
            if controller == self.config.broker_id:
                await self.controller.alter_partition(
                    p.topic,
                    p.partition,
                    self.config.broker_id,
                    leader_epoch,
                    partition_epoch,
                    isr,
                    self.incarnation,
                    seq,
                )
                return 0, ""
            if controller is None:
                return int(ErrorCode.NOT_CONTROLLER), "no controller"
            body = {
                "topic": p.topic,
                "partition": p.partition,
                "leader": self.config.broker_id,
                "leader_epoch": leader_epoch,
                "partition_epoch": partition_epoch,
                "isr": isr,
                "incarnation": self.incarnation,
                "seq": seq,
            }
            # Through the coordination service where it has a path (ZooKeeper), else to the controller.
            resp = await self.quorum.relay_to_controller(body, ALTER_PARTITION_TIMEOUT_S)
            if resp is None:
                resp = await self.peer_request(controller, ApiKey.ALTER_PARTITION, body, ALTER_PARTITION_TIMEOUT_S)
            return int(resp.get("error_code", 0)), str(resp.get("error_message") or "")
        except KafkaLiteError as e:
            return int(e.code), str(e)
        except (TimeoutError, OSError) as e:
            return int(ErrorCode.NETWORK_EXCEPTION), f"{type(e).__name__}: {e}"

    async def _relayed_alter_partition(self, body: dict[str, Any]) -> dict[str, Any]:
        """The controller's side of relay_to_controller: the same handler as a direct AlterPartition."""
        try:
            return await self.apis.handle_alter_partition(body)
        except BadRequest as e:
            return {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": str(e)}

    # --- chores ----------------------------------------------------------------

    async def _every(self, interval_s: float, chore) -> None:
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

    async def _register_kafka_endpoint(self) -> None:
        """Until the cluster metadata names our Kafka listener as configured, tell the controller (Kafka's
        BrokerRegistration): every broker's Metadata then sends Kafka clients to the right port, in both
        coordination modes. Idempotent; a failed attempt is retried at the next check."""
        me = self.image.brokers.get(self.config.broker_id)
        host, port = self.config.kafka_endpoint() or (None, -1)
        if me is None or me.fenced or (me.kafka_host, me.kafka_port) == (host, port):
            return
        controller = self.quorum.controller_id
        if controller is None:
            return
        try:
            if controller == self.config.broker_id:
                await self.controller.set_kafka_endpoint(self.config.broker_id, host, port)
            else:
                body = {"broker_id": self.config.broker_id, "kafka_host": host, "kafka_port": port}
                resp = await self.peer_request(controller, ApiKey.BROKER_REGISTRATION, body, ALTER_PARTITION_TIMEOUT_S)
                if resp.get("error_code"):
                    raise KafkaLiteError(f"error {resp['error_code']}: {resp.get('error_message')}")
        except (KafkaLiteError, TimeoutError, OSError) as e:
            # A controller election, a controller not reachable yet: the next check tries again.
            log.debug("Kafka listener not registered yet: %s", e)
            return
        log.info("registered the Kafka listener %s:%d with controller %d", host, port, controller)

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
        # High watermarks are read here, on the loop that moves them; the cleaner never cleans past one,
        # since a record above it may still be truncated away.
        high_watermarks = self.replica_manager.high_watermarks()
        await asyncio.get_running_loop().run_in_executor(
            None, self.log_manager.clean_compacted_logs, high_watermarks.get
        )

    async def stop(self) -> None:
        log.info("shutting down")
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        for t in list(self._alter_tasks):
            t.cancel()
        for f in self._fetchers.values():
            f.stop()
        if self.quorum is not None:
            self.quorum.stop()
        for ch in self._data_peers.values():
            ch.close()
        if self.net is not None:
            await self.net.stop()
        if getattr(self, "kafka_net", None) is not None:
            await self.kafka_net.stop()
        if getattr(self, "metrics_server", None) is not None:
            await self.metrics_server.stop()
        if self.log_manager is not None:
            self.group_coordinator.close()
            hws = self.replica_manager.high_watermarks()
            self.replica_manager.close()
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown, hws)
        log.info("shut down cleanly")
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
