"""Three-broker benchmark: RF=3, acks=all, min.insync.replicas=2, 100-byte values.

    .venv/bin/python -m bench.run_cluster [--runs 3] [--num-records 1000000] [--out docs/BENCHMARKS.md]

Per run, on a fresh local cluster (kl-cluster, loopback): produce throughput (kl-perf produce, 3 partitions),
consume throughput (kl-perf consume), produce latency at a fixed 10,000 msgs/s (kl-perf produce
--throughput), and failover time: a producer sends to one partition every millisecond with acks=all, its
leader is SIGKILLed, and the time from the kill to the first acknowledgement after it (necessarily from
the successor) is taken.
The latency step follows a one-second warm-up on its fresh topic. Medians over the runs go into the
cluster section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peers._common import free_port
from bench.run_single_broker import machine_info
from bench.sections import bench_parser
from bench.timeline import first as first_mark
from bench.timeline import log_rows, phase_lines, print_rows, trace_client

START_MARK = "<!-- cluster:start -->"
END_MARK = "<!-- cluster:end -->"
TARGETS = {"produce": 250_000, "p99_ms": 10.0, "failover_s": 3.0}
VENV_BIN = Path(sys.executable).parent


def installed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a broker a benchmark starts, as an installed package runs: with its bytecode cached
    (pip compiles it at install). A sandbox's PYTHONDONTWRITEBYTECODE would make every (re)start compile the
    broker's modules again, seconds on a busy machine; the cache goes to a directory of its own in /tmp."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "kl-bench-pycache")
    return {**env, **(extra or {})}


def tool(name: str) -> str:
    return str(VENV_BIN / name)


def sh(argv: list[str], timeout: float = 600) -> str:
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if cp.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {cp.stderr.strip()[-500:]}")
    return cp.stdout


class Cluster:
    def __init__(self, overrides: tuple[str, ...] = (), kafka: bool = False) -> None:
        """`overrides`: broker configs KEY=VALUE passed to every broker (kl-cluster up --override); `kafka`: with
        Kafka listeners too (their bootstrap in `kafka_bootstrap`)."""
        self.dir = Path(tempfile.mkdtemp(prefix="kl-bench-cluster-"))
        self.base = free_port()
        self.kafka_bootstrap = ""
        while True:  # three consecutive free ports (twice with Kafka listeners)
            kafka_base = free_port() if kafka else 0
            try:
                lines = sh(
                    [
                        tool("kl-cluster"),
                        "up",
                        "--brokers",
                        "3",
                        "--base-port",
                        str(self.base),
                        "--data-dir",
                        str(self.dir),
                        *(["--kafka-base-port", str(kafka_base)] if kafka else []),
                        *(x for o in overrides for x in ("--override", o)),
                    ],
                    60,
                ).splitlines()
                break
            except RuntimeError as e:
                if "in use" not in str(e) and "overlaps" not in str(e):
                    raise
                self.base = free_port()
        self.bootstrap = lines[0]  # then, with Kafka listeners, theirs, then a "# ports: ..." line
        if kafka:
            self.kafka_bootstrap = lines[1].strip()

    def state(self) -> dict:
        return json.loads((self.dir / "cluster.json").read_text())

    def create(self, topic: str, partitions: int) -> None:
        sh(
            [
                tool("kl-topics"),
                "--bootstrap-server",
                self.bootstrap,
                "--create",
                "--topic",
                topic,
                "--partitions",
                str(partitions),
                "--replication-factor",
                "3",
                "--config",
                "min.insync.replicas=2",
            ],
            60,
        )

    def down(self) -> None:
        subprocess.run([tool("kl-cluster"), "down", "--data-dir", str(self.dir)], capture_output=True, timeout=60)
        if os.environ.get("KL_BENCH_KEEP"):
            print(f"kept {self.dir} (KL_BENCH_KEEP)", flush=True)
            return
        subprocess.run(["rm", "-rf", str(self.dir)])


def perf(args: list[str], timeout: float = 900) -> dict[str, Any]:
    out = Path(tempfile.mktemp(suffix=".json"))
    sh([tool("kl-perf"), *args, "--json-out", str(out)], timeout)
    result = json.loads(out.read_text())
    out.unlink()
    return result


@dataclass
class FailoverTrace:
    """What the client saw around one failover, in wall-clock seconds (broker logs use the same clock)."""

    topic: str = ""
    partition: int = 0
    victim: int = -1
    controller: int = -1
    kill_wall: float = 0.0
    events: list[tuple[float, str]] = field(default_factory=list)


async def failover_once(c: Cluster, topic: str, partition: int = 0, trace: FailoverTrace | None = None) -> float:
    from client.producer import AsyncProducer
    from net.errors import UnknownTopicOrPartitionError

    producer = AsyncProducer(c.bootstrap, acks="all", linger_ms=0, retry_backoff_ms=20, delivery_timeout_ms=30000)
    await producer.start()
    for _ in range(100):
        # kl-topics returns once the controller committed the topic; the broker we ask may apply it a
        # metadata fetch later.
        try:
            await producer.partitions_for(topic)
            break
        except UnknownTopicOrPartitionError:
            await asyncio.sleep(0.05)
    else:
        raise RuntimeError(f"topic {topic} not in the metadata 5 s after its creation")
    acks: list[float] = []
    kill_at: list[float] = []

    def on_delivery(err: Exception | None, _md: Any) -> None:
        if err is None:
            acks.append(time.monotonic())

    for _ in range(300):  # warm up: leaders known, connections open
        producer.send(topic, b"w" * 100, partition=partition, on_delivery=on_delivery)
        await asyncio.sleep(0.001)
    await producer.flush()
    leader = producer.client.metadata.leader(topic, partition)
    if trace is not None:
        trace.topic, trace.partition, trace.victim = topic, partition, leader or -1
        trace.controller = producer.client.metadata.controller_id
        trace_client(producer, trace.events, (topic, partition))
    pid = c.state()["brokers"][str(leader)]["pid"]
    deadline = time.monotonic() + 30
    os.kill(pid, signal.SIGKILL)
    kill_at.append(time.monotonic())
    if trace is not None:
        trace.kill_wall = time.time()
    while time.monotonic() < deadline and not any(t > kill_at[0] for t in acks):
        producer.send(topic, b"x" * 100, partition=partition, on_delivery=on_delivery)
        await asyncio.sleep(0.001)
    after = [t for t in acks if t > kill_at[0]]
    if trace is not None and after:
        trace.events.append((trace.kill_wall + min(after) - kill_at[0], "client: first ack after the kill"))
    await producer.close(5)
    if not after:
        raise RuntimeError("no acknowledgement within 30 s of the kill")
    return min(after) - kill_at[0]


def failover_timeline(c: Cluster, trace: FailoverTrace) -> tuple[list[tuple[float, str]], dict[str, float]]:
    """Broker log lines and client events after the kill, as (ms since the kill, text), plus the phase marks."""
    rows = log_rows(c.dir.glob("broker-*.log"), trace.kill_wall, trace.events)

    def first(*needles: str, after: float = 0.0) -> float:
        return first_mark(rows, *needles, after=after)

    tp = f"{trace.topic}-{trace.partition}"
    marks: dict[str, float] = {"victim seen gone": first("process is gone")}
    if trace.victim == trace.controller:
        marks["election started"] = first("no controller in epoch")
        marks["voted"] = first("voted for")
        marks["new controller"] = first("became controller")
    marks["fence proposed"] = first("fencing broker")
    marks["fence committed"] = first("liveness update committed", after=marks["fence proposed"])
    marks["successor leads"] = first("became leader of " + tp)
    new_leader = next((text.split(":")[0].split()[-1] for _, text in rows if "became leader of " + tp in text), "?")
    marks["follower switched"] = first("following broker " + new_leader + " for " + tp)
    marks["client sees leader"] = first("client: metadata says leader " + new_leader)
    marks["client sends"] = first("client: produce sent to " + new_leader)
    marks["first ack"] = first("client: first ack")
    return rows, marks


async def pick_partition(c: Cluster, kill: str) -> tuple[str, int]:
    """A partition whose leader is the active controller (kill=controller), is not (non-controller), or failover-0."""
    from client.cluster import KafkaLiteClient

    client = KafkaLiteClient(c.bootstrap)
    try:
        md = await client.refresh_metadata(None)
    finally:
        await client.close()
    candidates = [("failover", 0)] + [("lat", p) for p in range(3)] + [("bench", p) for p in range(3)]
    for topic, p in candidates:
        if kill == "leader" or (md.leader(topic, p) == md.controller_id) == (kill == "controller"):
            return topic, p
    raise RuntimeError(f"no partition fits --kill {kill}")


def failover_only_run(kill: str, timeline: bool) -> tuple[float, dict[str, float]]:
    """Only the failover step, on a fresh cluster with the same topics (so the same placement) as one_run."""
    c = Cluster()
    try:
        c.create("bench", 3)
        c.create("lat", 3)
        c.create("failover", 1)
        topic, p = asyncio.run(pick_partition(c, kill))
        trace = FailoverTrace()
        fo = asyncio.run(failover_once(c, topic, p, trace))
        time.sleep(0.5)  # let the brokers' log lines about the end of the failover reach their files
        rows, marks = failover_timeline(c, trace)
        role = "controller" if trace.victim == trace.controller else "non-controller"
        print(f"  killed broker {trace.victim} ({role}), leader of {topic}-{p}: first ack after {fo:.3f} s", flush=True)
        if timeline:
            print_rows(rows)
        marks["role_is_controller"] = float(trace.victim == trace.controller)
        return fo, marks
    finally:
        c.down()


def produce_args(c: Cluster, topic: str, n: int, *extra: str) -> list[str]:
    return [
        "produce",
        "--bootstrap-server",
        c.bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--record-size",
        "100",
        "--acks",
        "all",
        *extra,
    ]


def one_run(num_records: int) -> dict[str, float]:
    c = Cluster()
    try:
        c.create("bench", 3)
        prod = perf(produce_args(c, "bench", num_records))
        cons = perf(["consume", "--bootstrap-server", c.bootstrap, "--topic", "bench", "--messages", str(num_records)])
        c.create("lat", 3)
        # Warm-up: a new topic's leaders and follower fetchers take a moment to settle (metadata propagation,
        # first NOT_LEADER retries); the latency figure is about steady state, as in Kafka's perf runs.
        perf(produce_args(c, "lat", 5000, "--throughput", "5000"))
        lat = perf(produce_args(c, "lat", 100000, "--throughput", "10000", "--producer-props", "linger.ms=0"))
        c.create("failover", 1)
        fo = asyncio.run(failover_once(c, "failover"))
        return {
            "produce": prod["records_per_sec"],
            "produce_mb": prod["records_per_sec"] * 100 / 1e6,
            "consume": cons["records_per_sec"],
            "p50_ms": lat["p50_ms"],
            "p99_ms": lat["p99_ms"],
            "failover_s": fo,
        }
    finally:
        c.down()


def render(runs: list[dict[str, float]], cmd: str) -> str:
    info = machine_info()

    def med(k: str) -> float:
        return statistics.median(r[k] for r in runs)

    def rng(k: str, fmt: str) -> str:
        vals = [r[k] for r in runs]
        return f"{format(med(k), fmt)} ({format(min(vals), fmt)}–{format(max(vals), fmt)})"

    rows = [
        (
            "Produce msgs/s (3 partitions)",
            rng("produce", ",.0f"),
            f">= {TARGETS['produce']:,}",
            med("produce") >= TARGETS["produce"],
        ),
        ("Produce MB/s", rng("produce_mb", ".1f"), "", None),
        ("Consume msgs/s (3 partitions)", rng("consume", ",.0f"), "", None),
        ("Produce latency p50 at 10,000 msgs/s (ms)", rng("p50_ms", ".1f"), "", None),
        (
            "Produce latency p99 at 10,000 msgs/s (ms)",
            rng("p99_ms", ".1f"),
            f"<= {TARGETS['p99_ms']:.0f}",
            med("p99_ms") <= TARGETS["p99_ms"],
        ),
        (
            "Failover: leader SIGKILL to first ack on successor (s)",
            rng("failover_s", ".2f"),
            f"<= {TARGETS['failover_s']:.0f}",
            med("failover_s") <= TARGETS["failover_s"],
        ),
    ]
    lines = [
        "## Three brokers, RF=3, acks=all, min.insync.replicas=2",
        "",
        f"Command: `{cmd}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; median of {len(runs)} runs (min–max).  ",
        f"Machine: {info.get('cpu', '?')}, {info.get('nproc', '?')} cores, {info.get('memory', '?')}, "
        f"Python {platform_python()}; all three brokers and the client share these cores.",
        "",
        "| Figure | Measured | Target | Status |",
        "|---|---|---|---|",
    ]
    for name, value, target, ok in rows:
        lines.append(f"| {name} | {value} | {target} | {'' if ok is None else ('MET' if ok else 'MISSED')} |")
    lines += [
        "",
        "Failure detection by timeout uses Kafka's defaults (`broker.session.timeout.ms` 9 s, "
        "`controller.quorum.election.timeout.ms` 6 s, heartbeats every 2 s on a thread of their own); a killed "
        "broker is found from its closed connections at once.",
    ]
    return "\n".join(lines) + "\n"


def platform_python() -> str:
    return sys.version.split()[0]


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, 1_000_000)
    ap.add_argument(
        "--only", choices=["failover"], help="run only this step and print its figures (docs/BENCHMARKS.md untouched)"
    )
    ap.add_argument(
        "--kill",
        choices=["leader", "controller", "non-controller"],
        default="leader",
        help="with --only failover: kill failover-0's leader (as the full run does), or a partition leader that "
        "is / is not the active controller",
    )
    ap.add_argument("--timeline", action="store_true", help="with --only failover: print each failover's events")
    a = ap.parse_args(argv)
    if a.only == "failover":
        return failover_only(a.runs, a.kill, a.timeline)
    runs = []
    for i in range(a.runs):
        print(f"run {i + 1}/{a.runs} ...", flush=True)
        r = one_run(a.num_records)
        print("  " + ", ".join(f"{k}={v:,.2f}" for k, v in r.items()), flush=True)
        runs.append(r)
    cmd = f".venv/bin/python -m bench.run_cluster --runs {a.runs} --num-records {a.num_records}"
    section = render(runs, cmd)
    _write(a.out, section)
    print(section)
    return 0


def failover_only(runs: int, kill: str, timeline: bool) -> int:
    times: list[float] = []
    all_marks: list[dict[str, float]] = []
    for i in range(runs):
        print(f"failover run {i + 1}/{runs} ...", flush=True)
        fo, marks = failover_only_run(kill, timeline)
        times.append(fo)
        all_marks.append(marks)
    print(f"\nfailover (s): median {statistics.median(times):.2f} ({min(times):.2f}–{max(times):.2f}) over {runs} runs")
    print("phase marks, ms after the kill: median (min–max)")
    print(f"  (the killed leader was the active controller in {sum(m['role_is_controller'] for m in all_marks):.0f})")
    for name, med, n in phase_lines(all_marks, skip=["role_is_controller"]):
        print(f"  {name:20s} {med}  n={n}")
    return 0


def _write(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{START_MARK}\n{section}{END_MARK}"
    if START_MARK in text and END_MARK in text:
        text = text[: text.index(START_MARK)] + block + text[text.index(END_MARK) + len(END_MARK) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
