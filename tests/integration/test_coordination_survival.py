"""Which failure combinations each coordination mode survives: the cells of docs/ELECTION.md section 8,
each measured here on real processes (not asserted from theory).

"Survives" means, after the failure and within PROBE_S: every partition that still has a live replica
takes an acks=all produce (min.insync.replicas=1, so durability settings do not decide the cell), and a
new topic can be created (metadata changes work). The measured outcome must equal EXPECTED, the table
in the docs: when behaviour changes, this fails and the table must be re-measured."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from client.admin import NewTopic
from client.producer import ProduceError
from client.sync import Admin, Producer
from net.errors import KafkaLiteError
from tests.integration.cluster_harness import ClusterHarness

pytestmark = pytest.mark.timeout(180)
TOPIC = "cells"
# A killed broker is found out within 3 s rather than the defaults' 9 s: the ZooKeeper mode finds one only when its
# session (zookeeper.session.timeout.ms) expires; the custom mode from its closed connections, or at
# broker.session.timeout.ms. What a cell measures is what works once the death is known, the same at any timeout;
# each cell waited out two 9 s sessions, and each cell that does not survive waited out PROBE_S twice.
DETECTION = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=750",
    "zookeeper.session.timeout.ms=3000",
]
PROBE_S = 12.0  # the detection (3 s), the elections after it, and a margin for a loaded machine

# (mode, cell) -> (partitions with a live replica writable, topic creation works)
EXPECTED = {
    ("custom", "3 brokers RF=3, lose 1"): (True, True),
    ("custom", "3 brokers RF=3, lose 2"): (False, False),
    ("custom", "5 brokers RF=3, lose 2"): (True, True),
    ("zookeeper", "3 brokers RF=3, lose 1"): (True, True),
    ("zookeeper", "3 brokers RF=3, lose 2"): (True, True),
    ("zookeeper", "5 brokers RF=3, lose 2"): (True, True),
}


@pytest.fixture(params=["custom", "zookeeper"])
def coordination(request) -> str:
    return request.param


def _writable(h: ClusterHarness, partitions: list[int]) -> bool:
    """Every listed partition acknowledges one acks=all record, retrying until PROBE_S."""
    deadline = time.monotonic() + PROBE_S
    pending = set(partitions)
    acked: list[int] = []
    while pending and time.monotonic() < deadline:
        with Producer(h.bootstrap(), acks="all", delivery_timeout_ms=3000, request_timeout_ms=1500) as p:
            for part in sorted(pending):
                p.send(TOPIC, b"probe", partition=part, on_delivery=lambda e, md: e or acked.append(md.partition))
            try:
                p.flush(10)
            except ProduceError:
                pass
        pending -= set(acked)
    return not pending


def _can_create(h: ClusterHarness, name: str) -> bool:
    try:
        with Admin(h.bootstrap(), request_timeout_ms=int(PROBE_S * 1000)) as a:
            a.create_topics([NewTopic(name, 1, 1)])
        return True
    except KafkaLiteError:
        return False


def _measure(h: ClusterHarness, dead: set[int], name: str) -> tuple[bool, bool]:
    """Both probes at once, each within PROBE_S of the failure (one after the other, a cell that does not survive
    waited PROBE_S twice)."""
    parts = [p for p in h.describe(TOPIC, [i for i in h.brokers if i not in dead][:1])]
    live = [p.partition for p in parts if set(p.replicas) - dead]
    with ThreadPoolExecutor(2) as pool:
        writable, created = pool.submit(_writable, h, live), pool.submit(_can_create, h, name)
        return writable.result(), created.result()


def _controller_first(h: ClusterHarness) -> list[int]:
    """Brokers to kill: the controller first (the harder loss), then the others by id."""
    c = h.controller_id()
    return [c] + [i for i in sorted(h.brokers) if i != c]


def test_three_brokers_rf3_lose_one_then_two(cluster_factory, coordination):
    h = cluster_factory(3, DETECTION)
    h.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "1"})
    order = _controller_first(h)
    h.kill(order[0])
    got1 = _measure(h, {order[0]}, "after-one")
    h.kill(order[1])
    got2 = _measure(h, {order[0], order[1]}, "after-two")
    print(f"{coordination}: lose 1 -> {got1}, lose 2 -> {got2}")
    assert got1 == EXPECTED[(coordination, "3 brokers RF=3, lose 1")]
    assert got2 == EXPECTED[(coordination, "3 brokers RF=3, lose 2")]


def test_five_brokers_rf3_lose_two(cluster_factory, coordination):
    h = cluster_factory(5, DETECTION)
    h.create_topic(TOPIC, 5, 3, {"min.insync.replicas": "1"})
    order = _controller_first(h)
    h.kill(order[0])
    h.kill(order[1])
    got = _measure(h, {order[0], order[1]}, "after-two")
    print(f"{coordination}: 5 brokers lose 2 -> {got}")
    assert got == EXPECTED[(coordination, "5 brokers RF=3, lose 2")]
