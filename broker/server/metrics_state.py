"""StateCollector: the broker's gauges read at scrape time from its own structures (leaders, partitions,
log sizes and offsets, replica lag, consumer-group lag, the controller), so they cost nothing between
scrapes. Registered on `BrokerMetrics.registry` by the broker; the counters and histograms are in
broker/metrics/broker_metrics.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from broker.metrics.broker_metrics import package_version

if TYPE_CHECKING:
    from broker.group.coordinator import GroupCoordinator
    from broker.replica.replica_manager import ReplicaManager
    from election.coordination import Coordination


class StateCollector(Collector):
    """Gauges read from the broker at scrape time (on the event loop, so the structures are consistent)."""

    def __init__(
        self,
        coordination: "Coordination",
        replica_manager: "ReplicaManager",
        group_coordinator: "GroupCoordinator",
        connection_count: Callable[[], int],
        mode: str,
        broker: str,
        topic_labels: bool = True,
    ) -> None:
        self.topic_labels = topic_labels  # metrics.topic.labels: per-partition/group series name their topic
        self.coordination = coordination
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.connection_count = connection_count
        self.mode = mode
        self.broker = broker

    def describe(self) -> list[Any]:
        return []  # unchecked collector: its series depend on the partitions hosted at scrape time

    def collect(self) -> Iterator[Any]:
        b = self.broker
        info = InfoMetricFamily("kafkalite_broker", "Broker version, coordination mode and rack", labels=["broker"])
        info.add_metric(
            [b],
            {"version": package_version(), "coordination": self.mode, "rack": ""},
        )
        yield info
        controller = GaugeMetricFamily(
            "kafkalite_active_controller_count",
            "1 on the active controller (Kafka's ActiveControllerCount)",
            labels=["broker"],
        )
        cid = self.coordination.controller_id
        controller.add_metric([b], 1.0 if cid == int(b) else 0.0)
        yield controller
        epoch = GaugeMetricFamily(
            "kafkalite_controller_epoch", "Epoch of the controller this broker follows", labels=["broker"]
        )
        epoch.add_metric([b], float(self.coordination.controller_epoch))
        yield epoch
        conns = GaugeMetricFamily("kafkalite_connection_count", "Open client and peer connections", labels=["broker"])
        conns.add_metric([b], float(self.connection_count()))
        yield conns
        rm = self.replica_manager
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
        yield from (leaders, parts, purgatory)
        groups = group_lag(self.group_coordinator, rm, b)
        if self.topic_labels:
            yield from (size, start, end, hw, lag, groups)
        else:  # no series names a topic or a group: the sums the dashboards and alerts still read
            yield from (broker_total(size, b), broker_total(lag, b), broker_total(groups, b))


def broker_total(fam: GaugeMetricFamily, broker: str) -> GaugeMetricFamily:
    """`fam`'s samples summed into one series labelled by broker only (metrics.topic.labels=false)."""
    total = GaugeMetricFamily(fam.name, f"{fam.documentation}; summed over this broker's partitions", labels=["broker"])
    total.add_metric([broker], float(sum(s.value for s in fam.samples)))
    return total


def group_lag(gc: "GroupCoordinator", rm: "ReplicaManager", broker: str) -> GaugeMetricFamily:
    """Consumer-group lag per partition for the groups this broker coordinates, for the partitions it
    hosts (log end = its replica's high watermark, what a consumer can reach; as kafka_exporter reports)."""
    fam = GaugeMetricFamily(
        "kafkalite_consumer_group_lag",
        "High watermark minus committed offset, per group and partition (groups coordinated here)",
        labels=["broker", "group", "topic", "partition"],
    )
    parts = rm.partitions
    for gid, g in list(gc.logic.groups.items()):
        for (topic, partition), om in list(g.offsets.items()):
            p = parts.get((topic, partition))
            if p is None:
                continue
            fam.add_metric([broker, gid, topic, str(partition)], float(max(p.high_watermark - om.offset, 0)))
    return fam
