"""The one percentile definition kl-perf and the bench scripts share (nearest rank)."""

from __future__ import annotations

from client.cli.perf import percentiles


def test_nearest_rank_percentiles():
    values = list(range(1, 101))  # 1..100
    assert percentiles(values, (0.5, 0.9, 0.99, 1.0)) == [50, 90, 99, 100]
    assert percentiles([7.0], (0.01, 0.5, 1.0)) == [7.0, 7.0, 7.0]
    assert percentiles([3, 1, 2], (0.5,)) == [2]  # unsorted input
    assert percentiles([], (0.5, 0.99)) == [0.0, 0.0]


def test_the_bench_latency_summary_uses_it():
    from bench.peers._common import latency_summary

    out = latency_summary([4_000_000, 1_000_000, 2_000_000, 3_000_000], sent=5)
    assert (out["p50_ms"], out["p99_ms"], out["max_ms"], out["count"], out["sent"]) == (2.0, 4.0, 4.0, 4, 5)
