"""ClientQuotaManager: Kafka's client quotas (producer_byte_rate, consumer_byte_rate, request_percentage;
controller_mutation_rate is broker/quota/mutation_quota.py's).

A quota belongs to an entity, a user and/or a client id, set with `kl-configs --entity-type users|clients`
and kept in the replicated metadata (`client_quota` records). The most specific one applies, in Kafka's
order: user + client id, user + default client, user, default user + client id, default user + default
client, default user, client id, default client. Each (entity, quota) has a rate measured over
`quota.window.num` samples of `quota.window.size.seconds`; a request that takes it above the quota is
answered with `throttle_time_ms` = (rate - quota) / quota x window, and its connection is not read for
that long (KIP-219), so a client that ignores the hint is slowed all the same. Sans-IO: time comes in.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
# KIP-599: partitions created or deleted per second (CreateTopics, CreatePartitions, DeleteTopics); metered by
# broker/quota/mutation_quota.py, not by record() below.
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)

Entity = tuple[tuple[str, str | None], ...]  # (("user", name or None=default), ("client-id", id or None))


def candidate_entities(user: str, client_id: str) -> list[Entity]:
    """Kafka's precedence, most specific first."""
    return [
        (("user", user), ("client-id", client_id)),
        (("user", user), ("client-id", None)),
        (("user", user),),
        (("user", None), ("client-id", client_id)),
        (("user", None), ("client-id", None)),
        (("user", None),),
        (("client-id", client_id),),
        (("client-id", None),),
    ]


class Rate:
    """A sliding-window rate: amounts recorded in fixed samples, the oldest dropped."""

    def __init__(self, samples: int, sample_s: float) -> None:
        self.samples = samples
        self.sample_s = sample_s
        self._windows: deque[list[float]] = deque()  # [start, total]

    def record(self, amount: float, now: float) -> float:
        """Record `amount` at `now`; returns the rate (per second) including it."""
        if not self._windows or now - self._windows[-1][0] >= self.sample_s:
            self._windows.append([now, 0.0])
        self._windows[-1][1] += amount
        return self.measure(now)

    def measure(self, now: float) -> float:
        """The rate (per second) at `now`, recording nothing: a quota that is checked before the work it meters
        (the replication quotas) asks this, and it falls as the samples holding a burst age out."""
        horizon = now - self.samples * self.sample_s
        while self._windows and self._windows[0][0] < horizon:
            self._windows.popleft()
        if not self._windows:
            return 0.0
        # Measured over the elapsed time but never less than all samples but one (Kafka's Rate rule), so a new
        # client's first burst is not divided by a tiny elapsed time.
        elapsed = max(now - self._windows[0][0], (self.samples - 1) * self.sample_s, self.sample_s)
        return sum(w[1] for w in self._windows) / elapsed


class ClientQuotaManager:
    def __init__(
        self,
        quotas: Callable[[], dict[Entity, dict[str, float]]],
        window_num: int = 11,
        window_size_s: float = 1.0,
    ) -> None:
        self._quotas = quotas  # the metadata image's client_quotas, read at each request
        self.window_num = window_num
        self.window_size_s = window_size_s
        self._rates: dict[tuple[Entity, str], Rate] = {}

    @property
    def active(self) -> bool:
        """Any quota set at all: otherwise requests skip the accounting."""
        return bool(self._quotas())

    def quota_for(self, user: str, client_id: str, key: str) -> tuple[Entity, float] | None:
        quotas = self._quotas()
        if not quotas:
            return None
        for entity in candidate_entities(user, client_id):
            q = quotas.get(entity)
            if q is not None and key in q:
                # A default entity's quota is shared per concrete user / client, as Kafka meters it.
                concrete = tuple((t, user if t == "user" else client_id) for t, _ in entity)
                return concrete, float(q[key])
        return None

    def record(self, user: str, client_id: str, key: str, amount: float, now: float) -> int:
        """Record usage; the throttle time in ms (0: within the quota, or no quota)."""
        found = self.quota_for(user, client_id, key)
        if found is None:
            return 0
        entity, quota = found
        rate = self._rates.get((entity, key))
        if rate is None:
            rate = self._rates[(entity, key)] = Rate(self.window_num, self.window_size_s)
        observed = rate.record(amount, now)
        if quota <= 0 or observed <= quota:
            return 0
        window_s = self.window_num * self.window_size_s
        return int((observed - quota) / quota * window_s * 1000)
