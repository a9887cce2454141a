"""Kafka's own clients' transactional APIs against Kafka Lite (issue 28 §3): confluent-kafka (librdkafka),
kafka-python and kafkajs each run the same programs on one shared 3-broker cluster: commit, abort, abort then
a retried commit, offsets sent in a transaction (aborted, then committed), a zombie fenced by a new producer with
the same transactional.id, and a transaction left open past its transaction.timeout.ms aborted by the
coordinator. Each client's own read_committed consumer reads the results, and Kafka Lite's consumer checks them
at both isolation levels, so a record an abort should have hidden, or a commit lost, fails the test.

A program is a list of steps (see tests/js/kafkajs_transactions.js for the step language); the Python clients
interpret the same steps in process, kafkajs in a node process."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from client.sync import Consumer, Producer
from tests.integration.cluster_harness import ClusterHarness
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

JS = Path(__file__).resolve().parents[1] / "js"
CLIENTS = ["confluent-kafka", "kafka-python", "kafkajs"]
# How each client names a producer fenced by a newer one with its transactional.id (or a coordinator's abort of
# its timed-out transaction, which bumps the epoch: KIP-360): Kafka's PRODUCER_FENCED or INVALID_PRODUCER_EPOCH,
# in the client's own spelling.
FENCED = {
    "confluent-kafka": {"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"},
    "kafka-python": {"ProducerFencedError", "InvalidProducerEpochError"},
    "kafkajs": {"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"},
}

Step = list[Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(
        tmp_path_factory.mktemp("txn-kafka-clients"),
        3,
        overrides=[
            "group.initial.rebalance.delay.ms=0",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
            "transaction.state.log.num.partitions=4",
        ],
    ).running() as h:
        yield h


class PythonClient:
    """The step language over confluent-kafka or kafka-python, in this process."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name, self.bootstrap = name, bootstrap
        self.producers: dict[str, Any] = {}

    def run(self, program: list[Step]) -> list[Any]:
        out = []
        try:
            for step in program:
                out.append(self.step(step))
        finally:
            for p in self.producers.values():
                self.close(p)
        return out

    def step(self, step: Step) -> Any:
        op, *a = step
        if op == "sleep":
            time.sleep(a[0] / 1000)
            return "ok"
        if op == "read":
            return {"read": self.read_committed(*a)}
        if op == "init":
            self.producers[a[0]] = self.new_producer(a[1], a[2])
        try:
            getattr(self, op)(self.producers[a[0]], *a[1:])
        except Exception as e:  # the client's error, by the client's own name for it
            return {"error": self.error_name(e)}
        return "ok"

    # --- confluent-kafka and kafka-python, method by method -------------------------------------------------------
    def new_producer(self, tid: str, timeout_ms: int | None) -> Any:
        if self.name == "confluent-kafka":
            import confluent_kafka

            conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "transactional.id": tid}
            if timeout_ms is not None:
                conf["transaction.timeout.ms"] = timeout_ms
            return confluent_kafka.Producer(conf)
        from kafka import KafkaProducer

        extra = {} if timeout_ms is None else {"transaction_timeout_ms": timeout_ms}
        return KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=tid, enable_idempotence=True, **extra)

    def init(self, p: Any, tid: str, timeout_ms: int | None) -> None:
        if self.name == "confluent-kafka":
            p.init_transactions(30)
        else:
            p.init_transactions()

    def begin(self, p: Any) -> None:
        p.begin_transaction()

    def send(self, p: Any, topic: str, partition: int, value: str) -> None:
        if self.name == "confluent-kafka":
            p.produce(topic, value.encode(), partition=partition)
        else:
            p.send(topic, value.encode(), partition=partition)

    def offsets(self, p: Any, group: str, topic: str, partition: int, offset: int) -> None:
        if self.name == "confluent-kafka":
            import confluent_kafka

            c = confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
            try:
                tps = [confluent_kafka.TopicPartition(topic, partition, offset)]
                p.send_offsets_to_transaction(tps, c.consumer_group_metadata(), 30)
            finally:
                c.close()
        else:
            from kafka import TopicPartition
            from kafka.structs import OffsetAndMetadata

            p.send_offsets_to_transaction({TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)}, group)

    def flush(self, p: Any) -> None:
        if self.name == "confluent-kafka":
            assert p.flush(30) == 0
        else:
            p.flush()

    def commit(self, p: Any) -> None:
        if self.name == "confluent-kafka":
            p.commit_transaction(30)
        else:
            p.commit_transaction()

    def abort(self, p: Any) -> None:
        if self.name == "confluent-kafka":
            p.abort_transaction(30)
        else:
            p.abort_transaction()

    def close(self, p: Any) -> None:
        if self.name == "confluent-kafka":
            import confluent_kafka

            # librdkafka's producer closes when collected; a fenced one (a fatal error) raises it again on flush
            with contextlib.suppress(confluent_kafka.KafkaException):
                p.flush(0)
        else:
            p.close(timeout=5)

    def error_name(self, e: Exception) -> str:
        if self.name == "confluent-kafka":
            err = e.args[0] if e.args else None
            return str(err.name()) if hasattr(err, "name") else type(e).__name__
        return type(e).__name__

    def read_committed(self, topic: str, partitions: int, sentinel: str) -> list[str]:
        """The client's own read_committed consumer, from the start, until it has read `sentinel` on every partition."""
        read: list[str] = []
        deadline = time.monotonic() + 30
        if self.name == "confluent-kafka":
            import confluent_kafka

            c = confluent_kafka.Consumer(
                {"bootstrap.servers": self.bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                 "isolation.level": "read_committed", "enable.auto.commit": False}
            )  # fmt: skip
            c.assign([confluent_kafka.TopicPartition(topic, q, 0) for q in range(partitions)])
            try:
                while read.count(sentinel) < partitions and time.monotonic() < deadline:
                    read += [m.value().decode() for m in c.consume(100, 0.5) if m.error() is None]
            finally:
                c.close()
        else:
            from kafka import KafkaConsumer, TopicPartition

            kc = KafkaConsumer(bootstrap_servers=self.bootstrap, isolation_level="read_committed",
                               enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
            kc.assign([TopicPartition(topic, q) for q in range(partitions)])
            try:
                while read.count(sentinel) < partitions and time.monotonic() < deadline:
                    for records in kc.poll(500).values():
                        read += [r.value.decode() for r in records]
            finally:
                kc.close()
        assert read.count(sentinel) == partitions, (
            f"{self.name}'s read_committed consumer never read {sentinel!r}: {read}"
        )
        return read


def run_program(client: str, cluster: ClusterHarness, program: list[Step]) -> list[Any]:
    if client == "confluent-kafka":
        pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
    if client != "kafkajs":
        return PythonClient(client, cluster.kafka_bootstrap()).run(program)
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "kafkajs").exists():
        pytest.fail("kafkajs needs node and tests/js/node_modules: cd tests/js && npm ci")
    r = subprocess.run(
        [node, str(JS / "kafkajs_transactions.js"), cluster.kafka_bootstrap()],
        input=json.dumps(program), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def topic(cluster: ClusterHarness, partitions: int = 2) -> str:
    name = f"ktx-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions, 3, {"min.insync.replicas": "2"})
    return name


def ours(cluster: ClusterHarness, name: str, isolation: str, sentinel: str, partitions: int = 2) -> list[str]:
    """What Kafka Lite's own consumer reads at `isolation`, from the start until it has read `sentinel` on every
    partition."""
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest", isolation_level=isolation) as c:
        c.assign([(name, q) for q in range(partitions)])
        got: list[str] = []
        deadline = time.monotonic() + 30
        while got.count(sentinel) < partitions and time.monotonic() < deadline:
            got += [r.value.decode() for r in c.poll(300)]
    assert got.count(sentinel) == partitions, f"Kafka Lite's {isolation} consumer never read {sentinel!r}: {got}"
    return got


def sentinel_txn(name: str, tid: str, value: str, partitions: int = 2) -> list[Step]:
    """A committed transaction writing `value` to every partition, after everything else: once a read_committed
    reader has read it, every transaction before it on those partitions is decided (the LSO passed them)."""
    return [["init", "s", tid, None], ["begin", "s"], *[["send", "s", name, q, value] for q in range(partitions)],
            ["commit", "s"]]  # fmt: skip


def tid(client: str, name: str, role: str) -> str:
    return f"{client}-{role}-{name}"


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_abort_and_a_retried_commit(cluster, client):
    name = topic(cluster)
    t = tid(client, name, "p")
    program = [
        ["init", "p", t, None],
        ["begin", "p"], ["send", "p", name, 0, "committed-0"], ["send", "p", name, 1, "committed-1"], ["commit", "p"],
        ["begin", "p"], ["send", "p", name, 0, "aborted-0"], ["send", "p", name, 1, "aborted-1"],
        ["flush", "p"], ["abort", "p"],  # written, then aborted (an abort drops what a client has not sent yet)
        # abort, then the same records again in a new transaction that commits (the application's retry)
        ["begin", "p"], ["send", "p", name, 0, "retried-0"], ["flush", "p"], ["abort", "p"],
        ["begin", "p"], ["send", "p", name, 0, "retried-0"], ["commit", "p"],
        *sentinel_txn(name, tid(client, name, "s"), "end"),
        ["read", name, 2, "end"],
    ]  # fmt: skip
    out = run_program(client, cluster, program)
    assert out[:-1] == ["ok"] * (len(program) - 1), out
    committed = ["committed-0", "committed-1", "retried-0", "end", "end"]
    assert sorted(out[-1]["read"]) == sorted(committed), f"{client}'s read_committed consumer"
    assert sorted(ours(cluster, name, "read_committed", "end")) == sorted(committed)
    # read_uncommitted shows the aborted records were written (and so hidden by the aborts, not lost on the way)
    every = ours(cluster, name, "read_uncommitted", "end")
    assert {"aborted-0", "aborted-1"} <= set(every) and every.count("retried-0") == 2, every


@pytest.mark.parametrize("client", CLIENTS)
def test_offsets_sent_in_a_transaction_commit_with_it_and_never_with_an_abort(cluster, client):
    src, dst = topic(cluster, 1), topic(cluster, 1)
    group = f"g-{client}-{src}"
    with Producer(cluster.bootstrap()) as p:
        for i in range(10):
            p.send(src, f"in-{i}".encode(), partition=0)
        p.flush()
    t = tid(client, dst, "ctp")
    aborted = [["init", "p", t, None], ["begin", "p"], ["send", "p", dst, 0, "out-aborted"], ["flush", "p"],
               ["offsets", "p", group, src, 0, 5], ["abort", "p"]]  # fmt: skip
    assert run_program(client, cluster, aborted) == ["ok"] * 6
    with Consumer(cluster.bootstrap(), group_id=group, enable_auto_commit=False) as c:
        assert c.committed((src, 0)) in (None, -1), "an aborted transaction's offsets were committed"
    committed = [["init", "p", t, None], ["begin", "p"], ["send", "p", dst, 0, "out-committed"],
                 ["offsets", "p", group, src, 0, 10], ["commit", "p"], ["read", dst, 1, "out-committed"]]  # fmt: skip
    out = run_program(client, cluster, committed)
    assert out[:-1] == ["ok"] * 5, out
    assert out[-1]["read"] == ["out-committed"]
    with Consumer(cluster.bootstrap(), group_id=group, enable_auto_commit=False) as c:
        wait_until(lambda: c.committed((src, 0)) == 10, 10, "the committed transaction's offsets to become visible")
    assert ours(cluster, dst, "read_committed", "out-committed", 1) == ["out-committed"]
    assert ours(cluster, dst, "read_uncommitted", "out-committed", 1) == ["out-aborted", "out-committed"]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_zombie_is_fenced_by_a_new_producer_with_the_same_transactional_id(cluster, client):
    name = topic(cluster)
    t = tid(client, name, "z")
    program = [
        ["init", "zombie", t, None], ["begin", "zombie"], ["send", "zombie", name, 0, "zombie"],
        ["init", "new", t, None], ["begin", "new"], ["send", "new", name, 1, "new"],
        ["commit", "zombie"],
        ["commit", "new"],
        *sentinel_txn(name, tid(client, name, "s"), "end"),
        ["read", name, 2, "end"],
    ]  # fmt: skip
    out = run_program(client, cluster, program)
    fenced = out[6]
    assert isinstance(fenced, dict) and fenced.get("error") in FENCED[client], f"the zombie's commit: {fenced}"
    assert out[:6] == ["ok"] * 6 and out[7:-1] == ["ok"] * (len(program) - 8), out
    assert sorted(out[-1]["read"]) == ["end", "end", "new"], f"{client}'s read_committed consumer"
    assert sorted(ours(cluster, name, "read_committed", "end")) == ["end", "end", "new"]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_transaction_left_open_past_its_timeout_is_aborted_by_the_coordinator(cluster, client):
    name = topic(cluster)
    program = [
        ["init", "slow", tid(client, name, "slow"), 1000], ["begin", "slow"],
        ["send", "slow", name, 0, "timed-out-0"], ["send", "slow", name, 1, "timed-out-1"], ["flush", "slow"],
        ["sleep", 4000],  # past transaction.timeout.ms (1 s) and the coordinator's 0.5 s check
        *sentinel_txn(name, tid(client, name, "s"), "end"),
        ["read", name, 2, "end"],  # the LSO moved past the open transaction: the coordinator ended it
        ["commit", "slow"],
    ]  # fmt: skip
    out = run_program(client, cluster, program)
    assert out[:-2] == ["ok"] * (len(program) - 2), out
    assert sorted(out[-2]["read"]) == ["end", "end"], f"{client}'s read_committed consumer"
    late = out[-1]
    # the coordinator's abort bumped the epoch (as Kafka's does), so the late commit is a fenced epoch's
    assert isinstance(late, dict) and late.get("error") in FENCED[client], f"a commit after the abort: {late}"
    assert sorted(ours(cluster, name, "read_committed", "end")) == ["end", "end"]
    assert {"timed-out-0", "timed-out-1"} <= set(ours(cluster, name, "read_uncommitted", "end"))
