"""ConnectionQuotas: how many connections the broker accepts in all and per client address (Kafka's
`max.connections` and `max.connections.per.ip`), shared by both listeners. A connection over a limit is
closed as soon as it is accepted, before anything is read, so thousands of idle or half-open connections
from one host cannot exhaust the broker's file descriptors or memory."""

from __future__ import annotations

import logging
from collections import Counter

from broker.utils.repeated_log import RepeatedConditionLog

log = logging.getLogger("kafkalite.net")


class ConnectionQuotas:
    def __init__(self, max_connections: int = 2**31 - 1, max_per_ip: int = 2**31 - 1) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self._per_ip: Counter[str] = Counter()
        self.total = 0
        self.refused = 0
        self._log = RepeatedConditionLog(log)

    def admit(self, ip: str) -> bool:
        """Count a new connection from `ip`; False (and not counted) when a limit is reached."""
        if self.total >= self.max_connections or self._per_ip[ip] >= self.max_per_ip:
            self.refused += 1
            which = "max.connections" if self.total >= self.max_connections else "max.connections.per.ip"
            self._log.report(("limit", ip), logging.WARNING, "refusing connections from %s: %s reached", ip, which)
            return False
        self._per_ip[ip] += 1
        self.total += 1
        return True

    def release(self, ip: str) -> None:
        self._per_ip[ip] -= 1
        if self._per_ip[ip] <= 0:
            del self._per_ip[ip]
        self.total -= 1
