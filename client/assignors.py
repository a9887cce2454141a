"""Partition assignment strategies (partition.assignment.strategy), run by the group's leader member.

range and roundrobin are eager: every member gives up everything at each rebalance. cooperative-sticky
is incremental (KIP-429): members keep what they own, and a partition that has to move is first left
out, revoked by its owner, then assigned in the follow-up rebalance, so partitions that stay put are
consumed throughout.
"""

from __future__ import annotations

from typing import Protocol

from net.consumer_protocol import Subscription, range_split

TP = tuple[str, int]
Assignments = dict[str, set[TP]]


class Assignor(Protocol):
    name: str
    cooperative: bool

    def assign(self, partitions: dict[str, int], subscriptions: dict[str, Subscription]) -> Assignments: ...


def _subscribers(topic: str, subscriptions: dict[str, Subscription]) -> list[str]:
    return sorted(m for m, s in subscriptions.items() if topic in s.topics)


class RangeAssignor:
    """Per topic: consecutive ranges of partitions, the first members getting one more (Kafka's RangeAssignor)."""

    name = "range"
    cooperative = False

    def assign(self, partitions: dict[str, int], subscriptions: dict[str, Subscription]) -> Assignments:
        out: Assignments = {m: set() for m in subscriptions}
        for topic in sorted(partitions):
            for m, parts in range_split(partitions[topic], _subscribers(topic, subscriptions)):
                out[m].update((topic, p) for p in parts)
        return out


class RoundRobinAssignor:
    """All partitions in (topic, partition) order dealt to members in turn, skipping non-subscribers."""

    name = "roundrobin"
    cooperative = False

    def assign(self, partitions: dict[str, int], subscriptions: dict[str, Subscription]) -> Assignments:
        out: Assignments = {m: set() for m in subscriptions}
        members = sorted(subscriptions)
        if not members:
            return out
        i = 0
        for topic in sorted(partitions):
            if not _subscribers(topic, subscriptions):
                continue
            for p in range(partitions[topic]):
                while topic not in subscriptions[members[i % len(members)]].topics:
                    i += 1
                out[members[i % len(members)]].add((topic, p))
                i += 1
        return out


class CooperativeStickyAssignor:
    """Balanced and sticky: keep owned partitions where balance allows, then move as few as possible."""

    name = "cooperative-sticky"
    cooperative = True

    def assign(self, partitions: dict[str, int], subscriptions: dict[str, Subscription]) -> Assignments:
        valid = {(t, p) for t, n in partitions.items() for p in range(n)}
        out: Assignments = {m: set() for m in subscriptions}
        previous: dict[TP, str] = {}
        for m in sorted(subscriptions):
            for tp in sorted(subscriptions[m].owned):
                # A partition claimed twice (a zombie's stale claim) goes to the first claimant only.
                if tp in valid and tp[0] in subscriptions[m].topics and tp not in previous:
                    previous[tp] = m
                    out[m].add(tp)
        members = sorted(subscriptions)

        def can_take(m: str, tp: TP) -> bool:
            return tp[0] in subscriptions[m].topics

        # Nobody holds more than the balanced maximum; the surplus goes back to the pool.
        eligible = [tp for tp in sorted(valid) if any(can_take(m, tp) for m in members)]
        ceiling = -(-len(eligible) // len(members)) if members else 0
        for m in members:
            while len(out[m]) > ceiling:
                out[m].remove(max(out[m]))
        assigned = {tp for tps in out.values() for tp in tps}
        for tp in eligible:
            if tp not in assigned:
                takers = [m for m in members if can_take(m, tp)]
                target = min(takers, key=lambda m: (len(out[m]), m))
                out[target].add(tp)
        # Even out remaining imbalance one move at a time (matters with differing subscriptions).
        moved = True
        while moved:
            moved = False
            for a in sorted(members, key=lambda m: -len(out[m])):
                for b in sorted(members, key=lambda m: len(out[m])):
                    if len(out[a]) <= len(out[b]) + 1:
                        continue
                    movable = sorted(tp for tp in out[a] if can_take(b, tp))
                    if movable:
                        tp = movable[-1]
                        out[a].remove(tp)
                        out[b].add(tp)
                        moved = True
                        break
                if moved:
                    break
        # Cooperative step: a partition moving away from a live owner is withheld this round; the owner
        # revokes it and rejoins, and the next rebalance hands it over.
        for m, tps in out.items():
            for tp in list(tps):
                owner = previous.get(tp)
                if owner is not None and owner != m:
                    tps.remove(tp)
        return out


ASSIGNORS: dict[str, type] = {a.name: a for a in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)}


def assignors_for(names: list[str] | tuple[str, ...] | str) -> list[Assignor]:
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in names if n not in ASSIGNORS]
    if unknown or not names:
        raise ValueError(
            f"unknown partition.assignment.strategy {unknown or names}; choose from {', '.join(ASSIGNORS)}"
        )
    return [ASSIGNORS[n]() for n in names]
