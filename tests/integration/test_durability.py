"""Real broker processes: produce, SIGKILL, restart, and read every acknowledged record back exactly once, in order."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from client.admin import NewTopic
from client.consumer import TopicPartition
from client.sync import Admin, Consumer, Producer
from tests.integration.cluster_harness import wait_until

pytestmark = pytest.mark.timeout(120)


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list]:
    out: dict[int, list] = {p: [] for p in range(partitions)}
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=5000) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        ends = c.list_offsets([TopicPartition(topic, p) for p in range(partitions)], -1)
        deadline = time.monotonic() + 60
        while sum(len(v) for v in out.values()) < sum(ends.values()) and time.monotonic() < deadline:
            for r in c.poll(1000):
                out[r.partition].append(r)
    return out


@pytest.mark.parametrize("acks", ["1", "all"])
def test_sigkill_loses_nothing_acknowledged(broker, acks):
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic("dur", 3, 1, {"segment.bytes": "200000"})])
    acked: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    lock = threading.Lock()

    def on_delivery_for(value):
        def on_delivery(err, md):
            if err is None:
                with lock:
                    acked[md.partition].append((md.offset, value))

        return on_delivery

    producer = Producer(
        broker.bootstrap, acks=acks, linger_ms=2, batch_size=4096, delivery_timeout_ms=60000, retry_backoff_ms=50
    )
    stop = threading.Event()
    sent = []

    def produce():
        i = 0
        while not stop.is_set():
            key = f"k{i % 50}".encode()
            value = f"v{i}".encode()
            producer.send("dur", value, key=key, on_delivery=on_delivery_for(value))
            sent.append(i)
            i += 1
            if i % 200 == 0:
                time.sleep(0.005)

    def acked_count() -> int:
        with lock:
            return sum(len(v) for v in acked.values())

    assert producer.idempotent == (acks == "all"), "idempotence is on by default with acks=all only, as in Kafka"
    t = threading.Thread(target=produce)
    t.start()
    # Conditions with deadlines, not fixed sleeps: a busy machine only makes this slower, never wrong.
    wait_until(lambda: acked_count() >= 1000, 60, "1000 acknowledged records before the kill")
    broker.kill(signal.SIGKILL)
    before_restart = acked_count()
    broker.start()
    wait_until(lambda: acked_count() >= before_restart + 500, 60, "500 more acknowledged after the restart")
    stop.set()
    t.join()
    producer.flush(60)
    producer.close()
    logged = read_all(broker.bootstrap, "dur", 3)
    for p in range(3):
        by_offset = {r.offset: r for r in logged[p]}
        offsets = [r.offset for r in logged[p]]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), "offsets in order, once each"
        for off, value in acked[p]:
            assert off in by_offset, f"acknowledged {p}@{off} lost"
            assert by_offset[off].value == value
        if acks == "1":
            # acks=1 turns idempotence off, as in Kafka: a batch whose answer the kill cut off is retried and may
            # be stored twice (at least once). Only what was acknowledged must be there, checked above.
            continue
        first_at: dict[bytes, int] = {}
        twice = []
        for r in logged[p]:
            if r.value in first_at:
                twice.append((r.value, first_at[r.value], r.offset))
            first_at.setdefault(r.value, r.offset)
        assert not twice, f"{len(twice)} records appended twice in partition {p} (value, first, again): {twice[:3]}"
        # per-key order: values of one key increase
        last: dict[bytes, int] = {}
        for r in logged[p]:
            n = int(r.value[1:])
            assert n > last.get(r.key, -1), "per-partition order broken"
            last[r.key] = n
    assert "(unclean shutdown)" in broker.logs() and "recovered segment" in broker.logs()


def test_sigterm_is_clean_and_restart_skips_recovery(broker):
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic("clean", 1, 1)])
    with Producer(broker.bootstrap, acks="all") as p:
        for i in range(1000):
            p.send("clean", f"{i}".encode())
        p.flush()
    assert broker.stop() == 0
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    assert "shut down cleanly" in broker.logs()
    broker.start()
    got = read_all(broker.bootstrap, "clean", 1)[0]
    assert [r.value for r in got] == [f"{i}".encode() for i in range(1000)]
    assert not (broker.data_dir / ".kafka_cleanshutdown").exists()


def test_restart_after_kill_with_torn_tail(broker):
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic("torn", 1, 1)])
    with Producer(broker.bootstrap, acks="1") as p:
        for i in range(500):
            p.send("torn", f"{i}".encode())
        p.flush()
    broker.kill()
    seg = sorted((broker.data_dir / "torn-0").glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x01\xf4\x00\x00\x10\x00garbage-after-a-crash")
    broker.start()
    got = read_all(broker.bootstrap, "torn", 1)[0]
    assert [r.value for r in got] == [f"{i}".encode() for i in range(500)]
    with Producer(broker.bootstrap) as p:
        p.send("torn", b"after")
        p.flush()
    got = read_all(broker.bootstrap, "torn", 1)[0]
    assert got[-1].value == b"after" and got[-1].offset == 500
