"""BrokerServer: wires the log, the partitions, the apis and the network
together, runs the periodic chores and shuts down cleanly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from broker.admin import AdminManager
from broker.api import KafkaApis
from broker.config import BrokerConfig
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.metadata import MetadataCache
from broker.metrics import BrokerMetrics, http_response
from broker.replica_manager import ReplicaManager
from net.server import NetServer

log = logging.getLogger("kafkalite.broker")


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.log_manager: LogManager | None = None
        self.net: NetServer | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        cfg = self.config
        for d in cfg.log_dirs:
            Path(d).mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        self.metadata = MetadataCache(Path(cfg.log_dirs[0]) / "__cluster_metadata.json")
        self.metadata.load()
        self.log_manager = LogManager(
            [Path(d) for d in cfg.log_dirs], cfg.topic_config_defaults(), topic_config=self._topic_config
        )
        # Recovery can read whole segments; keep it off the event loop even though nothing listens yet.
        await loop.run_in_executor(None, self.log_manager.startup)
        self.replica_manager = ReplicaManager(cfg.broker_id, self.log_manager)
        self.admin = AdminManager(cfg, self.metadata, self.log_manager, self.replica_manager)
        self.admin.load()
        self.apis = KafkaApis(cfg, self.replica_manager, self.admin)
        self.metrics = BrokerMetrics(cfg.broker_id)
        self.net = NetServer(self.apis, cfg.host, cfg.port, cfg.socket_request_max_bytes, self._http_get)
        await self.net.start()
        cfg.port = self.net.port
        self._tasks = [
            asyncio.create_task(self._every(cfg.log_flush_offset_checkpoint_interval_ms, self._checkpoint)),
            asyncio.create_task(self._every(cfg.log_retention_check_interval_ms, self._retention)),
        ]
        log.info(
            "started on %s:%d with %d partitions in %.2fs (cluster %s)",
            cfg.host,
            self.net.port,
            len(self.replica_manager.partitions),
            time.monotonic() - t0,
            self.metadata.cluster_id,
        )

    def _http_get(self, path: str) -> bytes:
        if path.split("?")[0] == "/metrics":
            return http_response(self.metrics.render())
        return http_response(b"not found: try /metrics\n", "404 Not Found", "text/plain")

    def _topic_config(self, topic: str) -> LogConfig | None:
        info = self.metadata.topics.get(topic)
        return None if info is None else self.config.topic_config_defaults().merged(info.configs)

    async def _every(self, interval_ms: int, chore) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await chore()
            except Exception:
                log.exception("periodic task %s failed", chore.__name__)

    async def _checkpoint(self) -> None:
        # fsync can take long on a busy disk: never on the event loop.
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.flush_dirty)

    async def _retention(self) -> None:
        deleted = await asyncio.get_running_loop().run_in_executor(None, self.log_manager.cleanup, None)
        if deleted:
            log.info("retention deleted %s segments", deleted)

    async def stop(self) -> None:
        log.info("shutting down")
        for t in self._tasks:
            t.cancel()
        if self.net is not None:
            await self.net.stop()
        if self.log_manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        log.info("shut down cleanly")
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
