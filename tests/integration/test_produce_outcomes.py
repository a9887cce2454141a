"""What a producer says about records it could not deliver, checked against what the log holds:

- retries of many queued batches are never refused as out of order (at most 5 batches of a partition are
  unacknowledged, which the broker's de-duplication window covers), so committed records are never
  reported as failed and none is stored twice;
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
    batches queue up. Every retry is de-duplicated, none is refused with OUT_OF_ORDER_SEQUENCE_NUMBER."""
    cluster = cluster_factory(3, overrides=["replica.lag.time.max.ms=4000"])
    cluster.create_topic("q", 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.describe("q")[0].leader
    follower = next(b for b in cluster.brokers if b != leader)
    cluster[follower].pause()
    failures: list = []
    acked: list[int] = []
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
                    on_delivery=lambda e, md: failures.append(e) if e else acked.append(md.offset),
                )
            time.sleep(2)  # several request timeouts pass with the follower stopped
            cluster[follower].resume()
            p.flush(60)
    finally:
        if cluster[follower].paused:
            cluster[follower].resume()
    assert not failures, f"{len(failures)} records reported failed, first: {failures[0]}"
    values = [r.value[:6] for r in read_back(cluster.bootstrap(), "q", 1)[0]]
    dup = [v for v, n in Counter(values).items() if n > 1]
    assert not dup, f"stored twice: {dup[:5]}"
    assert values == [f"v{i:05d}".encode() for i in range(3000)]  # all there, in order
    assert len(set(acked)) == 3000


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
