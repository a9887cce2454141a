"""Preferred leaders and the automatic leader rebalance (Kafka's auto.leader.rebalance.enable), sans-IO.

A partition's preferred leader is its first replica. Topic creation spreads first replicas evenly over the
brokers, so leadership is balanced while every partition is led by its preferred replica. A failover moves
leadership away, and nothing brings it back by itself: a restarted broker rejoins as a follower of every
partition. Kafka's controller therefore checks, every `leader.imbalance.check.interval.seconds`, for each
broker the share of the partitions it is the preferred leader of that it does not lead; where that share is
above `leader.imbalance.per.broker.percentage`, it elects the preferred replica of those partitions, each
where that replica is alive and in the ISR. That is a clean election (every ISR member holds every
acknowledged record), the same one the controller makes when a leader is fenced.

The decision is here, pure; ControllerService runs it from its ticks and commits what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol

TopicPartitionKey = tuple[str, int]


class PartitionState(Protocol):
    """What the decision reads of a partition (broker/metadata/image.py's PartitionState)."""

    @property
    def partition(self) -> int: ...
    @property
    def leader(self) -> int: ...
    @property
    def replicas(self) -> list[int]: ...
    @property
    def isr(self) -> list[int]: ...


class TopicInfo(Protocol):
    """What the decision reads of a topic (broker/metadata/image.py's TopicInfo)."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Mapping[int, PartitionState]: ...


@dataclass(frozen=True)
class RebalancePolicy:
    """The three broker configs, as the controller uses them."""

    enabled: bool = True  # auto.leader.rebalance.enable
    imbalance_percentage: int = 10  # leader.imbalance.per.broker.percentage
    check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds, in ms


@dataclass
class BrokerImbalance:
    """One broker's preferred leaderships: how many partitions name it first, and which of those it does not
    lead (led by another broker, or by none)."""

    broker: int
    preferred: int = 0
    led_elsewhere: list[TopicPartitionKey] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return len(self.led_elsewhere) / self.preferred if self.preferred else 0.0


def preferred_replica(p: PartitionState) -> int | None:
    return p.replicas[0] if p.replicas else None


def preferred_can_lead(p: PartitionState, live: set[int]) -> bool:
    """Kafka's preferred-replica election rule: the first replica, only if it is alive and in the ISR."""
    preferred = preferred_replica(p)
    return preferred is not None and preferred in live and preferred in p.isr


def imbalance_by_broker(topics: Iterable[TopicInfo]) -> dict[int, BrokerImbalance]:
    out: dict[int, BrokerImbalance] = {}
    for t in topics:
        for p in t.partitions.values():
            preferred = preferred_replica(p)
            if preferred is None:
                continue
            b = out.setdefault(preferred, BrokerImbalance(preferred))
            b.preferred += 1
            if p.leader != preferred:
                b.led_elsewhere.append((t.name, p.partition))
    return out


def rebalance_candidates(
    topics: Iterable[TopicInfo], live: set[int], imbalance_percentage: int
) -> list[TopicPartitionKey]:
    """The partitions whose preferred replica should be elected now: those of every broker whose imbalance
    ratio is above the percentage (strictly, as Kafka compares), where the preferred replica can lead.
    Sorted, so one image always gives one proposal."""
    by_name = {t.name: t for t in topics}
    out: list[TopicPartitionKey] = []
    for b in imbalance_by_broker(by_name.values()).values():
        if b.ratio <= imbalance_percentage / 100:
            continue
        out += [(t, p) for t, p in b.led_elsewhere if preferred_can_lead(by_name[t].partitions[p], live)]
    return sorted(out)
