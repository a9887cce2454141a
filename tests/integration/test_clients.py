"""Producer, consumer and admin clients against a real broker."""

from __future__ import annotations

import threading
import time

import pytest

from client.admin import NewTopic
from client.consumer import TopicPartition
from client.producer import ProduceError, default_partition
from client.sync import Admin, Consumer, Producer
from net.errors import KafkaLiteError, UnknownTopicOrPartitionError
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def create(bootstrap, name, partitions=1, **configs):
    with Admin(bootstrap) as a:
        a.create_topics([NewTopic(name, partitions, 1, configs or None)])


def consume_n(bootstrap, topic, partitions, n, timeout=20.0):
    out = []
    with Consumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in partitions])
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out.extend(c.poll(500))
    return out


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_round_trip_keys_headers_compression(broker, compression):
    create(broker.bootstrap, "rt", 4)
    delivered = []
    with Producer(broker.bootstrap, compression_type=compression) as p:
        for i in range(2000):
            p.send(
                "rt",
                f"value-{i}".encode(),
                key=f"user-{i % 10}".encode(),
                headers=[("h", str(i).encode())],
                on_delivery=lambda err, md: delivered.append((err, md)),
            )
        p.flush()
    assert len(delivered) == 2000 and all(err is None for err, _ in delivered)
    recs = consume_n(broker.bootstrap, "rt", range(4), 2000)
    assert len(recs) == 2000
    for r in recs:
        i = int(r.value.split(b"-")[1])
        assert r.key == f"user-{i % 10}".encode()
        assert r.partition == default_partition(r.key, 4)
        assert r.headers == (("h", str(i).encode()),)
    # order per key (= per partition) is the send order
    by_key: dict[bytes, list[int]] = {}
    for r in sorted(recs, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(r.key, []).append(int(r.value.split(b"-")[1]))
    for seq in by_key.values():
        assert seq == sorted(seq)
    # delivery reports carry the offsets the consumer sees
    offs = {(md.partition, md.offset) for _, md in delivered}
    assert offs == {(r.partition, r.offset) for r in recs}


def test_null_keys_stick_to_a_partition_per_batch(broker):
    create(broker.bootstrap, "sticky", 3)
    with Producer(broker.bootstrap, batch_size=2000, linger_ms=50) as p:
        for _i in range(600):
            p.send("sticky", b"x" * 50)
        p.flush()
    recs = consume_n(broker.bootstrap, "sticky", range(3), 600)
    counts = [sum(1 for r in recs if r.partition == q) for q in range(3)]
    assert sum(counts) == 600 and sum(1 for c in counts if c) >= 2  # spread over partitions...
    runs = 1 + sum(1 for a, b in zip(recs, recs[1:]) if a.partition != b.partition)
    assert runs < 600 / 5  # ...in runs of whole batches, not record by record


def test_a_producer_writes_to_partitions_added_while_it_runs(broker):
    """metadata.max.age.ms: the producer asks for its topics' partitions again, so partitions added by
    CreatePartitions take records without a restart, as with Kafka's producer."""
    create(broker.bootstrap, "grows", 1)
    with Producer(broker.bootstrap, metadata_max_age_ms=300, linger_ms=0) as p:
        p.send("grows", b"before")
        p.flush()
        with Admin(broker.bootstrap) as a:
            a.create_partitions("grows", 3)
        deadline = time.monotonic() + 10
        sent = 0
        while time.monotonic() < deadline:
            p.send("grows", b"after", key=f"k{sent}".encode())
            p.flush()
            sent += 1
            if sent >= 30 and len({r.partition for r in consume_n(broker.bootstrap, "grows", range(3), 1 + sent)}) == 3:
                break
            time.sleep(0.05)
    recs = consume_n(broker.bootstrap, "grows", range(3), 1 + sent)
    assert {r.partition for r in recs} == {0, 1, 2}, (
        f"{sent} records, all still on {sorted({r.partition for r in recs})}"
    )


def test_long_poll_returns_when_data_arrives(broker):
    create(broker.bootstrap, "lp")
    got = []
    with Consumer(broker.bootstrap, fetch_max_wait_ms=5000) as c:
        c.assign([("lp", 0)])
        c.seek(("lp", 0), 0)

        def later():
            time.sleep(0.5)
            with Producer(broker.bootstrap, linger_ms=0) as p:
                p.send("lp", b"wake")
                p.flush()

        t = threading.Thread(target=later)
        t.start()
        t0 = time.monotonic()
        while not got and time.monotonic() - t0 < 10:
            got = c.poll(10000)
        elapsed = time.monotonic() - t0
        t.join()
    assert [r.value for r in got] == [b"wake"]
    assert elapsed < 4, "fetch should answer as soon as data arrives, not at max_wait_ms"


def test_list_offsets_by_timestamp_and_seek(broker):
    create(broker.bootstrap, "ts", 1, **{"segment.bytes": "2000"})
    with Producer(broker.bootstrap, linger_ms=0, batch_size=200) as p:
        for i in range(100):
            p.send("ts", f"{i}".encode(), timestamp_ms=1_000_000 + i * 1000)
            if i % 10 == 9:
                p.flush()
    tp = TopicPartition("ts", 0)
    with Consumer(broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.list_offsets([tp], -2)[tp] == 0
        assert c.list_offsets([tp], -1)[tp] == 100
        off = c.list_offsets([tp], 1_000_000 + 55_000)[tp]
        assert off <= 55 and off >= 50  # batch granularity: the first batch holding ts >= target
        assert c.list_offsets([tp], 10**13)[tp] == -1
        c.seek(tp, 42)
        recs = c.poll(2000, max_records=3)
        assert [r.offset for r in recs] == [42, 43, 44]
        assert recs[0].timestamp == 1_000_000 + 42_000
        c.seek_to_end()
        assert c.position(tp) == 100


def test_retention_deletes_old_segments_live(broker_factory):
    b = broker_factory(extra=["--override", "log.retention.check.interval.ms=300"])
    create(b.bootstrap, "ret", 1, **{"segment.bytes": "4000", "retention.bytes": "8000"})
    with Producer(b.bootstrap, linger_ms=0, batch_size=1000) as p:
        for i in range(400):
            p.send("ret", b"y" * 90)
            if i % 10 == 9:
                p.flush()
    tp = TopicPartition("ret", 0)
    deadline = time.monotonic() + 15
    with Consumer(b.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        while time.monotonic() < deadline and c.list_offsets([tp], -2)[tp] == 0:
            time.sleep(0.3)
        start = c.list_offsets([tp], -2)[tp]
        assert start > 0, "retention.bytes should have deleted the oldest segments"
        recs = c.poll(3000)
        assert recs and recs[0].offset == start  # out-of-range reset to the new log start
    # A pass may have run while the records were still arriving (start > 0 already): the next passes bring the
    # log down to retention.bytes (two 4000-byte segments and the active one, give or take one).
    segments = lambda: len(list((b.data_dir / "ret-0").glob("*.log")))  # noqa: E731
    wait_until(lambda: segments() <= 4, 15, "retention down to retention.bytes")


def test_unknown_topic_fails_fast_with_clear_error(broker):
    # allow.auto.create.topics=false: otherwise the broker would create it (auto.create.topics.enable)
    with Producer(broker.bootstrap, max_block_ms=1000, allow_auto_create_topics=False) as p:
        with pytest.raises(UnknownTopicOrPartitionError):
            p.partitions_for("missing")
        p.send("missing", b"x")
        with pytest.raises(ProduceError, match="missing"):
            p.flush(10)
    with Consumer(broker.bootstrap) as c, pytest.raises(UnknownTopicOrPartitionError):
        c.assign([("missing", 0)])


def test_broker_down_gives_error_within_delivery_timeout(broker):
    create(broker.bootstrap, "down")
    p = Producer(broker.bootstrap, delivery_timeout_ms=2000, retry_backoff_ms=50)
    p.send("down", b"first")
    p.flush()
    broker.kill()
    t0 = time.monotonic()
    p.send("down", b"lost")
    with pytest.raises(ProduceError) as exc:
        p.flush(15)
    assert [f.value for f in exc.value.failures] == [b"lost"]
    assert exc.value.failures[0].outcome == "not_written" and exc.value.not_written == 1
    assert time.monotonic() - t0 < 10
    p.close()


def test_cannot_connect_is_a_clear_error():
    with pytest.raises(KafkaLiteError, match="no broker reachable"):
        Admin("127.0.0.1:1", request_timeout_ms=2000)
