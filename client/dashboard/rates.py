"""Sans-IO: per-second rates of the brokers' Prometheus counters over a sliding window of samples.

A rate taken from the last two scrapes alone is as noisy as the scrape timing and the producers' batching:
a steady 200 msg/s producer whose batches land every 2.5 s reads 499, then 0.0, then 499. Over a window of
the last `window_s` seconds of samples the rate is (counted increase) / (time between the window's first and
last sample), which is exact for a steady counter however irregular the samples, and whose error for a
batching producer is at most one batch over the window.

A counter that goes down was reset (its broker restarted): Prometheus' `rate()` rule, the increase across
the reset is the new value (it counted from 0), never a negative and never the old total again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

RATE_WINDOW_S = 15.0


def increase(before: float | None, after: float | None) -> float:
    """How much a counter grew between two samples; a counter absent from a sample counts as 0 (a series
    appears when first incremented and is gone after a restart until incremented again)."""
    b, a = before or 0.0, after or 0.0
    return a - b if a >= b else a  # went down: reset to 0, then counted up to `a`


class CounterRates:
    """The samples of several sources (brokers), each a {series: counter value} taken at a monotonic time."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be > 0")
        self.window_s = window_s
        self._samples: dict[Hashable, deque[tuple[float, dict[str, float]]]] = {}

    def add(self, source: Hashable, t: float, counters: dict[str, float]) -> None:
        """One scrape of `source` at monotonic time `t` (samples of one source arrive in time order)."""
        q = self._samples.setdefault(source, deque())
        if q and t <= q[-1][0]:
            return  # a clock that did not move gives no time to divide by
        q.append((t, dict(counters)))
        # Keep the newest sample at or before the window's start as its anchor, so the window spans
        # `window_s` (not less) once that much history exists.
        cutoff = t - self.window_s
        while len(q) > 2 and q[1][0] <= cutoff:
            q.popleft()

    def rates(self, source: Hashable) -> dict[str, float] | None:
        """Per-second rate of every series of `source` over the window; None until it has two samples."""
        q = self._samples.get(source)
        if not q or len(q) < 2:
            return None
        span = q[-1][0] - q[0][0]
        names: set[str] = set()
        for _, counters in q:
            names.update(counters)
        grown = dict.fromkeys(names, 0.0)
        prev = q[0][1]
        for _, cur in list(q)[1:]:
            for name in names:
                grown[name] += increase(prev.get(name), cur.get(name))
            prev = cur
        return {name: g / span for name, g in grown.items()}
