"""Keeping the broker's long-lived objects out of CPython's full garbage collections (issue 25 §4).

A broker holds a handful of objects per partition replica (its Partition, Log, segments, indexes, replication
state) for as long as it hosts it: ~100 per replica, hundreds of thousands after a flood of 5,000. CPython's
cyclic collector walks every tracked object at each full (generation 2) collection, and the churn of fetch
rounds (a follower's fetch names every partition of its lane) triggers one every few seconds per broker: on
the 2-core bench machine each took 0.2-0.5 s when quiet, over 1 s when loaded, holding the event loop, and an
acks=all record waits for all three brokers of its ISR, so nearly every probe ack met someone's pause. JVM
brokers avoid this with a generational collector that leaves the old generation alone between young
collections; `gc.freeze()` is CPython's way to say "these are old": it moves every tracked object to a
permanent generation that no collection scans (O(1)), as Instagram did for its forked workers.

Frozen objects are still freed by reference counting when the broker drops them, but a reference cycle among
them is not: a removed replica left ~50 objects behind (measured: 600 removed, 29,960 unreachable). So once
256 replicas were removed (broker/replica/replica_manager.py), an apply ends with `reclaim_frozen`: thaw, one full
collection, freeze again (one pause then, where main paused like that every few seconds). The young
generations are collected before each freeze, so what is frozen is what is still referenced.
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect the young generations (cheap: what was allocated lately), then move every surviving object out
    of reach of the full collections. Called after the broker built a large body of state: its startup (logs
    recovered, metadata replayed) and each slice of a large metadata apply (broker/replica/replica_manager.py)."""
    gc.collect(1)
    gc.freeze()


def reclaim_frozen() -> None:
    """Replicas were removed: thaw everything, collect the cycles they left, and freeze the survivors again."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
