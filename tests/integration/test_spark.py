"""The `kafkalite` Spark data source and kl-spark over segment files written by real brokers.

One SparkSession (local[2]) for the module; small data. Each test asserts what Spark read against
what a plain consumer reads from the brokers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from client import Admin, NewTopic, Producer
from tests.conftest import ROOT, BrokerProcess
from tests.integration.cluster_harness import wait_until
from tests.integration.spark_support import consume_all, require_spark, spark_session_fixture

# A hang guard, well above a loaded machine's time (a machine at half speed took 124-202 s to start one driver
# beside the suite's other modules, 2026-11-28): a timeout inside a py4j call leaves the Spark session's
# gateway unusable, so every later test of the module would fail with it.
pytestmark = pytest.mark.timeout(900)

TOPIC = "tweets"
PARTS = 3


@pytest.fixture(scope="module")
def spark():
    yield from spark_session_fixture("kafkalite-tests")


def produce(bootstrap: str, topic: str, n: int, start: int = 0, codec: str = "none", **kw) -> None:
    with Producer(bootstrap, acks="all", linger_ms=2, compression_type=codec, batch_size=4096, **kw) as p:
        for i in range(start, start + n):
            user = f"user{i % 37}"
            tweet = {
                "id": str(10_000 + i),
                "user": {"id": user, "username": user},
                "text": f"tweet {i} #Kafka" + (" #spark" if i % 3 == 0 else "") + (" #SPARK" if i % 9 == 0 else ""),
                "hashtags": ["Kafka"] + (["spark"] if i % 3 == 0 else []),
                "created_at": f"2026-01-01T00:{(i // 100) % 60:02d}:00.000Z",
            }
            p.send(topic, json.dumps(tweet).encode(), key=user.encode(), headers=[("n", str(i).encode())])
        p.flush()


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One live broker with a 3-partition topic of 3000 records in several segments, three codecs."""
    root = tmp_path_factory.mktemp("spark-single")
    b = BrokerProcess(root / "data").start()
    with Admin(b.bootstrap) as a:
        a.create_topics([NewTopic(TOPIC, PARTS, 1, configs={"segment.bytes": "16384"})])
    produce(b.bootstrap, TOPIC, 1000, 0, "none")
    produce(b.bootstrap, TOPIC, 1000, 1000, "zstd")
    produce(b.bootstrap, TOPIC, 1000, 2000, "lz4")
    yield b
    b.cleanup()


def rows_of(df) -> set[tuple]:  # type: ignore[no-untyped-def]
    return {(r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in df.collect()}


def load(spark, path, **options):  # type: ignore[no-untyped-def]
    reader = spark.read.format("kafkalite").option("path", str(path))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_live_single_broker_matches_a_consumer(spark, single):
    segments = list((single.data_dir / f"{TOPIC}-0").glob("*.log"))
    assert len(segments) > 2, "segment.bytes=16384 should have rolled the partition several times"
    df = load(spark, single.data_dir, subscribe=TOPIC, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    assert df.rdd.getNumPartitions() >= PARTS * 2, "one task per segment"
    got = rows_of(df)
    assert len(got) == 3000
    assert got == consume_all(single.bootstrap, TOPIC, PARTS)
    row = df.where("offset = 0 and partition = 0").first()
    assert row["topic"] == TOPIC and row["timestampType"] == 0 and row["headers"][0]["key"] == "n"


def test_workers_fork_from_the_daemon_that_preloaded_the_data_source(spark, single):
    """pipeline/spark_daemon.py (spark.python.daemon.module): the workers that read are forked from it, with
    the data source imported before the fork, and read the same records."""

    def where(_rows):  # type: ignore[no-untyped-def]
        import sys as worker_sys

        yield (worker_sys.modules["__main__"].__file__, "pipeline.datasource" in worker_sys.modules)

    df = load(spark, single.data_dir, subscribe=TOPIC)
    seen = set(df.rdd.mapPartitions(where).collect())
    assert seen and all(f.endswith("pipeline/spark_daemon.py") and loaded for f, loaded in seen), seen
    assert df.count() == 3000


def test_a_copy_of_the_data_dir_reads_the_same(spark, single, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(single.data_dir, copy)
    assert rows_of(load(spark, copy, subscribe=TOPIC)) == rows_of(load(spark, single.data_dir, subscribe=TOPIC))


def test_offset_ranges_and_assign(spark, single):
    df = load(
        spark,
        single.data_dir,
        assign=json.dumps({TOPIC: [0, 2]}),
        startingOffsets=json.dumps({TOPIC: {"0": 23, "2": -2}}),
        endingOffsets=json.dumps({TOPIC: {"0": 100}}),
    )
    by_p: dict[int, list[int]] = {}
    for r in df.select("partition", "offset").collect():
        by_p.setdefault(r["partition"], []).append(r["offset"])
    assert sorted(by_p[0]) == list(range(23, 100))
    assert sorted(by_p) == [0, 2] and min(by_p[2]) == 0


def test_reading_while_the_broker_appends_sees_a_consistent_prefix(spark, tmp_path):
    b = BrokerProcess(tmp_path / "live").start()
    try:
        with Admin(b.bootstrap) as a:
            a.create_topics([NewTopic("live", 2, 1, configs={"segment.bytes": "8192"})])
        stop = threading.Event()
        flushed = [0]  # records acknowledged so far

        def writer() -> None:
            with Producer(b.bootstrap, acks=1, linger_ms=1) as p:
                i = 0
                while not stop.is_set() and i < 200_000:
                    p.send("live", f"v{i}".encode(), partition=i % 2)
                    i += 1
                    if i % 50 == 0:
                        p.flush()
                        flushed[0] = i
                        time.sleep(0.005)  # a steady stream, not a flood of tiny segments

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        # A condition with a deadline, not a fixed sleep: several segments exist before the first read.
        wait_until(lambda: flushed[0] >= 2000, 60, "2000 records acknowledged by the live broker")
        counts = []
        for _ in range(2):
            offs: dict[int, list[int]] = {}
            for r in load(spark, b.data_dir, subscribe="live").select("partition", "offset").collect():
                offs.setdefault(r["partition"], []).append(r["offset"])
            for p, o in offs.items():
                assert sorted(o) == list(range(len(o))), f"partition {p}: not a gap-free prefix"
            counts.append(sum(len(o) for o in offs.values()))
        stop.set()
        t.join(30)
        assert 0 < counts[0] <= counts[1]
    finally:
        b.cleanup()


def test_corrupt_batch_in_a_closed_segment_fails_the_query_naming_file_and_position(spark, single, tmp_path):
    copy = tmp_path / "corrupt"
    shutil.copytree(single.data_dir, copy)
    first = sorted((copy / f"{TOPIC}-1").glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records (the header is 61 bytes)
    first.write_bytes(bytes(data))
    with pytest.raises(Exception, match=rf"corrupt batch in {first} at position 0"):
        load(spark, copy, subscribe=TOPIC).count()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"subscribe": "nope"}, "unknown topic 'nope'"),
        ({"subscribe": TOPIC, "startingOffsets": "{not json"}, "startingOffsets is neither earliest/latest nor valid"),
        ({"subscribe": TOPIC, "path": None}, "option 'path' is required"),
    ],
)
def test_bad_options_fail_at_load_with_a_clear_message(spark, single, options, message):
    reader = spark.read.format("kafkalite")
    if options.get("path", "") is not None:
        reader = reader.option("path", str(single.data_dir))
    for k, v in options.items():
        if v is not None:
            reader = reader.option(k, v)
    with pytest.raises(Exception, match=message):
        reader.load()


def test_three_brokers_each_partition_read_once_from_one_replica(spark, cluster_factory):
    h = cluster_factory(3)
    h.create_topic(TOPIC, PARTS, 3, {"min.insync.replicas": "2", "segment.bytes": "32768"})
    produce(h.bootstrap(), TOPIC, 600, 0, "zstd")
    h.kill(2)  # a follower (or leader) down mid-stream: the rest is written without it
    produce(h.bootstrap([1, 3]), TOPIC, 600, 600, "lz4")
    h.restart(2)
    h.wait_full_isr(TOPIC, PARTS)
    want = consume_all(h.bootstrap(), TOPIC, PARTS)
    assert len(want) >= 1200
    dirs = ",".join(str(b.data_dir) for b in h.brokers.values())
    deadline = time.monotonic() + 30
    while True:  # the restarted follower catches up from its leader
        got = rows_of(load(spark, dirs, subscribe=TOPIC))
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert got == want
    from pipeline.options import plan_read

    plan = plan_read({"path": dirs, "subscribe": TOPIC})
    assert len(plan.partitions) == PARTS
    for pp in plan.partitions:
        assert {Path(s.path).parents[1] for s in pp.slices} == {Path(pp.data_dir)}


def kl_spark(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_kl_spark_hashtags_and_export(single, tmp_path):
    require_spark()
    out = tmp_path / "out"
    summary = tmp_path / "summary.json"
    r = kl_spark(
        "hashtags", "--path", str(single.data_dir), "--topic", TOPIC, "--top", "3", "--window", "1m",
        "--output", str(out), "--summary-json", str(summary), "--master", "local[2]",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(summary.read_text())
    # #spark and #SPARK are one hashtag; every tweet has #kafka.
    assert s["records"] == 3000 and s["tweets"] == 3000
    assert s["top"][:2] == [["kafka", 3000], ["spark", 1000]]
    assert "#kafka" in r.stdout and "per 1m window" in r.stdout
    assert list((out / "overall").glob("*.csv")) and list((out / "windows").glob("*.csv"))

    pq = tmp_path / "pq"
    r = kl_spark(
        "export", "--path", str(single.data_dir), "--topic", TOPIC, "--output", str(pq),
        "--starting-offsets", json.dumps({TOPIC: {"1": 10}}), "--master", "local[1]",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    dirs = sorted(p.name for p in (pq / f"topic={TOPIC}").iterdir())
    assert dirs == ["partition=0", "partition=1", "partition=2"]
    import pyarrow.parquet as papq

    t = papq.read_table(pq / f"topic={TOPIC}" / "partition=1")
    assert min(t.column("offset").to_pylist()) == 10
    assert "wrote" in r.stdout and "records" in r.stdout


def test_kl_spark_bad_option_is_one_line(single):
    r = kl_spark("stats", "--path", str(single.data_dir), "--topic", "nope")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"Error: unknown topic 'nope': no nope-<partition> directory in {single.data_dir} (topics there: {TOPIC})"
    ]
    r = kl_spark("hashtags", "--path", str(single.data_dir), "--topic", TOPIC, "--window", "7x")
    assert r.returncode == 1 and "--window must look like" in r.stderr and "Traceback" not in r.stderr


def test_missing_java_is_one_line(single, tmp_path):
    """No java on PATH and no JAVA_HOME: one line saying what to install, before any JVM start."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PATH=str(bindir), PYSPARK_PYTHON=sys.executable)
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "stats", "--path", str(single.data_dir), "--topic", TOPIC],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Java 17+" in lines[0] and "apt-get install openjdk-17" in lines[0], r.stderr


def test_live_single_broker_is_read_past_its_checkpoint(broker):
    """On one broker the high watermark is the log end; its replication-offset-checkpoint trails it by up to
    replica.high.watermark.checkpoint.interval.ms, so the reader takes the log end there."""
    from pipeline.options import plan_read
    from pipeline.segments import COMMITTED_SINGLE_BROKER, HW_CHECKPOINT

    with Admin(broker.bootstrap) as a:
        a.create_topics([NewTopic("fresh", 1, 1)])
    produce(broker.bootstrap, "fresh", 50)
    deadline = time.monotonic() + 15
    while not (broker.data_dir / HW_CHECKPOINT).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    produce(broker.bootstrap, "fresh", 25, start=50)  # acknowledged after the checkpoint was written
    (pp,) = plan_read({"path": str(broker.data_dir), "subscribe": "fresh"}).partitions
    assert (pp.committed, pp.committed_source) == (75, COMMITTED_SINGLE_BROKER)


def test_records_written_by_a_kafka_client_are_read_by_the_spark_source(spark, tmp_path):
    """One log for both protocols: librdkafka's batches (gzip and snappy compressed, with headers and the
    client's timestamps) come out of the kafkalite source as librdkafka reads them back."""
    ck = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
    from tests.integration.cluster_harness import free_ports

    (kafka_port,) = free_ports(1)
    b = BrokerProcess(tmp_path / "kafka-written", extra=["--override", f"kafka.port={kafka_port}"]).start()
    try:
        with Admin(b.bootstrap) as a:
            a.create_topics([NewTopic("from-kafka", 2, 1)])
        kb = f"127.0.0.1:{kafka_port}"
        for codec in ("gzip", "snappy"):
            p = ck.Producer({"bootstrap.servers": kb, "compression.type": codec, "linger.ms": 20})
            for i in range(150):
                p.produce("from-kafka", f"{codec}-{i}", f"k{i}", partition=i % 2, headers=[("c", codec)],
                          timestamp=1_700_000_000_000 + i)  # fmt: skip
            assert p.flush(30) == 0
        c = ck.Consumer({"bootstrap.servers": kb, "group.id": "spark-x", "enable.auto.commit": False})
        c.assign([ck.TopicPartition("from-kafka", q, 0) for q in range(2)])
        want = set()
        deadline = time.monotonic() + 30
        while len(want) < 300 and time.monotonic() < deadline:
            for m in c.consume(300, 0.5):
                if m.error() is None:
                    want.add((m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1], tuple(m.headers())))
        c.close()
        df = load(spark, b.data_dir, subscribe="from-kafka", includeHeaders="true")
        got = {
            (r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]), int(r["timestamp"].timestamp() * 1000),
             tuple((h["key"], bytes(h["value"])) for h in r["headers"]))
            for r in df.collect()
        }  # fmt: skip
        assert len(want) == 300 and got == want
    finally:
        b.cleanup()
