"""Broker metrics (prometheus_client), with Kafka's meanings, served as Prometheus text on their own
listener (`metrics.port`, broker/metrics/metrics_server.py).

Counters are bumped where the work happens, per request or per batch (never per record). Gauges that
describe state (log sizes and offsets, replica lag, purgatory, group lag, connections, leader count) are
computed at scrape time from the broker's own structures by `StateCollector` (broker/server/metrics_state.py),
so they cost nothing between scrapes.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@functools.cache
def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("kafka-lite")
    except Exception:  # noqa: BLE001 - running from a source tree without an install
        return "0.1.0"


class BrokerMetrics:
    def __init__(self, broker_id: int, topic_labels: bool = True) -> None:
        self.topic_labels = topic_labels  # metrics.topic.labels: off, no series names a topic
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
        # Kafka's BrokerTopicMetrics: BytesInPerSec, MessagesInPerSec, BytesOutPerSec (consumer fetches only).
        self._topic_bytes_in = Counter(
            "kafkalite_topic_bytes_in", "Batch bytes appended as leader, per topic", ["broker", "topic"], registry=r
        )
        self._topic_messages_in = Counter(
            "kafkalite_topic_messages_in", "Records appended as leader, per topic", ["broker", "topic"], registry=r
        )
        self._topic_bytes_out = Counter(
            "kafkalite_topic_bytes_out", "Batch bytes sent to consumers, per topic", ["broker", "topic"], registry=r
        )
        # Kafka's RequestMetrics: RequestsPerSec and TotalTimeMs per request type.
        self._requests = Histogram(
            "kafkalite_request_seconds",
            "Time from reading a request to its response being queued, per api (rate: its _count)",
            ["broker", "api"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.broker_label = str(broker_id)
        self._topic_in: dict[str, tuple[Any, Any]] = {}
        self._topic_out: dict[str, Any] = {}
        self._api: dict[int, Any] = {}

    def set_gauges(self, under_replicated: Callable[[], float], offline: Callable[[], float]) -> None:
        self.under_replicated.set_function(under_replicated)
        self.offline.set_function(offline)

    def topic_in(self, topic: str, nbytes: int, messages: int) -> None:
        if not self.topic_labels:
            return
        children = self._topic_in.get(topic)
        if children is None:
            children = self._topic_in[topic] = (
                self._topic_bytes_in.labels(self.broker_label, topic),
                self._topic_messages_in.labels(self.broker_label, topic),
            )
        children[0].inc(nbytes)
        children[1].inc(messages)

    def topic_out(self, topic: str, nbytes: int) -> None:
        if not self.topic_labels:
            return
        child = self._topic_out.get(topic)
        if child is None:
            child = self._topic_out[topic] = self._topic_bytes_out.labels(self.broker_label, topic)
        child.inc(nbytes)

    def request_timer(self, api_key: int) -> Any:
        """The histogram child of one api (label values are resolved once per api, not per request)."""
        child = self._api.get(api_key)
        if child is None:
            from net.protocol import ApiKey

            try:
                name = ApiKey(api_key).name
            except ValueError:
                name = "UNKNOWN"
            child = self._api[api_key] = self._requests.labels(self.broker_label, name)
        return child

    def render(self) -> bytes:
        return generate_latest(self.registry)
