"""Real multi-broker clusters for fault tests: N `kl-broker` processes on loopback, a load
generator whose acknowledgements are recorded, and a checker for what was acknowledged.

- ClusterHarness: start / kill(sig) / stop / restart / pause / resume brokers by id, wait for
  full ISRs, dump every broker's log when a test fails, always clean up. `coordination="zookeeper"`
  runs the same brokers in ZooKeeper mode against a standalone ZooKeeper of its own (client/cli/zk_local.py),
  which `zk_kill` / `zk_start` stop and bring back with its data.
- Load: producer threads (acks=all, idempotent) that send values `P<producer>-<seq>` and record
  every acknowledged (partition, offset, value) from `on_delivery`; optional consumer threads.
- check_acknowledged / check_replicas_agree: every acknowledged record is read back at its
  offset, per-producer order per partition holds, and every replica's own segment files agree
  below the high watermark (read directly from disk, read-only).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from client.admin import NewTopic
from client.cli.cluster import start_command, write_cluster_secret
from client.cli.zk_local import LocalZooKeeper
from client.cluster import TopicMeta
from client.consumer import TopicPartition
from client.sync import Admin, Consumer, Producer
from net import batch as batch_fmt
from net.errors import KafkaLiteError, RequestTimedOutError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from net.protocol import ElectionType
from tests.ports import free_port_runs, free_ports, port_range
from tests.waiting import wait_port, wait_until

if TYPE_CHECKING:
    from bench.netns import NetnsLab

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"

__all__ = ["free_port_runs", "free_ports", "port_range"]  # re-exported: the fault tests take them from here


# The failure-detection timeouts before issue 24 (the defaults are now Kafka's patient 9 s / 2 s,
# broker/server/config.py),
# for tests whose faults must reach fencing and elections quickly (the nemesis' cuts of a few seconds).
FAST_FAILURE_DETECTION = [
    "broker.session.timeout.ms=2000",
    "broker.heartbeat.interval.ms=500",
    "controller.quorum.election.timeout.ms=2000",
    "zookeeper.session.timeout.ms=2000",
]


class Broker:
    def __init__(
        self, harness: "ClusterHarness", broker_id: int, port: int, metrics_port: int = -1, kafka_port: int = -1
    ) -> None:
        self.h = harness
        self.id = broker_id
        self.port = port
        self.metrics_port = metrics_port  # metrics.port: Prometheus text on its own listener
        self.kafka_port = kafka_port  # kafka.port: the Kafka-protocol listener
        self.data_dir = harness.root / f"broker-{broker_id}"
        self.log_path = harness.root / f"broker-{broker_id}.log"
        self.proc: subprocess.Popen | None = None
        self._log = None
        self.paused = False

    @property
    def host(self) -> str:
        """Loopback, or this broker's own host when the harness places brokers in network namespaces."""
        return self.h.lab.addr(self.id) if self.h.lab is not None else HOST

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, wait: bool = True) -> None:
        assert not self.alive, f"broker {self.id} is already running"
        cmd = start_command(
            self.id,
            self.port,
            self.data_dir,
            host=self.host,
            peers=self.h.peers,
            extra=[
                x
                for o in [
                    # metrics.host: this broker's own host in network namespaces; per-topic series for the
                    # tests that read them (a test's own overrides come later and win)
                    f"metrics.host={self.host}",
                    "metrics.topic.labels=true",
                    *self.h.overrides,
                    f"metrics.port={self.metrics_port}",
                    f"kafka.port={self.kafka_port}",
                ]
                for x in ("--override", o)
            ]
            + self.h.extra_args,
            coordination=self.h.coordination if self.h.zk is not None else None,
            zookeeper=self.h.zk.connect if self.h.zk is not None else None,
        )
        self._log = open(self.log_path, "ab")
        self._log.write(f"==== harness: start broker {self.id} at {time.strftime('%X')} ====\n".encode())
        self._log.flush()
        if self.h.lab is not None:
            cmd = self.h.lab.argv(self.id, cmd)  # run inside this broker's host
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.paused = False
        if wait:
            self.wait_listening()

    def wait_listening(self, timeout: float = 30) -> None:
        assert self.proc is not None, f"broker {self.id} was not started"
        wait_port(self.port, timeout, self.proc, self.host)

    def send_signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.paused and sig not in (signal.SIGKILL, signal.SIGCONT):
            self.proc.send_signal(signal.SIGCONT)
            self.paused = False
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self._close_log(f"broker {self.id} exited with {rc} after signal {sig}")
        return rc

    def stop(self, timeout: float = 30) -> int:
        return self.kill(signal.SIGTERM, timeout)

    def pause(self) -> None:
        self.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.send_signal(signal.SIGCONT)
        self.paused = False

    def _close_log(self, note: str) -> None:
        if self._log is not None:
            self._log.write(f"==== harness: {note} at {time.strftime('%X')} ====\n".encode())
            self._log.close()
            self._log = None

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
                self.proc.wait(10)
            except Exception:  # noqa: BLE001
                pass
        self._close_log(f"cleanup of broker {self.id}")

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def metrics(self, timeout: float = 5) -> str:
        with urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}/metrics", timeout=timeout) as r:
            return r.read().decode()

    # --- reading this replica's own files, read-only ---

    def read_partition(self, topic: str, partition: int) -> dict[int, tuple[int, bytes | None]]:
        """offset -> (leader epoch of its batch, value), straight from the segment files."""
        return read_replica_log(self.data_dir / f"{topic}-{partition}")


def read_replica_log(pdir: Path) -> dict[int, tuple[int, bytes | None]]:
    out: dict[int, tuple[int, bytes | None]] = {}
    if not pdir.is_dir():
        return out
    for seg in sorted(pdir.glob("*.log"), key=lambda p: int(p.stem)):
        data = seg.read_bytes()
        try:
            for pos, h in batch_fmt.iter_batches(data):
                try:
                    batch_fmt.validate(data, pos)
                except batch_fmt.InvalidBatch:
                    break  # a torn tail (SIGKILL mid-write, or read during a write): not a record
                for rec in batch_fmt.records_of(data, pos, h):
                    out[h.base_offset + rec[0]] = (h.leader_epoch, rec[3])
        except batch_fmt.InvalidBatch:
            pass
    return out


class ClusterHarness:
    def __init__(
        self,
        root: Path,
        n: int = 3,
        overrides: list[str] | None = None,
        coordination: str = "custom",
        extra_args: list[str] | None = None,
        client_config: dict | None = None,
        lab: NetnsLab | None = None,
    ) -> None:
        """`extra_args` go to every `kl-broker start` (e.g. --add-scram); `client_config` (keyword arguments of
        our clients: security_protocol, sasl_username, ...) is what the harness's own admin clients use.
        With `lab` (set up by the caller, one host per broker) broker i runs on host i, so `lab.cut(i, j)`
        cuts two brokers apart; ZooKeeper listens on the bridge and the test's clients reach every host."""
        self.root = root
        self.lab = lab
        self.extra_args = list(extra_args or [])
        self.client_config = dict(client_config or {})
        self.root.mkdir(parents=True, exist_ok=True)
        ports = free_ports(3 * n + 1)
        self.coordination = coordination
        zk_host = {"host": lab.gateway} if lab is not None else {}
        self.zk = LocalZooKeeper(root / "zookeeper", ports[n], **zk_host) if coordination == "zookeeper" else None
        self.brokers = {i + 1: Broker(self, i + 1, ports[i], ports[n + 1 + i], ports[2 * n + 1 + i]) for i in range(n)}
        self.peers = ",".join(f"{b.id}@{b.address}" for b in self.brokers.values())
        # The cluster's secret, as kl-cluster up makes one: brokers prove it on the inter-broker listener.
        secret = write_cluster_secret(self.root)
        self.overrides = [f"inter.broker.secret.file={secret}", *(overrides or [])]
        self._clients: list = []

    # --- lifecycle ---

    def start(self) -> "ClusterHarness":
        if self.zk is not None and not self.zk.alive:
            self.zk.start()
        for b in self.brokers.values():
            b.start(wait=False)
        for b in self.brokers.values():
            b.wait_listening()
        self.wait_all_registered()
        return self

    @contextlib.contextmanager
    def running(self) -> Iterator["ClusterHarness"]:
        """Started, and cleaned up whatever happens: a module fixture is `with ClusterHarness(...).running()
        as h: yield h`."""
        try:
            yield self.start()
        finally:
            self.cleanup()

    def __getitem__(self, broker_id: int) -> Broker:
        return self.brokers[broker_id]

    def zk_kill(self) -> None:
        """ZooKeeper lost: SIGKILL the server (its data directory stays)."""
        assert self.zk is not None, "not a ZooKeeper-mode cluster"
        self.zk.kill()

    def zk_start(self) -> None:
        assert self.zk is not None, "not a ZooKeeper-mode cluster"
        self.zk.start()

    def controller_id(self) -> int:
        with self.admin() as a:
            a._lt.run(a._impl.client.refresh_metadata([]))
            return a._impl.client.metadata.controller_id

    def kill(self, broker_id: int, sig: int = signal.SIGKILL) -> int:
        return self.brokers[broker_id].kill(sig)

    def stop(self, broker_id: int) -> int:
        return self.brokers[broker_id].stop()

    def restart(self, broker_id: int, wait: bool = True) -> None:
        b = self.brokers[broker_id]
        if b.alive:
            b.stop()
        b.start(wait=wait)

    def restore(self, timeout: float = 60) -> None:
        """Healthy again after a test's faults, for the next test on a shared cluster (SharedCluster
        below): ZooKeeper running, every broker a test paused resumed and every one it killed or stopped
        started again, every broker registered and unfenced, and every partition of every topic led by its preferred
        replica with all its replicas in its ISR in every broker's metadata. AssertionError (from `wait_until`) when
        it cannot."""
        if self.zk is not None and not self.zk.alive:
            self.zk.start()
        for b in self.brokers.values():
            if b.alive:
                if b.paused:
                    b.resume()
            else:
                b._close_log(f"broker {b.id} found dead")  # a crash the harness did not cause: its log stays open
                b.start(wait=False)
        for b in self.brokers.values():
            b.wait_listening(timeout)
        self.wait_all_registered(timeout)
        self.wait_all_isrs_full(timeout)

        # Leaders back on their preferred replicas, as on a new cluster: the leaderships a test's faults moved
        # (of the internal topics, which stay) would otherwise move back under a later test, when the controller's
        # automatic rebalance runs (auto.leader.rebalance.enable).
        def elect() -> bool:
            with self.admin() as a:
                a.elect_leaders(ElectionType.PREFERRED)
            return True

        wait_until(elect, timeout, "a preferred leader election")
        self.wait_all_isrs_full(timeout, preferred=True)

    def topics(self, ids: list[int] | None = None) -> dict[str, TopicMeta]:
        """name -> metadata of every topic (internal ones too), in one Metadata answer (of a broker among `ids`)."""
        with self.admin(ids, timeout_ms=5000) as a:
            return a._lt.run(a._impl.client.list_topics())

    def wait_all_isrs_full(self, timeout: float = 60, preferred: bool = False) -> None:
        """Every partition of every topic has a leader (`preferred`: its first replica) and every replica in its ISR,
        alike in every running broker's metadata (each answers from its own image, which trails the controller's
        commits a little)."""

        def ok() -> bool:
            views = []
            for i, b in self.brokers.items():
                if not b.alive or b.paused:
                    continue
                topics = self.topics([i])
                if any(
                    tm.error
                    or p.leader <= 0
                    or sorted(p.isr) != sorted(p.replicas)
                    or (preferred and p.leader != p.replicas[0])
                    for tm in topics.values()
                    for p in tm.partitions.values()
                ):
                    return False
                views.append(
                    {
                        (name, p.partition): (p.leader, p.leader_epoch, sorted(p.isr))
                        for name, tm in topics.items()
                        for p in tm.partitions.values()
                    }
                )
            return all(v == views[0] for v in views)

        wait_until(ok, timeout, "every partition of every topic with a leader and a full ISR on every broker")

    def delete_topics(self, names: set[str], timeout: float = 30) -> None:
        """Deleted, and gone from every running broker's metadata."""
        if not names:
            return
        deadline = time.monotonic() + timeout
        with self.admin() as a:
            left = sorted(names)
            while True:
                try:
                    a.delete_topics(left)
                    break
                except (RequestTimedOutError, UnknownTopicOrPartitionError):
                    # No verdict (ZooKeeper mode: a connection loss, which a loaded machine's short sessions
                    # meet), or an unknown topic after the admin client's own retry of a deletion that was made:
                    # deleting is idempotent, so ask again for what is still there.
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
                    left = sorted(names & set(self.topics()))
                    if not left:
                        break

        def gone() -> bool:
            return all(not names & set(self.topics([i])) for i, b in self.brokers.items() if b.alive and not b.paused)

        wait_until(gone, timeout, f"topics {sorted(names)} deleted on every broker")

    def cleanup(self) -> None:
        for c in self._clients:
            try:
                c.close(5)
            except Exception:  # noqa: BLE001
                pass
        for b in self.brokers.values():
            b.cleanup()
        if self.zk is not None:
            self.zk.stop()

    def dump_logs(self, tail: int = 150) -> str:
        parts = []
        for b in self.brokers.values():
            lines = b.logs().splitlines()
            parts.append(f"----- broker {b.id} (port {b.port}) last {tail} lines -----")
            parts.extend(lines[-tail:])
        return "\n".join(parts)

    # --- client access ---

    def bootstrap(self, ids: list[int] | None = None) -> str:
        ids = ids or [i for i, b in self.brokers.items() if b.alive and not b.paused] or list(self.brokers)
        return ",".join(self.brokers[i].address for i in ids)

    def kafka_bootstrap(self, ids: list[int] | None = None) -> str:
        """bootstrap.servers for Kafka clients: the brokers' Kafka-protocol listeners."""
        ids = ids or [i for i, b in self.brokers.items() if b.alive and not b.paused] or list(self.brokers)
        return ",".join(f"{self.brokers[i].host}:{self.brokers[i].kafka_port}" for i in ids)

    def admin(self, ids: list[int] | None = None, timeout_ms: int = 10000) -> Admin:
        a = Admin(self.bootstrap(ids), request_timeout_ms=timeout_ms, **self.client_config)
        return a

    def create_topic(self, name: str, partitions: int, rf: int = 3, configs: dict[str, str] | None = None) -> None:
        def attempt() -> bool:
            try:
                with self.admin() as a:
                    a.create_topics([NewTopic(name, partitions, rf, configs or {})])
            except TopicAlreadyExistsError:
                # An earlier attempt's (or the admin client's own retry's) outcome was unknown and it was made: a
                # REQUEST_TIMED_OUT or a lost connection, which a loaded machine's short sessions meet. Tests name
                # their topics uniquely, so the topic is theirs if it has their partition count.
                if len(self.describe(name)) != partitions:
                    raise
            return True

        wait_until(attempt, 30, f"topic {name} created")
        self.wait_full_isr(name, partitions, rf)

    def describe(self, topic: str, ids: list[int] | None = None) -> list:
        with self.admin(ids, timeout_ms=5000) as a:
            return a.describe_topics([topic])[0].partitions

    def wait_all_registered(self, timeout: float = 30) -> None:
        """Every running broker is unfenced in the cluster metadata (it is in the Metadata brokers list)."""

        def ok() -> bool:
            want = {i for i, b in self.brokers.items() if b.alive and not b.paused}
            with self.admin() as a:
                a._lt.run(a._impl.client.refresh_metadata([]))
                md = a._impl.client.metadata
                return md.controller_id > 0 and want <= set(md.brokers)

        wait_until(ok, timeout, "all running brokers registered with a controller")

        def kafka_listeners() -> bool:
            # Kafka clients send admin requests to the controller they see in Metadata: it must be listed.
            from net.protocol import ApiKey

            want = {i for i, b in self.brokers.items() if b.alive and not b.paused and b.kafka_port > 0}
            with self.admin() as a:
                md = a._lt.run(a._impl.client.request(None, ApiKey.METADATA, {"topics": [], "listener": "kafka"}))
            return want <= {b[0] for b in md.get("brokers") or []}

        wait_until(kafka_listeners, timeout, "all running brokers' Kafka listeners registered")

    def wait_full_isr(self, topic: str, partitions: int, rf: int = 3, timeout: float = 40) -> list:
        """Every partition has a leader and a full ISR, in the metadata of *every* running broker: each
        answers Metadata from its own image, which trails the controller's commits a little."""

        def ok():
            views = []
            for i, b in self.brokers.items():
                if not b.alive or b.paused:
                    continue
                parts = self.describe(topic, [i])
                if not (len(parts) == partitions and all(p.leader > 0 and len(p.isr) == rf for p in parts)):
                    return None
                views.append([(p.leader, p.leader_epoch, sorted(p.isr)) for p in parts])
            return parts if all(v == views[0] for v in views) else None

        return wait_until(ok, timeout, f"{topic}: every partition with a leader and a full ISR")  # type: ignore[return-value]

    def wait_isr_contains(self, topic: str, broker_id: int, timeout: float = 40, ids: list[int] | None = None) -> list:
        def ok():
            parts = self.describe(topic, ids)
            return parts if all(broker_id in p.isr and p.leader > 0 for p in parts) else None

        return wait_until(ok, timeout, f"broker {broker_id} back in every ISR of {topic}")  # type: ignore[return-value]

    def high_watermarks(self, topic: str, partitions: int) -> dict[int, int]:
        with Consumer(self.bootstrap(), request_timeout_ms=10000) as c:
            ends = c.list_offsets([TopicPartition(topic, p) for p in range(partitions)], -1)
        return {tp.partition: off for tp, off in ends.items()}


# --- a cluster that tests take turns on ---------------------------------------------------------


def failed(node: pytest.Item) -> bool:
    """The test's set-up or call failed (conftest.py's pytest_runtest_makereport keeps its reports on the item)."""
    return any(getattr(getattr(node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))


class SharedCluster:
    """One cluster that a module's tests take turns on, where each test would otherwise start (and, in ZooKeeper
    mode, start a ZooKeeper for) a cluster of its own: for tests whose faults the cluster recovers from. After each
    test the cluster is restored (ClusterHarness.restore: every broker back, registered, every ISR full) and the
    test's topics deleted, so the next test finds it as a fresh one but for the ids and epochs; a cluster that
    cannot be restored fails that test's teardown and is thrown away, and the next test gets a new one: one test's
    damage never reaches the next. Tests that need other broker configs, or damage that a restart does not repair,
    take a cluster of their own (cluster_factory).

    A module fixture makes one (`SharedCluster(lambda: ClusterHarness(...))`, closed at the module's end); a
    function fixture hands it to each test (`yield from shared.turn(request)`)."""

    def __init__(self, make: Callable[[], ClusterHarness]) -> None:
        self._make = make
        self.harness: ClusterHarness | None = None
        self._own_topics: set[str] = set()  # what a new cluster has: kept; any other topic is a test's

    def take(self) -> ClusterHarness:
        if self.harness is None:
            h = self._make()
            try:
                h.start()
                self._own_topics = set(h.topics())
            except BaseException:
                h.cleanup()
                raise
            self.harness = h
        return self.harness

    def give_back(self, test_failed: bool) -> None:
        h = self.harness
        if h is None:
            return
        if test_failed:
            print(h.dump_logs())
        try:
            h.restore()
            h.delete_topics({n for n, tm in h.topics().items() if not tm.is_internal} - self._own_topics)
        except BaseException:
            print("the shared cluster could not be restored: thrown away, the next test gets a new one")
            print(h.dump_logs())
            self.close()
            raise

    def turn(self, request: pytest.FixtureRequest) -> Iterator[ClusterHarness]:
        yield self.take()
        self.give_back(failed(request.node))

    def close(self) -> None:
        if self.harness is not None:
            self.harness.cleanup()
            self.harness = None


# --- load: producers that record acknowledgements, consumers that read concurrently ---------------


@dataclass
class ProducerStats:
    name: str
    acked: list[tuple[int, int, bytes]] = field(default_factory=list)  # (partition, offset, value)
    failed: list[tuple[bytes, str]] = field(default_factory=list)
    sent: int = 0
    flush_error: str | None = None


class LoadProducer:
    """A thread sending `<name>-<seq>` values with acks=all; keys spread records over partitions."""

    def __init__(self, bootstrap: str, topic: str, name: str, rate_sleep: float = 0.002, **config) -> None:
        self.topic = topic
        self.stats = ProducerStats(name)
        self._lock = threading.Lock()
        cfg = dict(
            acks="all",
            linger_ms=5,
            batch_size=16384,
            delivery_timeout_ms=60000,
            request_timeout_ms=10000,
            retry_backoff_ms=50,
        )
        cfg.update(config)
        self.producer = Producer(bootstrap, **cfg)
        self._stop = threading.Event()
        self._paused = threading.Event()
        self.rate_sleep = rate_sleep
        self._thread = threading.Thread(target=self._run, name=f"load-{name}", daemon=True)

    def _cb(self, value: bytes):
        def on_delivery(err, md) -> None:
            with self._lock:
                if err is None:
                    self.stats.acked.append((md.partition, md.offset, value))
                else:
                    self.stats.failed.append((value, str(err)))

        return on_delivery

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = f"{self.stats.name}-{i}".encode()
            key = f"k{i % 16}".encode()
            try:
                self.producer.send(self.topic, value, key=key, on_delivery=self._cb(value))
            except KafkaLiteError as e:
                with self._lock:
                    self.stats.failed.append((value, f"send: {e}"))
                time.sleep(0.05)
                continue
            self.stats.sent = i = i + 1
            if i % 10 == 0:
                time.sleep(self.rate_sleep * 10)

    def start(self) -> "LoadProducer":
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self._lock:
            return len(self.stats.acked)

    def wait_acked(self, more_than: int, timeout: float) -> None:
        wait_until(lambda: self.acked_count() > more_than, timeout, f"{self.stats.name}: more than {more_than} acks")

    def stop(self, flush_timeout: float = 60) -> ProducerStats:
        self._stop.set()
        self._thread.join(10)
        try:
            self.producer.flush(flush_timeout)
        except KafkaLiteError as e:
            self.stats.flush_error = str(e)
        try:
            self.producer.close(5)
        except KafkaLiteError:
            pass
        return self.stats


class LoadConsumer:
    """A thread polling its assigned partitions from the earliest offset, keeping every record."""

    def __init__(self, bootstrap: str, topic: str, partitions: list[int], name: str) -> None:
        self.topic = topic
        self.name = name
        self.records: list = []
        self.errors: list[str] = []
        self.consumer = Consumer(
            bootstrap, auto_offset_reset="earliest", request_timeout_ms=5000, fetch_max_wait_ms=200
        )
        self.consumer.assign([TopicPartition(topic, p) for p in partitions])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consume-{name}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.records.extend(self.consumer.poll(300))
            except KafkaLiteError as e:
                self.errors.append(str(e))
                time.sleep(0.1)

    def start(self) -> "LoadConsumer":
        self._thread.start()
        return self

    def stop(self) -> list:
        self._stop.set()
        self._thread.join(15)
        try:
            self.consumer.close(5)
        except KafkaLiteError:
            pass
        return self.records


# --- the checker -------------------------------------------------------------------------------


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 60, **config) -> dict[int, list]:
    """Every record below each partition's high watermark, through a consumer (`config`: its settings,
    e.g. a login)."""
    out: dict[int, list] = {p: [] for p in range(partitions)}
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    settings = {"auto_offset_reset": "earliest", "max_poll_records": 5000, "request_timeout_ms": 10000, **config}
    with Consumer(bootstrap, **settings) as c:
        c.assign(tps)
        ends = {tp.partition: off for tp, off in c.list_offsets(tps, -1).items()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((out[p][-1].offset + 1 if out[p] else 0) >= ends[p] for p in out):
                break
            for r in c.poll(500):
                out[r.partition].append(r)
    for p in out:
        got = out[p][-1].offset + 1 if out[p] else 0
        assert got >= ends[p], f"{topic}-{p}: read up to {got}, high watermark {ends[p]}"
    return out


def _seq(value: bytes) -> tuple[str, int]:
    name, _, n = value.decode().rpartition("-")
    return name, int(n)


def check_order(records_by_partition: dict[int, list[tuple[int, bytes]]], where: str) -> None:
    """Offsets strictly increase, and within a partition each producer's sequence numbers increase
    (idempotent retries: never a value twice)."""
    for p, recs in records_by_partition.items():
        offsets = [o for o, _ in recs]
        assert offsets == sorted(set(offsets)), f"{where} {p}: offsets not strictly increasing"
        last: dict[str, int] = {}
        seen: set[bytes] = set()
        for off, v in recs:
            assert v not in seen, f"{where} {p}@{off}: value {v!r} appears twice"
            seen.add(v)
            name, n = _seq(v)
            assert n > last.get(name, -1), f"{where} {p}@{off}: {v!r} after {name}-{last.get(name)}: order broken"
            last[name] = n


def check_acknowledged(logged: dict[int, list], stats: list[ProducerStats], min_acked: int = 1) -> int:
    """Every acknowledged record is at its acknowledged offset; per-partition order holds."""
    by_offset = {p: {r.offset: r.value for r in recs} for p, recs in logged.items()}
    values = {p: set(offsets.values()) for p, offsets in by_offset.items()}
    check_order({p: [(r.offset, r.value) for r in recs] for p, recs in logged.items()}, "consumer partition")
    total = 0
    for s in stats:
        # Acknowledged offsets of one producer in one partition increase with its sequence numbers.
        per_part: dict[int, list[tuple[int, int]]] = {}
        for p, off, v in s.acked:
            if off is None:
                # Delivered with its offset unknown: librdkafka's idempotent producer reports a batch it had to
                # retry as persisted once the partition's sequence shows it was written (an OUT_OF_ORDER_SEQUENCE
                # or DUPLICATE_SEQUENCE_NUMBER answer below the next expected sequence), without an offset.
                # It must still be in the partition, once (check_order): anywhere.
                assert v in values[p], f"acknowledged {v!r} in partition {p} (offset unknown) lost"
                continue
            assert by_offset[p].get(off) == v, (
                f"acknowledged {v!r} at {p}@{off} lost: the log has {by_offset[p].get(off)!r} there"
            )
            per_part.setdefault(p, []).append((_seq(v)[1], off))
        for p, pairs in per_part.items():
            pairs.sort()
            offs = [o for _, o in pairs]
            assert offs == sorted(offs), f"{s.name}: acknowledged offsets in {p} not in send order"
        total += len(s.acked)
    assert total >= min_acked, f"only {total} records acknowledged (expected at least {min_acked})"
    return total


def check_replicas_agree(
    h: ClusterHarness, topic: str, partitions: int, hws: dict[int, int], require_complete: bool = True
) -> None:
    """Each replica's own segment files: no offset below the high watermark holds different
    records on different replicas, and (require_complete) every replica holds everything below it."""
    for p in range(partitions):
        logs = {b.id: b.read_partition(topic, p) for b in h.brokers.values()}
        hw = hws[p]
        for off in range(hw):
            vals = {bid: lg.get(off, (None, None))[1] for bid, lg in logs.items()}
            present = {bid: v for bid, v in vals.items() if v is not None or off in logs[bid]}
            if require_complete:
                missing = [bid for bid in logs if off not in logs[bid]]
                assert not missing, f"{topic}-{p}@{off} < HW {hw} missing on brokers {missing}"
            distinct = set(present.values())
            assert len(distinct) <= 1, f"{topic}-{p}@{off} < HW {hw} differs between replicas: {present}"
        for bid, lg in logs.items():
            check_order({p: sorted((o, v) for o, (_, v) in lg.items())}, f"broker {bid} log {topic}-")


def wait_replicas_caught_up(h: ClusterHarness, topic: str, partitions: int, hws: dict[int, int], timeout: float = 30):
    """Until every replica's files hold every offset below the high watermark."""

    def ok() -> bool:
        for p in range(partitions):
            for b in h.brokers.values():
                lg = b.read_partition(topic, p)
                if hws[p] and (hws[p] - 1) not in lg:
                    return False
        return True

    wait_until(ok, timeout, f"every replica of {topic} holding everything below the high watermark", 0.2)


def full_check(
    h: ClusterHarness, topic: str, partitions: int, stats: list[ProducerStats], min_acked: int = 1
) -> dict[int, list]:
    """The checker every scenario ends with (cluster healthy again, load stopped)."""
    h.wait_full_isr(topic, partitions)
    logged = read_back(h.bootstrap(), topic, partitions)
    check_acknowledged(logged, stats, min_acked)
    hws = {p: (recs[-1].offset + 1 if recs else 0) for p, recs in logged.items()}
    hws = {p: max(hws[p], v) for p, v in h.high_watermarks(topic, partitions).items()}
    wait_replicas_caught_up(h, topic, partitions, hws)
    check_replicas_agree(h, topic, partitions, hws)
    return logged


def check_consumer_saw(c: LoadConsumer, stats: list[ProducerStats], partitions: list[int]) -> None:
    """A consumer that ran alongside the producers: order kept, and every acknowledged record of its
    partitions delivered at its offset (it is stopped only after it reached the high watermark)."""
    by_part: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    for r in c.records:
        assert r.partition in by_part, f"{c.name} got a record of unassigned partition {r.partition}"
        by_part[r.partition].append((r.offset, r.value))
    check_order(by_part, f"{c.name} partition")
    got = {p: dict(v) for p, v in by_part.items()}
    for s in stats:
        for p, off, v in s.acked:
            if p in got:
                assert got[p].get(off) == v, f"{c.name}: acknowledged {v!r} at {p}@{off} not consumed"


def wait_consumer_reached(c: LoadConsumer, hws: dict[int, int], partitions: list[int], timeout: float = 40) -> None:
    def ok() -> bool:
        top: dict[int, int] = {}
        for r in list(c.records):
            top[r.partition] = max(top.get(r.partition, -1), r.offset)
        return all(top.get(p, -1) >= hws[p] - 1 for p in partitions)

    wait_until(ok, timeout, f"{c.name} consuming up to the high watermarks {hws}", 0.2)
