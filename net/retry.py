"""One retry backoff for every loop that retries (clients, the broker's AlterPartition, peer channels).

Kafka's rule (KIP-580): the first retry waits retry.backoff.ms, each consecutive failure doubles the wait up
to retry.backoff.max.ms, and every wait is spread by ±20% random jitter, so that many clients failing at
once do not retry in lock step. A success resets it.
"""

from __future__ import annotations

import random

JITTER = 0.2


class Backoff:
    """Exponential backoff with jitter. `next()` is the wait before the next attempt; `reset()` after a
    success. Give a seeded `rng` where a schedule must replay (the simulators)."""

    __slots__ = ("base_s", "max_s", "failures", "_rng")

    def __init__(self, base_ms: float, max_ms: float, rng: random.Random | None = None) -> None:
        if base_ms < 0 or max_ms < 0:
            raise ValueError("retry.backoff.ms and retry.backoff.max.ms must be >= 0")
        self.base_s = base_ms / 1000
        self.max_s = max(base_ms, max_ms) / 1000
        self.failures = 0
        self._rng = rng or random.Random()

    def delay(self, failures: int) -> float:
        """The wait after `failures` consecutive failures (1: the first retry)."""
        if failures <= 0 or self.base_s == 0:
            return 0.0
        exp = min(self.base_s * (1 << min(failures - 1, 30)), self.max_s)
        return exp * self._rng.uniform(1 - JITTER, 1 + JITTER)

    def next(self) -> float:
        self.failures += 1
        return self.delay(self.failures)

    def reset(self) -> None:
        self.failures = 0
