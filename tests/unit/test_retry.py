"""The one retry backoff (Kafka's KIP-580): doubling from retry.backoff.ms up to retry.backoff.max.ms, ±20%."""

from __future__ import annotations

import random

import pytest

from net.retry import JITTER, Backoff


def test_doubles_up_to_the_maximum_with_jitter_and_resets():
    b = Backoff(100, 1000, random.Random(7))
    waits = [b.next() for _ in range(8)]
    for n, w in enumerate(waits, start=1):
        exp = min(0.1 * 2 ** (n - 1), 1.0)
        assert exp * (1 - JITTER) <= w <= exp * (1 + JITTER)
    assert max(waits) <= 1.0 * (1 + JITTER) and waits[0] < 0.13
    b.reset()
    assert b.next() < 0.13


def test_jitter_spreads_clients_that_fail_together():
    waits = {round(Backoff(100, 1000).delay(3), 4) for _ in range(50)}
    assert len(waits) > 10


def test_zero_backoff_and_bad_values():
    assert Backoff(0, 0).next() == 0.0
    assert Backoff(200, 50).delay(5) <= 0.2 * (1 + JITTER)  # the maximum is at least the base
    with pytest.raises(ValueError):
        Backoff(-1, 10)
