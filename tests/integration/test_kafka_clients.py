"""Real Kafka clients against Kafka Lite's Kafka listener, installed as users install them (kafka-python,
confluent-kafka and aiokafka from PyPI, kafkajs from npm, kcat from Debian), on one 3-broker cluster (RF=3,
min.insync.replicas=2): each creates a topic with its own admin api, writes 10,000 keyed records with a
header at acks=all and reads them all back; every compression codec of librdkafka and kafka-python; records
crossing protocols both ways; kcat's metadata listing; an idempotent librdkafka producer through a leader's
SIGKILL."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from client.sync import Consumer as KLConsumer
from client.sync import Producer as KLProducer
from tests.integration.cluster_harness import ROOT, ClusterHarness, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
kafka = pytest.importorskip("kafka", reason="pip install -e '.[test]' (kafka-python)")
aiokafka = pytest.importorskip("aiokafka")
AdminClient, NewTopic = pytest.importorskip("confluent_kafka.admin").AdminClient, confluent_kafka.admin.NewTopic

N = 10_000
JS = ROOT / "tests" / "js"


def need(tool: str, install: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is required: {install} (./scripts/test.sh installs it)")
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(tmp_path_factory.mktemp("kclients"), 3, overrides=["min.insync.replicas=2"]).running() as h:
        yield h


def check(records: list[tuple], prefix: str, n: int = N) -> None:
    """(partition, offset, key, value, headers dict) of a full read: every record once, keys, values and
    headers as written, and per partition the offsets and the write order increasing."""
    assert len(records) == n, f"{len(records)} records read, {n} written"
    by_part: dict[int, list[tuple]] = {}
    for r in records:
        by_part.setdefault(r[0], []).append(r)
    seen = set()
    for part, rows in by_part.items():
        rows.sort(key=lambda r: r[1])
        order = []
        for _, _off, key, value, headers in rows:
            i = int(value.removeprefix(f"{prefix}-"))
            assert key == f"k{i}" and headers.get("n") == str(i), (key, value, headers)
            order.append(i)
            seen.add(i)
        assert order == sorted(order), f"partition {part}: write order broken"
    assert seen == set(range(n))


def text(b: bytes | None) -> str | None:
    return None if b is None else b.decode()


# --- each client, its own admin, 10,000 records there and back ---------------------------------------------


def test_confluent_kafka(cluster):
    kb = cluster.kafka_bootstrap()
    admin = AdminClient({"bootstrap.servers": kb})  # held: a collected client cancels its futures
    admin.create_topics([NewTopic("ck", 3, 3)])["ck"].result(30)
    p = confluent_kafka.Producer({"bootstrap.servers": kb, "acks": "all", "enable.idempotence": True})
    failed = []
    for i in range(N):
        p.produce(
            "ck", f"confluent-{i}", f"k{i}", headers=[("n", str(i))], on_delivery=lambda e, m: e and failed.append(e)
        )
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0 and not failed
    c = confluent_kafka.Consumer({"bootstrap.servers": kb, "group.id": "ck-read", "auto.offset.reset": "earliest"})
    c.subscribe(["ck"])
    out, deadline = [], time.monotonic() + 60
    while len(out) < N and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                hd = {k: text(v) for k, v in m.headers() or []}
                out.append((m.partition(), m.offset(), text(m.key()), text(m.value()), hd))
    c.close()
    check(out, "confluent")


def test_kafka_python(cluster):
    kb = cluster.kafka_bootstrap()
    admin = kafka.KafkaAdminClient(bootstrap_servers=kb)
    admin.create_topics([kafka.admin.NewTopic("kp", 3, 3)])
    admin.close()
    wait_until(lambda: "kp" in cluster.admin().list_topics(), 20, "kp created")
    p = kafka.KafkaProducer(bootstrap_servers=kb, acks="all", linger_ms=5)
    futures = [p.send("kp", f"kafka-python-{i}".encode(), f"k{i}".encode(), [("n", str(i).encode())]) for i in range(N)]
    p.flush(60)
    assert all(f.succeeded() for f in futures)
    p.close()
    c = kafka.KafkaConsumer("kp", bootstrap_servers=kb, group_id="kp-read", auto_offset_reset="earliest",
                            consumer_timeout_ms=15000)  # fmt: skip
    out = []
    for m in c:
        out.append((m.partition, m.offset, text(m.key), text(m.value), {k: text(v) for k, v in m.headers}))
        if len(out) == N:
            break
    c.close()
    check(out, "kafka-python")


def test_aiokafka(cluster):
    kb = cluster.kafka_bootstrap()

    async def run() -> list[tuple]:
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.admin import NewTopic as AioTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=kb)
        await admin.start()
        await admin.create_topics([AioTopic("aio", 3, 3)])
        await admin.close()
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=kb, acks="all", enable_idempotence=True)
        await p.start()
        try:
            batch = [
                await p.send("aio", f"aiokafka-{i}".encode(), f"k{i}".encode(), headers=[("n", str(i).encode())])
                for i in range(N)
            ]
            await asyncio.gather(*batch)
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer("aio", bootstrap_servers=kb, group_id="aio-read", auto_offset_reset="earliest")
        await c.start()
        out: list[tuple] = []
        try:
            while len(out) < N:
                got = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                for tp, msgs in got.items():
                    for m in msgs:
                        hd = {k: text(v) for k, v in m.headers}
                        out.append((tp.partition, m.offset, text(m.key), text(m.value), hd))
        finally:
            await c.stop()
        return out

    check(asyncio.run(run()), "aiokafka")


def test_kafkajs(cluster):
    node = need("node", "apt-get install -y nodejs")
    if not (JS / "node_modules" / "kafkajs").exists():
        pytest.fail("kafkajs is not installed in tests/js: cd tests/js && npm ci")
    r = subprocess.run(
        [node, str(JS / "kafkajs_roundtrip.js"), cluster.kafka_bootstrap(), "kjs", str(N), "both", "3"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[-1] == {"done": N}
    check([(x["partition"], x["offset"], x["key"], x["value"], x["headers"]) for x in lines[:-1]], "kafkajs")


def test_kcat_produce_consume_and_list(cluster):
    kcat = need("kcat", "apt-get install -y kcat")
    cluster.create_topic("kc", 3, 3, {"min.insync.replicas": "2"})
    kb = cluster.kafka_bootstrap()
    lines = "".join(f"k{i}\tkcat-{i}\n" for i in range(N))
    r = subprocess.run(
        [kcat, "-P", "-b", kb, "-t", "kc", "-K", "\t", "-H", "src=kcat", "-X", "acks=all"],
        input=lines, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [kcat, "-C", "-b", kb, "-t", "kc", "-o", "beginning", "-e", "-J"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    out = []
    for x in rows:
        hd = dict(zip(x["headers"][::2], x["headers"][1::2])) if x.get("headers") else {}
        i = x["payload"].removeprefix("kcat-")
        assert hd == {"src": "kcat"}
        out.append((x["partition"], x["offset"], x["key"], x["payload"], {"n": i}))
    check(out, "kcat")
    # kcat -L: brokers, topics, leaders and ISRs as kl-topics --describe says
    listing = subprocess.run([kcat, "-L", "-b", kb, "-t", "kc"], capture_output=True, text=True, timeout=30).stdout
    for b in cluster.brokers.values():
        assert f"broker {b.id} at 127.0.0.1:{b.kafka_port}" in listing
    shown = {
        int(m[1]): (int(m[2]), m[3], m[4])
        for m in re.finditer(r"partition (\d+), leader (\d+), replicas: ([\d,]+), isrs: ([\d,]+)", listing)
    }
    want = {
        p.partition: (p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)))
        for p in cluster.describe("kc")
    }
    assert shown == want


# --- compression, both directions ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_of_librdkafka_and_kafka_python_reads_back_everywhere(cluster, codec):
    topic = f"codec-{codec}"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    kb = cluster.kafka_bootstrap()
    p = confluent_kafka.Producer({"bootstrap.servers": kb, "acks": "all", "compression.type": codec, "linger.ms": 20})
    for i in range(500):
        p.produce(topic, f"rd-{i}" * 5, f"k{i}", partition=0)
    assert p.flush(30) == 0
    kp = kafka.KafkaProducer(bootstrap_servers=kb, acks="all", compression_type=codec, linger_ms=20)
    for i in range(500):
        kp.send(topic, (f"kp-{i}" * 5).encode(), f"k{i}".encode(), partition=0)
    kp.flush(30)
    kp.close()
    want = [f"rd-{i}" * 5 for i in range(500)] + [f"kp-{i}" * 5 for i in range(500)]
    # the batches are stored compressed as the clients sent them
    assert any(h.codec for h in stored_headers(cluster, topic)), f"no {codec} batch stored"
    with KLConsumer(cluster.bootstrap(), auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 1000 and time.monotonic() < deadline:
            got += [r.value.decode() for r in c.poll(500)]
    assert got == want
    ck = confluent_kafka.Consumer(
        {"bootstrap.servers": kb, "group.id": f"read-{codec}", "auto.offset.reset": "earliest"}
    )
    ck.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    back = []
    deadline = time.monotonic() + 30
    while len(back) < 1000 and time.monotonic() < deadline:
        back += [m.value().decode() for m in ck.consume(500, 0.5) if m.error() is None]
    ck.close()
    assert back == want


def stored_headers(cluster: ClusterHarness, topic: str) -> list:
    from net import batch as batch_fmt

    leader = cluster.describe(topic)[0].leader
    out = []
    for seg in sorted((cluster[leader].data_dir / f"{topic}-0").glob("*.log")):
        out += [h for _, h in batch_fmt.iter_batches(seg.read_bytes())]
    return out


# --- across the two protocols ----------------------------------------------------------------------------


def test_confluent_written_records_read_by_kl_consume_and_our_consumer(cluster):
    cluster.create_topic("x-in", 2, 3, {"min.insync.replicas": "2"})
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all", "linger.ms": 5})
    stamp = 1_700_000_000_000
    for i in range(200):
        p.produce("x-in", f"v{i}", f"k{i}", partition=i % 2, headers=[("h", f"{i}")], timestamp=stamp + i)
    assert p.flush(30) == 0
    ck = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "x", "auto.offset.reset": "earliest"}
    )
    ck.assign([confluent_kafka.TopicPartition("x-in", q, 0) for q in range(2)])
    theirs = set()
    deadline = time.monotonic() + 30
    while len(theirs) < 200 and time.monotonic() < deadline:
        for m in ck.consume(200, 0.5):
            if m.error() is None:
                ts = m.timestamp()[1]
                theirs.add((m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts))
    ck.close()
    with KLConsumer(cluster.bootstrap(), auto_offset_reset="earliest") as c:
        c.assign([("x-in", 0), ("x-in", 1)])
        ours = set()
        deadline = time.monotonic() + 30
        while len(ours) < 200 and time.monotonic() < deadline:
            ours |= {(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in c.poll(500)}
    assert len(theirs) == 200 and ours == theirs
    r = subprocess.run(
        [sys.executable, "-m", "client.cli.consume", "--bootstrap-server", cluster.bootstrap(), "--topic", "x-in",
         "--from-beginning", "--max-messages", "200", "--print-key"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == sorted(f"k{i}\tv{i}" for i in range(200))


def test_kl_produce_records_read_by_confluent_kafka_python_and_kcat(cluster):
    kcat = need("kcat", "apt-get install -y kcat")
    cluster.create_topic("x-out", 1, 3, {"min.insync.replicas": "2"})
    r = subprocess.run(
        [sys.executable, "-m", "client.cli.produce", "--bootstrap-server", cluster.bootstrap(), "--topic", "x-out",
         "--key-separator", ":", "--acks", "all"],
        input="".join(f"key{i}:value{i}\n" for i in range(100)), cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    with KLProducer(cluster.bootstrap(), acks="all") as p:
        p.send(
            "x-out", b"with-header", key=b"hk", partition=0, headers=[("trace", b"abc")], timestamp_ms=1_600_000_000_000
        )
        p.flush()
    want = [(f"key{i}", f"value{i}") for i in range(100)] + [("hk", "with-header")]
    kb = cluster.kafka_bootstrap()
    ck = confluent_kafka.Consumer({"bootstrap.servers": kb, "group.id": "x-out-read", "auto.offset.reset": "earliest"})
    ck.assign([confluent_kafka.TopicPartition("x-out", 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 101 and time.monotonic() < deadline:
        got += [m for m in ck.consume(200, 0.5) if m.error() is None]
    ck.close()
    assert [(text(m.key()), text(m.value())) for m in got] == want
    assert [m.offset() for m in got] == list(range(101))
    assert got[-1].headers() == [("trace", b"abc")] and got[-1].timestamp()[1] == 1_600_000_000_000
    kc = kafka.KafkaConsumer(bootstrap_servers=kb, consumer_timeout_ms=5000, auto_offset_reset="earliest")
    kc.assign([kafka.TopicPartition("x-out", 0)])
    msgs = list(kc)
    kc.close()
    assert [(text(m.key), text(m.value)) for m in msgs] == want and msgs[-1].headers == [("trace", b"abc")]
    out = subprocess.run(
        [kcat, "-C", "-b", kb, "-t", "x-out", "-o", "beginning", "-e", "-f", "%k=%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.splitlines()
    assert out == [f"{k}={v}" for k, v in want]


# --- an idempotent librdkafka producer through a leader's death ------------------------------------------


def test_idempotent_confluent_producer_through_a_leader_sigkill_loses_and_repeats_nothing(cluster):
    cluster.create_topic("idem", 1, 3, {"min.insync.replicas": "2"})
    kb = cluster.kafka_bootstrap()
    p = confluent_kafka.Producer(
        {
            "bootstrap.servers": kb,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
        }
    )
    acked: list[str] = []
    failed: list = []

    def on_delivery(err, msg):
        (failed if err else acked).append(err or msg.value().decode())

    stop = threading.Event()

    def produce():
        i = 0
        while not stop.is_set():
            try:
                p.produce("idem", f"idem-{i}", partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0.001)

    t = threading.Thread(target=produce)
    t.start()
    try:
        wait_until(lambda: len(acked) >= 2000, 60, "2000 acknowledged before the kill")
        victim = cluster.describe("idem")[0].leader
        cluster.kill(victim, signal.SIGKILL)
        n = len(acked)
        wait_until(lambda: len(acked) >= n + 2000, 60, "2000 more acknowledged by the successor")
    finally:
        stop.set()
        t.join(30)
    assert p.flush(60) == 0 and failed == []
    cluster.restart(victim)
    cluster.wait_full_isr("idem", 1)
    with KLConsumer(cluster.bootstrap(), auto_offset_reset="earliest") as c:
        c.assign([("idem", 0)])
        logged: list[str] = []
        end = c.list_offsets([("idem", 0)], -1)
        want_end = next(iter(end.values()))
        deadline = time.monotonic() + 60
        while len(logged) < want_end and time.monotonic() < deadline:
            logged += [r.value.decode() for r in c.poll(1000)]
    assert len(logged) == len(set(logged)), "a value was stored twice"
    assert set(acked) <= set(logged), "an acknowledged value was lost"
    order = [int(v.removeprefix("idem-")) for v in logged]
    assert order == sorted(order), "the producer's order was not kept"
