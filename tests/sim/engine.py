"""The event loop both simulators run on (tests/sim/election_sim.py, tests/sim/replication_sim.py).

One `random.Random(seed)` draws everything, a virtual clock in milliseconds moves from event to event, and
a heap of timed events (ties broken by the order they were pushed) says what happens next, so a seed replays
exactly. The network is part of it: a message is lost with `loss_p`, duplicated with `dup_p` (so a copy can
overtake the other), delayed by `min_delay_ms..max_delay` (so messages reorder), rarely delayed by up to
`late_max_ms` more (`late_p`), and never crosses a network partition (`group`: nodes in different groups
cannot talk) or a cut link (`cut`). A simulator subclasses `EventLoop`, pushes its own event kinds (any
int but DELIVER), and runs them in `_dispatch`.
"""

from __future__ import annotations

import heapq
import random
from typing import Any, Callable

DELIVER = 0  # a message arrives: (destination, (source, message)); the simulators' own event kinds follow it


class SimFailure(AssertionError):
    """An invariant broke: the message names what, the simulator adds the seed and step that replay it."""


class EventLoop:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0  # virtual ms
        self.step = 0  # events run so far
        self.queue: list[tuple[int, int, int, Any, Any]] = []
        self._seq = 0
        self.tracing = False
        self.trace_lines: list[str] = []
        # The network: set by the simulator once its parameters are drawn (from self.rng).
        self.group: dict[int, int] = {}  # node -> side of the partition; different sides cannot talk
        self.cut: set[tuple[int, int]] = set()  # (low id, high id): single links cut on top of the partition
        self.unpartitioned: frozenset[int] = frozenset()  # nodes no partition cuts off (clients)
        self.loss_p = 0.0
        self.dup_p = 0.0
        self.min_delay_ms = 1
        self.max_delay = 1
        self.late_p = 0.0
        self.late_max_ms = 0

    # --- events ---------------------------------------------------------------------------------------

    def _push(self, at: int, kind: int, a: Any = None, b: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self.queue, (at, self._seq, kind, a, b))

    def _run_one(self) -> None:
        at, _, kind, a, b = heapq.heappop(self.queue)
        self.now = at
        self.step += 1
        self._dispatch(kind, a, b, at)

    def _dispatch(self, kind: int, a: Any, b: Any, at: int) -> None:
        raise NotImplementedError

    def _run_steps(self, steps: int) -> None:
        """The fault phase: `steps` events (or until nothing is left to happen)."""
        while self.step < steps and self.queue:
            self._run_one()

    def _run_until(self, done: Callable[[], bool], deadline: int, failure: Callable[[], str]) -> None:
        """The liveness phase: run events until `done()`; past `deadline` (virtual ms) it is a failure."""
        while not done():
            if not self.queue or self.queue[0][0] > deadline:
                raise SimFailure(failure())
            self._run_one()

    def _trace(self, text: str) -> None:
        if self.tracing:
            self.trace_lines.append(f"{self.now:>8} #{self.step:<6} {text}")

    # --- the network ----------------------------------------------------------------------------------

    def _linked(self, a: int, b: int) -> bool:
        """Whether a and b can talk: same side of the partition, and their link is not cut."""
        if a in self.unpartitioned or b in self.unpartitioned:
            return True
        return self.group[a] == self.group[b] and (min(a, b), max(a, b)) not in self.cut

    def _send(self, src: int, dst: int, msg: Any, dup: bool = True) -> None:
        """Put `msg` on the wire: maybe lost, maybe twice (unless `dup` is False), each copy delayed."""
        if not self._linked(src, dst):
            return
        rng = self.rng
        if rng.random() < self.loss_p:
            return
        copies = 2 if dup and self.dup_p and rng.random() < self.dup_p else 1
        for _ in range(copies):
            delay = rng.randint(self.min_delay_ms, self.max_delay)
            if self.late_p and rng.random() < self.late_p:
                delay += rng.randint(0, self.late_max_ms)
            self._push(self.now + delay, DELIVER, dst, (src, msg))
