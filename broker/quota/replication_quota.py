"""Replication throttles: Kafka's ReplicationQuotaManager (KIP-73), one per direction on each broker.

Two broker configs set the rates, in bytes/s: `leader.replication.throttled.rate` (what this broker, leading,
serves to throttled followers) and `follower.replication.throttled.rate` (what it, following, fetches for its
throttled replicas); Long.MAX_VALUE, the default, is no throttle. They are dynamic broker configs
(broker/server/dynamic_config.py), kept in the metadata log, so every broker applies what `kl-configs --entity-type
brokers` set. Two topic configs say which replicas are throttled: `leader.replication.throttled.replicas` and
`follower.replication.throttled.replicas`, each `partition:broker,...` or `*` (all); a broker throttles the
partitions listed with its own id, as Kafka's TopicConfigHandler parses them.

The leader answers a throttled follower's fetch without that partition's records while the rate measured over
`replication.quota.window.num` samples of `replication.quota.window.size.seconds` is above the quota (the fetch
itself is answered, the other partitions in it are not held back); the follower leaves its throttled partitions
out of its fetches while over its own quota. Only replicas outside the ISR are throttled (Kafka's
isReplicaInSync check): an in-sync follower is never held back, so acks=all never waits on a throttle. The bytes
of throttled partitions are recorded after they moved, as Kafka does; a fetch that starts under the quota may
take it over by up to one fetch's worth. Sans-IO: the time comes in.
"""

from __future__ import annotations

from typing import Callable

from broker.quota.client_quota import Rate
from net.config_def import LONG_MAX

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
UNLIMITED = LONG_MAX  # Kafka's default rate: no throttle

# A throttled-replica list naming every partition (`*`).
ALL_PARTITIONS: frozenset[int] = frozenset({-1})


def throttled_partitions(value: str, broker_id: int) -> frozenset[int]:
    """The partitions a `*.replication.throttled.replicas` value throttles on `broker_id` (ALL_PARTITIONS for
    `*`). The value was validated when it was set (broker/log/config.py); anything else throttles nothing."""
    items = [i.strip() for i in value.split(",") if i.strip()]
    if items == ["*"]:
        return ALL_PARTITIONS
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if partition.isdigit() and broker.isdigit() and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One direction's quota on this broker: which partitions it throttles, and whether it is over its rate."""

    def __init__(
        self,
        broker_id: int,
        rate: Callable[[], int],
        replicas: Callable[[str], str],
        window_num: int = 11,
        window_size_s: float = 1.0,
    ) -> None:
        self.broker_id = broker_id
        self._rate = rate  # the effective rate config, read at each check (it changes with metadata)
        self._replicas = replicas  # topic -> its throttled-replica list ("" when none)
        self._meter = Rate(window_num, window_size_s)
        self._parsed: dict[str, tuple[str, frozenset[int]]] = {}  # topic -> (list value, its partitions here)

    def is_throttled(self, topic: str, partition: int) -> bool:
        value = self._replicas(topic)
        if not value:
            return False
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != value:  # parsed once per value: a follower's fetch names many
            cached = self._parsed[topic] = (value, throttled_partitions(value, self.broker_id))
        return cached[1] is ALL_PARTITIONS or partition in cached[1]

    @property
    def limited(self) -> bool:
        return self._rate() < UNLIMITED

    def exceeded(self, now: float) -> bool:
        """Over the quota: the rate measured now is above it (Kafka's Sensor.checkQuotas)."""
        rate = self._rate()
        return rate < UNLIMITED and self._meter.measure(now) > rate

    def record(self, amount: int, now: float) -> None:
        if amount:
            self._meter.record(amount, now)

    def rate(self, now: float) -> float:
        """The measured rate in bytes/s (for the metrics and tests)."""
        return self._meter.measure(now)
