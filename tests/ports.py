"""Where test servers' ports come from: free loopback ports below the kernel's ephemeral range.

A port the kernel hands out for `bind(("127.0.0.1", 0))` is an ephemeral one, which every outgoing connection
takes its local port from: found free, it can be taken by a client's connect() before the server binds it, and
the server exits with "address already in use" while the test talks to whoever took it (a CI run's
`broker 1 ... elected no controller within 30s`). Ports from below that range are taken only by servers, and each
xdist worker has its own slice of it.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterable
from pathlib import Path

HOST = "127.0.0.1"


def port_range() -> tuple[int, int]:
    """Where test servers' ports come from: below the kernel's ephemeral range, which every outgoing connection
    takes its local port from (a port found free there can be taken by a client's connect() before the server
    binds it: "address already in use" on a loaded run), and split between the xdist workers so that two
    workers never pick the same one."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    low, high = 10000, max(ephemeral, 12000)
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker.startswith("gw") and worker[2:].isdigit() and count > 1:
        span = (high - low) // count
        low, high = low + int(worker[2:]) * span, low + (int(worker[2:]) + 1) * span
    return low, high


def free_port_runs(*lengths: int) -> list[int]:
    """The first port of each of several runs of consecutive free loopback ports, the runs disjoint (for
    kl-cluster's --base-port, --kafka-base-port, ...), from `port_range()`."""
    rng = random.Random()
    low, high = port_range()
    while True:
        starts, taken = [], set()
        for n in lengths:
            start = rng.randrange(low, high - n)
            ports = set(range(start, start + n))
            if ports & taken or not all_free(ports):
                break
            starts.append(start)
            taken |= ports
        if len(starts) == len(lengths):
            return starts


def all_free(ports: Iterable[int]) -> bool:
    """Whether every one of `ports` can be bound on loopback now (each bound and released together)."""
    socks = []
    try:
        for port in ports:
            s = socket.socket()
            socks.append(s)
            s.bind((HOST, port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports, from `port_range()`."""
    return free_port_runs(*([1] * n))


def free_port() -> int:
    """One free loopback port, from `port_range()`."""
    return free_ports(1)[0]
