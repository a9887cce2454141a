"""Faster recovery after big faults (issue 12 §4), as properties rather than timings (bench/run_recovery.py
measures the times):

- a controller whose process dies (SIGKILL: its sockets close, a reconnect is refused) is replaced without
  waiting for the election timeout, while a paused one (SIGSTOP: its sockets stay open) is still judged by
  the timeout;
- after every broker is SIGKILLed and restarted, acks=all produces succeed again.
"""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime

import pytest

from client.sync import Producer

pytestmark = pytest.mark.timeout(120)

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \[broker (\d+)\] \w+ [\w.]+: (.*)$")


def _log_times(cluster, broker_ids, needle: str, after: float) -> list[float]:
    """Wall-clock times of log lines containing `needle`, written after `after`, by these brokers."""
    times = []
    for bid in broker_ids:
        for line in cluster[bid].logs().splitlines():
            m = _LINE.match(line)
            if m is not None and needle in m.group(3):
                t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if t >= after:
                    times.append(t)
    return sorted(times)


def _wait_log(cluster, broker_ids, needle: str, after: float, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _log_times(cluster, broker_ids, needle, after)
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no {needle!r} in the logs of brokers {broker_ids} within {timeout}s")


def test_dead_controller_is_replaced_at_once_but_a_paused_one_waits_for_the_timeout(cluster):
    timeout_s = 2.0  # controller.quorum.election.timeout.ms: the proposal's failure detector
    dead = cluster.controller_id()
    survivors = [b for b in cluster.brokers if b != dead]
    killed_at = time.time()
    cluster.kill(dead)
    # The survivors' quorum connections to it close and a reconnect is refused: they elect now.
    started = _wait_log(cluster, survivors, "no controller in epoch", killed_at, 10)
    assert started - killed_at < timeout_s / 2, f"election began {started - killed_at:.2f}s after the kill"
    _wait_log(cluster, survivors, "became controller", killed_at, 10)

    paused = cluster.controller_id()
    assert paused in survivors
    others = [b for b in survivors if b != paused]
    time.sleep(0.3)  # the last follower is fetching from the new controller
    paused_at = time.time()
    cluster[paused].pause()
    try:
        # A paused process keeps its sockets (and the kernel still accepts connections for it): nothing
        # tells the follower, which elects only once its election timeout has passed with no answer.
        time.sleep(timeout_s * 0.75)
        assert _log_times(cluster, others, "no controller in epoch", paused_at) == []
        later = _wait_log(cluster, others, "no controller in epoch", paused_at, 10)
        assert later - paused_at >= timeout_s * 0.75
    finally:
        cluster[paused].resume()


def test_acks_all_resumes_after_every_broker_is_killed_and_restarted(cluster):
    cluster.create_topic("ka", 3, 3, {"min.insync.replicas": "2"})
    with Producer(cluster.bootstrap(), acks="all", enable_idempotence=True) as p:
        for i in range(30):
            p.send("ka", f"before-{i}".encode(), key=str(i).encode())
        p.flush(30)
    for b in cluster.brokers.values():
        b.kill(signal.SIGKILL)
    time.sleep(0.5)
    for b in cluster.brokers.values():
        b.start(wait=False)
    for b in cluster.brokers.values():
        b.wait_listening()
    acked: list[int] = []
    with Producer(
        cluster.bootstrap(), acks="all", enable_idempotence=True, delivery_timeout_ms=30000, retry_backoff_ms=20
    ) as p:
        for i in range(30):
            p.send("ka", f"after-{i}".encode(), key=str(i).encode(), on_delivery=lambda e, md: acked.append(e is None))
        p.flush(40)
    assert len(acked) == 30 and all(acked)
    # Every partition has a leader and a full ISR again (the restarted brokers rejoined).
    cluster.wait_full_isr("ka", 3)
