"""Rebalances by group protocol, and share-group throughput (issue 29 §4), on three brokers.

    .venv/bin/python -m bench.run_group_protocols [--runs 3] [--num-records 300000] [--out docs/BENCHMARKS.md]

Per run, on a fresh 3-broker kl-cluster (RF=3, min.insync.replicas=2; group.initial.rebalance.delay.ms=0 as
kl-cluster sets it; the consumer protocol's group.consumer.session.timeout.ms / heartbeat.interval.ms set to
the classic members' session.timeout.ms / heartbeat.interval.ms, so both protocols time a member out alike):
- rebalance time of a 10-member group on a 20-partition topic, each member its own process
  (bench/group_member.py, timeline mode: every assignment and revocation with its wall time): from the event to
  the last member having its new assignment (the last assignment or revocation callback before the group is
  settled: every partition owned exactly once, every member owning some, nothing changing for QUIET_S), when
  an eleventh member joins (from its subscribe()) and when one member is SIGKILLed (from the kill); classic
  protocol (eager `range`, Kafka's default first assignor) vs the consumer protocol (KIP-848, the
  coordinator's `uniform` assignor), the own client, and confluent-kafka (librdkafka) with --confluent;
- share-group throughput (KIP-932, client/share_consumer.py, implicit acknowledgement, max.poll.records 500)
  with 1, 4 and 8 members vs a consumer group (classic, range) with as many members, each reading the same
  --num-records records of 100 B pre-filled into one 8-partition topic: msgs/s from the first record any
  member received to the last.
The medians over the runs, with min–max, go into docs/BENCHMARKS.md.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.run_cluster import Cluster, perf, platform_python, produce_args
from bench.run_groups import MemberProc, wait_for
from bench.run_single_broker import OutsideLoad, machine_info
from bench.sections import bench_parser, md_table, median_range, publish

START_MARK = "<!-- group-protocols:start -->"
END_MARK = "<!-- group-protocols:end -->"
MEMBERS = 10
REBALANCE_PARTITIONS = 20
SESSION_MS = 6000  # classic: session.timeout.ms; consumer protocol: group.consumer.session.timeout.ms
HEARTBEAT_MS = 2000  # classic: heartbeat.interval.ms (a third of the session); consumer: the broker's
QUIET_S = 3.0  # no assignment change for this long after the last one: the group has settled
IDLE_S = 3.0  # a throughput member stops after this long without a record
SHARE_PARTITIONS = 8
SHARE_MEMBERS = (1, 4, 8)
OVERRIDES = (
    f"group.consumer.session.timeout.ms={SESSION_MS}",
    f"group.consumer.min.session.timeout.ms={min(SESSION_MS, 45000)}",  # Kafka's rule: min <= the value
    f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
    f"group.consumer.min.heartbeat.interval.ms={min(HEARTBEAT_MS, 5000)}",
    "share.auto.offset.reset=earliest",
    # Kafka's default (kl-cluster sets 0): the members of a throughput measurement join in one round; the
    # rebalances timed here are of groups that are not empty, which this delay does not hold up.
    "group.initial.rebalance.delay.ms=3000",
)
CLIENTS = {"own": "the own client", "confluent": "confluent-kafka"}


class _Bootstrap:
    """What MemberProc needs of a cluster: its bootstrap (the Kafka listener's for confluent-kafka)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


def _settled(members: list[MemberProc], partitions: int) -> float | None:
    """Time of the last assignment change if the group is settled (see the module doc), else None."""
    owned = [m.owned() for m in members]
    if any(not o for o in owned) or sum(len(o) for o in owned) != partitions:
        return None
    if set().union(*owned) != set(range(partitions)):
        return None
    changes = [t for m in members for t, kind, _ in m.events() if kind in ("A", "V")]
    last = max(changes, default=0.0)
    return last if time.time() - last >= QUIET_S else None


def _wait_settled(members: list[MemberProc], partitions: int, timeout: float, what: str) -> float:
    found: list[float] = []

    def done() -> bool:
        t = _settled(members, partitions)
        if t is not None:
            found.append(t)
        return t is not None

    wait_for(done, timeout, what)
    return found[-1]


def rebalance(c: Cluster, kafka: str, protocol: str, client: str, topic: str, run: int) -> dict[str, float]:
    """Seconds from a member's join, then from a member's SIGKILL, to the last member's new assignment."""
    group = f"rb-{protocol}-{client}-{run}"
    target = _Bootstrap(kafka if client == "confluent" else c.bootstrap)
    opts: dict[str, Any] = {"group_protocol": protocol, "session_timeout_ms": SESSION_MS, "client": client}
    ms = [MemberProc(target, group, topic, "timeline", **opts) for _ in range(MEMBERS)]  # type: ignore[arg-type]
    try:
        _wait_settled(ms, REBALANCE_PARTITIONS, 120, f"{MEMBERS} members settled ({protocol}, {client})")
        newcomer = MemberProc(target, group, topic, "timeline", **opts)  # type: ignore[arg-type]
        ms.append(newcomer)
        wait_for(lambda: any(k == "J" for _, k, _ in newcomer.events()), 60, "the newcomer subscribed")
        joined_at = next(t for t, k, _ in newcomer.events() if k == "J")
        join_s = _wait_settled(ms, REBALANCE_PARTITIONS, 120, "the group settled after the join") - joined_at
        victim = ms.pop(0)
        os.kill(victim.proc.pid, signal.SIGKILL)
        killed_at = time.time()
        victim.stop()
        die_s = (
            _wait_settled(ms, REBALANCE_PARTITIONS, SESSION_MS / 1000 + 120, "the group settled after the kill")
            - killed_at
        )
        return {f"join/{protocol}/{client}": join_s, f"die/{protocol}/{client}": die_s}
    finally:
        for m in ms:
            m.stop()


def consume_rate(c: Cluster, topic: str, members: int, n: int, share: bool, run: int) -> float:
    """msgs/s of `members` processes reading the topic's n records, from the first record received to the last."""
    group = f"{'share' if share else 'cg'}-{members}-{run}"
    mode = "share" if share else "throughput"
    go = Path(tempfile.mktemp(prefix="kl-go-"))
    procs = [MemberProc(c, group, topic, mode, idle_s=IDLE_S, go_file=go) for _ in range(members)]
    try:
        wait_for(lambda: all(Path(f"{p.out}.ready").exists() for p in procs), 120, "the members started")
        go.touch()  # they all subscribe now; group.initial.rebalance.delay.ms lets one JoinGroup round take all
        results = [p.result(900) for p in procs]
    finally:
        for p in procs:
            p.stop()
            Path(f"{p.out}.ready").unlink(missing_ok=True)
        go.unlink(missing_ok=True)
    total = sum(r["count"] for r in results)
    # A share group hands a record out again only if its lock ran out (30 s) before the member accepted it.
    if total < n or (not share and total != n):
        raise RuntimeError(f"{members} {mode} members consumed {total} records, expected {n}")
    return n / (max(r["last"] for r in results) - min(r["first"] for r in results if r["count"]))


def one_run(n: int, run: int, clients: list[str]) -> dict[str, float]:
    c = Cluster(OVERRIDES, kafka=("confluent" in clients))
    try:
        r: dict[str, float] = {}
        c.create("share", SHARE_PARTITIONS)
        perf(produce_args(c, "share", n))
        for k in SHARE_MEMBERS:  # alternately, so that a load change hits both kinds alike
            r[f"share/{k}"] = consume_rate(c, "share", k, n, True, run)
            r[f"group/{k}"] = consume_rate(c, "share", k, n, False, run)
            print(f"  {k} members: share {r[f'share/{k}']:,.0f}, group {r[f'group/{k}']:,.0f} msgs/s", flush=True)
        for client in clients:
            for protocol in ("classic", "consumer"):
                topic = f"rb-{protocol}-{client}"
                c.create(topic, REBALANCE_PARTITIONS)
                got = rebalance(c, c.kafka_bootstrap, protocol, client, topic, run)
                print("  " + ", ".join(f"{k} {v:.2f} s" for k, v in got.items()), flush=True)
                r.update(got)
        return r
    finally:
        c.down()


def render(runs: list[dict[str, float]], cmd: str, n: int, clients: list[str], load: list[str]) -> str:
    m = machine_info()

    def col(key: str) -> list[float]:
        return [r[key] for r in runs if key in r]

    rb_rows = []
    for client in clients:
        for event, what in (("join", "an 11th member joins"), ("die", "a member is SIGKILLed")):
            classic, consumer = col(f"{event}/classic/{client}"), col(f"{event}/consumer/{client}")
            ratio = [
                r[f"{event}/consumer/{client}"] / r[f"{event}/classic/{client}"]
                for r in runs
                if f"{event}/classic/{client}" in r and f"{event}/consumer/{client}" in r
            ]
            rb_rows.append(
                [
                    f"{CLIENTS[client]}: {what}",
                    median_range(classic, ".2f"),
                    median_range(consumer, ".2f"),
                    median_range(ratio, ".2f"),
                ]
            )
    tp_rows = []
    for k in SHARE_MEMBERS:
        tp_rows.append(
            [
                f"{k} member{'s' if k > 1 else ''}",
                median_range(col(f"share/{k}")),
                median_range(col(f"group/{k}")),
                median_range([r[f"share/{k}"] / r[f"group/{k}"] for r in runs], ".2f"),
            ]
        )
    return "\n".join(
        [
            "## Group protocols: rebalances and share groups (issue 29 §4)",
            "",
            f"Command: `{cmd}`  ",
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; median of {len(runs)} runs (min–max).  ",
            f"Machine: {m['cpu']}, {m['nproc']} cores, {m['memory']}, Python {platform_python()}; the three brokers "
            "(kl-cluster, RF=3, min.insync.replicas=2) and every member process share these cores. Load average "
            "(1, 5, 15 min) at each run's start: " + "; ".join(f"run {i + 1}: {s}" for i, s in enumerate(load)) + ".",
            "",
            f"### Rebalance time, {MEMBERS} members, {REBALANCE_PARTITIONS} partitions (s)",
            "",
            "From the event (the new member's subscribe(); the SIGKILL) to the last member's new assignment (its "
            "last assignment or revocation callback before every partition is owned once and nothing changes for "
            f"{QUIET_S:.0f} s). Each member is a process of its own. Classic: eager `range`, "
            f"session.timeout.ms={SESSION_MS}, heartbeat.interval.ms={HEARTBEAT_MS}; consumer protocol (KIP-848): "
            f"the coordinator's `uniform` assignor, group.consumer.session.timeout.ms={SESSION_MS}, "
            f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS} on the brokers. Ratio: consumer / classic, "
            "within each run.",
            "",
            md_table(["Event", "classic", "consumer (KIP-848)", "Ratio"], rb_rows),
            "",
            f"### Share group vs consumer group, {n:,} records of 100 B pre-filled, {SHARE_PARTITIONS} partitions "
            "(msgs/s)",
            "",
            "The same topic and records for every row, each group reading all of them from the start "
            "(share.auto.offset.reset=earliest); share members: client/share_consumer.py, implicit "
            "acknowledgement, max.poll.records 500 (Kafka's); consumer group: the own client, classic, `range`. "
            "msgs/s from the first record any member received to the last one. The member counts alternate share, "
            "group, share, ... within a run. Ratio: share / consumer group, within each run.",
            "",
            md_table(["Members", "share group", "consumer group", "Ratio"], tp_rows),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, 300_000)
    ap.add_argument("--confluent", action="store_true", help="also time confluent-kafka's rebalances")
    ap.add_argument("--quick", action="store_true", help="print only, do not write --out")
    a = ap.parse_args(argv)
    clients = ["own", "confluent"] if a.confluent else ["own"]
    runs: list[dict[str, float]] = []
    load: list[str] = []
    for i in range(a.runs):
        load.append(", ".join(f"{x:.2f}" for x in os.getloadavg()))
        outside = OutsideLoad()
        print(f"run {i + 1}/{a.runs} (load average {load[-1]}) ...", flush=True)
        runs.append(one_run(a.num_records, i, clients))
        print(f"  other processes used {outside.cores():.2f} cores", flush=True)
    cmd = " ".join([".venv/bin/python -m bench.run_group_protocols", *(sys.argv[1:] if argv is None else argv)])
    section = render(runs, cmd, a.num_records, clients, load)
    publish(section, a.out, START_MARK, END_MARK, write=not a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
