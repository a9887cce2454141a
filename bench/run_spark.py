"""Spark scan benchmark: the `kafkalite` data source over segment files vs Spark reading the same
records as Parquet, in the same run, on local[2].

    .venv/bin/python -m bench.run_spark [--records 10000000] [--runs 3] [--out docs/BENCHMARKS.md]

1. A fresh broker (one partition per core plus one: 3 partitions, segment.bytes 128 MiB) gets N keyed
   records of ~100-byte values from the Python producer (acks=1), then is stopped cleanly.
2. Spark (local[2]) scans the segment files: every column of the Kafka schema is produced and the
   rows are written to Spark's `noop` sink (a full scan, nothing kept). Median of `--runs`.
3. The same records are exported to Parquet with `kl-spark export`'s code path (not timed against
   the scan), and Spark scans the Parquet files the same way. Median of `--runs`.
4. The profile of the gap: the same Arrow batches the kafkalite source builds, decoded once ahead (timed:
   our Python decoding, single-threaded) and saved as Arrow IPC files, are scanned through a Python data
   source that only memory-maps them (bench/spark_floor.py): Spark's own cost of any Python source.
5. The ratio kafkalite time / Parquet time is the figure; the goal is within 1.5x.
6. Streaming: the broker is started again on the same files, and a `readStream.format("kafkalite")` query
   (startingOffsets earliest, trigger availableNow, to the `noop` sink) reads every record through the
   broker protocol; records/s end to end, median of `--runs`, each with a fresh checkpoint.
The section between `<!-- spark:start -->` and `<!-- spark:end -->` of docs/BENCHMARKS.md is rewritten.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.sections import replace_section

ROOT = Path(__file__).resolve().parent.parent
START_MARK = "<!-- spark:start -->"
END_MARK = "<!-- spark:end -->"
GOAL_RATIO = 1.5
PARTITIONS = 3
POOL = 200_003  # distinct tweets cycled through (prime: no alignment with batches)
MISSED_NOTE = """ What is left above the floor is our decoding's share of the two cores (CRC checks and the
copy of every key and value into Arrow's buffers, which any reader of this format pays) and the floor itself,
Spark's cost for a Python source, which no change on our side removes."""


def produce(data_dir: Path, records: int) -> tuple[float, float]:
    """Start a broker, fill the topic, stop it cleanly; returns records/s of the load, mean value size."""
    from bench.peers._common import HOST, free_port, server
    from client import Admin, NewTopic, Producer
    from client.cli.cluster import start_command
    from pipeline.tweets.generator import SyntheticTweets

    port = free_port()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    # server() stops the broker with SIGTERM, a clean shutdown: the segment files are complete when it returns
    with server(start_command(1, port, data_dir, host=HOST), port, data_dir.parent):
        bootstrap = f"{HOST}:{port}"
        with Admin(bootstrap) as a:
            a.create_topics([NewTopic("bench", PARTITIONS, 1, configs={"segment.bytes": str(128 * 1024 * 1024)})])
        # Realistic records: the demo's synthetic tweets (JSON, key = user id), a pool cycled through.
        gen = SyntheticTweets(["DataEngineering"], seed=11, bursts=False)
        pool = [(t.key, t.to_json()) for t in (gen.make(1_780_000_000_000 + i) for i in range(POOL))]
        t0 = time.monotonic()
        with Producer(bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024) as p:
            send = p.send
            for i in range(records):
                key, value = pool[i % POOL]
                send("bench", value, key=key)
                if i % 1_000_000 == 999_999:
                    print(f"  produced {i + 1:,}", flush=True)
            p.flush()
        rate = records / (time.monotonic() - t0)
    return rate, statistics.mean(len(v) for _, v in pool)


def timed_scan(df) -> float:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    df.write.format("noop").mode("overwrite").save()
    return time.monotonic() - t0


def stream_runs(spark, data: Path, records: int, runs: int, work: Path) -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds for a streaming query to read every record from a live broker on the same files, per run."""
    from bench.peers._common import HOST, free_port, server
    from client.cli.cluster import start_command

    port = free_port()
    times = []
    with server(start_command(1, port, data, host=HOST), port, data.parent):
        for run in range(runs):
            df = (
                spark.readStream.format("kafkalite")
                .option("kafka.bootstrap.servers", f"{HOST}:{port}")
                .option("subscribe", "bench")
                .option("startingOffsets", "earliest")
                .load()
            )
            t0 = time.monotonic()
            q = (
                df.writeStream.format("noop")
                .option("checkpointLocation", str(work / f"stream-checkpoint-{run}"))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            times.append(time.monotonic() - t0)
            read = sum(p["numInputRows"] for p in q.recentProgress)
            assert read == records, f"the streaming query read {read} records, expected {records}"
            print(f"  stream run {run + 1}: {times[-1]:.2f}s ({records / times[-1]:,.0f} records/s)", flush=True)
    return times


def _runs(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    ap.add_argument("--work", type=Path, default=None, help="Keep data here (default: a temp dir, removed)")
    args = ap.parse_args()

    started = time.monotonic()
    work = args.work or Path(tempfile.mkdtemp(prefix="kl-bench-spark-"))
    data = work / "broker"
    pq = work / "parquet"
    try:
        print(f"producing {args.records:,} records into {data} ...", flush=True)
        load_rate, value_size = produce(data, args.records)
        disk = sum(f.stat().st_size for f in data.rglob("bench-*/*.log"))

        segments = len(list(data.rglob("bench-*/*.log")))
        print(f"  {load_rate:,.0f} records/s; {disk / 1e6:,.0f} MB in {segments} segments", flush=True)

        from bench.spark_floor import PrebuiltArrowSource, write_ipc

        decode_s, decoded = write_ipc(data, "bench", work / "ipc")
        assert decoded == args.records, f"decoded {decoded} records, expected {args.records}"
        print(f"  decoded to Arrow in {decode_s:.2f}s on one core ({decoded / decode_s:,.0f} records/s)", flush=True)

        # Python workers import bench.spark_floor by name: bench/ is not an installed package.
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        from pipeline.session import spark_session

        spark = spark_session(args.master, "bench-spark", {"spark.driver.memory": "3g"})
        spark.dataSource.register(PrebuiltArrowSource)
        floor = spark.read.format("prebuiltarrow").option("dir", str(work / "ipc")).load()
        assert floor.count() == args.records
        src = spark.read.format("kafkalite").option("path", str(data)).option("subscribe", "bench").load()
        n = src.count()
        assert n == args.records, f"kafkalite read {n} records, expected {args.records}"
        tasks = src.rdd.getNumPartitions()

        t0 = time.monotonic()
        src.write.mode("overwrite").partitionBy("topic", "partition").parquet(str(pq))
        export_s = time.monotonic() - t0
        pq_bytes = sum(f.stat().st_size for f in pq.rglob("*.parquet"))
        cols = [f.name for f in src.schema.fields]
        parquet = spark.read.parquet(str(pq)).select(*cols)
        assert parquet.count() == args.records

        kl_times, pq_times, floor_times = [], [], []
        for run in range(args.runs):
            kl_times.append(timed_scan(src))
            pq_times.append(timed_scan(parquet))
            floor_times.append(timed_scan(floor))
            print(
                f"  run {run + 1}: kafkalite {kl_times[-1]:.2f}s, parquet {pq_times[-1]:.2f}s, "
                f"prebuilt arrow {floor_times[-1]:.2f}s",
                flush=True,
            )
        stream_times = stream_runs(spark, data, args.records, args.runs, work)
        spark.stop()
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)

    kl, pqm, fl = statistics.median(kl_times), statistics.median(pq_times), statistics.median(floor_times)
    st = statistics.median(stream_times)
    ratio = kl / pqm
    status = "MET" if ratio <= GOAL_RATIO else "MISSED"
    missed = MISSED_NOTE if status == "MISSED" else ""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    cmd = f".venv/bin/python -m bench.run_spark --records {args.records} --runs {args.runs}"
    if args.master != "local[2]":
        cmd += f" --master '{args.master}'"
    body = f"""## Spark over segment files

Generated by `bench/run_spark.py`; do not edit by hand.

```bash
{cmd}
```

- Date: `{time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())}` (took {(time.monotonic() - started) / 60:.1f} min)
- Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, pyspark {pyspark.__version__}, {java}
- Data: {args.records:,} synthetic tweets (`kl-tweets` generator: JSON values of {value_size:.0f} bytes on
  average, key = user id; {POOL:,} distinct tweets cycled), no compression, in
  {PARTITIONS} partitions, {segments} segment files, {disk / 1e6:,.0f} MB, written by a real broker (acks=1,
  {load_rate:,.0f} records/s from the Python producer) and read after a clean shutdown.
- Scan: Spark `{args.master}`, every column of the Kafka schema, rows to the `noop` sink;
  the kafkalite scan ran as {tasks} tasks. Parquet: the same records exported by Spark
  (`partitionBy("topic", "partition")`, {pq_bytes / 1e6:,.0f} MB, export took {export_s:.1f}s), scanned the same way.
  Median of {args.runs} runs, alternating.

| Scan ({args.records:,} records) | Median time | Records/s | Runs |
|---|---|---|---|
| `kafkalite` source (segment files) | {kl:.2f} s | {args.records / kl:,.0f} | {_runs(kl_times)} |
| Parquet (same records) | {pqm:.2f} s | {args.records / pqm:,.0f} | {_runs(pq_times)} |
| profile: same Arrow batches, prebuilt (no decoding) | {fl:.2f} s | {args.records / fl:,.0f} | {_runs(floor_times)} |

Our decoding alone (segment files to the Arrow batches, `pipeline/arrow_reader.py` and
`pipeline/columnar.py`, one core, outside Spark): {decode_s:.2f} s, {args.records / decode_s:,.0f} records/s.

| Target | Measured | Status |
|---|---|---|
| kafkalite scan within {GOAL_RATIO:g}x of Parquet | {ratio:.2f}x | **{status}** |

Where the time goes: Spark's path for any Python data source (a Python worker per task, Arrow batches
over its socket into the JVM, then rows) takes {fl / pqm:.2f}x Parquet's time by itself, before any decoding;
our decoding adds the remaining {max(kl - fl, 0):.2f} s ({decode_s:.1f} s of one core, shared by the 2 cores with
the JVM). The decoding makes no Python object per record: per read buffer (4 MiB of segment file), Python checks
each batch's header and CRC (`net/batch.py`), and one compiled pass (numba) walks the varint records into arrays
of offsets, timestamps and key/value positions, a second copies keys and values into Arrow's buffers.{missed}

Streaming (`readStream.format("kafkalite")` from the broker on the same files, every record through the broker
protocol, trigger availableNow, `noop` sink, {args.master}): median {st:.2f} s, **{args.records / st:,.0f} records/s**
end to end (runs: {_runs(stream_times)}); the batch scan of the files reads {args.records / kl:,.0f} records/s.
"""
    replace_section(args.out, START_MARK, END_MARK, body)
    print(body)
    print(f"wrote the spark section of {args.out}")
    sys.exit(0)


if __name__ == "__main__":
    main()
