"""Transactions (issue 28 §5): what exactly-once costs, on three brokers, same run.

    ./scripts/bench.sh run_transactions [--runs 3] [--num-records 200000]

Per run, on a fresh 3-broker kl-cluster (RF=3, min.insync.replicas=2, acks=all) with a Kafka listener,
confluent-kafka (librdkafka, the client most Kafka users' Python code runs on) through the Kafka listener:
- idempotent produce of --num-records records of 100 B into a fresh 8-partition topic (the baseline);
- transactional produce of the same count into another fresh topic, at 100 and at 10,000 records per
  transaction (begin, produce, commit_transaction), and the latency of each commit_transaction call
  (p50 / p99 over the run's commits);
- read_committed vs read_uncommitted consume of the transactional topic (isolation.level), from the start.
Each client runs in a process of its own. The medians over the runs, with min–max, and the same-run ratio
transactional / idempotent go into docs/BENCHMARKS.md. Targets (issue 28 §5): transactional throughput at
10,000 records per transaction >= 80% of idempotent; commit p99 <= 20 ms.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time

from bench.run_kafka_clients import PARTITIONS, RECORD_SIZE, _in_process, create, three_brokers
from bench.run_single_broker import OutsideLoad, machine_info
from bench.sections import bench_parser, md_table, median_range, replace_section

START_MARK = "<!-- transactions:start -->"
END_MARK = "<!-- transactions:end -->"
PER_TXN = (100, 10_000)
TARGET_RATIO = 0.80  # transactional at 10,000 records per transaction / idempotent
TARGET_COMMIT_P99_MS = 20.0


def _producer(bootstrap: str, extra: dict[str, object]) -> object:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            **extra,
        }
    )


def _send_all(p: object, topic: str, first: int, count: int, failed: list[object]) -> None:
    value = b"x" * RECORD_SIZE

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for i in range(first, first + count):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS, on_delivery=on_delivery)  # type: ignore[attr-defined]
                break
            except BufferError:  # the local queue is full: let librdkafka send
                p.poll(0.01)  # type: ignore[attr-defined]
        if i % 10_000 == 0:
            p.poll(0)  # type: ignore[attr-defined]


def _idempotent(bootstrap: str, topic: str, n: int, out: mp.Queue) -> None:
    p = _producer(bootstrap, {})
    p.list_topics(topic, timeout=30)  # type: ignore[attr-defined]
    failed: list[object] = []
    t0 = time.perf_counter()
    _send_all(p, topic, 0, n, failed)
    p.flush(300)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} idempotent deliveries failed, first: {failed[0]}")
    out.put({"msgs": n / elapsed})


def _transactional(bootstrap: str, topic: str, n: int, per_txn: int, out: mp.Queue) -> None:
    p = _producer(bootstrap, {"transactional.id": f"bench-{topic}-{per_txn}", "transaction.timeout.ms": 60_000})
    p.init_transactions(60)  # type: ignore[attr-defined]
    p.list_topics(topic, timeout=30)  # type: ignore[attr-defined]
    failed: list[object] = []
    commits: list[float] = []  # commit_transaction() once the records are acknowledged: EndTxn alone
    totals: list[float] = []  # from the last send to the commit's return: flush (acks=all) + EndTxn
    t0 = time.perf_counter()
    for first in range(0, n, per_txn):
        p.begin_transaction()  # type: ignore[attr-defined]
        _send_all(p, topic, first, min(per_txn, n - first), failed)
        f0 = time.perf_counter()
        p.flush(60)  # type: ignore[attr-defined]  (commit_transaction would flush first anyway)
        c0 = time.perf_counter()
        p.commit_transaction(60)  # type: ignore[attr-defined]
        c1 = time.perf_counter()
        commits.append((c1 - c0) * 1000)
        totals.append((c1 - f0) * 1000)
    elapsed = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} transactional deliveries failed, first: {failed[0]}")
    out.put({"msgs": n / elapsed, "commits_ms": commits, "totals_ms": totals})


def _consume(bootstrap: str, topic: str, n: int, isolation: str, out: mp.Queue) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 52428800,
            "fetch.queue.backoff.ms": 10,  # see the Kafka clients section
        }
    )
    c.list_topics(topic, timeout=30)
    c.assign([TopicPartition(topic, q, 0) for q in range(PARTITIONS)])
    got, t0 = 0, time.perf_counter()
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                got += 1
    elapsed = time.perf_counter() - t0
    c.close()
    if got != n:
        raise RuntimeError(f"{isolation} consume read {got} of {n} records")
    out.put({"msgs": n / elapsed})


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(n: int) -> dict[str, float]:
    with three_brokers() as (native, kafka):
        topics = ["idem", *(f"txn{k}" for k in PER_TXN)]
        for topic in topics:
            create(native, topic, 3)
        r: dict[str, float] = {"idempotent": _in_process(_idempotent, kafka, "idem", n)["msgs"]}
        for k in PER_TXN:
            t = _in_process(_transactional, kafka, f"txn{k}", n, k)
            r[f"txn{k}"] = t["msgs"]
            if k == PER_TXN[0]:  # many commits: the latency figures
                r["commit_p50"] = statistics.median(t["commits_ms"])
                r["commit_p99"] = _percentile(t["commits_ms"], 0.99)
                r["total_p50"] = statistics.median(t["totals_ms"])
                r["total_p99"] = _percentile(t["totals_ms"], 0.99)
        for isolation in ("read_uncommitted", "read_committed"):
            r[isolation] = _in_process(_consume, kafka, f"txn{PER_TXN[0]}", n, isolation)["msgs"]
    return r


def render(runs: list[dict[str, float]], cmd: str, n: int, outside: list[float]) -> str:
    m = machine_info()

    def col(key: str) -> list[float]:
        return [r[key] for r in runs]

    def ratio(a: str, b: str) -> list[float]:
        return [r[a] / r[b] for r in runs]

    rows = [
        ["Idempotent produce", median_range(col("idempotent")), "1.00"],
        *(
            [
                f"Transactional produce, {k:,} records per transaction",
                median_range(col(f"txn{k}")),
                median_range(ratio(f"txn{k}", "idempotent"), ".2f"),
            ]
            for k in PER_TXN
        ),
        ["Consume, read_uncommitted", median_range(col("read_uncommitted")), "1.00"],
        [
            "Consume, read_committed",
            median_range(col("read_committed")),
            median_range(ratio("read_committed", "read_uncommitted"), ".2f"),
        ],
    ]
    big = statistics.median(ratio(f"txn{PER_TXN[-1]}", "idempotent"))
    p99 = statistics.median(col("commit_p99"))
    total99 = statistics.median(col("total_p99"))
    targets = [
        [
            f"Transactional at {PER_TXN[-1]:,} per transaction ≥ {TARGET_RATIO:.0%} of idempotent",
            f"{big:.2f}",
            "**MET**" if big >= TARGET_RATIO else "**MISSED**",
        ],
        [
            f"commit p99 ≤ {TARGET_COMMIT_P99_MS:.0f} ms: commit_transaction() after flush(), i.e. EndTxn "
            f"({PER_TXN[0]} records per transaction)",
            f"{p99:.1f} ms (p50 {statistics.median(col('commit_p50')):.1f} ms)",
            "**MET**" if p99 <= TARGET_COMMIT_P99_MS else "**MISSED**",
        ],
        [
            f"the same with the flush: from the transaction's last send to the commit's return (the records' "
            f"acks=all round trip, each partition's first batch verified with the coordinator, KIP-890), ≤ "
            f"{TARGET_COMMIT_P99_MS:.0f} ms",
            f"{total99:.1f} ms (p50 {statistics.median(col('total_p50')):.1f} ms)",
            "**MET**" if total99 <= TARGET_COMMIT_P99_MS else "**MISSED**",
        ],
    ]
    return "\n".join(
        [
            "## Transactions (issue 28 §5)",
            "",
            "```bash",
            cmd,
            "```",
            "",
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; median of {len(runs)} runs (min–max). "
            f"Machine: {m['cpu']}, {m['nproc']} cores, {m['memory']}, {m['python']}; brokers and clients share the "
            f"cores. Three brokers (kl-cluster), RF=3, min.insync.replicas=2, acks=all; confluent-kafka through the "
            f"Kafka listener, linger.ms=5 (librdkafka's default, written out; flush() and commit_transaction() send "
            f"at once whatever it says: linger.ms 0 and 100 gave the same flush times); {n:,} records of "
            f"{RECORD_SIZE} B per path into fresh {PARTITIONS}-partition "
            "topics; each client in a process of its own. Ratio: against the first row of its group, within each run.",
            "",
            md_table(["Path", "msgs/s", "Ratio"], rows),
            "",
            md_table(["Target", "Measured", "Status"], targets),
            "",
            # kl-cluster daemonizes its brokers, so they are not this script's children: their CPU shows here too
            "CPU used by processes other than this script and its clients during each run (the three brokers "
            "included: kl-cluster runs them as daemons): "
            + ", ".join(f"run {i + 1}: {c:.2f} cores" for i, c in enumerate(outside))
            + ".",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = bench_parser(__doc__, 200_000).parse_args(argv)
    cmd = " ".join(["./scripts/bench.sh run_transactions", *(sys.argv[1:] if argv is None else argv)])
    runs: list[dict[str, float]] = []
    outside: list[float] = []
    for run in range(args.runs):
        load = OutsideLoad()
        runs.append(measure(args.num_records))
        outside.append(load.cores())
        print(f"run {run + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in runs[-1].items()), flush=True)
    replace_section(args.out, START_MARK, END_MARK, render(runs, cmd, args.num_records, outside))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
