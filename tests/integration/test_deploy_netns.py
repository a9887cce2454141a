"""The deploy scripts on three hosts: network namespaces joined by a bridge, addresses from
198.18.9.0/24 (inside 198.18.0.0/15; nothing leaves this machine). Each host runs
deploy/node/install.sh --no-systemd (offline: a wheel of this checkout, dependencies reused from
the test venv); the three brokers form a cluster; records are produced and consumed across hosts
with the installed CLIs; one host's link is cut and healed (failover, then catch-up seen by
deploy/node/wait-isr.sh); then deploy/node/upgrade.sh, the step deploy/azure/deploy.sh runs on each
VM over ssh, upgrades the brokers one at a time while a producer with acks=all keeps writing, and
no acknowledged record is lost. Needs root (CI runs as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client.admin import NewTopic
from client.consumer import TopicPartition
from client.sync import Admin, Consumer, Producer
from net.errors import TopicAlreadyExistsError
from tests.conftest import ROOT
from tests.integration.test_deploy_node import build_wheel, clean_env, copy_deps, require_root

pytestmark = pytest.mark.timeout(240)
NET = "198.18.9"  # test_netns_partition.py uses 198.18.7
PORT = 9092
NODE = ROOT / "deploy" / "node"
HOSTS = (1, 2, 3)


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check)


class Hosts:
    """Three namespace hosts, each with its own install root (what / is on a VM)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tag = f"kd{os.getpid() % 10000}"  # unique names: no clash with a parallel run or test
        self.bridge = f"{self.tag}br"
        self.peers = ",".join(f"{i}@{NET}.{i}:{PORT}" for i in HOSTS)
        self.bootstrap = ",".join(f"{NET}.{i}:{PORT}" for i in HOSTS)
        self.first: dict[int, subprocess.Popen] = {}

    def ns(self, i: int) -> str:
        return f"{self.tag}h{i}"

    def veth(self, i: int) -> str:
        return f"{self.tag}v{i}"

    def root(self, i: int) -> Path:
        return self.tmp / f"host{i}"

    def tool(self, i: int, name: str) -> str:
        return str(self.root(i) / "opt/kafkalite/venv/bin" / name)

    def setup(self) -> None:
        self.teardown()  # leftovers of a crashed run with the same pid
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{NET}.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i in HOSTS:
            inside = f"{self.tag}p{i}"
            sh("ip", "netns", "add", self.ns(i))
            sh("ip", "link", "add", self.veth(i), "type", "veth", "peer", "name", inside)
            sh("ip", "link", "set", inside, "netns", self.ns(i))
            sh("ip", "link", "set", self.veth(i), "master", self.bridge)
            sh("ip", "link", "set", self.veth(i), "up")
            ex = ("ip", "netns", "exec", self.ns(i))
            sh(*ex, "ip", "addr", "add", f"{NET}.{i}/24", "dev", inside)
            sh(*ex, "ip", "link", "set", inside, "up")
            sh(*ex, "ip", "link", "set", "lo", "up")

    def install_and_start(self, i: int, wheel: Path, deps: Path) -> None:
        """install.sh --no-systemd, in the foreground of host i: what cloud-init does on a VM, with
        the unit's command line run directly."""
        log = open(self.tmp / f"install-{i}.log", "ab")
        args = ["--root", str(self.root(i)), "--id", str(i), "--peers", self.peers, "--user", "root"]
        args += ["--override", "default.replication.factor=3", "--override", "min.insync.replicas=2"]
        args += ["--package", str(wheel), "--deps-from", str(deps), "--python", sys.executable, "--no-systemd"]
        self.first[i] = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(i), "bash", str(NODE / "install.sh"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=self.tmp,
        )

    def run_in(self, i: int, *argv: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(i), *argv],
            input=stdin,
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=self.tmp,
            timeout=timeout,
        )

    def node(self, i: int, script: str, *args: str, timeout: float = 200) -> subprocess.CompletedProcess:
        """A deploy/node script on host i, as deploy.sh runs it on a VM over ssh."""
        return self.run_in(i, "bash", str(NODE / script), "--root", str(self.root(i)), *args, timeout=timeout)

    def ok(self, cp: subprocess.CompletedProcess) -> str:
        assert cp.returncode == 0, f"{cp.args}\n{cp.stdout}\n{cp.stderr}\n{self.logs()}"
        return cp.stdout

    def cut(self, i: int) -> None:
        sh("ip", "link", "set", self.veth(i), "down")

    def heal(self, i: int) -> None:
        sh("ip", "link", "set", self.veth(i), "up")

    def broker_pid(self, i: int) -> int:
        return int((self.root(i) / "var/lib/kafkalite/kl-broker.pid").read_text())

    def started(self, i: int) -> bool:
        """Whether install.sh on host i is done and exec'd the broker (it writes its pid file)."""
        assert self.first[i].poll() is None, f"install.sh on host {i} exited\n{self.logs()}"
        pid = self.broker_pid(i)
        return b"kl-broker" in Path(f"/proc/{pid}/cmdline").read_bytes()

    def logs(self) -> str:
        files = sorted(self.tmp.glob("install-*.log")) + sorted(self.tmp.glob("host*/var/lib/kafkalite/broker.log"))
        return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in files)

    def teardown(self) -> None:
        # Every process in a host (the first broker, the ones upgrade.sh started) dies with it.
        for i in HOSTS:
            pids = sh("ip", "netns", "pids", self.ns(i), check=False).stdout.split()
            for pid in pids:
                sh("kill", "-KILL", pid, check=False)
        for p in self.first.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)
        for i in HOSTS:
            sh("ip", "netns", "del", self.ns(i), check=False)
            sh("ip", "link", "del", self.veth(i), check=False)
        sh("ip", "link", "del", self.bridge, check=False)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    require_root()
    if shutil.which("ip") is None:
        pytest.fail("iproute2 is missing (apt-get install -y iproute2)")
    h = Hosts(tmp_path_factory.mktemp("deploy-netns"))
    try:
        h.setup()
        wheel = build_wheel(h.tmp)
        deps = copy_deps(h.tmp / "deps")
        for i in HOSTS:
            h.install_and_start(i, wheel, deps)
        for i in HOSTS:
            wait_for(lambda i=i: h.started(i), 120, f"install.sh to start the broker on host {i}\n{h.logs()}")
        yield h
    finally:
        h.teardown()


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - brokers may be unreachable while we wait
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def produce_in(h: Hosts, i: int, via: int, topic: str, lines: list[str]) -> None:
    """kl-produce, installed on host i, to the broker on host `via`, acks=all."""
    cp = h.run_in(
        i,
        h.tool(i, "kl-produce"),
        "--bootstrap-server",
        f"{NET}.{via}:{PORT}",
        "--topic",
        topic,
        "--acks",
        "all",
        "--key-separator",
        ":",
        stdin="".join(f"{line}\n" for line in lines),
    )
    h.ok(cp)


def consume_in(h: Hosts, i: int, via: int, topic: str, n: int) -> list[str]:
    """kl-consume, installed on host i, from the broker on host `via`: n records as key:value."""
    cp = h.run_in(
        i,
        h.tool(i, "kl-consume"),
        "--bootstrap-server",
        f"{NET}.{via}:{PORT}",
        "--topic",
        topic,
        "--from-beginning",
        "--print-key",
        "--max-messages",
        str(n),
        "--timeout-ms",
        "30000",
    )
    return [line.replace("\t", ":", 1) for line in h.ok(cp).splitlines()]


def test_installed_brokers_form_a_cluster_across_hosts_and_fail_over(hosts: Hosts) -> None:
    h = hosts
    # the deploy scripts' own check (deploy.sh --initial runs it): every broker answers
    h.ok(h.node(1, "wait-isr.sh", "--until", "healthy", "--timeout", "90"))
    for i in HOSTS:  # each host runs the installed package, not this checkout
        cp = h.run_in(i, h.tool(i, "python"), "-c", "import broker; print(broker.__file__)")
        assert h.ok(cp).startswith(f"{h.root(i)}/opt/kafkalite/venv/lib/")

    def create() -> bool:
        # from host 2, through host 3; fails until the controller has registered all three brokers
        cp = h.run_in(
            2,
            h.tool(2, "kl-topics"),
            "--bootstrap-server",
            f"{NET}.3:{PORT}",
            "--create",
            "--topic",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
            "--if-not-exists",
        )
        return cp.returncode == 0

    wait_for(create, 60, "the topic to be created on three brokers")
    lines = [f"k{n}:v{n}" for n in range(300)]
    produce_in(h, 1, 2, "orders", lines[:200])
    assert sorted(consume_in(h, 3, 1, "orders", 200)) == sorted(lines[:200])

    with Admin(h.bootstrap, request_timeout_ms=5000) as admin:
        described = admin.describe_topics(["orders"])[0]
        assert described.configs["min.insync.replicas"][0] == "2"  # install.sh's --override
        victim = described.partitions[0].leader
        others = [i for i in HOSTS if i != victim]
        h.cut(victim)
        try:

            def moved() -> bool:
                d = admin.describe_topics(["orders"])[0]
                return all(p.leader in others and victim not in p.isr for p in d.partitions)

            wait_for(moved, 30, "leaders to move off the cut host")
            # acks=all goes on with the two hosts left (min.insync.replicas=2)
            produce_in(h, others[0], others[1], "orders", lines[200:])
        finally:
            h.heal(victim)
        # the healed broker catches up: seen by the same check the rolling upgrade waits on
        h.ok(h.node(victim, "wait-isr.sh", "--until", "in-sync", "--timeout", "60"))
        assert all(victim in p.isr for p in admin.describe_topics(["orders"])[0].partitions)
    assert sorted(consume_in(h, victim, victim, "orders", 300)) == sorted(lines)
    status = h.node(others[0], "status.sh")
    assert h.ok(status).splitlines()[-1].startswith("healthy"), status.stdout


def test_rolling_upgrade_keeps_every_acknowledged_record(hosts: Hosts, tmp_path: Path) -> None:
    h = hosts
    wheel = build_wheel(tmp_path, version="0.1.0.post1")
    admin = Admin(h.bootstrap, request_timeout_ms=5000)

    def create() -> bool:
        try:
            admin.create_topics([NewTopic("rolling", 3, 3, {"min.insync.replicas": "2"})])
        except TopicAlreadyExistsError:  # an earlier try got through
            pass
        return True

    wait_for(create, 60, "the topic to be created")
    acked: list[tuple[int, int, bytes]] = []
    errors: list[Exception] = []
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery_for(value: bytes) -> Callable:
        def cb(err: Exception | None, md) -> None:  # noqa: ANN001 - the client's metadata type
            with lock:
                if err is None:
                    acked.append((md.partition, md.offset, value))
                else:
                    errors.append(err)

        return cb

    producer = Producer(
        h.bootstrap, acks="all", linger_ms=1, delivery_timeout_ms=90000, request_timeout_ms=5000, retry_backoff_ms=50
    )

    def produce() -> None:
        n = 0
        while not stop.is_set():
            value = f"r{n}".encode()
            producer.send("rolling", value, key=f"k{n % 30}".encode(), on_delivery=on_delivery_for(value))
            n += 1
            time.sleep(0.002)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        wait_for(lambda: len(acked) > 200, 30, "the producer to get going")
        for i in HOSTS:
            before = len(acked)
            # upgrade.sh: healthy? stop, fenced, install the new wheel, start, back in every ISR
            out = h.node(i, "upgrade.sh", "--package", str(wheel), "--timeout", "90")
            h.ok(out)
            assert "back in every ISR" in out.stderr
            # upgrade.sh's claim, checked independently: broker i is in every ISR again
            for topic in admin.describe_topics():
                for p in topic.partitions:
                    assert i in p.isr, f"broker {i} not in the ISR of {topic.name}-{p.partition}: {p}"
            # the new version is what runs on host i
            cmdline = Path(f"/proc/{h.broker_pid(i)}/cmdline").read_bytes().split(b"\0")
            assert cmdline[1] == h.tool(i, "kl-broker").encode()
            cp = h.run_in(
                i, h.tool(i, "python"), "-c", "import importlib.metadata as m; print(m.version('kafka-lite'))"
            )
            assert h.ok(cp).strip() == "0.1.0.post1"
            assert len(acked) > before, "no write was acknowledged while the broker restarted"
    finally:
        stop.set()
        thread.join()
        producer.flush(90)
        producer.close()
        admin.close()
    assert not errors, f"{len(errors)} writes failed during the rolling upgrade, e.g. {errors[0]!r}"

    got: dict[int, dict[int, bytes]] = {0: {}, 1: {}, 2: {}}
    with Consumer(h.bootstrap, auto_offset_reset="earliest", max_poll_records=100000) as consumer:
        tps = [TopicPartition("rolling", p) for p in range(3)]
        consumer.assign(tps)
        ends = consumer.list_offsets(tps, -1)
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < sum(ends.values()) and time.monotonic() < deadline:
            for r in consumer.poll(1000):
                got[r.partition][r.offset] = r.value
    assert len(acked) > 1000
    lost = [(p, off) for p, off, v in acked if got[p].get(off) != v]
    assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. rolling-{lost[0][0]}@{lost[0][1]}"
