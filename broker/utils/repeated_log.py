"""Log a repeated condition once when it starts, a summary while it lasts, and a count when it ends.

Under a fault the same condition recurs many times a second (an ISR change the controller keeps refusing
while a broker is fenced, a liveness proposal that cannot commit without a quorum): one line per
occurrence buried the logs (13,842 identical lines in a 60 s fault run). Each condition has a key (for
example the partition); for each key this logs at most one line per `interval_s` while it lasts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass
class _Active:
    first: str  # the message that started the condition
    since: float
    last_emit: float
    count: int = 1  # occurrences since it started
    unlogged: int = 0  # occurrences since the last line


class RepeatedConditionLog:
    def __init__(
        self, logger: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        assert interval_s >= 1.0, "at most one line per second per key"
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._active: dict[Hashable, _Active] = {}

    def report(self, key: Hashable, level: int, msg: str, *args: object) -> None:
        """One occurrence of the condition `key`. Logged now if it just started; otherwise counted, with a
        summary line (the latest message and the count) at most every `interval_s`."""
        now = self.clock()
        text = msg % args if args else msg
        a = self._active.get(key)
        if a is None:
            self._active[key] = _Active(text, now, now)
            self.logger.log(level, "%s", text)
            return
        a.count += 1
        a.unlogged += 1
        if now - a.last_emit >= self.interval_s:
            self.logger.log(level, "%s (repeated %d times in the last %.0f s)", text, a.unlogged, now - a.last_emit)
            a.last_emit, a.unlogged = now, 0

    def clear(self, key: Hashable, level: int = logging.INFO, how: str = "resolved") -> None:
        """The condition `key` ended: if it had repeated, say so once, with its total count and duration."""
        a = self._active.pop(key, None)
        if a is not None and a.count > 1:
            self.logger.log(
                level, "%s: %s after %d occurrences over %.1f s", a.first, how, a.count, self.clock() - a.since
            )

    def active(self, key: Hashable) -> bool:
        return key in self._active
