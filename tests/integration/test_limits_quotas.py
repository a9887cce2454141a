"""Connection limits and client quotas (issue 14 §5), with Kafka's names: thousands of idle or half-open
connections do not exhaust a broker, max.connections.per.ip turns the excess away, idle connections are
closed, and a producer_byte_rate quota holds a producer to its rate."""

from __future__ import annotations

import select
import socket
import subprocess
import time
from pathlib import Path

import pytest

from client import Admin, Consumer, NewTopic, Producer
from tests.integration.cluster_harness import wait_until

ROOT = Path(__file__).resolve().parents[2]


def overrides(*kv: str) -> list[str]:
    return [x for o in kv for x in ("--override", o)]


def open_sockets(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        out.append(s)
    return out


def closed_by_peer(socks: list[socket.socket], wait: float = 0.3) -> int:
    """How many of `socks` the broker has closed, `wait` seconds from now (poll: no 1024-descriptor limit)."""
    time.sleep(wait)
    poller = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    closed = 0
    for fd, _ in poller.poll(0):
        s = by_fd[fd]
        try:
            s.setblocking(False)
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


def test_two_thousand_idle_and_half_open_connections_do_not_exhaust_the_broker(broker_factory):
    b = broker_factory(extra=overrides("connections.max.idle.ms=3000", "socket.partial.request.timeout.ms=2000"))
    idle = open_sockets(b.port, 1800)
    half = open_sockets(b.port, 200)
    for s in half:
        s.sendall(b"\x00\x00\x10\x00\x93")  # promise 4096 bytes, send one
    try:
        with Admin(b.bootstrap) as a:  # still served meanwhile
            a.create_topics([NewTopic("alive", 1, 1)])
        # the half-open ones are cut after the partial-request timeout, the idle ones after the idle timeout
        wait_until(lambda: closed_by_peer(half) == len(half), 15, "half-open connections cut")
        wait_until(lambda: closed_by_peer(idle[:500]) == 500, 15, "idle connections closed")
        with Producer(b.bootstrap) as p:
            p.send("alive", b"x")
            p.flush(10)
    finally:
        for s in idle + half:
            s.close()
    assert "Traceback" not in b.logs()


def test_max_connections_per_ip_turns_the_excess_away(broker_factory):
    b = broker_factory(extra=overrides("max.connections.per.ip=50"))
    held = open_sockets(b.port, 80)
    try:
        refused = closed_by_peer(held, 1.0)
        assert refused >= 30, f"only {refused} of 80 connections refused with max.connections.per.ip=50"
        assert "max.connections.per.ip reached" in b.logs()
    finally:
        for s in held:
            s.close()
    # once they are gone, clients from this address are served again
    wait_until(lambda: Admin(b.bootstrap).list_topics() is not None, 10, "served again")


@pytest.mark.timeout(120)
def test_producer_byte_rate_quota_holds_a_producer_to_its_rate(broker_factory):
    b = broker_factory(extra=overrides("quota.window.num=3", "quota.window.size.seconds=1"))
    quota = 300_000  # bytes/s
    r = subprocess.run(
        [str(ROOT / ".venv/bin/kl-configs"), "--bootstrap-server", b.bootstrap, "--alter", "--entity-type",
         "clients", "--entity-name", "slow", "--add-config", f"producer_byte_rate={quota}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and "Completed updating config for client slow." in r.stdout, r.stderr
    with Admin(b.bootstrap) as a:
        # Stamped with the broker's clock as appended: the rate is what the broker admitted, per its own time,
        # not when a (maybe descheduled) client thread saw the acknowledgements.
        a.create_topics([NewTopic("q", 1, 1, {"message.timestamp.type": "LogAppendTime"})])
        assert a.describe_client_quotas()[(("client-id", "slow"),)] == {"producer_byte_rate": quota}
    acked: list[int] = []
    value = b"v" * 1000
    sent = 0
    with Producer(b.bootstrap, client_id="slow", linger_ms=5, batch_size=32768) as p:
        start = time.monotonic()
        while time.monotonic() - start < 9:
            # Keep the producer ahead of the quota (2 s of it unacknowledged; a busy machine slowed a 1 s window
            # below the rate), not its buffer unbounded.
            if sent - len(acked) > 600:
                time.sleep(0.005)
                continue
            for _ in range(200):
                p.send("q", value, on_delivery=lambda err, md: acked.append(len(value)))
            sent += 200
        p.flush(60)
    with Consumer(b.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([("q", 0)])
        stamps: list[int] = []
        deadline = time.monotonic() + 30
        while len(stamps) < len(acked):
            assert time.monotonic() < deadline, f"{len(stamps)} records read back, {len(acked)} acknowledged"
            stamps += [r.timestamp for r in c.poll(1000)]
    # the steady rate, after the burst the window allows at start: the broker's append times of 5 s of it
    first = min(stamps)
    window = [ts for ts in stamps if first + 4000 <= ts < first + 9000]
    rate = len(window) * len(value) / 5
    assert 0.8 * quota <= rate <= 1.2 * quota, f"{rate:,.0f} B/s under a {quota:,} B/s quota"
