"""The deploy scripts on three hosts: network namespaces joined by a bridge, addresses from
198.18.9.0/24 (inside 198.18.0.0/15; nothing leaves this machine). Each host runs
deploy/node/install.sh --no-systemd (offline: a wheel of this checkout, dependencies reused from
the test venv) with its secure default: SASL_SSL on every connection, between the brokers too, and
ACLs, with the TLS material and passwords that deploy/tls/cluster-secrets.sh made for the cluster
(as deploy.sh --initial does on the operator's machine); the three brokers form a cluster; an
unauthenticated client gets nothing and a user without ACLs reads nothing; records are produced
and consumed across hosts with the installed CLIs; one host's link is cut and healed (failover, then catch-up seen by
deploy/node/wait-isr.sh); then deploy/node/upgrade.sh, the step deploy/azure/deploy.sh runs on each
VM over ssh, upgrades the brokers one at a time while a producer with acks=all keeps writing, and
no acknowledged record is lost. In ZooKeeper mode (three more hosts, on 198.18.10.0/24), install.sh
also runs a server of a three-server ZooKeeper ensemble on each host; one host dies (its ZooKeeper
server and its broker), the other two keep a quorum, writes with acks=all go on and none is lost,
and the host comes back. Needs root (CI runs as root)."""

from __future__ import annotations

import copy
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from client.admin import NewTopic
from client.consumer import TopicPartition
from client.sync import Admin, Consumer, Producer
from net.errors import TopicAlreadyExistsError, TopicAuthorizationError
from tests.conftest import ROOT
from tests.integration.cluster_harness import LoadProducer, check_acknowledged, read_back, wait_until
from tests.integration.test_deploy_node import build_wheel, clean_env, copy_deps, require_root
from tests.integration.zk_support import require_zookeeper

pytestmark = pytest.mark.timeout(240)
NET = "198.18.9"  # test_netns_partition.py uses 198.18.7
ZK_NET = "198.18.10"  # the ZooKeeper-mode hosts
PORT = 9092
ZK_PORT = 2181
NODE = ROOT / "deploy" / "node"
HOSTS = (1, 2, 3)


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check)


class Hosts:
    """Three namespace hosts on network `net`.0/24, each with its own install root (what / is on a
    VM); `install_args` are install.sh's extra arguments on every host."""

    def __init__(self, tmp: Path, net: str = NET, kind: str = "", install_args: Sequence[str] = ()) -> None:
        self.tmp = tmp
        self.net = net
        # the cluster's secrets, made on "the operator's machine" (deploy.sh --initial runs this)
        self.secrets = tmp / "operator-secrets"
        specs = [f"{i}={net}.{i}" for i in HOSTS]
        made = sh("bash", str(ROOT / "deploy/tls/cluster-secrets.sh"), str(self.secrets), *specs)
        assert made.returncode == 0, made.stderr
        admin_password = (self.secrets / "admin.password").read_text().strip()
        # our Python clients' login: the admin user over TLS with the cluster's CA
        self.client = {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_username": "admin",
            "sasl_password": admin_password,
            "ssl_ca_location": str(self.secrets / "ca.pem"),
        }
        # unique names: no clash with a parallel run, another test, or the other kind of hosts
        self.tag = f"kd{os.getpid() % 10000}{kind}"
        self.bridge = f"{self.tag}br"
        self.peers = ",".join(f"{i}@{net}.{i}:{PORT}" for i in HOSTS)
        self.bootstrap = ",".join(f"{net}.{i}:{PORT}" for i in HOSTS)
        self.install_args = list(install_args)
        self.first: dict[int, subprocess.Popen] = {}

    def ns(self, i: int) -> str:
        return f"{self.tag}h{i}"

    def veth(self, i: int) -> str:
        return f"{self.tag}v{i}"

    def root(self, i: int) -> Path:
        return self.tmp / f"host{i}"

    def tool(self, i: int, name: str) -> str:
        return str(self.root(i) / "opt/kafkalite/venv/bin" / name)

    def login(self, i: int) -> list[str]:
        """The installed CLIs' login on host i: the admin's client config install.sh wrote there."""
        return ["--command-config", str(self.root(i) / "etc/kafkalite/admin.properties")]

    def setup(self) -> None:
        self.teardown()  # leftovers of a crashed run with the same pid
        self.remove_stale_labs()
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.net}.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i in HOSTS:
            inside = f"{self.tag}p{i}"
            sh("ip", "netns", "add", self.ns(i))
            sh("ip", "link", "add", self.veth(i), "type", "veth", "peer", "name", inside)
            sh("ip", "link", "set", inside, "netns", self.ns(i))
            sh("ip", "link", "set", self.veth(i), "master", self.bridge)
            sh("ip", "link", "set", self.veth(i), "up")
            ex = ("ip", "netns", "exec", self.ns(i))
            sh(*ex, "ip", "addr", "add", f"{self.net}.{i}/24", "dev", inside)
            sh(*ex, "ip", "link", "set", inside, "up")
            sh(*ex, "ip", "link", "set", "lo", "up")

    def install_and_start(self, i: int, wheel: Path, deps: Path) -> None:
        """install.sh --no-systemd, in the foreground of host i: what cloud-init does on a VM, with
        the unit's command line run directly."""
        if i in self.first:  # a host that comes back: its first run is over
            self.first[i].wait(30)
        log = open(self.tmp / f"install-{i}.log", "ab")
        args = ["--root", str(self.root(i)), "--id", str(i), "--peers", self.peers, "--user", "root"]
        args += ["--override", "default.replication.factor=3", "--override", "min.insync.replicas=2"]
        args += ["--package", str(wheel), "--deps-from", str(deps), "--python", sys.executable, "--no-systemd"]
        args += ["--secrets-dir", str(self.secrets / f"broker-{i}")]
        args += self.install_args
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

    def kill(self, i: int) -> None:
        """Host i dies: SIGKILL to everything running in it (its broker, its ZooKeeper server)."""
        for pid in sh("ip", "netns", "pids", self.ns(i), check=False).stdout.split():
            sh("kill", "-KILL", pid, check=False)
        self.first[i].wait(30)

    def zk_mode(self, i: int) -> str:
        """The mode of host i's ZooKeeper server (its `srvr` four-letter command), or "down"."""
        try:
            with socket.create_connection((f"{self.net}.{i}", ZK_PORT), timeout=2) as s:
                s.sendall(b"srvr")
                out = b""
                while chunk := s.recv(4096):
                    out += chunk
        except OSError:
            return "down"
        for line in out.decode(errors="replace").splitlines():
            if line.startswith("Mode: "):
                return line[len("Mode: ") :]
        return "not serving"

    def zk_modes(self, hosts: Sequence[int] = HOSTS) -> list[str]:
        return sorted(self.zk_mode(i) for i in hosts)

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
        files = sorted(self.tmp.glob("install-*.log")) + sorted(self.tmp.glob("host*/var/lib/kafkalite/*.log"))
        return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in files)

    def remove_stale_labs(self) -> None:
        """A killed run's lab on this subnet (another tag: its worker's pid): its bridge holds our gateway address,
        so traffic to our hosts would reach its brokers (found when a run was killed and the next one's clients
        met the old brokers' certificates). Its hosts' processes are killed and its links and namespaces removed."""
        shown = sh("ip", "-o", "-4", "addr", "show", check=False).stdout
        for line in shown.splitlines():
            fields = line.split()
            if len(fields) > 3 and fields[3] == f"{self.net}.254/24" and fields[1] != self.bridge:
                stale = copy.copy(self)
                stale.tag, stale.bridge, stale.first = fields[1].removesuffix("br"), fields[1], {}
                stale.teardown()

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
def package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """What every host installs: a wheel of this checkout, and the dependencies (--deps-from)."""
    require_root()
    if shutil.which("ip") is None:
        pytest.fail("iproute2 is missing (apt-get install -y iproute2)")
    tmp = tmp_path_factory.mktemp("deploy-package")
    return build_wheel(tmp), copy_deps(tmp / "deps")


def running_hosts(h: Hosts, package: tuple[Path, Path]) -> Iterator[Hosts]:
    """Sets up the hosts, runs install.sh on each (in parallel, as cloud-init does on the VMs), waits
    until each has exec'd its broker; tears everything down afterwards."""
    try:
        h.setup()
        for i in HOSTS:
            h.install_and_start(i, *package)
        for i in HOSTS:
            wait_until(
                lambda i=i: h.started(i),
                120,
                f"install.sh to start the broker on host {i}",
                give_up=lambda i=i: None if h.first[i].poll() is None else f"it exited with {h.first[i].returncode}",
                detail=h.logs,
            )
        yield h
    finally:
        h.teardown()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory, package: tuple[Path, Path]) -> Iterator[Hosts]:
    yield from running_hosts(Hosts(tmp_path_factory.mktemp("deploy-netns")), package)


@pytest.fixture
def zk_hosts(tmp_path_factory: pytest.TempPathFactory, package: tuple[Path, Path]) -> Iterator[Hosts]:
    """Three hosts in ZooKeeper mode: each runs a server of one ensemble, and a broker."""
    require_zookeeper()  # install.sh would apt-get it; a test does not
    servers = ",".join(f"{i}={ZK_NET}.{i}" for i in HOSTS)
    args = ["--coordination", "zookeeper", "--zookeeper-servers", servers]
    tmp = tmp_path_factory.mktemp("deploy-netns-zk")
    yield from running_hosts(Hosts(tmp, ZK_NET, "z", args), package)


def produce_in(h: Hosts, i: int, via: int, topic: str, lines: list[str]) -> None:
    """kl-produce, installed on host i, to the broker on host `via`, acks=all."""
    cp = h.run_in(
        i,
        h.tool(i, "kl-produce"),
        *h.login(i),
        "--bootstrap-server",
        f"{h.net}.{via}:{PORT}",
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
        *h.login(i),
        "--bootstrap-server",
        f"{h.net}.{via}:{PORT}",
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


def create_topic(admin: Admin, name: str, replication: int = 3) -> None:
    """Creates the topic (3 partitions, min.insync.replicas=2), retrying until the brokers can."""

    def create() -> bool:
        try:
            admin.create_topics([NewTopic(name, 3, replication, {"min.insync.replicas": "2"})])
        except TopicAlreadyExistsError:  # an earlier try got through
            pass
        return True

    wait_until(create, 60, f"topic {name} to be created")


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
            *h.login(2),
            "--bootstrap-server",
            f"{h.net}.3:{PORT}",
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

    wait_until(create, 60, "the topic to be created on three brokers")
    lines = [f"k{n}:v{n}" for n in range(300)]
    produce_in(h, 1, 2, "orders", lines[:200])
    assert sorted(consume_in(h, 3, 1, "orders", 200)) == sorted(lines[:200])
    check_the_secure_default(h)

    with Admin(h.bootstrap, request_timeout_ms=5000, **h.client) as admin:
        described = admin.describe_topics(["orders"])[0]
        assert described.configs["min.insync.replicas"][0] == "2"  # install.sh's --override
        victim = described.partitions[0].leader
        others = [i for i in HOSTS if i != victim]
        h.cut(victim)
        try:

            def moved() -> bool:
                d = admin.describe_topics(["orders"])[0]
                return all(p.leader in others and victim not in p.isr for p in d.partitions)

            wait_until(moved, 30, "leaders to move off the cut host")
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


PEM_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----\s+[A-Za-z0-9+/]{40}")  # a key, not a script naming one


def check_the_secure_default(h: Hosts) -> None:
    """No login, no service; a plaintext client gets no answer; a user with a login but no ACL sees
    no topic and may read none; no password or key is in a log or a world-readable file."""
    plain = h.run_in(3, h.tool(3, "kl-topics"), "--bootstrap-server", f"{h.net}.1:{PORT}", "--list", timeout=60)
    assert plain.returncode != 0 and "orders" not in plain.stdout
    assert "Traceback" not in plain.stderr and len(plain.stderr.strip().splitlines()) == 1, plain.stderr
    with Admin(h.bootstrap, request_timeout_ms=5000, **h.client) as admin:
        admin.alter_user_scram_credentials([("guest", "SCRAM-SHA-256", "guest-password-1", 4096)])
    guest = dict(h.client, sasl_username="guest", sasl_password="guest-password-1")

    def guest_sees(i: int) -> list[str]:
        with Admin(f"{h.net}.{i}:{PORT}", request_timeout_ms=5000, **guest) as admin:
            return admin.list_topics()

    # a new login reaches each broker through the cluster metadata, a moment after it was made
    for i in HOSTS:
        wait_until(lambda i=i: guest_sees(i) is not None, 20, f"guest's login accepted by broker {i}")
        assert "orders" not in guest_sees(i)
    with Consumer(h.bootstrap, auto_offset_reset="earliest", request_timeout_ms=5000, **guest) as c:
        with pytest.raises(TopicAuthorizationError):
            c.assign([TopicPartition("orders", 0)])
            for _ in range(10):
                c.poll(500)
    secrets = [(h.secrets / f).read_text().strip() for f in ("admin.password", "broker.password")]
    for i in HOSTS:
        for p in h.root(i).rglob("*"):
            if not p.is_file() or p.is_symlink() or "/venv/" in str(p) or p.stat().st_size > 10_000_000:
                continue
            text = p.read_text(errors="replace")
            if any(s in text for s in secrets) or PEM_KEY.search(text):
                assert p.stat().st_mode & 0o007 == 0, f"{p} holds a secret and others may read it"
                assert p.suffix != ".log" and "data" not in p.parts, f"a secret in {p}"
    for log in h.tmp.glob("install-*.log"):
        assert not any(s in log.read_text(errors="replace") for s in secrets), log


def test_rolling_upgrade_keeps_every_acknowledged_record(hosts: Hosts, tmp_path: Path) -> None:
    h = hosts
    wheel = build_wheel(tmp_path, version="0.1.0.post1")
    admin = Admin(h.bootstrap, request_timeout_ms=5000, **h.client)
    create_topic(admin, "rolling")
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
        h.bootstrap,
        acks="all",
        linger_ms=1,
        delivery_timeout_ms=90000,
        request_timeout_ms=5000,
        retry_backoff_ms=50,
        **h.client,
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
        wait_until(lambda: len(acked) > 200, 30, "the producer to get going")
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
    with Consumer(h.bootstrap, auto_offset_reset="earliest", max_poll_records=100000, **h.client) as consumer:
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


def test_zookeeper_mode_keeps_a_quorum_and_every_acknowledged_record_when_a_host_dies(
    zk_hosts: Hosts, package: tuple[Path, Path]
) -> None:
    h = zk_hosts
    # install.sh ran a server of one ensemble on every host: they elect a leader
    wait_until(lambda: h.zk_modes() == ["follower", "follower", "leader"], 90, "a ZooKeeper quorum", detail=h.logs)
    connect = ",".join(f"{ZK_NET}.{i}:{ZK_PORT}" for i in HOSTS)
    for i in HOSTS:
        props = (h.root(i) / "etc/kafkalite/server.properties").read_text().splitlines()
        assert "coordination=zookeeper" in props and f"zookeeper.connect={connect}" in props
    h.ok(h.node(1, "wait-isr.sh", "--until", "healthy", "--timeout", "90"))
    admin = Admin(h.bootstrap, request_timeout_ms=5000, **h.client)
    load: LoadProducer | None = None
    try:
        create_topic(admin, "zk-cli")
        create_topic(admin, "zk-load")
        lines = [f"k{n}:v{n}" for n in range(200)]
        produce_in(h, 1, 2, "zk-cli", lines[:100])  # across hosts, with the installed CLIs
        assert sorted(consume_in(h, 3, 1, "zk-cli", 100)) == sorted(lines[:100])
        status = h.ok(h.node(2, "status.sh"))
        assert status.splitlines()[-1].startswith("healthy"), status
        zk_lines = [line for line in status.splitlines() if line.startswith("zookeeper\t")]
        assert len(zk_lines) == 3 and sum("\tleader" in line for line in zk_lines) == 1, status

        load = LoadProducer(h.bootstrap, "zk-load", "Z", delivery_timeout_ms=90000, request_timeout_ms=5000, **h.client)
        load.start()
        load.wait_acked(200, 30)
        # The host whose ZooKeeper server leads the ensemble dies, broker and all.
        victim = next(i for i in HOSTS if h.zk_mode(i) == "leader")
        others = [i for i in HOSTS if i != victim]
        h.kill(victim)
        # the two servers left are a quorum of three: they elect a new leader
        wait_until(lambda: h.zk_modes(others) == ["follower", "leader"], 60, "a new ZooKeeper leader", detail=h.logs)

        def moved() -> bool:
            return all(
                p.leader in others and victim not in p.isr
                for t in admin.describe_topics(["zk-cli", "zk-load"])
                for p in t.partitions
            )

        wait_until(moved, 60, f"leaders to move off host {victim}")
        # acks=all goes on with the two brokers left (min.insync.replicas=2) ...
        n = load.acked_count()
        load.wait_acked(n + 300, 60)
        produce_in(h, others[0], others[1], "zk-cli", lines[100:])
        # ... and so do metadata changes, which are ZooKeeper writes: the ensemble has its quorum
        create_topic(admin, "zk-after", replication=2)
        status = h.node(others[0], "status.sh")
        assert status.returncode == 1, status.stdout
        assert f"zookeeper\t{ZK_NET}.{victim}:{ZK_PORT}\tdown" in status.stdout.splitlines()
        stats = load.stop(90)
        load = None
        assert stats.flush_error is None and not stats.failed, (stats.flush_error, stats.failed[:3])
        check_acknowledged(read_back(h.bootstrap, "zk-load", 3, **h.client), [stats], min_acked=500)
        assert sorted(consume_in(h, others[1], others[0], "zk-cli", 200)) == sorted(lines)

        # The host comes back (install.sh again, as after a reboot): its server rejoins the ensemble,
        # its broker every ISR.
        h.install_and_start(victim, *package)
        wait_until(lambda: h.started(victim), 60, f"install.sh to start the broker on host {victim}", detail=h.logs)
        wait_until(lambda: h.zk_modes() == ["follower", "follower", "leader"], 60, "the ensemble whole", detail=h.logs)
        h.ok(h.node(victim, "wait-isr.sh", "--until", "in-sync", "--timeout", "90"))
        assert sorted(consume_in(h, victim, victim, "zk-cli", 200)) == sorted(lines)
    finally:
        if load is not None:
            load.stop(5)
        admin.close()
