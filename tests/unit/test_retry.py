"""The one retry backoff (Kafka's KIP-580): doubling from retry.backoff.ms up to retry.backoff.max.ms, ±20%."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from net.retry import JITTER, Backoff, retry_until


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


class Flaky(Exception):
    pass


def test_retry_until_retries_what_is_retriable_and_readies_each_retry():
    calls: list[float] = []
    readied: list[str] = []

    async def attempt() -> str:
        calls.append(time.monotonic())
        if len(calls) < 4:
            raise Flaky(f"try {len(calls)}")
        return "done"

    got = asyncio.run(
        retry_until(attempt, Backoff(10, 40), Flaky, lambda e: True, before_retry=lambda e: readied.append(str(e)))
    )
    assert got == "done" and len(calls) == 4
    assert readied == ["try 1", "try 2", "try 3"]
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert all(g >= 0.01 * (1 - JITTER) for g in gaps)  # waited the backoff between attempts


def test_retry_until_raises_at_once_what_is_not_retriable_or_not_of_the_type():
    calls = []

    async def attempt() -> None:
        calls.append(1)
        raise Flaky("fatal")

    with pytest.raises(Flaky, match="fatal"):
        asyncio.run(retry_until(attempt, Backoff(10, 10), Flaky, lambda e: False))
    assert len(calls) == 1

    async def other() -> None:
        raise KeyError("not a retried type")

    with pytest.raises(KeyError):
        asyncio.run(retry_until(other, Backoff(10, 10), Flaky, lambda e: True))


def test_retry_until_never_waits_past_the_deadline_and_raises_the_last_failure():
    calls: list[float] = []

    async def attempt() -> None:
        calls.append(time.monotonic())
        raise Flaky(f"try {len(calls)}")

    async def run() -> None:
        # A 1 s backoff against a 0.15 s deadline: the one wait is cut to the deadline, the attempt there fails,
        # and that failure is raised.
        await retry_until(attempt, Backoff(1000, 1000), Flaky, lambda e: True, deadline=time.monotonic() + 0.15)

    start = time.monotonic()
    with pytest.raises(Flaky, match="try 2"):
        asyncio.run(run())
    assert len(calls) == 2
    assert 0.14 <= calls[1] - start < 0.9
