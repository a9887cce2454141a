"""A busy machine must not look like a dead broker (issue 24 §2): three broker processes on this (2-core)
machine, busy-loop processes taking every core, and clients saturating the brokers (producers with acks=all
and acks=1 and no throughput cap, consumers reading everything). For the whole run, no broker is fenced, no replica
truncates, no controller election runs and no partition changes leader: asserted from every broker's log,
its controller-epoch metric and the partitions' leader epochs.

KL_SOAK=1 runs it for 5 minutes (KL_SOAK_SECONDS to change), the suite for LOAD_S. The kill and pause
failovers under the same defaults are tests/integration/test_recovery.py's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from tests.integration.cluster_harness import ROOT, wait_until

SOAK = os.environ.get("KL_SOAK") == "1"
# The suite's run: three session timeouts (9 s) under full load, which the 9-12 s stalls this load caused before
# the heartbeat thread (docs/ELECTION.md section 3) turned into fencing within seconds; 50 s until 28 November 2026.
LOAD_S = float(os.environ.get("KL_SOAK_SECONDS", "300")) if SOAK else 30.0
HOGS = int(os.environ.get("KL_BUSY_HOGS", "4"))  # busy loops: twice as many as the machine's cores
# kl-perf produce processes (their acks), no throughput cap. The acks=1 one outruns replication on brokers
# this starved: followers keep fetching but fall more than replica.lag.time.max.ms behind and leave the ISR,
# as in Kafka (overload, not a failure). The leader tells the controller they are slow, not silent, so the
# shrink stays an ordinary one: no leadership moves to a lagging follower, which would truncate the acks=1
# records only the old leader had (docs/ELECTION.md section 6, "A leader cut off from its followers").
PRODUCERS = ("all", "all", "1")
CONSUMERS = 2  # each reads every partition from the beginning, as fast as it can
# The brokers run at this niceness (every thread), the busy loops at 0: a machine whose cores are taken by
# work that matters more than the brokers (as a JVM, a build or a browser at the user's own priority do on a
# laptop), i.e. many more busy loops than processes could be started.
BROKER_NICE = int(os.environ.get("KL_BUSY_NICE", "10"))
TOPIC = "busy"
PARTITIONS = 6

pytestmark = [pytest.mark.timeout(LOAD_S + 240), pytest.mark.serial]

# What a false failure detection leaves in the brokers' logs (a fenced broker's partitions move, its replicas
# truncate when they follow the new leaders; an election announces itself).
BAD = re.compile(r"fencing broker|truncat|no controller in epoch|became controller|leadership moved", re.I)
# Not one of them: a follower out of the ISR (slow, under the acks=1 load) whose next offset retention has
# deleted on the leader restarts at the leader's log start (Kafka's truncateFullyAndStartAt). It removes
# nothing the leader still has; the soak's small retention.bytes makes it happen. Counted and reported.
RETENTION_RESET = re.compile(r"behind the leader's log start \d+; truncating fully")

CONSUMER = """
import sys
from client.consumer import TopicPartition
from client.sync import Consumer
with Consumer(sys.argv[1], auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
    c.assign([TopicPartition(sys.argv[2], p) for p in range(int(sys.argv[3]))])
    while True:
        c.poll(500)
"""


def _spawn(args: list[str], log) -> subprocess.Popen:
    return subprocess.Popen(
        args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def _renice(pid: int, nice: int) -> None:
    """Every thread of `pid` (Linux's niceness is per thread; later threads inherit their creator's)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(task), nice)


def _controller_epochs(cluster) -> dict[int, float]:
    out = {}
    for b in cluster.brokers.values():
        m = re.search(r'^kafkalite_controller_epoch\{broker="\d+"\} (\S+)$', b.metrics(timeout=30), re.M)
        assert m is not None, f"broker {b.id} has no kafkalite_controller_epoch"
        out[b.id] = float(m.group(1))
    return out


def _isr_shrinks(cluster) -> float:
    """ISR shrinks committed over the cluster (the overload this test makes, reported rather than asserted:
    how far followers fall behind depends on how busy the machine is)."""
    total = 0.0
    for b in cluster.brokers.values():
        m = re.search(r'^kafkalite_isr_shrinks_total\{broker="\d+"\} (\S+)$', b.metrics(timeout=30), re.M)
        total += float(m.group(1)) if m else 0.0
    return total


def _leader_epochs(cluster) -> dict[int, tuple[int, int]]:
    return {p.partition: (p.leader, p.leader_epoch) for p in cluster.describe(TOPIC)}


def test_no_false_failure_detection_under_cpu_hogs_and_saturating_clients(cluster_factory, tmp_path):
    cluster = cluster_factory(3, start=False)
    # Started with room to spare: on a machine this busy a broker's start alone can take half a minute.
    for b in cluster.brokers.values():
        b.start(wait=False)
    for b in cluster.brokers.values():
        b.wait_listening(120)
    cluster.wait_all_registered(120)
    cluster.create_topic(
        TOPIC,
        PARTITIONS,
        3,
        # acks=all needs two copies; segments roll and retention deletes them, so the disk stays small.
        {"min.insync.replicas": "2", "segment.bytes": "8388608", "retention.bytes": "33554432"},
    )
    bs = cluster.bootstrap()
    # Log positions and state before the load: only what happens under it counts.
    marks = {b.id: len(b.logs()) for b in cluster.brokers.values()}
    epochs_before = _controller_epochs(cluster)
    leaders_before = _leader_epochs(cluster)
    client_log = open(tmp_path / "clients.log", "ab")
    procs: list[subprocess.Popen] = []
    try:
        for acks in PRODUCERS:
            procs.append(
                _spawn(
                    [sys.executable, "-m", "client.cli.perf", "produce", "--bootstrap-server", bs, "--topic", TOPIC,
                     "--num-records", "1000000000", "--record-size", "200", "--acks", acks],
                    client_log,
                )
            )  # fmt: skip
        for _ in range(CONSUMERS):
            procs.append(_spawn([sys.executable, "-c", CONSUMER, bs, TOPIC, str(PARTITIONS)], client_log))
        # The clients' records flowing first, then the hogs: what is measured is a loaded cluster's steady state,
        # not its first produce and fetch under starvation (each broker's first requests build the message
        # codecs and open segments: at niceness 10 beside the hogs, on a machine at half its usual speed, that
        # stalled a broker's loop for 16 s and not one record committed in the whole run, ci100 2026-11-28).
        start_hws = wait_until(
            lambda: (hws := cluster.high_watermarks(TOPIC, PARTITIONS)) and sum(hws.values()) > 0 and hws,
            120,
            "the clients' first records committed",
        )
        for b in cluster.brokers.values():
            _renice(b.proc.pid, BROKER_NICE)
        procs += [_spawn([sys.executable, "-c", "while True: pass"], subprocess.DEVNULL) for _ in range(HOGS)]
        t0 = time.monotonic()
        while time.monotonic() - t0 < LOAD_S:
            time.sleep(1)
            dead = [p.args for p in procs if p.poll() is not None]
            assert not dead, f"a load process exited: {dead}"
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(30)
        client_log.close()
    # The load reached the brokers: the topic grew under the hogs.
    hws = wait_until(lambda: cluster.high_watermarks(TOPIC, PARTITIONS), 60, "high watermarks")
    assert sum(hws.values()) - sum(start_hws.values()) > 1000, (start_hws, hws)
    print(f"under load: high watermarks {hws}, ISR shrinks committed {_isr_shrinks(cluster):.0f}")
    lines = {b.id: b.logs()[marks[b.id] :].splitlines() for b in cluster.brokers.values()}
    resets = sum(1 for ls in lines.values() for line in ls if RETENTION_RESET.search(line))
    print(f"followers restarted at the leader's log start (behind retention): {resets}")
    bad = {i: [line for line in ls if BAD.search(line) and not RETENTION_RESET.search(line)] for i, ls in lines.items()}
    assert all(not lines for lines in bad.values()), f"false failure detection under load: {bad}"
    assert _controller_epochs(cluster) == epochs_before
    assert _leader_epochs(cluster) == leaders_before
