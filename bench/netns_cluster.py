"""Three brokers on three network-namespace hosts (bench/netns.py) with the client in the root namespace:
`NetnsZkCluster`, and the topic helpers the benches that use it share (bench/run_recovery.py's ZooKeeper-mode
leader cut, bench/group_faults.py's back-to-back faults, tests/integration/test_recovery.py)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.netns import NetnsLab
from bench.peers._common import free_port
from bench.run_cluster import installed_env

ROOT = Path(__file__).resolve().parents[1]
NETNS_SUBNET, NETNS_PREFIX = "198.18.20.0/24", "klr"


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class NetnsZkCluster:
    """Three brokers on three network-namespace hosts (bench/netns.py), the client in the root namespace;
    `lab.cut(i, j)` cuts two brokers apart, `lab.isolate(i)` one from everything. With `zookeeper` (the
    default) ZooKeeper-mode brokers and ZooKeeper on the bridge, every broker reaching it; otherwise the
    built-in controller quorum among the three. `kafka_port` also opens each broker's Kafka listener.
    tests/integration/test_recovery.py and bench/group_faults.py use it."""

    PORT = 9092

    def __init__(
        self,
        root: Path,
        overrides: list[str] | None = None,
        subnet: str = NETNS_SUBNET,
        prefix: str = NETNS_PREFIX,
        zookeeper: bool = True,
        kafka_port: int | None = None,
    ) -> None:
        self.root = root
        self.lab = NetnsLab(prefix, subnet, 3)
        self.overrides = list(overrides or []) + ([f"kafka.port={kafka_port}"] if kafka_port else [])
        self.kafka_port = kafka_port
        self.use_zookeeper = zookeeper
        self.procs: dict[int, subprocess.Popen] = {}
        self.zk: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.lab.addr(i)}:{self.PORT}" for i in range(1, 4))

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{self.lab.addr(i)}:{self.kafka_port}" for i in range(1, 4))

    def start(self) -> NetnsZkCluster:
        from client.cli.zk_local import LocalZooKeeper

        self.root.mkdir(parents=True, exist_ok=True)
        self.lab.setup()
        try:
            if self.use_zookeeper:
                self.zk = LocalZooKeeper(self.root / "zookeeper", free_port(), host=self.lab.gateway).start()
            for i in range(1, 4):
                self.start_broker(i)
            for i in range(1, 4):
                self.waitlistening(i, 60)
        except Exception:
            self.stop()
            raise
        return self

    def start_broker(self, i: int) -> None:
        from client.cli.cluster import start_command

        peers = None if self.use_zookeeper else ",".join(f"{j}@{self.lab.addr(j)}:{self.PORT}" for j in range(1, 4))
        cmd = start_command(
            i,
            self.PORT,
            self.root / f"broker-{i}",
            host=self.lab.addr(i),
            peers=peers,
            extra=[x for o in self.overrides for x in ("--override", o)],
            coordination="zookeeper" if self.use_zookeeper else None,
            zookeeper=self.zk.connect if self.use_zookeeper else None,
        )
        with open(self.root / f"broker-{i}.log", "ab") as log:
            self.procs[i] = self.lab.popen(
                i,
                cmd,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=installed_env({"PYTHONPATH": str(ROOT)}),
            )

    def waitlistening(self, i: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not listening(self.lab.addr(i), self.PORT):
            if time.monotonic() > deadline or self.procs[i].poll() is not None:
                raise RuntimeError(f"broker {i} did not start; see {self.root}/broker-{i}.log")
            time.sleep(0.05)

    def broker_pid(self, i: int) -> int:
        """The broker's own pid (`ip netns exec` execs it, so the same as the Popen's)."""
        return self.procs[i].pid

    def logs(self) -> list[Path]:
        return sorted(self.root.glob("broker-*.log"))

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        if self.zk is not None:
            self.zk.stop()
        self.lab.teardown()


async def wait_partition(bootstrap: str, topic: str, want: Any, timeout: float) -> Any:
    """Poll topic metadata until want(partitions) is truthy; return it."""
    from client.admin import AsyncAdmin

    deadline = time.monotonic() + timeout
    last_err: Exception | None = None
    while time.monotonic() < deadline:
        admin = AsyncAdmin(bootstrap, request_timeout_ms=3000)
        try:
            parts = (await admin.describe_topics([topic]))[0].partitions
            got = want(parts)
            if got:
                return got
        except Exception as e:  # noqa: BLE001 - a cluster in flux
            last_err = e
        finally:
            await admin.close()
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{topic}: condition not met within {timeout} s (last error: {last_err})")


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from client.admin import AsyncAdmin, NewTopic

    deadline = time.monotonic() + 60
    while True:
        admin = AsyncAdmin(bootstrap, request_timeout_ms=5000)
        try:
            await admin.create_topics([NewTopic(topic, partitions, 3, {"min.insync.replicas": "2"})])
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
        finally:
            await admin.close()
    await wait_partition(bootstrap, topic, lambda ps: all(p.leader > 0 and len(p.isr) == 3 for p in ps), 60)
