"""The two coordination modes side by side: the brokers' own controller quorum (custom, the default) and
ZooKeeper (classic Kafka). Same machine, same run, runs interleaved (custom, zookeeper, custom, ...) so
that background load hits both alike.

Per run and mode, on a fresh 3-broker kl-cluster (`--coordination zookeeper` also starts a local ZooKeeper):
- failover: SIGKILL the leader of a partition, time to the first acknowledged acks=all produce on its
  successor (bench/run_cluster.py failover_once);
- topic creation: an Admin create_topics of 12 partitions (RF=3) until every partition has a leader in
  the metadata (the controller committed it and a broker applied it);
- produce throughput: kl-perf produce, acks=all, 3 partitions, RF=3, min.insync.replicas=2.

Writes docs/BENCHMARKS.md between <!-- modes:start --> and <!-- modes:end --> (median of --runs).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from bench.peers._common import free_port
from bench.run_cluster import Cluster, failover_once, perf, produce_args, sh, tool
from bench.run_single_broker import machine_info
from bench.sections import bench_parser, median_range, replace_section

START_MARK = "<!-- modes:start -->"
END_MARK = "<!-- modes:end -->"
MODES = ("custom", "zookeeper")


class ModeCluster(Cluster):
    """bench/run_cluster.py's Cluster, started with `kl-cluster up --coordination MODE`."""

    def __init__(self, mode: str) -> None:  # noqa: D107 - same fields as Cluster
        import tempfile

        self.mode = mode
        self.dir = Path(tempfile.mkdtemp(prefix=f"kl-bench-modes-{mode}-"))
        while True:
            self.base = free_port()
            try:
                argv = [tool("kl-cluster"), "up", "--brokers", "3", "--base-port", str(self.base)]
                argv += ["--data-dir", str(self.dir), "--coordination", mode]
                self.bootstrap = sh(argv, 90).strip().splitlines()[0]  # then a "# ports: ..." line
                return
            except RuntimeError as e:
                if "in use" not in str(e):
                    raise


def create_topic_time(c: Cluster, partitions: int = 12) -> float:
    from client.admin import NewTopic
    from client.sync import Admin
    from net.errors import UnknownTopicOrPartitionError

    with Admin(c.bootstrap, request_timeout_ms=30000) as a:
        t0 = time.monotonic()
        a.create_topics([NewTopic("twelve", partitions, 3, {"min.insync.replicas": "2"})])
        while time.monotonic() - t0 < 30:
            try:
                parts = a.describe_topics(["twelve"])[0].partitions
            except UnknownTopicOrPartitionError:
                parts = []  # the broker answering has not learnt the topic yet
            if len(parts) == partitions and all(p.leader > 0 for p in parts):
                return time.monotonic() - t0
            time.sleep(0.005)
    raise RuntimeError("12-partition topic without leaders after 30 s")


def one_run(mode: str, num_records: int) -> dict[str, float]:
    c = ModeCluster(mode)
    try:
        topic_s = create_topic_time(c)
        c.create("bench", 3)
        prod = perf(produce_args(c, "bench", num_records))
        c.create("failover", 1)
        fo = asyncio.run(failover_once(c, "failover"))
        return {"failover_s": fo, "create_12_s": topic_s, "produce": prod["records_per_sec"]}
    finally:
        c.down()


def render(results: dict[str, list[dict[str, float]]], cmd: str) -> str:
    m = machine_info()
    info = f"{m['cpu']}, {m['nproc']} cores, {m['memory']}, {m['python']}"

    def cell(mode: str, key: str, fmt: str) -> str:
        return median_range([r[key] for r in results[mode]], fmt)

    runs = len(results[MODES[0]])
    lines = [
        "## Coordination modes: custom quorum vs ZooKeeper",
        "",
        f"Command: `{cmd}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; median of {runs} runs per mode (min–max), "
        "modes interleaved in one run.  ",
        f"Machine: {info}; the brokers, ZooKeeper (one standalone server, Debian's 3.8) and the client share "
        "these cores.",
        "",
        "| Figure | custom (default) | zookeeper |",
        "|---|---|---|",
        f"| Failover: leader SIGKILL to first ack on successor (s) | {cell('custom', 'failover_s', '.2f')} | "
        f"{cell('zookeeper', 'failover_s', '.2f')} |",
        f"| Create a topic of 12 partitions, RF=3, until all have leaders (ms) | "
        f"{cell('custom', 'create_12_ms', '.0f')} | {cell('zookeeper', 'create_12_ms', '.0f')} |",
        f"| Produce msgs/s, acks=all (3 partitions, RF=3) | {cell('custom', 'produce', ',.0f')} | "
        f"{cell('zookeeper', 'produce', ',.0f')} |",
        "",
        "A silent broker is judged after 9 s in both modes: `broker.session.timeout.ms` (custom, with "
        "`controller.quorum.election.timeout.ms` 6 s) and `zookeeper.session.timeout.ms` (ZooKeeper mode; "
        "Kafka's default is 18 s). A killed one is found at once in the custom mode (its closed connections) "
        "and when its session expires in the ZooKeeper mode. Produce throughput does not involve the "
        "coordination at all (the data path is the same "
        "code); it is listed to show that. Which failures each mode survives: docs/ELECTION.md section 8.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, 300_000)
    a = ap.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for i in range(a.runs):
        for mode in MODES:
            print(f"run {i + 1}/{a.runs}, {mode} ...", flush=True)
            r = one_run(mode, a.num_records)
            r["create_12_ms"] = r["create_12_s"] * 1000
            print("  " + ", ".join(f"{k}={v:,.3f}" for k, v in r.items()), flush=True)
            results[mode].append(r)
    cmd = f".venv/bin/python -m bench.run_modes --runs {a.runs} --num-records {a.num_records}"
    section = render(results, cmd)
    replace_section(a.out, START_MARK, END_MARK, section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
