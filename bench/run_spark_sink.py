"""The `kafkalite` Spark sink, exactly once vs at least once (issue 28 §5), same run, interleaved.

    .venv/bin/python -m bench.run_spark_sink [--runs 3] [--num-records 200000] [--out docs/BENCHMARKS.md]

One fresh 3-broker kl-cluster (RF=3, min.insync.replicas=2) and one Spark session (local[2]) for the whole
benchmark; per run, fresh 8-partition topics, and in turn (the order of the two modes alternates run by run):
- batch: `df.write.format("kafkalite")` of --num-records rows (unique values of 100 B, 8 Spark partitions),
  at least once (the default: idempotent producer, acks=all) and with `option("exactlyOnce", "true")` (each task
  writes in a transaction it leaves open, the driver commits the 8 of them once the job succeeded);
- streaming: a `readStream.format("kafkalite")` query (read_committed, startingOffsets earliest,
  maxOffsetsPerTrigger a tenth of the records, micro-batches back to back: 10 of 8 tasks each) over the
  batch step's output, written with `writeStream.format("kafkalite")` in both modes: each micro-batch's
  transactions are committed by the driver before the next one starts, so this shows the commit's cost.
records/s is rows over the wall time of the write (the streaming query: from start(), query start included,
until the last micro-batch's progress is posted, which follows its commit). A warm-up write of each kind and
mode (not timed) comes first. The driver's commit (`commit` of the sink's writer, timed by
bench/spark_sink_timed.py) is reported per job / per micro-batch. Every output topic is checked to hold exactly
--num-records distinct values for a read_committed reader. The section between `<!-- spark-sink:start -->` and
`<!-- spark-sink:end -->` of --out is rewritten.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.run_kafka_clients import PARTITIONS, RECORD_SIZE, create, three_brokers
from bench.run_single_broker import _machine_busy_s, machine_info
from bench.sections import bench_parser, md_table, median_range, replace_section

ROOT = Path(__file__).resolve().parent.parent
START_MARK = "<!-- spark-sink:start -->"
END_MARK = "<!-- spark-sink:end -->"
MODES = ("at-least-once", "exactly-once")
MICRO_BATCHES = 10


def _sink(writer: Any, bootstrap: str, topic: str, mode: str, commit_log: Path) -> Any:
    w = (
        writer.format("kafkalitetimed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("benchCommitLog", str(commit_log))
    )
    return w.option("exactlyOnce", "true") if mode == "exactly-once" else w


def _commits(commit_log: Path) -> list[float]:
    if not commit_log.exists():
        return []
    return [json.loads(line)["ms"] for line in commit_log.read_text().splitlines() if line.strip()]


def verify(spark: Any, bootstrap: str, topic: str, n: int) -> None:
    """The topic holds exactly n records, all distinct, for a read_committed reader: nothing lost, nothing twice."""
    from pyspark.sql.functions import count, countDistinct

    df = (
        spark.read.format("kafkalite")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    total, distinct = df.agg(count("*"), countDistinct("value")).first()
    if total != n or distinct != n:
        raise RuntimeError(f"{topic}: {total} records ({distinct} distinct) read_committed, expected {n}")


def batch_write(spark: Any, bootstrap: str, topic: str, mode: str, n: int, work: Path) -> dict[str, float]:
    log = work / f"{topic}.commits"
    # Each task writes to every partition (as a keyed write would), evenly: the streaming step's 8 input
    # partitions are the same size.
    df = spark.range(0, n, 1, PARTITIONS).selectExpr(
        f"lpad(cast(id AS string), {RECORD_SIZE}, '0') AS value", f"cast(id % {PARTITIONS} AS int) AS partition"
    )
    t0 = time.perf_counter()
    _sink(df.write.mode("append"), bootstrap, topic, mode, log).save()
    elapsed = time.perf_counter() - t0
    verify(spark, bootstrap, topic, n)
    return {"rate": n / elapsed, "commit_ms": statistics.median(_commits(log) or [0.0])}


def stream_write(spark: Any, bootstrap: str, src: str, topic: str, mode: str, n: int, work: Path) -> dict[str, float]:
    log = work / f"{topic}.commits"
    df = (
        spark.readStream.format("kafkalite")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(-(-n // MICRO_BATCHES)))
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select("value")
    )
    t0 = time.perf_counter()
    q = (
        _sink(df.writeStream, bootstrap, topic, mode, log)
        .option("checkpointLocation", str(work / f"{topic}.checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    # Not availableNow: for a Python source Spark hands it ReadAllAvailable then, ignoring maxOffsetsPerTrigger.
    # A micro-batch's progress is posted once its commit is done.
    deadline = time.monotonic() + 1800
    while sum(p["numInputRows"] for p in q.recentProgress) < n:
        if q.exception() is not None or time.monotonic() > deadline:
            q.stop()
            raise RuntimeError(f"streaming {mode} into {topic} did not finish: {q.exception()}")
        time.sleep(0.02)
    elapsed = time.perf_counter() - t0
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    q.stop()
    verify(spark, bootstrap, topic, n)
    commits = _commits(log)
    add_batch = [p["durationMs"].get("addBatch", 0) for p in batches]
    return {
        "rate": n / elapsed,
        "commit_ms": statistics.median(commits or [0.0]),
        "commit_max_ms": max(commits or [0.0]),
        "micro_batches": len(batches),
        "add_batch_ms": statistics.median(add_batch or [0.0]),
    }


def measure_run(spark: Any, bootstrap: str, run: str, n: int, work: Path, flip: bool) -> dict[str, float]:
    """One run: fresh topics, the two modes in turn (reversed when `flip`), batch then streaming."""
    modes = MODES[::-1] if flip else MODES
    r: dict[str, float] = {}
    tags = {"at-least-once": "alo", "exactly-once": "eos"}
    for mode in modes:
        create(bootstrap, f"batch-{tags[mode]}-{run}", 3)
        create(bootstrap, f"stream-{tags[mode]}-{run}", 3)
    for mode in modes:
        b = batch_write(spark, bootstrap, f"batch-{tags[mode]}-{run}", mode, n, work)
        r |= {f"batch {mode} {k}": v for k, v in b.items()}
    for mode in modes:
        s = stream_write(spark, bootstrap, f"batch-alo-{run}", f"stream-{tags[mode]}-{run}", mode, n, work)
        r |= {f"stream {mode} {k}": v for k, v in s.items()}
    return r


def render(runs: list[dict[str, float]], cmd: str, n: int, busy: list[float], loads: list[tuple[float, float]]) -> str:
    m = machine_info()

    def col(key: str) -> list[float]:
        return [r[key] for r in runs]

    def ratio(kind: str) -> list[float]:
        return [r[f"{kind} exactly-once rate"] / r[f"{kind} at-least-once rate"] for r in runs]

    rows = []
    for kind, label in (("batch", "Batch write"), ("stream", f"Streaming, {MICRO_BATCHES} micro-batches")):
        for mode in MODES:
            rows.append(
                [
                    f"{label}, {mode}",
                    median_range(col(f"{kind} {mode} rate")),
                    "1.00" if mode == MODES[0] else median_range(ratio(kind), ".2f"),
                    median_range(col(f"{kind} {mode} commit_ms"), ".1f"),
                    median_range(col(f"{kind} {mode} add_batch_ms")) if kind == "stream" else "",
                ]
            )
    eos = "stream exactly-once"
    share = [r[f"{eos} commit_ms"] / r[f"{eos} add_batch_ms"] for r in runs if r[f"{eos} add_batch_ms"]]
    return "\n".join(
        [
            "## Spark sink: exactly once vs at least once (issue 28 §5)",
            "",
            "```bash",
            cmd,
            "```",
            "",
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; median of {len(runs)} runs (min–max). "
            f"Machine: {m['cpu']}, {m['nproc']} cores, {m['memory']}, {m['python']}; brokers, Spark (local[2]) and "
            "its Python workers share the cores. Three brokers (kl-cluster), RF=3, min.insync.replicas=2; the "
            f"`kafkalite` sink (our producer, idempotent, acks=all) writes {n:,} rows of {RECORD_SIZE} B from "
            f"{PARTITIONS} Spark partitions into a fresh {PARTITIONS}-partition topic per path; `exactlyOnce`: each "
            "task's rows in a transaction the driver commits. Batch: `df.write`; streaming: a `readStream` of the "
            "batch output (read_committed, maxOffsetsPerTrigger a tenth: 10 micro-batches of 8 tasks, back to "
            "back) into `writeStream`. "
            "records/s over the write's wall time (the streaming query's start included); the modes alternate "
            "order run by run; ratio exactly-once / at-least-once within each run. Driver commit: the sink "
            "writer's `commit`, per job or per micro-batch (median of the micro-batches in a run). Every output "
            "topic was checked to hold exactly the rows written, distinct, read with read_committed.",
            "",
            md_table(["Path", "records/s", "Ratio", "Driver commit (ms)", "Micro-batch (ms)"], rows),
            "",
            "Micro-batch: Spark's `addBatch` duration (the tasks' reads and writes, then the driver's commit), "
            "median over the run's micro-batches. Exactly once, the driver's commit of a micro-batch's "
            f"{PARTITIONS} transactions (EndTxn, concurrently on one client) is "
            f"{median_range([100 * x for x in share], '.0f')} % of the micro-batch; each task also asks the "
            "coordinator for its transaction's state (a replay check), then InitProducerId and AddPartitionsToTxn "
            "once, no round trip per record.",
            "",
            "Load (the machine is shared with other sessions; these figures include this benchmark's brokers, "
            "JVM and Python workers): 1-minute load average at each run's start and end: "
            + ", ".join(f"{a:.1f}–{b:.1f}" for a, b in loads)
            + f"; cores busy during each run (of {m['nproc']}): "
            + ", ".join(f"{c:.2f}" for c in busy)
            + ".",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = bench_parser(__doc__, 200_000).parse_args(argv)
    cmd = " ".join([".venv/bin/python -m bench.run_spark_sink", *(sys.argv[1:] if argv is None else argv)])
    # Python workers import bench.spark_sink_timed by name: bench/ is not an installed package.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    from bench.spark_sink_timed import TimedKafkaLiteDataSource
    from pipeline.session import spark_session

    runs: list[dict[str, float]] = []
    busy: list[float] = []
    loads: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="kl-bench-spark-sink-") as tmp, three_brokers() as (native, _kafka):
        spark = spark_session("local[2]", "bench-spark-sink", {"spark.driver.memory": "2g"})
        spark.dataSource.register(TimedKafkaLiteDataSource)
        try:
            # Warm-up (not reported): Spark's Python workers started, every code path run once.
            measure_run(spark, native, "warmup", min(args.num_records, 20_000), Path(tmp), False)
            for run in range(args.runs):
                load0, busy0, t0 = os.getloadavg()[0], _machine_busy_s(), time.monotonic()
                runs.append(measure_run(spark, native, str(run), args.num_records, Path(tmp), run % 2 == 1))
                loads.append((load0, os.getloadavg()[0]))
                busy.append((_machine_busy_s() - busy0) / (time.monotonic() - t0))
                print(f"run {run + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in runs[-1].items()), flush=True)
        finally:
            spark.stop()
    replace_section(args.out, START_MARK, END_MARK, render(runs, cmd, args.num_records, busy, loads))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
