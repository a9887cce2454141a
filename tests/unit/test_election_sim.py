"""The seeded simulator of tests/sim/election_sim.py as a test: many random schedules, every invariant after every step.

The short run is part of the normal suite. KL_SOAK=1 runs the long one (KL_SOAK_SEEDS schedules,
100,000 by default) on every core; a failure prints the seed, and
`python -m tests.sim.election_sim --replay SEED --nodes N --steps S --trace` replays it exactly.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from tests.sim.election_sim import run_schedule

SHORT_SEEDS = 700  # per cluster size: 1,400 schedules in all
STEPS = 800


def _failures(seeds: range, nodes: int, steps: int = STEPS) -> list[str]:
    return [r.failure or "" for r in (run_schedule(s, steps, nodes) for s in seeds) if not r.ok]


@pytest.mark.timeout(300)  # CPU-bound: its time grows with the load; a hang guard, not a speed test
@pytest.mark.parametrize("nodes", [3, 5])
def test_random_schedules_keep_every_invariant(nodes):
    assert _failures(range(SHORT_SEEDS), nodes) == []


def test_a_schedule_replays_exactly():
    a, b = run_schedule(42, 800, 5), run_schedule(42, 800, 5)
    assert a == b and a.ok and a.controllers > 0 and a.committed > 0 and a.liveness_ms is not None


@pytest.mark.skipif(os.environ.get("KL_SOAK") != "1", reason="soak test: set KL_SOAK=1 (KL_SOAK_SEEDS to size it)")
@pytest.mark.timeout(0)
def test_soak():
    per_size = int(os.environ.get("KL_SOAK_SEEDS", "100000")) // 2
    start, chunk = SHORT_SEEDS, 500  # the short run already covers the first seeds
    end = start + per_size
    jobs = [(range(s, min(s + chunk, end)), nodes) for nodes in (3, 5) for s in range(start, end, chunk)]
    with ProcessPoolExecutor(os.cpu_count() or 2) as pool:
        failures = [f for fs in pool.map(_failures, *zip(*jobs)) for f in fs]
    assert failures == []
