"""Replication throttles (issue 27 §2, KIP-73): how long a reassignment moves a partition of N MB from one broker
to another without a throttle and with `kl-reassign-partitions --throttle`, on a 3-broker cluster (`kl-cluster
up`). Median of --runs, written to the "Reassignment throttles" section of docs/BENCHMARKS.md (--out).

    .venv/bin/python -m bench.run_reassignment --runs 3 --mb 24 --throttle 1000000

Each run fills two single-replica topics on broker 1 with N MB of incompressible records, moves one to broker 2
unthrottled and then the other throttled, each timed from `--execute` (the tool run in this process) until
ListPartitionReassignments has no reassignment left and the partition's replica is broker 2; `--verify` then
clears the throttle. The floor is
what Kafka's quota allows: a first burst of rate x (replication.quota.window.num - 1) x window, one fetch
(replica.fetch.max.bytes) over, then the rate.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.peers._common import free_port
from bench.sections import bench_parser, md_table, median_range, replace_section
from client import Admin, NewTopic, Producer, TopicPartition
from client.cli import reassign_partitions as kl_reassign

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- reassignment-throttles:start -->", "<!-- reassignment-throttles:end -->"
RECORD = 10_000
FETCH_MAX = 1_048_576  # replica.fetch.max.bytes, Kafka's default


@dataclass
class Run:
    unthrottled_s: float
    throttled_s: float
    moved_bytes: int


def kl(module: str, *args: str, timeout: float = 120) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cp = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                        cwd=ROOT, timeout=timeout)  # fmt: skip
    if cp.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)}: {cp.stderr.strip()[-400:]}")
    return cp.stdout


def moved(admin: Admin, topic: str) -> bool:
    if admin.list_partition_reassignments([TopicPartition(topic, 0)]):
        return False
    return list(admin.describe_topics([topic])[0].partitions[0].replicas) == [2]


def reassign(bootstrap: str, plan: Path, *args: str) -> None:
    """kl-reassign-partitions, in this process (the move is timed, not the start of an interpreter), its lines
    kept out of the bench's output."""
    with contextlib.redirect_stdout(io.StringIO()):
        kl_reassign.main(["--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), *args],
                         standalone_mode=False)  # fmt: skip


def move(bootstrap: str, work: Path, topic: str, throttle: list[str]) -> float:
    plan = work / f"{topic}.json"
    plan.write_text(f'{{"version":1,"partitions":[{{"topic":"{topic}","partition":0,"replicas":[2]}}]}}')
    with Admin(bootstrap) as admin:
        start = time.monotonic()
        reassign(bootstrap, plan, "--execute", *throttle)
        while not moved(admin, topic):
            time.sleep(0.05)
        took = time.monotonic() - start
    reassign(bootstrap, plan, "--verify")  # clears the throttle
    return took


def measure(work: Path, mb: int, throttle: int, window_num: int) -> Run:
    data = work / "cluster"
    base = free_port()
    up = ["up", "--brokers", "3", "--base-port", str(base), "--data-dir", str(data),
          "--override", f"replication.quota.window.num={window_num}"]  # fmt: skip
    bootstrap = kl("client.cli.cluster", *up).splitlines()[0]
    try:
        with Admin(bootstrap) as admin:
            admin.create_topics([NewTopic(t, replica_assignments={0: [1]}) for t in ("plain", "throttled")])
        payload = mb * 1_000_000 // RECORD * RECORD
        with Producer(bootstrap, acks="1", linger_ms=5) as p:
            for topic in ("plain", "throttled"):
                for _ in range(payload // RECORD):
                    p.send(topic, os.urandom(RECORD), partition=0)
            p.flush()
        unthrottled = move(bootstrap, work, "plain", [])
        throttled = move(bootstrap, work, "throttled", ["--throttle", str(throttle)])
        return Run(unthrottled, throttled, payload)
    finally:
        subprocess.run([sys.executable, "-m", "client.cli.cluster", "down", "--data-dir", str(data)],
                       capture_output=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip


def main() -> None:
    ap = bench_parser(__doc__, 0)
    ap.add_argument("--mb", type=int, default=24, help="MB (10^6 bytes) of records in the moving partition")
    ap.add_argument("--throttle", type=int, default=1_000_000, help="bytes/s")
    ap.add_argument("--window-num", type=int, default=11, help="replication.quota.window.num (Kafka's: 11)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kl-bench-reassign-"))
    runs: list[Run] = []
    try:
        for i in range(args.runs):
            r = measure(work / f"run{i}", args.mb, args.throttle, args.window_num)
            runs.append(r)
            print(f"run {i + 1}: unthrottled {r.unthrottled_s:.2f} s, throttled {r.throttled_s:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    moved_bytes = runs[0].moved_bytes
    burst = args.throttle * (args.window_num - 1) + FETCH_MAX
    floor = max(0.0, (moved_bytes - burst) / (args.throttle + FETCH_MAX / args.window_num))
    rows = [
        ["unthrottled", median_range([r.unthrottled_s for r in runs], ".2f"),
         median_range([moved_bytes / r.unthrottled_s / 1e6 for r in runs], ".1f"), ""],
        [f"--throttle {args.throttle:,}", median_range([r.throttled_s for r in runs], ".2f"),
         median_range([moved_bytes / r.throttled_s / 1e6 for r in runs], ".2f"), f"{floor:.1f}"],
    ]  # fmt: skip
    body = "\n".join(
        [
            "## Reassignment throttles (issue 27 §2)",
            "",
            f"`.venv/bin/python -m bench.run_reassignment --runs {args.runs} --mb {args.mb} --throttle "
            f"{args.throttle} --window-num {args.window_num}` ({time.strftime('%Y-%m-%d')}): 3 brokers "
            f"(`kl-cluster up`), a partition of {moved_bytes / 1e6:.0f} MB of incompressible records moved from "
            "broker 1 to broker 2 by `kl-reassign-partitions --execute`, timed until the reassignment is done. "
            f"With `--throttle` both rates are set on brokers 1 and 2 (replication.quota.window.num="
            f"{args.window_num}, 1-s samples, replica.fetch.max.bytes={FETCH_MAX:,}); the floor is the least time "
            "Kafka's quota allows (a first burst of rate x (samples - 1) s and a fetch, then the rate). Median "
            f"(min-max) of {args.runs} runs on the shared 2-core machine.",
            "",
            md_table(["move", "seconds", "MB/s", "floor (s)"], rows),
            "",
            "Kafka's sampled rate lets the first burst through at full speed and then holds the throttled "
            "partition until the samples holding it expire, so a move longer than the window averages the rate "
            "(the MB/s column against the rate set), in steps of about a window.",
        ]
    )
    replace_section(args.out, START, END, body)
    print(body)


if __name__ == "__main__":
    main()
