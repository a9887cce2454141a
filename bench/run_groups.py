"""Consumer-group benchmark on three local brokers (RF=3, acks=all, min.insync.replicas=2, 100-byte values).

    .venv/bin/python -m bench.run_groups [--runs 3] [--num-records 300000] [--out docs/BENCHMARKS.md]

Per run, on a fresh cluster (kl-cluster, loopback, broker defaults: group.initial.rebalance.delay.ms=3000):
- group consume throughput with 1 and with 3 members (each member its own process, bench/group_member.py),
  from the first record received to the last, over a 3-partition topic filled beforehand;
- recovery after a member's SIGKILL: 3 members share 6 partitions under a steady 3,000 msgs/s producer;
  one is killed; the time until every partition it owned is consumed again by a survivor, with
  session.timeout.ms at the consumer default (45 s) and at 6 s;
- cooperative rebalance: 2 cooperative-sticky members on 6 partitions under the same producer; a third
  joins; the longest gap in consumption on the partitions that stayed where they were, from the join to
  two seconds after the new member got its partitions, next to the longest gap in an equal window
  before the join (the producer's own rhythm). The same with eager `range` for contrast, where every
  partition is revoked.
Medians over the runs go into the groups section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.run_cluster import Cluster, perf, platform_python, produce_args
from bench.run_single_broker import machine_info
from bench.sections import bench_parser, publish
from client.sync import Producer

START_MARK = "<!-- groups:start -->"
END_MARK = "<!-- groups:end -->"
ROOT = Path(__file__).resolve().parent.parent
RATE = 3000  # msgs/s of the steady producer in the timeline experiments


class MemberProc:
    def __init__(self, c: Cluster, group: str, topic: str, mode: str, **opts: object) -> None:
        self.out = Path(tempfile.mktemp(prefix="kl-member-", suffix=".out"))
        args = [sys.executable, "-m", "bench.group_member", c.bootstrap, group, topic, str(self.out), "--mode", mode]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        self.err = open(str(self.out) + ".err", "w")
        self.proc = subprocess.Popen(args, cwd=ROOT, stderr=self.err, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def events(self) -> list[tuple[float, str, list[int]]]:
        """(wall time, kind, numbers) per line of a timeline member."""
        if not self.out.exists():
            return []
        out = []
        for line in self.out.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                out.append((float(parts[0]), parts[1], [int(x) for x in parts[2:]]))
        return out

    def owned(self) -> set[int]:
        held: set[int] = set()
        for _, kind, nums in self.events():
            if kind == "A":
                held |= set(nums)
            elif kind == "V":
                held -= set(nums)
        return held

    def receipts(self, partition: int) -> list[float]:
        return [t for t, kind, nums in self.events() if kind == "R" and nums[0] == partition]

    def result(self, timeout: float) -> dict:
        self.proc.wait(timeout)
        return json.loads(self.out.read_text().splitlines()[-1])  # after the A/V lines

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.err.close()
        if not os.environ.get("KL_BENCH_KEEP"):
            self.out.unlink(missing_ok=True)
            Path(self.err.name).unlink(missing_ok=True)


def wait_for(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def group_throughput(c: Cluster, topic: str, members: int, n: int, run: int) -> float:
    procs = [MemberProc(c, f"tp-{members}-{run}", topic, "throughput", idle_s=3) for _ in range(members)]
    try:
        results = [p.result(600) for p in procs]
    finally:
        for p in procs:
            p.stop()
    total = sum(r["count"] for r in results)
    if total != n:
        raise RuntimeError(f"{members} members consumed {total} records, expected {n}")
    return n / (max(r["last"] for r in results) - min(r["first"] for r in results if r["count"]))


class SteadyProducer:
    """RATE msgs/s dealt round-robin over the topic's partitions (acks=all), in its own process: a
    producer thread inside this one would stall whenever the bench parses member files, and show up
    as gaps on every partition at once."""

    def __init__(self, c: Cluster, topic: str, partitions: int = 6) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.run_groups", "--steady-producer", c.bootstrap, topic, str(partitions)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def steady_produce(bootstrap: str, topic: str, partitions: int) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Producer(bootstrap, acks="all", linger_ms=0) as p:
        start, i = time.monotonic(), 0
        while not stop.is_set():
            p.send(topic, b"x" * 100, partition=i % partitions)
            i += 1
            ahead = start + i / RATE - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)


def kill_recovery(c: Cluster, topic: str, session_ms: int, run: int) -> float:
    """SIGKILL one of three members; seconds until each of its partitions is consumed again elsewhere."""
    producer = SteadyProducer(c, topic)
    ms = [MemberProc(c, f"kill-{session_ms}-{run}", topic, "timeline", session_timeout_ms=session_ms) for _ in range(3)]
    try:
        wait_for(lambda: all(len(m.owned()) == 2 for m in ms), 60, "three members with two partitions each")
        time.sleep(2)
        victim, survivors = ms[0], ms[1:]
        lost = victim.owned()
        os.kill(victim.proc.pid, signal.SIGKILL)
        killed_at = time.time()

        def resumed() -> bool:
            return all(any(t > killed_at for s in survivors for t in s.receipts(p)) for p in lost)

        wait_for(resumed, session_ms / 1000 + 60, "the victim's partitions consumed again")
        return max(min(t for s in survivors for t in s.receipts(p) if t > killed_at) for p in lost) - killed_at
    finally:
        producer.stop()
        for m in ms:
            m.stop()


def rebalance_gap(c: Cluster, topic: str, strategy: str, run: int) -> tuple[float, float, float]:
    """Longest gaps, in ms, on the partitions that stayed with their members: during the join in the group;
    in the same window for a control consumer (its own group, never rebalancing) reading the same
    partitions, which sees the same CPU and producer hiccups; and in the group before the join."""
    producer = SteadyProducer(c, topic)
    group = f"gap-{strategy}-{run}"
    control = MemberProc(c, f"{group}-control", topic, "timeline", strategy=strategy, session_timeout_ms=10000)
    ms = [MemberProc(c, group, topic, "timeline", strategy=strategy, session_timeout_ms=10000) for _ in range(2)]
    try:
        wait_for(lambda: len(control.owned()) == 6, 60, "the control consumer owns all six partitions")
        wait_for(lambda: all(len(m.owned()) == 3 for m in ms), 60, "two members with three partitions each")
        time.sleep(8)  # a stable stretch at least as long as the measured window, for the baseline
        newcomer = MemberProc(c, group, topic, "timeline", strategy=strategy, session_timeout_ms=10000)
        ms.append(newcomer)
        wait_for(lambda: len(newcomer.owned()) == 2, 60, "the new member got two partitions")
        # From the moment it subscribed (its JoinGroup starts the rebalance), not from its process start.
        joined_at = next(t for t, kind, _ in newcomer.events() if kind == "J")
        settled = max(t for t, kind, _ in newcomer.events() if kind == "A") + 2
        time.sleep(max(0.0, settled - time.time()) + 0.5)
        window = settled - joined_at
        # Partitions that stayed with their owner; with eager range every partition is revoked, so all count.
        stayed = [p for m in ms[:2] for p in m.owned()] if strategy != "range" else list(range(6))
        during = before = reference = 0.0
        for p in stayed:
            times = sorted(t for m in ms for t in m.receipts(p))
            during = max(during, _longest_gap(times, joined_at, settled))
            before = max(before, _longest_gap(times, joined_at - window, joined_at))
            reference = max(reference, _longest_gap(control.receipts(p), joined_at, settled))
        return during * 1000, reference * 1000, before * 1000
    finally:
        producer.stop()
        for m in [*ms, control]:
            m.stop()


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """Longest stretch of [start, end] without a receipt."""
    inside = [start] + [t for t in times if start < t < end] + [end]
    return max(b - a for a, b in zip(inside, inside[1:]))


def one_run(n: int, run: int, quick: bool) -> dict[str, float]:
    c = Cluster()
    try:
        c.create("grp", 3)
        perf(produce_args(c, "grp", n))
        r = {
            "tp1": group_throughput(c, "grp", 1, n, run),
            "tp3": group_throughput(c, "grp", 3, n, run),
        }
        c.create("kill", 6)
        r["kill_6s"] = kill_recovery(c, "kill", 6000, run)
        if not quick:
            r["kill_45s"] = kill_recovery(c, "kill", 45000, run)
        c.create("coop", 6)
        r["coop_gap_ms"], r["coop_control_ms"], r["coop_base_ms"] = rebalance_gap(c, "coop", "cooperative-sticky", run)
        c.create("eager", 6)
        r["eager_gap_ms"], r["eager_control_ms"], r["eager_base_ms"] = rebalance_gap(c, "eager", "range", run)
        r["coop_excess_ms"] = r["coop_gap_ms"] - r["coop_control_ms"]
        r["eager_excess_ms"] = r["eager_gap_ms"] - r["eager_control_ms"]
        return r
    finally:
        c.down()


def render(runs: list[dict[str, float]], cmd: str) -> str:
    info = machine_info()

    def cell(k: str, fmt: str) -> str:
        vals = [r[k] for r in runs if k in r]
        if not vals:
            return "not measured"
        return f"{format(statistics.median(vals), fmt)} ({format(min(vals), fmt)}–{format(max(vals), fmt)})"

    coop_excess = statistics.median(r["coop_excess_ms"] for r in runs)
    rows = [
        ("Group consume msgs/s, 1 member (3 partitions)", cell("tp1", ",.0f"), "", ""),
        ("Group consume msgs/s, 3 members (3 partitions)", cell("tp3", ",.0f"), "", ""),
        (
            "Member SIGKILL to its partitions consumed again, session.timeout.ms=45000 (s)",
            cell("kill_45s", ".2f"),
            "",
            "",
        ),
        (
            "Member SIGKILL to its partitions consumed again, session.timeout.ms=6000 (s)",
            cell("kill_6s", ".2f"),
            "",
            "",
        ),
        ("Cooperative join: longest gap on partitions that stayed (ms)", cell("coop_gap_ms", ".0f"), "", ""),
        (
            "  control consumer outside the group, same partitions and window (ms)",
            cell("coop_control_ms", ".0f"),
            "",
            "",
        ),
        (
            "  excess over the control (ms)",
            cell("coop_excess_ms", ".0f"),
            "no gap (<= 100)",
            "MET" if coop_excess <= 100 else "MISSED",
        ),
        ("  the group's own gap in an equal window before the join (ms)", cell("coop_base_ms", ".0f"), "", ""),
        ("Eager (range) join: longest gap on any partition (ms)", cell("eager_gap_ms", ".0f"), "", ""),
        ("  control consumer, same window (ms)", cell("eager_control_ms", ".0f"), "", ""),
        ("  excess over the control (ms)", cell("eager_excess_ms", ".0f"), "", ""),
    ]
    lines = [
        "## Consumer groups on three brokers",
        "",
        f"Command: `{cmd}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; median of {len(runs)} runs (min–max).  ",
        f"Machine: {info.get('cpu', '?')}, {info.get('nproc', '?')} cores, {info.get('memory', '?')}, "
        f"Python {platform_python()}; brokers, members and the producer share these cores.",
        "",
        "| Figure | Measured | Target | Status |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    lines += [
        "",
        f"The timeline experiments run a steady {RATE:,} msgs/s producer over 6 partitions (about "
        f"{1000 * 6 / RATE:.0f} ms between records of one partition). The brokers, the members, the producer and "
        "a control consumer share two cores, so every consumer sees stalls of a few hundred ms; the control "
        "consumer (its own group, never rebalancing, same partitions and window) measures them, and 'no gap' "
        "counts as met when the group's longest gap exceeds the control's by at most 100 ms.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, 300_000)
    ap.add_argument("--quick", action="store_true", help="skip the 45 s session-timeout case; print only")
    ap.add_argument("--steady-producer", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "PARTITIONS"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.steady_producer:
        steady_produce(a.steady_producer[0], a.steady_producer[1], int(a.steady_producer[2]))
        return 0
    runs = []
    for i in range(a.runs):
        print(f"run {i + 1}/{a.runs} ...", flush=True)
        r = one_run(a.num_records, i, a.quick)
        print("  " + ", ".join(f"{k}={v:,.2f}" for k, v in r.items()), flush=True)
        runs.append(r)
    cmd = f".venv/bin/python -m bench.run_groups --runs {a.runs} --num-records {a.num_records}"
    section = render(runs, cmd)
    publish(section, a.out, START_MARK, END_MARK, write=not a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
