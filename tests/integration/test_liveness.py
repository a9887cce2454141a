"""A busy machine must not look like a dead broker (issue 24 §2).

- An event loop that stalls for longer than the session and election timeouts (a broker's work, or a
  machine too busy to run it) neither fences that broker nor replaces it as controller: heartbeats travel
  on a thread and connections of their own (broker/controller/heartbeat.py). The brokers run in this process,
  each on its own loop thread, so that one loop can be stalled on purpose (a blocking call on it) while
  its heartbeat thread goes on; the same cluster then has one broker's loop stalled at a time.
- Heartbeats are authenticated like every inter-broker message: on a SASL cluster with ACLs, a heartbeat
  without a login or from a principal without ClusterAction is refused and keeps no broker alive.

The CPU-hog soak (three broker processes, busy loops, saturating clients) is tests/integration/test_busy_machine.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import pytest

from broker.server.broker_server import BrokerServer
from broker.server.config import BrokerConfig
from client.cli.zk_local import LocalZooKeeper
from tests.integration.cluster_harness import free_ports, wait_until
from tests.integration.zk_support import require_zookeeper

pytestmark = pytest.mark.timeout(180)

SESSION_MS = 9000  # broker.session.timeout.ms and zookeeper.session.timeout.ms (defaults); the watchdog's limit
ELECTION_MS = 6000  # controller.quorum.election.timeout.ms (default)
STALL_S = 12.0  # longer than both timeouts: without heartbeats, fenced or replaced; with them, neither


class LogLines(logging.Handler):
    """Every kafkalite log line of this process (the in-process brokers share the loggers)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}")

    def since(self, n: int, *needles: str) -> list[str]:
        return [line for line in self.lines[n:] if any(x in line for x in needles)]


class InProcessBroker:
    """A BrokerServer on a loop thread of its own, whose loop the test can stall."""

    def __init__(self, props: dict[str, str]) -> None:
        self.config = BrokerConfig.from_props(props)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server = BrokerServer(self.config)

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(60)

    def stall(self, seconds: float) -> threading.Event:
        """Block this broker's event loop for `seconds` (as a long synchronous piece of work would)."""
        done = threading.Event()

        def block() -> None:
            time.sleep(seconds)
            done.set()

        self.loop.call_soon_threadsafe(block)
        return done

    def call(self, fn, timeout: float = 30):
        """fn() on the broker's loop (its state is the loop's)."""

        async def run():
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.fixture(params=["custom", "zookeeper"])
def in_process_cluster(tmp_path: Path, request):
    """Three in-process brokers; in ZooKeeper mode with a standalone ZooKeeper (kazoo pings from a thread of
    its own, so the session must survive the stall as the heartbeats do)."""
    ports = free_ports(4)
    peers = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports[:3]))
    zk = None
    mode = {}
    if request.param == "zookeeper":
        require_zookeeper()
        zk = LocalZooKeeper(tmp_path / "zookeeper", ports[3])
        zk.start()
        mode = {"coordination": "zookeeper", "zookeeper.connect": zk.connect}
    handler = LogLines()
    logger = logging.getLogger("kafkalite")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    brokers = {
        i + 1: InProcessBroker(
            {
                "broker.id": str(i + 1),
                "host": "127.0.0.1",
                "port": str(p),
                "log.dirs": str(tmp_path / f"broker-{i + 1}"),
                "peers": peers,
                **mode,
            }
        )
        for i, p in enumerate(ports[:3])
    }
    try:
        for b in brokers.values():
            b.start()
        yield brokers, handler
    finally:
        for b in brokers.values():
            try:
                b.stop()
            except Exception:  # noqa: BLE001 - the others must still stop
                pass
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        if zk is not None:
            zk.stop()


def _all_registered(brokers) -> int | None:
    """The controller id once every broker is registered and unfenced in every broker's image."""
    ctl = {b.call(lambda b=b: b.server.quorum.controller_id) for b in brokers.values()}
    if len(ctl) != 1 or None in ctl:
        return None
    for b in brokers.values():
        image = b.call(lambda b=b: {i: x.fenced for i, x in b.server.image.brokers.items()})
        if sorted(image) != sorted(brokers) or any(image.values()):
            return None
    return ctl.pop()


def test_a_stalled_event_loop_is_neither_fenced_nor_replaced(in_process_cluster):
    brokers, logs = in_process_cluster
    controller = wait_until(lambda: _all_registered(brokers), 60, "a controller with every broker registered")
    epoch = brokers[controller].call(lambda: brokers[controller].server.quorum.controller_epoch)
    follower = min(b for b in brokers if b != controller)
    for victim in (controller, follower):
        mark = len(logs.lines)
        t0 = time.monotonic()
        brokers[victim].stall(STALL_S).wait(STALL_S + 30)
        stalled = time.monotonic() - t0
        assert stalled * 1000 > max(SESSION_MS, ELECTION_MS)  # long enough to be taken for a death by timeout
        # After the stall: a tick on every broker (the controller's liveness check included) has run.
        time.sleep(1.0)
        for b in brokers.values():
            b.call(lambda: None)
        bad = logs.since(
            mark, "fencing broker", "no controller in", "became controller", "truncat", "session lost", "suspended"
        )
        assert bad == [], f"broker {victim}'s loop stalled {stalled:.1f}s: {bad}"
        epochs = {i: b.call(lambda b=b: b.server.quorum.controller_epoch) for i, b in brokers.items()}
        assert set(epochs.values()) == {epoch}, epochs
        assert _all_registered(brokers) == controller
