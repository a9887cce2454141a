"""Shared helpers for the log tests (no tests here)."""

from __future__ import annotations

from broker.log.config import LogConfig
from net.batch import BatchHeader, build, iter_batches


def batch(n: int = 1, ts: int = 1000, value: bytes = b"v", max_ts: int | None = None) -> bytes:
    """A client batch of `n` records (base offset 0, no epoch), as a producer would send it."""
    records = [[i, 0, None, value, []] for i in range(n)]
    return build(records, ts, ts if max_ts is None else max_ts)


def headers(data: bytes) -> list[BatchHeader]:
    hs = [h for _, h in iter_batches(data, validate_crc=True)]
    assert sum(h.size for h in hs) == len(data), "read returned a partial batch"
    return hs


def config(**kw: object) -> LogConfig:
    """A LogConfig from Kafka names written with underscores: config(segment_bytes=1000)."""
    return LogConfig.from_props({k.replace("_", "."): v for k, v in kw.items()})


class FakeClock:
    def __init__(self, ms: int = 1_700_000_000_000) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms
