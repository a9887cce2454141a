"""What a producer says about records it could not deliver, checked against what the log holds:

- retries of many queued batches are never refused as out of order (at most 5 batches of a partition are
  unacknowledged, which the broker's de-duplication window covers), so committed records are never
  reported as failed and none is stored twice; each acknowledged record's reported offset is the one it
  is stored at, a retry's duplicate's too (a request carries one batch per partition, as Kafka's);
- every failed record is in ProduceError with an outcome: "not_written" only when the log cannot hold it,
  "unknown" as soon as an attempt may have been appended;
- kl-produce prints both counts and exits non-zero.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from client.admin import NewTopic
from client.producer import ProduceError
from client.sync import Admin, Producer
from tests.integration.cluster_harness import read_back, wait_until

pytestmark = pytest.mark.timeout(120)


def create(bootstrap: str, name: str, partitions: int = 1, rf: int = 1, **configs: str) -> None:
    with Admin(bootstrap) as a:
        a.create_topics([NewTopic(name, partitions, rf, configs or None)])


def test_many_queued_batches_retried_after_timeouts_are_never_out_of_order(cluster_factory):
    """A follower stops (SIGSTOP): acks=all requests time out until the ISR shrinks, while dozens of small
    batches queue up. Every retry is de-duplicated, none is refused with OUT_OF_ORDER_SEQUENCE_NUMBER, and
    every delivery report names the offset its record is stored at: the retries' duplicates kept their first
    offsets, which the broker answers (several batches of a partition in one request made their single
    base_offset -1, and the delivery reports' offsets -1, when duplicates and new batches were mixed)."""
    cluster = cluster_factory(3, overrides=["replica.lag.time.max.ms=4000"])
    cluster.create_topic("q", 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.describe("q")[0].leader
    follower = next(b for b in cluster.brokers if b != leader)
    cluster[follower].pause()
    failures: list = []
    acked: dict[bytes, int] = {}  # value -> the offset its delivery report gave
    try:
        with Producer(
            cluster.bootstrap(),
            acks="all",
            batch_size=1024,  # ~10 records per batch: 3000 records make ~300 batches, most of them queued
            linger_ms=0,
            request_timeout_ms=1000,
            retry_backoff_ms=100,
            delivery_timeout_ms=60000,
        ) as p:
            for i in range(3000):
                p.send(
                    "q",
                    f"v{i:05d}".encode() + b"." * 80,
                    partition=0,
                    on_delivery=lambda e, md, v=f"v{i:05d}".encode(): (
                        failures.append(e) if e else acked.__setitem__(v, md.offset)
                    ),
                )
            time.sleep(2)  # several request timeouts pass with the follower stopped
            cluster[follower].resume()
            p.flush(60)
    finally:
        if cluster[follower].paused:
            cluster[follower].resume()
    assert not failures, f"{len(failures)} records reported failed, first: {failures[0]}"
    stored = read_back(cluster.bootstrap(), "q", 1)[0]
    values = [r.value[:6] for r in stored]
    dup = [v for v, n in Counter(values).items() if n > 1]
    assert not dup, f"stored twice: {dup[:5]}"
    assert values == [f"v{i:05d}".encode() for i in range(3000)]  # all there, in order
    assert len(acked) == 3000
    unknown = [v for v, off in acked.items() if off < 0]
    assert not unknown, f"{len(unknown)} acknowledged records reported at offset -1, first: {unknown[0]!r}"
    at = {r.offset: r.value[:6] for r in stored}
    wrong = [(v, off, at.get(off)) for v, off in acked.items() if at.get(off) != v]
    assert not wrong, f"{len(wrong)} delivery reports name another record's offset, first: {wrong[0]}"


def test_retried_duplicates_behind_another_producers_record_keep_their_exact_offsets(cluster_factory):
    """Issue 26 §1: a0 is appended at offset 0 but its acks=all answer times out (a follower is stopped, still in
    the ISR); another producer's record takes offset 1; a1 and a2 follow a0. Their retries are duplicates, which
    the broker answers with their first offsets: every delivery report names the offset its record is at.
    (With a0, a1 and a2 in one request, as the producer once sent a partition's queued batches, the broker
    found a0 a duplicate at 0 and appended a1 and a2 at 2 and 3: one base_offset could not say that, the
    answer was -1 and so were the three delivery reports.)"""
    cluster = cluster_factory(3, overrides=["replica.lag.time.max.ms=30000"])  # the stopped follower stays in
    cluster.create_topic("dups", 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.describe("dups")[0].leader
    follower = next(b for b in cluster.brokers if b != leader)
    reports: dict[bytes, int] = {}
    failures: list = []

    def report(value: bytes):  # a delivery callback for `value`
        return lambda e, md: failures.append(e) if e else reports.__setitem__(value, md.offset)

    bootstrap = cluster.bootstrap()
    with (
        Producer(bootstrap, acks="all", batch_size=1, linger_ms=0, request_timeout_ms=1000, retry_backoff_ms=100) as a,
        Producer(bootstrap, acks="1", linger_ms=0) as b,
    ):
        a.partitions_for("dups")
        cluster[follower].pause()
        try:
            a.send("dups", b"a0", partition=0, on_delivery=report(b"a0"))
            time.sleep(0.3)  # a0 appended at 0, waiting for the stopped follower
            b.send("dups", b"b0", partition=0, on_delivery=report(b"b0"))
            b.flush(10)  # acks=1: at 1 at once
            for v in (b"a1", b"a2"):
                a.send("dups", v, partition=0, on_delivery=report(v))
            time.sleep(2.5)  # a0's request times out (and its retry), a1 and a2 queued or timed out behind it
        finally:
            cluster[follower].resume()
        a.flush(30)
    assert not failures, failures
    assert reports[b"b0"] == 1 and reports[b"a0"] == 0, reports
    stored = {r.offset: r.value for r in read_back(cluster.bootstrap(), "dups", 1)[0]}
    assert sorted(stored.values()) == [b"a0", b"a1", b"a2", b"b0"]  # none stored twice
    assert {v: off for off, v in stored.items()} == reports  # every report: the record's own offset, never -1


def test_queued_batches_merged_past_the_topics_max_message_bytes_are_split_and_all_delivered(broker, caplog):
    """The producer sends the batches queued behind a partition's request in flight as one record batch; where
    that is larger than the topic's max.message.bytes (each batch alone fits), the broker refuses it
    (MESSAGE_TOO_LARGE, nothing appended) and the producer sends its batches one by one, numbered from where
    the merged one began, as Kafka's producer splits a batch refused as too large: nothing fails, nothing is
    stored twice, every report names its record's offset."""
    create(broker.bootstrap, "fits", **{"max.message.bytes": "3000"})
    reports: dict[bytes, int] = {}
    failures: list = []
    values = [f"r{i:03d}".encode() + b"." * 96 for i in range(150)]

    def report(v: bytes):  # a delivery callback for `v`
        return lambda e, md: failures.append(e) if e else reports.__setitem__(v, md.offset)

    with caplog.at_level("INFO", logger="kafkalite.producer"):
        with Producer(broker.bootstrap, acks="all", batch_size=2500, linger_ms=0, request_timeout_ms=10000) as p:
            p.partitions_for("fits")
            broker.proc.send_signal(signal.SIGSTOP)  # the first batch waits in flight, the rest queue behind it
            try:
                for v in values:
                    p.send("fits", v, partition=0, on_delivery=report(v))
                time.sleep(0.3)
            finally:
                broker.proc.send_signal(signal.SIGCONT)
            p.flush(30)
    assert not failures, f"{len(failures)} failed, first: {failures[0]}"
    assert "too large for the topic; sending them one by one" in caplog.text  # the merge happened and was split
    stored = read_back(broker.bootstrap, "fits", 1)[0]
    assert [r.value for r in stored] == values  # all, once, in order
    assert {r.value: r.offset for r in stored} == reports


def test_refused_before_append_is_not_written(broker):
    create(broker.bootstrap, "small", **{"max.message.bytes": "2000"})
    with Producer(broker.bootstrap, acks="all", retries=0) as p:
        p.send("small", b"x" * 5000, partition=0)
        p.send("small", b"x" * 6000, partition=0)
        with pytest.raises(ProduceError) as exc:
            p.flush(10)
    assert exc.value.not_written == 2 and exc.value.unknown == 0
    assert [len(f.value) for f in exc.value.failures] == [5000, 6000]
    assert all(f.error.code.name in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE") for f in exc.value.failures)
    assert read_back(broker.bootstrap, "small", 1)[0] == []


def test_not_enough_replicas_is_not_written(cluster):
    cluster.create_topic("nr", 1, 3, {"min.insync.replicas": "3"})
    leader = cluster.describe("nr")[0].leader
    other = next(b for b in cluster.brokers if b != leader)
    cluster.kill(other)
    wait_until(lambda: len(cluster.describe("nr", [leader])[0].isr) == 2, 30, "ISR shrunk to 2")
    with Producer(cluster.bootstrap([leader]), acks="all", delivery_timeout_ms=2000, retry_backoff_ms=100) as p:
        for i in range(5):
            p.send("nr", f"nr-{i}".encode(), partition=0)
        with pytest.raises(ProduceError) as exc:
            p.flush(20)
    assert exc.value.not_written == 5 and exc.value.unknown == 0, str(exc.value)
    # Retried (NOT_ENOUGH_REPLICAS is retriable) until delivery.timeout.ms; every attempt was refused before
    # any append, so the expiry still knows the records are not in the log.
    assert all(f.outcome == "not_written" for f in exc.value.failures)


def test_timeout_on_a_stopped_leader_is_unknown(broker):
    create(broker.bootstrap, "stop")
    with Producer(
        broker.bootstrap, acks="1", request_timeout_ms=800, delivery_timeout_ms=2500, retry_backoff_ms=100
    ) as p:
        p.send("stop", b"before", partition=0)
        p.flush(10)
        broker.proc.send_signal(signal.SIGSTOP)
        try:
            p.send("stop", b"maybe", partition=0)
            with pytest.raises(ProduceError) as exc:
                p.flush(20)
        finally:
            broker.proc.send_signal(signal.SIGCONT)
    [f] = exc.value.failures
    assert f.outcome == "unknown" and exc.value.unknown == 1, str(exc.value)
    assert "outcome unknown" in str(f.error) or "timed out" in str(f.error)
    # The broker read the request before it stopped or reads it now: the record may well be in the log,
    # which is exactly why the outcome must not be "not_written".
    values = [r.value for r in read_back(broker.bootstrap, "stop", 1)[0]]
    assert values[0] == b"before" and set(values[1:]) <= {b"maybe"}


def test_kl_produce_prints_both_counts(broker):
    create(broker.bootstrap, "cli", **{"max.message.bytes": "2000"})
    lines = "ok\n" + "y" * 5000 + "\n"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "client.cli.produce",
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            "cli",
            "--producer-property",
            "retries=0",
        ],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    # "ok" shares the refused batch (linger.ms=5), so both lines are refused, before any append.
    assert "2 records not written, 0 records with unknown outcome" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
