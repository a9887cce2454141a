"""Synthetic tweets for offline use: the shape of a filtered stream for a hashtag, without the network.

What makes them look like the real thing:
- users and hashtags are Zipf-distributed (a few accounts and tags make most of the traffic);
- every tweet carries one of the tracked hashtags (it is a filtered stream for them), plus 0-3 others;
- trends: now and then one hashtag takes off for a while (its weight multiplied);
- bursts: during a trend the tweet rate can jump (several times the average rate), as a stream
  does when something happens; `bursts=False` keeps a steady rate;
- ids are snowflakes (time-ordered, unique across processes), created_at is the emission time.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate

from pipeline.tweets.model import Tweet, iso_ms, now_ms

TWITTER_EPOCH_MS = 1288834974657

TOPIC_TAGS = [
    "AI",
    "Python",
    "DataEngineering",
    "BigData",
    "Spark",
    "Kafka",
    "MachineLearning",
    "Cloud",
    "DevOps",
    "OpenSource",
    "Streaming",
    "Analytics",
    "Rust",
    "JavaScript",
    "Kubernetes",
    "Docker",
    "Linux",
    "Security",
    "Startup",
    "Tech",
    "Coding",
    "100DaysOfCode",
    "WebDev",
    "Database",
    "SQL",
    "Java",
    "Golang",
    "LLM",
    "DataScience",
    "Serverless",
    "Microservices",
    "ETL",
    "Observability",
    "SRE",
    "Postgres",
    "Redis",
    "GraphQL",
    "API",
    "Remote",
    "Hiring",
    "Conference",
    "Meetup",
    "Webinar",
    "Release",
    "Outage",
    "Benchmark",
    "Scala",
    "Flink",
    "Iceberg",
    "DeltaLake",
    "Airflow",
    "dbt",
    "Snowflake",
    "Grafana",
    "Prometheus",
]
WORDS = (
    "just shipped a new pipeline for our team today anyone else seeing latency spikes in production "
    "this is the best talk of the conference so far thread on how we scaled ingestion to millions of "
    "events per second without losing a single message turns out the bottleneck was the disk not the "
    "network hot take exactly once is a lie we tell ourselves rolling restarts went smoothly finally "
    "benchmark results look promising reading the docs again migrated everything over the weekend "
    "consumer lag is back to zero learned the hard way to always set replication factor three "
    "partition count matters more than you think new blog post about stream processing with small teams"
).split()
TAG_SUFFIXES = ["Summit", "Tips", "Life", "News", "Day", "Conf", "Community", "Jobs", "2026", "Weekly", "Fail", "Ops"]
SYLLABLES = ["ka", "lo", "mi", "ra", "te", "so", "nu", "vi", "de", "ze", "pa", "qu", "an", "el", "or", "ix"]


def _zipf_cum(n: int, s: float) -> list[float]:
    return list(accumulate(1.0 / (k**s) for k in range(1, n + 1)))


@dataclass
class _Trend:
    tag: str
    until_ms: int
    boost: float
    rate_factor: float


class SyntheticTweets:
    """An endless, seeded stream of realistic tweets for the tracked hashtags."""

    def __init__(
        self,
        tracked: list[str],
        seed: int | None = None,
        users: int = 5000,
        tags: int = 300,
        zipf_s: float = 1.1,
        bursts: bool = True,
        trend_every_s: float = 20.0,
        trend_length_s: float = 8.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.tracked = [t.lstrip("#") for t in tracked] or ["kafka"]
        self.bursts = bursts
        self.trend_every_ms = trend_every_s * 1000
        self.trend_length_ms = trend_length_s * 1000
        self.users = [(str(10_000_000 + self.rng.randrange(10**9)), self._username()) for _ in range(users)]
        self._user_cum = _zipf_cum(users, zipf_s)
        # The popular head is plain topic tags; the long tail compounds like #SparkSummit or #DevOpsLife.
        tracked_lower = {x.lower() for x in self.tracked}
        head = [t for t in TOPIC_TAGS if t.lower() not in tracked_lower]
        self.rng.shuffle(head)
        tail = [a + b for a in head for b in TAG_SUFFIXES]
        self.rng.shuffle(tail)
        self.tags = list(dict.fromkeys(head + tail))[: max(tags, 1)]
        self._tag_weights = [1.0 / (k**zipf_s) for k in range(1, len(self.tags) + 1)]
        self._tag_cum = list(accumulate(self._tag_weights))
        self._trend: _Trend | None = None
        self._next_trend_ms = 0
        self._worker = self.rng.randrange(1024)  # snowflake worker bits: unique enough across processes
        self._last_ms = 0
        self._seq = 0

    def _username(self) -> str:
        name = "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 4)))
        return name + (str(self.rng.randrange(100)) if self.rng.random() < 0.4 else "")

    def _snowflake(self, ms: int) -> str:
        if ms <= self._last_ms:
            ms = self._last_ms
            self._seq += 1
            if self._seq >= 4096:
                ms, self._seq = ms + 1, 0
        else:
            self._seq = 0
        self._last_ms = ms
        return str(((ms - TWITTER_EPOCH_MS) << 22) | (self._worker << 12) | self._seq)

    def _update_trend(self, ms: int) -> None:
        if self._trend is not None and ms >= self._trend.until_ms:
            self._trend = None
        if self._trend is None and ms >= self._next_trend_ms:
            if self._next_trend_ms:
                tag = self.tags[min(len(self.tags) - 1, int(self.rng.expovariate(1 / 15)))]
                self._trend = _Trend(
                    tag,
                    ms + int(self.rng.uniform(0.5, 1.5) * self.trend_length_ms),
                    boost=self.rng.uniform(20, 60),
                    rate_factor=self.rng.uniform(2, 4),
                )
            self._next_trend_ms = ms + int(self.rng.expovariate(1 / self.trend_every_ms))

    def rate_factor(self) -> float:
        """How many times the average rate the stream runs at now (1 unless a burst is on)."""
        return self._trend.rate_factor if (self.bursts and self._trend) else 1.0

    def _pick_tags(self) -> list[str]:
        out = [self.rng.choice(self.tracked)]
        n_extra = self.rng.choices((0, 1, 2, 3), weights=(30, 40, 20, 10))[0]
        trend = self._trend
        for _ in range(n_extra):
            if trend is not None and self.rng.random() < trend.boost / (trend.boost + 10):
                tag = trend.tag
            else:
                tag = self.tags[bisect_right(self._tag_cum, self.rng.random() * self._tag_cum[-1])]
            if tag not in out:
                out.append(tag)
        return out

    def make(self, ms: int | None = None) -> Tweet:
        ms = now_ms() if ms is None else ms
        self._update_trend(ms)
        uid, uname = self.users[bisect_right(self._user_cum, self.rng.random() * self._user_cum[-1])]
        tags = self._pick_tags()
        words = self.rng.sample(WORDS, self.rng.randint(5, 14))
        if self.rng.random() < 0.2:
            words.insert(0, "@" + self.users[self.rng.randrange(len(self.users))][1])
        if self.rng.random() < 0.15:
            words.append(f"https://t.co/{self.rng.getrandbits(40):010x}")
        # Hashtags mostly at the end, sometimes inline, with the casual casing people use.
        text_tags = [("#" + (t if self.rng.random() < 0.8 else t.lower())) for t in tags]
        if self.rng.random() < 0.3 and len(words) > 3:
            words.insert(self.rng.randrange(1, len(words)), text_tags.pop())
        text = " ".join(words + text_tags)
        return Tweet(self._snowflake(ms), uid, uname, text, tags, iso_ms(ms))

    def __iter__(self) -> Iterator[Tweet]:
        while True:
            yield self.make()
