"""A consumer group through broker faults (issue 12 §4), for bench/run_recovery.py.

Three brokers (RF=3), a 6-partition topic written at a steady 3,000 msgs/s (acks=all, its own process), and a
group of 3 members (eager `range`, each its own process, bench/group_member.py) with session.timeout.ms =
SESSION_MS. One broker is SIGKILLed:

- group-broker-kill: a broker that leads partitions of the topic but is not the group's coordinator. Figure:
  the kill to the moment every partition has been consumed again. Target session.timeout.ms + 3 s.
- coordinator-kill: the group's coordinator (the leader of its `__consumer_offsets` partition, which leads
  partitions of the topic too). The group's members, generation and assignment are in `__consumer_offsets`,
  so the new coordinator loads them and the members carry on: no member may rejoin (no revocation or
  assignment after the kill). Figure as above; target 3 s.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from bench.run_cluster import Cluster
from bench.run_groups import MemberProc, SteadyProducer, wait_for
from bench.timeline import EVENTS, first, log_rows

SESSION_MS = 10000  # Kafka's consumer default before 3.0; the current 45 s only stretches the target
TOPIC = "group-faults"
PARTITIONS = 6


async def _coordinator(bootstrap: str, group: str) -> int:
    from client.admin import AsyncAdmin
    from net.protocol import ApiKey

    admin = AsyncAdmin(bootstrap, request_timeout_ms=5000)
    try:
        body = await admin.client.request(None, ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0})
        if body.get("error_code"):
            raise RuntimeError(f"FindCoordinator for {group}: error {body['error_code']}")
        return int(body["node_id"])
    finally:
        await admin.close()


async def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from client.admin import AsyncAdmin

    admin = AsyncAdmin(bootstrap, request_timeout_ms=5000)
    try:
        return {p.partition: p.leader for p in (await admin.describe_topics([topic]))[0].partitions}
    finally:
        await admin.close()


def _member_log(m: MemberProc) -> list[tuple[float, str]]:
    """The member's client log lines (KL_MEMBER_LOG=1: '<wall time> <logger> <message>')."""
    try:
        lines = Path(m.err.name).read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        head, _, rest = line.partition(" ")
        try:
            out.append((float(head), rest.split(" ", 1)[-1]))
        except ValueError:
            continue
    return out


def group_fault_once(kill_coordinator: bool, run: int) -> tuple[float, list[tuple[float, str]], dict[str, float]]:
    """One run: (kill → every partition consumed again in s, merged timeline rows, phase marks in ms)."""
    c = Cluster()
    producer = None
    members: list[MemberProc] = []
    try:
        c.create(TOPIC, PARTITIONS)
        producer = SteadyProducer(c, TOPIC, PARTITIONS)
        group = f"faults-{'coord' if kill_coordinator else 'broker'}-{run}"
        os.environ["KL_MEMBER_LOG"] = "1"  # the members' client logs, for the timeline
        members = [MemberProc(c, group, TOPIC, "timeline", session_timeout_ms=SESSION_MS) for _ in range(3)]
        wait_for(lambda: all(len(m.owned()) == 2 for m in members), 60, "three members with two partitions each")
        wait_for(
            lambda: all(any(m.receipts(p) for m in members) for p in range(PARTITIONS)), 30, "every partition read"
        )
        time.sleep(2)
        coordinator = asyncio.run(_coordinator(c.bootstrap, group))
        leaders = asyncio.run(_leaders(c.bootstrap, TOPIC))
        if kill_coordinator:
            victim = coordinator
        else:
            others = sorted({b for b in leaders.values() if b != coordinator})
            if not others:
                raise RuntimeError(f"every partition is led by the coordinator {coordinator}: {leaders}")
            victim = others[0]
        led = sorted(p for p, b in leaders.items() if b == victim)
        os.kill(c.state()["brokers"][str(victim)]["pid"], signal.SIGKILL)
        killed = time.time()

        def again(p: int) -> float:
            return min((t for m in members for t in m.receipts(p) if t > killed), default=float("nan"))

        wait_for(lambda: all(again(p) == again(p) for p in range(PARTITIONS)), SESSION_MS / 1000 + 60, "all again")
        every = max(again(p) for p in range(PARTITIONS))
        # Members heartbeat every 3 s: by a session timeout after the kill each has met the new coordinator
        # (or been told to rejoin), so a rebalance the kill caused would show by then.
        time.sleep(max(0.0, killed + SESSION_MS / 1000 + 2 - time.time()))
        rejoins = sum(1 for m in members for t, kind, _ in m.events() if kind in "AV" and t > killed)
        noticed = [(t, text) for m in members for t, text in _member_log(m) if t > killed and "coordinator" in text]
        events = [(killed, f"bench: broker {victim} SIGKILLed (coordinator {coordinator}; leads {led})")]
        events += [(again(p), f"member: partition {p} consumed again") for p in range(PARTITIONS)]
        events += [(t, f"member: {kind} {nums}") for m in members for t, kind, nums in m.events() if kind in "AV"]
        events += [(t, f"member: {text}") for t, text in noticed]
        rows = log_rows(c.dir.glob("broker-*.log"), killed, events, needles=(*EVENTS, "loaded __"))
        marks = {
            "victim seen gone": first(rows, "process is gone"),
            "new leader of a victim's partition": first(rows, f"became leader of {TOPIC}"),
            "first victim's partition consumed again": min((again(p) - killed) * 1000 for p in led),
            "every partition consumed again": (every - killed) * 1000,
            "member rejoins (revocations and assignments after the kill)": float(rejoins),
        }
        if kill_coordinator:
            marks["new coordinator loaded the group"] = first(rows, "loaded __consumer_offsets")
            marks["a member found the coordinator gone (heartbeat)"] = first(rows, "member: group")
        return every - killed, rows, marks
    finally:
        if producer is not None:
            producer.stop()
        for m in members:
            m.stop()
        c.down()
