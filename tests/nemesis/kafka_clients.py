"""Kafka's own clients in the seeded nemesis (issue 27, section 4): confluent-kafka's idempotent producer
(librdkafka) and a kafkajs consumer-group member, both through the brokers' Kafka listeners, under the same
faults and judged by the same checker as Kafka Lite's own clients (tests/nemesis/runner.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections import deque
from pathlib import Path

from confluent_kafka import KafkaError, Producer

from tests.integration.cluster_harness import ProducerStats

JS = Path(__file__).resolve().parents[1] / "js"


class ConfluentLoadProducer:
    """LoadProducer's workload (values `<name>-<seq>`, keys over 16 values, acks=all) from librdkafka's
    idempotent producer, with the same stats: what was acknowledged at which partition and offset."""

    def __init__(self, bootstrap: str, topic: str, name: str, rate_sleep: float = 0.002) -> None:
        self.topic = topic
        self.stats = ProducerStats(name)
        self.errors: list[str] = []  # librdkafka's error_cb: fatal idempotence errors would show here
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "request.timeout.ms": 3000,
                # A record that times out while in flight is reported failed, and the records sent with it are numbered
                # again in a bumped epoch though the broker may have written them (librdkafka's INTRODUCTION.md,
                # "Message timeout considerations"): duplicates by design, which this checker would count. ci101's
                # seed 962 on a machine at half speed: 24 s of ISR below min.insync.replicas, 30 s timeouts, 22
                # epoch bumps and 700 records written twice. Longer than any fault schedule's outage here.
                "message.timeout.ms": 120000,
                "retry.backoff.ms": 50,
                "error_cb": self._error,
                "log_level": 0,  # its connection failures while brokers are down reach error_cb; no log spam
            }
        )
        self.rate_sleep = rate_sleep
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"confluent-{name}", daemon=True)

    # librdkafka calls these from whichever thread polls (the load thread's poll, stop()'s flush), one at a time;
    # a list's append is atomic, so no lock: a lock here turned a pytest-timeout into a hang (ci101: the timeout's
    # exception landed in a callback between the lock's acquire and its `with`, and flush's next callback waited
    # for the lock for ever).
    def _error(self, err: KafkaError) -> None:
        self.errors.append(f"{'FATAL ' if err.fatal() else ''}{err}")

    def _delivered(self, err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            self.stats.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.stats.failed.append((msg.value(), str(err)))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = f"{self.stats.name}-{i}".encode()
            try:
                self.producer.produce(self.topic, value, key=f"k{i % 16}".encode(), on_delivery=self._delivered)
            except BufferError:  # the local queue is full while brokers are down: wait for deliveries
                self.producer.poll(0.05)
                continue
            self.stats.sent = i = i + 1
            self.producer.poll(0)
            if i % 10 == 0:
                time.sleep(self.rate_sleep * 10)

    def start(self) -> ConfluentLoadProducer:
        self._thread.start()
        return self

    def stop(self, flush_timeout: float = 150) -> ProducerStats:
        self._stop.set()
        self._thread.join(10)
        left = self.producer.flush(flush_timeout)
        if left:
            self.stats.flush_error = f"{left} records undelivered after {flush_timeout}s"
        del self.producer  # librdkafka's threads end with it (they would go on reconnecting to stopped brokers)
        return self.stats


class KafkajsMember:
    """tests/js/kafkajs_group.js in its own group: it must be handed every record of the log."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is required: apt-get install -y nodejs (./scripts/test.sh installs it)")
        self.records: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.stderr: deque[str] = deque(maxlen=20)
        self.proc = subprocess.Popen(
            [node, str(JS / "kafkajs_group.js"), bootstrap, topic, group],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=JS,
        )
        self._readers = [
            threading.Thread(target=self._read_records, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read_records(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            r = json.loads(line)
            self.records.append((r["partition"], r["offset"], r["value"].encode()))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def describe(self) -> str:
        state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        return f"kafkajs member ({state}, {len(self.records)} records); stderr: {list(self.stderr)[-5:]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
