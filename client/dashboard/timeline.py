"""Sans-IO: the cluster events between two metadata snapshots (controller elections, brokers going down
and coming back, leader changes, ISR shrinks and expands), for the console's timeline."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClusterView:
    """What one poll saw: live brokers, the controller, and per partition (leader, leader epoch, isr)."""

    brokers_up: frozenset[int] = frozenset()
    controller: int = -1
    controller_epoch: int = -1
    partitions: dict[tuple[str, int], tuple[int, int, tuple[int, ...]]] = field(default_factory=dict)


def diff(prev: ClusterView | None, cur: ClusterView) -> list[tuple[str, str]]:
    """(kind, text) events that explain the change from `prev` to `cur`; none for the first view."""
    if prev is None:
        return []
    out: list[tuple[str, str]] = []
    for b in sorted(prev.brokers_up - cur.brokers_up):
        out.append(("broker", f"broker {b} down"))
    for b in sorted(cur.brokers_up - prev.brokers_up):
        out.append(("broker", f"broker {b} up"))
    if cur.controller >= 0 and (cur.controller, cur.controller_epoch) != (prev.controller, prev.controller_epoch):
        out.append(("election", f"controller election: broker {cur.controller} (epoch {cur.controller_epoch})"))
    elif cur.controller < 0 <= prev.controller:
        out.append(("election", f"no active controller (was broker {prev.controller})"))
    internal: dict[tuple[str, str], int] = {}  # (topic, kind) -> count: internal topics in one line each
    for tp, (leader, epoch, isr) in sorted(cur.partitions.items()):
        old = prev.partitions.get(tp)
        if old is None:
            continue
        if tp[0].startswith("__"):
            for kind, changed in (
                ("leader changes", leader != old[0]),
                ("ISR shrinks", bool(set(old[2]) - set(isr))),
                ("ISR expands", bool(set(isr) - set(old[2]))),
            ):
                if changed:
                    internal[(tp[0], kind)] = internal.get((tp[0], kind), 0) + 1
            continue
        name = f"{tp[0]}-{tp[1]}"
        if (leader, epoch) != old[:2] and leader != old[0]:
            who = f"broker {leader}" if leader >= 0 else "none (offline)"
            out.append(("leader", f"{name}: leader {old[0]} → {who} (epoch {epoch})"))
        shrunk = sorted(set(old[2]) - set(isr))
        grown = sorted(set(isr) - set(old[2]))
        if shrunk:
            out.append(("isr", f"{name}: ISR shrink {list(old[2])} → {list(isr)} (removed {shrunk})"))
        if grown:
            out.append(("isr", f"{name}: ISR expand {list(old[2])} → {list(isr)} (added {grown})"))
    for (topic, kind), n in sorted(internal.items()):
        out.append(("leader" if kind == "leader changes" else "isr", f"{topic}: {n} partitions: {kind}"))
    return out
