"""Broker metrics (prometheus_client), with Kafka's meanings, served as Prometheus text on their own
listener (`metrics.port`, broker/metrics_server.py).

Counters are bumped where the work happens, per request or per batch (never per record). Gauges that
describe state (log sizes and offsets, replica lag, purgatory, group lag, connections, leader count) are
computed at scrape time from the broker's own structures by `StateCollector`, so they cost nothing
between scrapes.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from broker.server import BrokerServer

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@functools.cache
def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("kafka-lite")
    except Exception:  # noqa: BLE001 - running from a source tree without an install
        return "0.1.0"


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
        children = self._topic_in.get(topic)
        if children is None:
            children = self._topic_in[topic] = (
                self._topic_bytes_in.labels(self.broker_label, topic),
                self._topic_messages_in.labels(self.broker_label, topic),
            )
        children[0].inc(nbytes)
        children[1].inc(messages)

    def topic_out(self, topic: str, nbytes: int) -> None:
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

    def watch(self, server: "BrokerServer") -> None:
        """Register the scrape-time gauges of this broker's state."""
        self.registry.register(StateCollector(server, self.broker_label))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class StateCollector(Collector):
    """Gauges read from the broker at scrape time (on the event loop, so the structures are consistent)."""

    def __init__(self, server: "BrokerServer", broker: str) -> None:
        self.server = server
        self.broker = broker

    def describe(self) -> list:
        return []  # unchecked collector: its series depend on the partitions hosted at scrape time

    def collect(self) -> Iterator[Any]:
        s = self.server
        b = self.broker
        info = InfoMetricFamily("kafkalite_broker", "Broker version, coordination mode and rack", labels=["broker"])
        info.add_metric(
            [b],
            {"version": package_version(), "coordination": s.config.coordination, "rack": ""},
        )
        yield info
        controller = GaugeMetricFamily(
            "kafkalite_active_controller_count",
            "1 on the active controller (Kafka's ActiveControllerCount)",
            labels=["broker"],
        )
        cid = s.quorum.controller_id if s.quorum is not None else None
        controller.add_metric([b], 1.0 if cid == int(b) else 0.0)
        yield controller
        epoch = GaugeMetricFamily(
            "kafkalite_controller_epoch", "Epoch of the controller this broker follows", labels=["broker"]
        )
        epoch.add_metric([b], float(controller_epoch(s)))
        yield epoch
        conns = GaugeMetricFamily("kafkalite_connection_count", "Open client and peer connections", labels=["broker"])
        conns.add_metric([b], float(s.net.connection_count if s.net is not None else 0))
        yield conns
        rm = s.replica_manager
        if rm is None:
            return
        leaders = GaugeMetricFamily("kafkalite_leader_count", "Partitions led by this broker", labels=["broker"])
        parts = GaugeMetricFamily("kafkalite_partition_count", "Partition replicas on this broker", labels=["broker"])
        purgatory = GaugeMetricFamily(
            "kafkalite_produce_purgatory_size", "acks=all produce waits not yet satisfied", labels=["broker"]
        )
        pl = ["broker", "topic", "partition"]
        size = GaugeMetricFamily("kafkalite_log_size_bytes", "Bytes of a partition's segments on disk", labels=pl)
        start = GaugeMetricFamily("kafkalite_log_start_offset", "First offset of a partition's log", labels=pl)
        end = GaugeMetricFamily("kafkalite_log_end_offset", "Next offset of a partition's log", labels=pl)
        hw = GaugeMetricFamily("kafkalite_high_watermark", "High watermark of a partition replica", labels=pl)
        lag = GaugeMetricFamily(
            "kafkalite_replica_lag_messages",
            "Leader's log end minus a follower's (as of its last fetch; Kafka's ReplicaLag)",
            labels=[*pl, "replica"],
        )
        n_leaders = n_waiting = 0
        for (topic, partition), p in list(rm.partitions.items()):
            labels = [b, topic, str(partition)]
            lg = p.log
            size.add_metric(labels, float(lg.size_bytes))
            start.add_metric(labels, float(lg.log_start_offset))
            end.add_metric(labels, float(lg.log_end_offset))
            hw.add_metric(labels, float(p.high_watermark))
            n_waiting += len(getattr(p, "_hw_waiters", ()))
            ls = p.leader_state
            if ls is None:
                continue
            n_leaders += 1
            leo = lg.log_end_offset
            for r in p.replicas:
                if r == int(b):
                    continue
                f = ls.follower_log_end_offset(r)
                lag.add_metric([*labels, str(r)], float(leo - f) if f is not None else float(leo))
        leaders.add_metric([b], float(n_leaders))
        parts.add_metric([b], float(len(rm.partitions)))
        purgatory.add_metric([b], float(n_waiting))
        yield from (leaders, parts, purgatory, size, start, end, hw, lag)
        yield group_lag(s, b)


def controller_epoch(server: "BrokerServer") -> int:
    q = server.quorum
    node = getattr(q, "node", None)  # the brokers' own quorum (QuorumDriver)
    if node is not None:
        return int(getattr(node, "epoch", 0))
    return int(getattr(q, "_epoch", 0))  # ZooKeeperCoordination: /controller_epoch as last seen


def group_lag(server: "BrokerServer", broker: str) -> GaugeMetricFamily:
    """Consumer-group lag per partition for the groups this broker coordinates, for the partitions it
    hosts (log end = its replica's high watermark, what a consumer can reach; as kafka_exporter reports)."""
    fam = GaugeMetricFamily(
        "kafkalite_consumer_group_lag",
        "High watermark minus committed offset, per group and partition (groups coordinated here)",
        labels=["broker", "group", "topic", "partition"],
    )
    gc = getattr(server, "group_coordinator", None)
    if gc is None:
        return fam
    parts = server.replica_manager.partitions
    for gid, g in list(gc.logic.groups.items()):
        for (topic, partition), om in list(g.offsets.items()):
            p = parts.get((topic, partition))
            if p is None:
                continue
            fam.add_metric([broker, gid, topic, str(partition)], float(max(p.high_watermark - om.offset, 0)))
    return fam
