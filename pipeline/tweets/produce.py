"""Publish tweets to a topic: key = user id, value = the JSON event, acks=all, paced to a rate.

Counts what the brokers acknowledged (delivery callbacks), prints progress every second, and
can write the acknowledged tweet ids to a file (what the demo compares with the consumers and Spark).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

from pipeline.tweets.model import BadTweet, Tweet, parse_line


@dataclass
class ProduceStats:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    skipped: int = 0  # input lines that were not tweets, or tweets without a tracked hashtag
    first_error: str = ""
    acked_ids: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def on_delivery(self, tweet_id: str) -> Callable[[object, object], None]:
        def done(err: object, _metadata: object) -> None:
            with self.lock:
                if err is None:
                    self.acked += 1
                    self.acked_ids.append(tweet_id)
                else:
                    self.failed += 1
                    self.first_error = self.first_error or str(err)

        return done


def read_jsonl(stream: TextIO, stats: ProduceStats, wanted: set[str]) -> Iterator[Tweet]:
    """Tweets from JSON lines (our event format or X API v2 objects); bad lines are counted and skipped."""
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            tweet = parse_line(line)
        except BadTweet as e:
            stats.skipped += 1
            if stats.skipped <= 3:
                print(f"line {n} skipped: {e}", file=sys.stderr)
            continue
        if not tweet.has_any(wanted):
            stats.skipped += 1
            continue
        yield tweet


class Pacer:
    """Hold a steady average rate (tweets/s); `factor()` may speed it up during a burst."""

    def __init__(self, rate: float, factor: Callable[[], float] = lambda: 1.0) -> None:
        self.rate = rate
        self.factor = factor
        self.next_at = time.monotonic()

    def wait(self) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        if self.next_at > now:
            time.sleep(self.next_at - now)
        else:
            self.next_at = max(self.next_at, now - 1.0)  # after a stall, catch up for at most 1 s
        self.next_at += 1.0 / (self.rate * self.factor())


def publish(
    producer,  # type: ignore[no-untyped-def]
    topic: str,
    tweets: Iterable[Tweet],
    stats: ProduceStats,
    pacer: Pacer,
    count: int | None = None,
    duration: float | None = None,
    progress: Callable[[ProduceStats, float], None] | None = None,
    progress_every: float = 1.0,
    stop: threading.Event | None = None,
) -> None:
    """Send until `count` tweets, `duration` seconds, the end of the input, or `stop`."""
    t0 = time.monotonic()
    last = t0
    if count is not None and count <= 0:
        return
    for tweet in tweets:
        if stop is not None and stop.is_set():
            break
        now = time.monotonic()
        if duration is not None and now - t0 >= duration:
            break
        pacer.wait()
        producer.send(topic, tweet.to_json(), key=tweet.key, on_delivery=stats.on_delivery(tweet.id))
        stats.sent += 1
        if progress is not None and now - last >= progress_every:
            last = now
            progress(stats, now - t0)
        if count is not None and stats.sent >= count:
            break  # before asking the source for one more: a live stream may not have one for a while


def write_ids(path: str, ids: list[str]) -> None:
    with open(path, "w") as f:
        f.write("".join(f"{i}\n" for i in ids))


def summary_json(stats: ProduceStats) -> str:
    return json.dumps({"sent": stats.sent, "acked": stats.acked, "failed": stats.failed, "skipped": stats.skipped})
