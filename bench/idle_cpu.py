"""What an idle cluster costs: the CPU of three brokers (`kl-cluster up`, default configuration) that serve no
client, in CPU seconds per broker per minute.

    .venv/bin/python -m bench.idle_cpu [--runs 3] [--settle 10] [--seconds 30] [--out docs/BENCHMARKS.md]

Each run starts a fresh cluster, waits --settle seconds (the controller election, the first metadata), then reads
every broker's user + system CPU from /proc before and after --seconds of idling. An idle cluster still works:
the controller quorum's fetches (long polls since 28 November 2026), the heartbeat thread, the metadata and
checkpoint timers. Median (min–max) of --runs; printed, and with --out written to the idle section of
docs/BENCHMARKS.md. A figure in CPU seconds is the one a busy machine stretches least.
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
import time

from bench.run_cluster import Cluster
from bench.sections import bench_parser, md_table, median_range, publish

START_MARK = "<!-- idle-cpu:start -->"
END_MARK = "<!-- idle-cpu:end -->"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid`, all its threads (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def one_run(settle_s: float, seconds: float) -> list[float]:
    """CPU seconds per minute of each broker of a fresh idle cluster."""
    c = Cluster()
    try:
        time.sleep(settle_s)
        pids = [b["pid"] for b in c.state()["brokers"].values()]
        before = [cpu_seconds(p) for p in pids]
        time.sleep(seconds)
        after = [cpu_seconds(p) for p in pids]
        return [(a - b) * 60 / seconds for a, b in zip(after, before)]
    finally:
        c.down()


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, 0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--print-only", action="store_true", help="do not write --out")
    args = ap.parse_args(argv)
    per_run: list[list[float]] = []
    load_before = os.getloadavg()[0]
    for i in range(args.runs):
        per_run.append(one_run(args.settle, args.seconds))
        print(f"run {i + 1}: " + ", ".join(f"{x:.2f}" for x in per_run[-1]) + " CPU s/min per broker", flush=True)
    load_after = os.getloadavg()[0]
    means = [sum(r) / len(r) for r in per_run]
    busiest = [max(r) for r in per_run]
    cmd = " ".join(["python -m bench.idle_cpu", *(argv if argv is not None else sys.argv[1:])])
    section = "\n".join(
        [
            "## An idle cluster",
            "",
            f"Command: `{cmd}`  ",
            f"Date: {datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} cores; load average "
            f"{load_before:.1f} before, {load_after:.1f} after. Three brokers, no client; median (min–max) of "
            f"{args.runs} runs of {args.seconds:.0f} s each, after {args.settle:.0f} s to settle.",
            "",
            md_table(
                ["Figure", "CPU s per minute"],
                [
                    ["a broker (mean of the three)", median_range(means, ".2f")],
                    ["the busiest broker (the controller)", median_range(busiest, ".2f")],
                ],
            ),
        ]
    )
    publish(section + "\n", args.out, START_MARK, END_MARK, write=not args.print_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
