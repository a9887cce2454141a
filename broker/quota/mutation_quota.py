"""ControllerMutationQuota: Kafka's controller mutation quota (KIP-599), `controller_mutation_rate`.

A user / client id (Kafka's quota entities and precedence, broker/quota/client_quota.py) may create or delete so many
partitions per second: CreateTopics counts each topic's partitions, CreatePartitions the partitions added,
DeleteTopics the deleted topic's partitions. Kafka meters it with a token bucket, and so does this: the
bucket holds `rate x controller.quota.window.num x controller.quota.window.size.seconds` tokens (the burst)
and refills at `rate` per second. A topic is admitted while the bucket is not below zero, and may take it
below (one topic is never split); after that, until the bucket is back at zero, every topic is refused with
THROTTLING_QUOTA_EXCEEDED and `throttle_time_ms` says how long that is (strict mode: the native protocol,
CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+). Older Kafka clients do not know that error: their
topics are admitted and their response throttled instead (permissive mode), as Kafka does.

Metered where the request is served: on the active controller, which also serves requests other brokers
forward (with the requester's user and client id). Sans-IO: time comes in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker.quota.client_quota import CONTROLLER_MUTATION_RATE, ClientQuotaManager, Entity
from net.errors import ThrottlingQuotaExceededError


@dataclass(slots=True)
class TokenBucket:
    tokens: float
    last: float

    def refill(self, rate: float, burst: float, now: float) -> None:
        self.tokens = min(burst, self.tokens + max(0.0, now - self.last) * rate)
        self.last = now


class ControllerMutationQuota:
    def __init__(self, quotas: ClientQuotaManager, window_num: int = 11, window_size_s: float = 1.0) -> None:
        self._quotas = quotas  # resolves the entity and its controller_mutation_rate from the metadata image
        self.window_s = window_num * window_size_s
        self._buckets: dict[Entity, TokenBucket] = {}

    def _bucket(self, user: str, client_id: str, now: float) -> tuple[TokenBucket, float] | None:
        found = self._quotas.quota_for(user, client_id, CONTROLLER_MUTATION_RATE)
        if found is None or found[1] <= 0:
            return None
        entity, rate = found
        burst = rate * self.window_s
        bucket = self._buckets.get(entity)
        if bucket is None:
            bucket = self._buckets[entity] = TokenBucket(burst, now)
        bucket.refill(rate, burst, now)
        return bucket, rate

    def throttle_ms(self, user: str, client_id: str, now: float) -> int:
        """0 while the entity may mutate; else how long until its bucket is back at zero."""
        found = self._bucket(user, client_id, now)
        if found is None:
            return 0
        bucket, rate = found
        return 0 if bucket.tokens >= 0 else max(1, int(-bucket.tokens / rate * 1000))

    def record(self, user: str, client_id: str, partitions: int, now: float) -> int:
        """Take `partitions` mutations; the throttle time they leave behind (0: still within the quota)."""
        found = self._bucket(user, client_id, now)
        if found is None:
            return 0
        found[0].tokens -= partitions
        return self.throttle_ms(user, client_id, now)


class MutationMeter:
    """One CreateTopics / CreatePartitions / DeleteTopics request's side of the quota: `check` before a
    topic's change (raises THROTTLING_QUOTA_EXCEEDED in strict mode), `record` once it is committed, and
    the largest throttle time seen, for the response's throttle_time_ms."""

    def __init__(
        self, quota: ControllerMutationQuota, user: str, client_id: str, strict: bool, clock: Callable[[], float]
    ) -> None:
        self.quota, self.user, self.client_id, self.strict, self.clock = quota, user, client_id, strict, clock
        self.throttle_ms = 0

    def check(self) -> None:
        ms = self.quota.throttle_ms(self.user, self.client_id, self.clock())
        if ms and self.strict:
            self.throttle_ms = max(self.throttle_ms, ms)
            raise ThrottlingQuotaExceededError(
                f"controller_mutation_rate quota of user {self.user!r} (client id {self.client_id!r}) exceeded: "
                f"retry after {ms} ms"
            )

    def record(self, partitions: int) -> None:
        self.throttle_ms = max(self.throttle_ms, self.quota.record(self.user, self.client_id, partitions, self.clock()))

    async def mutate(self, partitions: int, change: Callable[[], Awaitable[None]]) -> None:
        """Check, take `partitions` before the change is proposed (so that concurrent requests of one user
        cannot all pass the check while the first is being committed), and give them back if it fails."""
        self.check()
        self.record(partitions)
        try:
            await change()
        except BaseException:
            self.quota.record(self.user, self.client_id, -partitions, self.clock())
            raise
