"""Kafka clients against Kafka Lite's Kafka listener, next to our own client on the same broker, same run.

    ./scripts/bench.sh run_kafka_clients [--runs 3] [--num-records 1000000] [--brokers 1,3]

Per run and cluster size (1 broker, acks=1; 3 brokers, RF=3, min.insync.replicas=2, acks=all), on a fresh
broker or kl-cluster with a Kafka listener: confluent-kafka (librdkafka) produces --num-records records
of 100 bytes into a fresh 8-partition topic through the Kafka listener and consumes them all back; our
own client does the same through the native listener (kl-perf produce / consume) on another fresh topic
of the same broker; kafka-python, for reference (it is slow on its own), does it with a tenth of the
records. Each client's produce and consume run in processes of their own, as kl-perf's do. The medians
over the runs, with min–max, and the same-run ratio confluent-kafka / ours go into docs/BENCHMARKS.md;
the targets are issue 13's: confluent-kafka on one broker, acks=1, >= 500,000 msgs/s produce and >=
1,000,000 msgs/s consume.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.peers._common import HOST, free_port, server, temp_dir
from bench.run_cluster import perf, sh, tool
from bench.run_single_broker import OutsideLoad, machine_info
from bench.sections import bench_parser, md_table, median_range, replace_section

START_MARK = "<!-- kafka-clients:start -->"
END_MARK = "<!-- kafka-clients:end -->"
RECORD_SIZE = 100
PARTITIONS = 8
TARGETS = {"produce": 500_000, "consume": 1_000_000}  # confluent-kafka, 1 broker, acks=1


# --- the clients, each in its own process --------------------------------------------------------------


def _confluent_produce(bootstrap: str, topic: str, n: int, acks: str, out: mp.Queue) -> None:
    from confluent_kafka import Producer

    value = b"x" * RECORD_SIZE
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000}
    )
    failed = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: let librdkafka send
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(300)
    produce_s = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} confluent-kafka deliveries failed, first: {failed[0]}")
    out.put({"produce": n / produce_s})


def _confluent_consume(bootstrap: str, topic: str, n: int, acks: str, out: mp.Queue) -> None:
    """In a process of its own, as kl-perf consume runs apart from kl-perf produce."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            # librdkafka stops fetching for fetch.queue.backoff.ms (default 1 s) whenever its local queue is
            # full, which a Python loop reading 100-byte records keeps it: 325k msgs/s with the default,
            # 1.8M with 10 ms on this machine. A throughput set-up, stated in the section.
            "fetch.queue.backoff.ms": 10,
        }
    )
    # Connected, with the topic's metadata, before the clock starts: kl-perf consume starts its clock there too.
    c.list_topics(topic, timeout=30)
    c.assign([TopicPartition(topic, q, 0) for q in range(PARTITIONS)])
    got, t0 = 0, time.perf_counter()
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                got += 1
    consume_s = time.perf_counter() - t0
    c.close()
    if got != n:
        raise RuntimeError(f"confluent-kafka read {got} of {n} records")
    out.put({"consume": n / consume_s})


def _kafka_python(bootstrap: str, topic: str, n: int, acks: str, out: mp.Queue) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    value = b"x" * RECORD_SIZE
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1 if acks == "1" else "all", linger_ms=5)
    t0 = time.perf_counter()
    for i in range(n):
        p.send(topic, value, partition=i % PARTITIONS)
    p.flush(300)
    produce_s = time.perf_counter() - t0
    p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000)
    c.assign([TopicPartition(topic, q) for q in range(PARTITIONS)])
    c.seek_to_beginning()
    got, t0 = 0, time.perf_counter()
    while got < n:
        batches = c.poll(timeout_ms=1000, max_records=10_000)
        if not batches:
            break
        got += sum(len(v) for v in batches.values())
    consume_s = time.perf_counter() - t0
    c.close()
    if got != n:
        raise RuntimeError(f"kafka-python read {got} of {n} records")
    out.put({"produce": n / produce_s, "consume": n / consume_s})


def _in_process(target: object, *args: object) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, out))
    proc.start()
    try:
        result = out.get(timeout=900)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    return result


def ours(native: str, topic: str, n: int, acks: str) -> dict[str, float]:
    common = ["--bootstrap-server", native, "--topic", topic]
    p = perf(["produce", *common, "--num-records", str(n), "--record-size", str(RECORD_SIZE), "--acks", acks])
    c = perf(["consume", *common, "--messages", str(n)])
    return {"produce": p["records_per_sec"], "consume": c["records_per_sec"]}


# --- the brokers ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def one_broker() -> Iterator[tuple[str, str]]:
    with temp_dir("bench-kafka-clients-") as d:
        port, kafka_port = free_port(), free_port()
        argv = [tool("kl-broker"), "start", "--id", "1", "--host", HOST, "--port", str(port)]
        argv += ["--kafka-port", str(kafka_port), "--data-dir", str(d / "data")]
        with server(argv, port, d):
            yield f"{HOST}:{port}", f"{HOST}:{kafka_port}"


@contextlib.contextmanager
def three_brokers() -> Iterator[tuple[str, str]]:
    d = Path(tempfile.mkdtemp(prefix="bench-kafka-clients-3-"))
    try:
        for _ in range(20):  # two runs of three free ports: retry when a neighbour was taken
            base, kafka_base = free_port(), free_port()
            argv = [
                tool("kl-cluster"),
                "up",
                "--brokers",
                "3",
                "--base-port",
                str(base),
                "--kafka-base-port",
                str(kafka_base),
                "--metrics-base-port",
                "-1",
                "--data-dir",
                str(d),
            ]
            try:
                up = sh(argv, 120)
                break
            except RuntimeError as e:
                if "in use" not in str(e) and "overlaps" not in str(e):
                    raise
        else:
            raise RuntimeError("no free ports for a 3-broker kl-cluster")
        native = up.splitlines()[0].strip()
        kafka = ",".join(f"{HOST}:{kafka_base + i}" for i in range(3))
        yield native, kafka
    finally:
        subprocess.run([tool("kl-cluster"), "down", "--data-dir", str(d)], capture_output=True, timeout=60)
        subprocess.run(["rm", "-rf", str(d)])


def create(native: str, topic: str, rf: int) -> None:
    argv = [
        tool("kl-topics"),
        "--bootstrap-server",
        native,
        "--create",
        "--topic",
        topic,
        "--partitions",
        str(PARTITIONS),
        "--replication-factor",
        str(rf),
    ]
    if rf > 1:
        argv += ["--config", "min.insync.replicas=2"]
    sh(argv, 60)


def measure(brokers: int, n: int) -> dict[str, dict[str, float]]:
    acks, rf = ("1", 1) if brokers == 1 else ("all", 3)
    cm = one_broker() if brokers == 1 else three_brokers()
    with cm as (native, kafka):
        results = {}
        for topic in ("ck", "kl", "kp"):  # confluent-kafka, ours, kafka-python
            create(native, topic, rf)
        time.sleep(1)  # every broker has applied the topics
        results["confluent"] = {
            **_in_process(_confluent_produce, kafka, "ck", n, acks),
            **_in_process(_confluent_consume, kafka, "ck", n, acks),
        }
        results["ours"] = ours(native, "kl", n, acks)
        results["kafka-python"] = _in_process(_kafka_python, kafka, "kp", max(n // 10, 1000), acks)
    return results


def render(results: dict[int, list[dict[str, dict[str, float]]]], cmd: str, n: int, outside: list[float]) -> str:
    m = machine_info()
    rows, targets = [], []
    for brokers, runs in results.items():
        setup = "1 broker, acks=1" if brokers == 1 else "3 brokers, RF=3, acks=all"
        for what in ("produce", "consume"):
            vals = {c: [r[c][what] for r in runs] for c in ("confluent", "ours", "kafka-python")}
            ratio = [r["confluent"][what] / r["ours"][what] for r in runs]
            rows.append(
                [
                    setup,
                    what,
                    median_range(vals["confluent"]),
                    median_range(vals["ours"]),
                    median_range(ratio, ".2f"),
                    median_range(vals["kafka-python"]),
                ]
            )
            if brokers == 1:
                med = sorted(vals["confluent"])[len(vals["confluent"]) // 2]
                targets.append(
                    [
                        f"confluent-kafka {what} ≥ {TARGETS[what]:,} msgs/s, 1 broker, acks=1",
                        median_range(vals["confluent"]),
                        "**MET**" if med >= TARGETS[what] else "**MISSED**",
                    ]
                )
    runs = max(len(v) for v in results.values())
    return "\n".join(
        [
            "## Kafka clients on the Kafka listener",
            "",
            "```bash",
            cmd,
            "```",
            "",
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; median of {runs} runs (min–max). Machine: "
            f"{m['cpu']}, {m['nproc']} cores, {m['memory']}, {m['python']}; brokers and clients share the cores. "
            f"{n:,} records of {RECORD_SIZE} B into a fresh {PARTITIONS}-partition topic per client (kafka-python: "
            f"{max(n // 10, 1000):,}), then read back from the beginning; confluent-kafka and kafka-python through "
            "the Kafka listener, ours (kl-perf, batch.size 128 KiB) through the native one, on the same broker(s) "
            "in the same run; each client's produce and consume in processes of their own; the consumers' clocks start "
            "once they are connected and know the topic (as kl-perf consume's does). confluent-kafka: linger.ms=5, "
            "fetch.queue.backoff.ms=10 "
            "(its default of 1 s idles the consumer whenever its local queue fills, 3-5x slower here). Ratio: "
            "confluent-kafka / ours, within each run.",
            "",
            md_table(
                [
                    "Set-up",
                    "Path",
                    "confluent-kafka msgs/s",
                    "Kafka Lite client msgs/s",
                    "Ratio",
                    "kafka-python msgs/s (reference)",
                ],
                rows,
            ),
            "",
            md_table(["Target", "Measured", "Status"], targets),
            "",
            "CPU used by processes outside this benchmark during each run (machine busy time minus the "
            "benchmark's own and its children's), competing for the same cores: "
            + ", ".join(f"run {i + 1}: {c:.2f} cores" for i, c in enumerate(outside))
            + ".",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, 1_000_000)
    ap.add_argument("--brokers", default="1,3", help="cluster sizes (default 1,3)")
    args = ap.parse_args(argv)
    sizes = [int(b) for b in args.brokers.split(",")]
    cmd = " ".join(["./scripts/bench.sh run_kafka_clients", *(sys.argv[1:] if argv is None else argv)])
    results: dict[int, list[dict[str, dict[str, float]]]] = {b: [] for b in sizes}
    outside: list[float] = []
    for run in range(args.runs):
        load = OutsideLoad()
        for b in sizes:
            r = measure(b, args.num_records)
            results[b].append(r)
            print(
                f"run {run + 1}, {b} broker(s): "
                + "; ".join(f"{c} produce {v['produce']:,.0f} consume {v['consume']:,.0f}" for c, v in r.items()),
                flush=True,
            )
        outside.append(load.cores())
        print(f"run {run + 1}: processes outside the benchmark used {outside[-1]:.2f} cores on average", flush=True)
    replace_section(args.out, START_MARK, END_MARK, render(results, cmd, args.num_records, outside))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
