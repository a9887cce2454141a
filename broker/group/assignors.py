"""The consumer group protocol's server-side assignors (KIP-848): `uniform` and `range`, as Kafka names them.

An assignor is a pure function: the members' subscriptions, the subscribed topics' partition counts and the
current target assignment in; the new target assignment out. The coordinator reconciles members towards it
(broker/group/consumer_logic.py), so an assignor never has to think about revocation order.
"""

from __future__ import annotations

from typing import Callable, Mapping

from net.consumer_protocol import range_split

TopicPartitions = dict[str, frozenset[int]]  # topic name -> partitions
Assignor = Callable[
    [Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, TopicPartitions]], dict[str, TopicPartitions]
]


def uniform(
    subscriptions: Mapping[str, frozenset[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, TopicPartitions],
) -> dict[str, TopicPartitions]:
    """Kafka's UniformAssignor: every member gets as many partitions as the others (within one, among those
    that may take a partition), and keeps as many of its current ones as that allows (sticky).

    `subscriptions`: member -> topics it subscribes to; `partition_counts`: topic -> partitions (topics that
    do not exist are absent); `current`: the target assignment before."""
    members = sorted(subscriptions)
    owner: dict[tuple[str, int], str] = {}
    load = {m: 0 for m in members}
    # Sticky: a partition stays with its member while that member still subscribes to its topic.
    for m in members:
        for topic, parts in (current.get(m) or {}).items():
            if topic not in subscriptions[m]:
                continue
            for p in parts:
                if p < partition_counts.get(topic, 0) and (topic, p) not in owner:
                    owner[(topic, p)] = m
                    load[m] += 1
    # Unowned partitions go to the least loaded member that may take them (ties: member id order).
    for topic in sorted(partition_counts):
        eligible = [m for m in members if topic in subscriptions[m]]
        if not eligible:
            continue
        for p in range(partition_counts[topic]):
            if (topic, p) not in owner:
                m = min(eligible, key=lambda x: (load[x], x))
                owner[(topic, p)] = m
                load[m] += 1
    # Balance: move a partition from the most loaded member that has one to move to an eligible member with at
    # least two fewer, until none can move. Each move lowers the sum of squared loads, so this ends; it moves as
    # few partitions as a greedy pass can (the sticky part above kept the rest).
    held: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
    for tp in sorted(owner):
        held[owner[tp]].append(tp)
    subscribers = {t: [m for m in members if t in subscriptions[m]] for t in partition_counts}
    while _move_one(members, held, load, subscribers, owner):
        pass
    return _by_member(members, owner)


def _move_one(
    members: list[str],
    held: dict[str, list[tuple[str, int]]],
    load: dict[str, int],
    subscribers: dict[str, list[str]],
    owner: dict[tuple[str, int], str],
) -> bool:
    for m in sorted(members, key=lambda x: (-load[x], x)):
        for i, tp in enumerate(held[m]):
            lighter = [x for x in subscribers[tp[0]] if load[x] <= load[m] - 2]
            if lighter:
                to = min(lighter, key=lambda x: (load[x], x))
                held[m].pop(i)
                held[to].append(tp)
                owner[tp] = to
                load[m] -= 1
                load[to] += 1
                return True
    return False


def range_(
    subscriptions: Mapping[str, frozenset[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, TopicPartitions],
) -> dict[str, TopicPartitions]:
    """Kafka's RangeAssignor: per topic, its subscribers (in member id order) get consecutive ranges of its
    partitions, the first ones one more when they do not divide evenly; topics with the same partition count
    and subscribers are so co-partitioned (partition p of each goes to the same member)."""
    members = sorted(subscriptions)
    owner: dict[tuple[str, int], str] = {}
    for topic in sorted(partition_counts):
        for m, parts in range_split(partition_counts[topic], [m for m in members if topic in subscriptions[m]]):
            for p in parts:
                owner[(topic, p)] = m
    return _by_member(members, owner)


def _by_member(members: list[str], owner: dict[tuple[str, int], str]) -> dict[str, TopicPartitions]:
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for (topic, p), m in owner.items():
        out[m].setdefault(topic, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in tps.items()} for m, tps in out.items()}


# Kafka's names (group.consumer.assignors takes these or Kafka's class names), the first the default.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
    "org.apache.kafka.coordinator.group.api.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.api.assignor.RangeAssignor": "range",
}


def assignor_name(name: str) -> str | None:
    """The assignor a name (or Kafka class name) means, or None if there is no such assignor."""
    name = _CLASS_NAMES.get(name.strip(), name.strip())
    return name if name in ASSIGNORS else None
