"""Count hashtags as one member of a consumer group; several processes share the partitions.

Delivery is at least once: after a rebalance or a crash a member may get records another member
(or its former self) already saw, and a producer retry may have stored a tweet twice. So counts are
over distinct tweet ids seen by this process, offsets are committed after each processed poll, and
`--output` keeps one JSON line per record (id, hashtags, partition, offset), from which the group's
exact total is the union of its members' files.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from net.errors import KafkaLiteError
from pipeline.tweets.model import BadTweet, parse_line


@dataclass
class CountState:
    seen: set[str] = field(default_factory=set)
    counts: Counter = field(default_factory=Counter)
    records: int = 0
    bad: int = 0
    partitions: set[int] = field(default_factory=set)

    def add(self, value: bytes | None) -> tuple[str, list[str]] | None:
        self.records += 1
        try:
            tweet = parse_line(value or b"")
        except BadTweet:
            self.bad += 1
            return None
        tags = tweet.tags()
        if tweet.id not in self.seen:
            self.seen.add(tweet.id)
            self.counts.update(tags)
        return tweet.id, tags

    def top(self, n: int) -> list[tuple[str, int]]:
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


class _Listener:
    """Commit before partitions move, so the next owner starts where this member stopped."""

    def __init__(self, consumer, state: CountState) -> None:  # type: ignore[no-untyped-def]
        self.consumer = consumer
        self.state = state

    def on_partitions_revoked(self, partitions) -> None:  # type: ignore[no-untyped-def]
        try:
            self.consumer.commit()
        except Exception:  # noqa: BLE001 - a failed commit only means some records are seen twice
            pass
        self.state.partitions -= {tp.partition for tp in partitions}

    def on_partitions_assigned(self, partitions) -> None:  # type: ignore[no-untyped-def]
        self.state.partitions |= {tp.partition for tp in partitions}

    def on_partitions_lost(self, partitions) -> None:  # type: ignore[no-untyped-def]
        self.state.partitions -= {tp.partition for tp in partitions}


def count_hashtags(
    consumer,  # type: ignore[no-untyped-def]
    topic: str,
    state: CountState,
    stop: threading.Event,
    output: TextIO | None = None,
    max_idle: float | None = None,
    report: Callable[[CountState], None] | None = None,
    report_every: float = 5.0,
) -> None:
    """Poll, count, write, commit; until `stop` is set or nothing came for `max_idle` seconds."""
    consumer.subscribe([topic], listener=_Listener(consumer, state))
    last_record = last_report = time.monotonic()
    while not stop.is_set():
        records = consumer.poll(500)
        now = time.monotonic()
        if records:
            last_record = now
            lines = []
            for r in records:
                got = state.add(r.value)
                if got is not None and output is not None:
                    lines.append(json.dumps({"id": got[0], "hashtags": got[1], "p": r.partition, "o": r.offset}))
            if output is not None and lines:
                output.write("\n".join(lines) + "\n")
                output.flush()
            try:
                consumer.commit()
            except KafkaLiteError:
                pass  # a rebalance got in between: the next owner re-reads from the last commit
        elif max_idle is not None and now - last_record >= max_idle:
            break
        if report is not None and now - last_report >= report_every:
            last_report = now
            report(state)
    try:
        consumer.commit()
    except Exception:  # noqa: BLE001 - leaving anyway; the group re-delivers what was not committed
        pass
