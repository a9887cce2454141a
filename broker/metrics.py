"""Broker metrics (prometheus_client), served as Prometheus text on GET /metrics of the broker port."""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class BrokerMetrics:
    def __init__(self, broker_id: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"broker": str(broker_id)}
        r = self.registry
        self.under_replicated = Gauge(
            "kafkalite_under_replicated_partitions",
            "Led partitions whose ISR is smaller than the replica set",
            ["broker"],
            registry=r,
        ).labels(**labels)
        self.offline = Gauge(
            "kafkalite_offline_partitions", "Partitions with no leader (controller's view)", ["broker"], registry=r
        ).labels(**labels)
        self.isr_shrinks = Counter(
            "kafkalite_isr_shrinks", "ISR shrinks proposed by this broker", ["broker"], registry=r
        ).labels(**labels)
        self.isr_expands = Counter(
            "kafkalite_isr_expands", "ISR expansions proposed by this broker", ["broker"], registry=r
        ).labels(**labels)
        self.elections = Counter(
            "kafkalite_controller_elections", "Controller elections this broker took part in", ["broker"], registry=r
        ).labels(**labels)
        self.election_seconds = Histogram(
            "kafkalite_election_duration_seconds",
            "From starting an election to knowing the new controller",
            ["broker"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10),
            registry=r,
        ).labels(**labels)
        self.leader_changes = Counter(
            "kafkalite_partition_leader_changes", "Partition leaderships gained by this broker", ["broker"], registry=r
        ).labels(**labels)
        self.produce_messages = Counter(
            "kafkalite_produce_messages", "Records appended as leader", ["broker"], registry=r
        ).labels(**labels)
        self.produce_bytes = Counter(
            "kafkalite_produce_bytes", "Batch bytes appended as leader", ["broker"], registry=r
        ).labels(**labels)
        self.produce_latency = Histogram(
            "kafkalite_produce_request_seconds",
            "Produce request handling time",
            ["broker"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        ).labels(**labels)
        self.fetch_bytes = Counter(
            "kafkalite_fetch_bytes", "Batch bytes served by fetches", ["broker", "kind"], registry=r
        )
        self.fetch_latency = Histogram(
            "kafkalite_fetch_request_seconds",
            "Fetch request time, long-poll included",
            ["broker"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        ).labels(**labels)
        self.broker_label = str(broker_id)

    def set_gauges(self, under_replicated: Callable[[], float], offline: Callable[[], float]) -> None:
        self.under_replicated.set_function(under_replicated)
        self.offline.set_function(offline)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def http_response(body: bytes, status: str = "200 OK", content_type: str = "text/plain; version=0.0.4") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
