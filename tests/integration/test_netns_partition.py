"""A real network partition: three brokers on three hosts (network namespaces joined by a bridge,
addresses from 198.18.0.0/15, nothing leaves this machine). One broker's link is cut and healed while
producers with acks=all keep writing. Needs root (CI runs as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from client.admin import NewTopic
from client.consumer import TopicPartition
from client.sync import Admin, Consumer, Producer
from tests.conftest import ROOT
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)
NET = "198.18.7"
PORT = 9092


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check)


class NetnsCluster:
    def __init__(self, tmp: Path, n: int = 3) -> None:
        self.tag = f"kl{os.getpid() % 10000}"
        self.bridge = f"{self.tag}br"
        self.n = n
        self.tmp = tmp
        self.procs: dict[int, subprocess.Popen] = {}
        self.peers = ",".join(f"{i}@{NET}.{i}:{PORT}" for i in range(1, n + 1))

    def ns(self, i: int) -> str:
        return f"{self.tag}h{i}"

    def veth(self, i: int) -> str:
        return f"{self.tag}v{i}"

    def setup(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{NET}.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i in range(1, self.n + 1):
            sh("ip", "netns", "add", self.ns(i))
            sh("ip", "link", "add", self.veth(i), "type", "veth", "peer", "name", f"{self.tag}p{i}")
            sh("ip", "link", "set", f"{self.tag}p{i}", "netns", self.ns(i))
            sh("ip", "link", "set", self.veth(i), "master", self.bridge)
            sh("ip", "link", "set", self.veth(i), "up")
            ex = ("ip", "netns", "exec", self.ns(i))
            sh(*ex, "ip", "addr", "add", f"{NET}.{i}/24", "dev", f"{self.tag}p{i}")
            sh(*ex, "ip", "link", "set", f"{self.tag}p{i}", "up")
            sh(*ex, "ip", "link", "set", "lo", "up")

    def start(self, i: int) -> None:
        log = open(self.tmp / f"broker-{i}.log", "ab")
        cmd = [
            "ip",
            "netns",
            "exec",
            self.ns(i),
            sys.executable,
            "-m",
            "broker.cli",
            "start",
            "--id",
            str(i),
            "--host",
            f"{NET}.{i}",
            "--port",
            str(PORT),
            "--data-dir",
            str(self.tmp / f"data-{i}"),
            "--peers",
            self.peers,
        ]
        self.procs[i] = subprocess.Popen(
            cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )

    def cut(self, i: int) -> None:
        sh("ip", "link", "set", self.veth(i), "down")

    def heal(self, i: int) -> None:
        sh("ip", "link", "set", self.veth(i), "up")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{NET}.{i}:{PORT}" for i in range(1, self.n + 1))

    def teardown(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        for i in range(1, self.n + 1):
            sh("ip", "netns", "del", self.ns(i), check=False)
            sh("ip", "link", "del", self.veth(i), check=False)
        sh("ip", "link", "del", self.bridge, check=False)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.tmp.glob("broker-*.log")))


@pytest.fixture
def netns_cluster(tmp_path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (CI runs as root)")
    c = NetnsCluster(tmp_path)
    try:
        c.setup()
        for i in range(1, 4):
            c.start(i)
        yield c
    finally:
        c.teardown()


def test_partitioned_broker_is_fenced_and_catches_up_after_heal(netns_cluster):
    c = netns_cluster
    admin_holder: list[Admin] = []

    def create() -> bool:
        if not admin_holder:
            admin_holder.append(Admin(c.bootstrap, request_timeout_ms=5000))
        admin_holder[0].create_topics([NewTopic("np", 3, 3, {"min.insync.replicas": "2"})])
        return True

    wait_until(create, 60, "the cluster to form and create the topic")
    admin = admin_holder[0]
    acked: list[tuple[int, int, bytes]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery_for(v: bytes):
        def cb(err, md):
            if err is None:
                with lock:
                    acked.append((md.partition, md.offset, v))

        return cb

    producer = Producer(
        c.bootstrap, acks="all", linger_ms=1, delivery_timeout_ms=60000, request_timeout_ms=5000, retry_backoff_ms=50
    )

    def produce():
        i = 0
        while not stop.is_set():
            v = f"v{i}".encode()
            producer.send("np", v, key=f"k{i % 30}".encode(), on_delivery=on_delivery_for(v))
            i += 1
            time.sleep(0.0005)

    t = threading.Thread(target=produce)
    t.start()
    wait_until(lambda: len(acked) >= 300, 30, "acknowledged writes before the cut")
    victim = admin.describe_topics(["np"])[0].partitions[0].leader
    c.cut(victim)
    cut_at = len(acked)
    try:
        # the majority fences the victim and moves its leaderships; acks=all goes on without it
        def moved() -> bool:
            d = admin.describe_topics(["np"])[0]
            return all(p.leader != victim and victim not in p.isr for p in d.partitions)

        wait_until(moved, 30, "leaders to move off the partitioned broker")
        wait_until(lambda: len(acked) > cut_at + 500, 30, "acknowledged writes on the majority side")
    finally:
        c.heal(victim)

    def rejoined() -> bool:
        d = admin.describe_topics(["np"])[0]
        return all(victim in p.isr for p in d.partitions)

    wait_until(rejoined, 60, "the healed broker to catch up and rejoin every ISR")
    wait_until(lambda: len(acked) > 1000, 30, "over 1000 acknowledged writes in all")
    stop.set()
    t.join()
    producer.flush(60)
    producer.close()
    admin.close()

    got: dict[int, dict[int, bytes]] = {0: {}, 1: {}, 2: {}}
    with Consumer(c.bootstrap, auto_offset_reset="earliest", max_poll_records=100000) as cons:
        tps = [TopicPartition("np", p) for p in range(3)]
        cons.assign(tps)
        ends = cons.list_offsets(tps, -1)
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < sum(ends.values()) and time.monotonic() < deadline:
            for r in cons.poll(1000):
                got[r.partition][r.offset] = r.value
    assert len(acked) > 1000
    for p, off, v in acked:
        assert got[p].get(off) == v, f"acknowledged np-{p}@{off} lost or changed"
    # the healed broker's log matches the leader's where both have data (it truncated its own tail);
    # read its segment files directly, read-only, while it runs
    from net import batch as batch_fmt

    for p in range(3):
        for seg in sorted((c.tmp / f"data-{victim}" / f"np-{p}").glob("*.log")):
            data = seg.read_bytes()
            for pos, h in batch_fmt.iter_batches(data):
                for r in batch_fmt.records_of(data, pos, h):
                    o = h.base_offset + r[0]
                    if o in got[p]:
                        assert got[p][o] == r[3], f"replica {victim} differs at np-{p}@{o}"
