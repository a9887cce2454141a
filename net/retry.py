"""One retry backoff for every loop that retries, and one retry loop (`retry_until`) for the requests that
are asked again until a deadline.

Kafka's rule (KIP-580): the first retry waits retry.backoff.ms, each consecutive failure doubles the wait up
to retry.backoff.max.ms, and every wait is spread by ±20% random jitter, so that many clients failing at
once do not retry in lock step. A success resets it.

Users: the clients' retries (client/cluster.py ListOffsets, client/admin.py controller requests, client/group.py
coordinator lookups, requests and commits, client/consumer.py assign, client/sender.py batches), the broker's
AlterPartition (broker/replica/alter_partition_manager.py), and, at a constant wait (base = maximum, so only the
jitter varies it), the peer channels' reconnects (broker/network/peers.py) and the replica fetcher's retries
after a failed fetch (broker/replica/replica_fetcher.py, Kafka's replica.fetch.backoff.ms is a constant too).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)

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


async def retry_until(
    attempt: Callable[[], Awaitable[T]],
    backoff: Backoff,
    errors: type[E],
    retriable: Callable[[E], bool],
    deadline: float | None = None,
    before_retry: Callable[[E], None] | None = None,
) -> T:
    """Run `attempt` until it returns. A failure of type `errors` that `retriable` accepts is tried again after
    `backoff.next()`; any other failure is raised at once. `deadline` (time.monotonic()) bounds the retries:
    a wait never passes it, and a failure at or after it is raised (so the last attempt starts by the
    deadline). `before_retry` readies the next attempt (forget a stale leader or a dead coordinator)."""
    while True:
        try:
            return await attempt()
        except errors as e:
            if not retriable(e):
                raise
            wait = backoff.next()
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                wait = min(wait, left)
            if before_retry is not None:
                before_retry(e)
            await asyncio.sleep(wait)
