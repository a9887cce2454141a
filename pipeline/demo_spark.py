"""The Spark side of scripts/demo.sh: its jobs in ONE Spark session, so Spark's start is paid once.

    python -m pipeline.demo_spark WORK --bootstrap-file FILE --data-dir KL [--master local[2]]

1. Starts Spark at once (while the demo starts its cluster, group and producer), then, once FILE holds the
   cluster's bootstrap servers (or with --bootstrap-server), runs the live job
   (`kl-spark stream-hashtags`'s StreamingHashtags) against the brokers: its micro-batches go to stdout,
   its final counts to WORK/stream.json.
2. When WORK/spark-drain appears (the demo creates it once the producer is done and the group has consumed
   everything), the live job reads what the topic holds and stops at once: no idle timeout to sit out.
3. When WORK/segments-final appears (the demo creates it after the cluster's clean shutdown), the batch job
   (`kl-spark hashtags`) runs over the brokers' segment files in the same session: its tables go to
   WORK/spark.log, its totals to WORK/spark.json.

Each stage's start and duration go to stderr with the time since the demo's start (--since).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

import click

from client.cli.common import one_line_errors
from pipeline.cli import spark_errors

DRAIN = "spark-drain"
SEGMENTS_FINAL = "segments-final"
# The demo's jobs are small (thousands of records): the JVM's start is most of their cost. C1 only (no C2
# compiles competing for the 2 cores) and a single-threaded GC cut the CPU a JVM spends on starting; a long
# job would want C2, so kl-spark keeps the JVM's defaults. bench/spark_start.py measures the difference.
FAST_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1"


def jvm_cpu_seconds(spark: object) -> float | None:
    """CPU seconds (user + system) the session's JVM has used so far (Linux /proc; None elsewhere)."""
    proc = getattr(getattr(getattr(spark, "sparkContext", None), "_gateway", None), "proc", None)
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()  # type: ignore[union-attr]
    except (AttributeError, OSError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


def wait_for_file(path: Path, interval: float = 0.2) -> None:
    while not path.exists():
        time.sleep(interval)


@click.command()
@click.argument("work", type=click.Path(file_okay=False, path_type=Path))
@click.option("--bootstrap-server", "bootstrap", default=None, metavar="HOST:PORT[,HOST:PORT]")
@click.option(
    "--bootstrap-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Wait for this file and read the bootstrap servers from it: Spark starts while the cluster does.",
)
@click.option("--data-dir", required=True, metavar="DIR", help="The cluster's data directory (kl-cluster).")
@click.option("--topic", default="tweets", show_default=True)
@click.option("--to-topic", default="hashtag-counts", show_default=True)
@click.option("--window", default="30s", show_default=True)
@click.option("--watermark", default="1m", show_default=True)
@click.option("--trigger", "every", default="3 seconds", show_default=True)
@click.option("--top", "top_n", type=int, default=10, show_default=True)
@click.option("--master", default="local[2]", show_default=True)
@click.option("--since", type=float, default=None, help="Epoch seconds the demo's clock counts from.")
@one_line_errors
@spark_errors
def main(
    work: Path,
    bootstrap: str | None,
    bootstrap_file: Path | None,
    data_dir: str,
    topic: str,
    to_topic: str,
    window: str,
    watermark: str,
    every: str,
    top_n: int,
    master: str,
    since: float | None,
) -> None:
    """The demo's live and batch Spark jobs in one Spark session."""
    from pipeline import options as opt
    from pipeline.cli import run_hashtags
    from pipeline.session import spark_session
    from pipeline.streaming_job import StreamingHashtags

    if (bootstrap is None) == (bootstrap_file is None):
        raise click.UsageError("give one of --bootstrap-server and --bootstrap-file")
    t_start = time.time() if since is None else since

    def note(what: str) -> None:
        click.echo(f"[{time.time() - t_start:5.1f}s] {what}", err=True)

    t0 = time.monotonic()
    # Two cores: as many shuffle partitions as cores, not Spark's 200 (or the CLI's 8), for 4,000 records;
    # on local[N] the driver is the executor, so its JVM options are the executors' too.
    conf = {"spark.sql.shuffle.partitions": "2"}
    if master.startswith("local"):
        conf["spark.driver.extraJavaOptions"] = FAST_START_JVM
    spark = spark_session(master, "kl-spark demo", conf)
    note(
        f"spark {spark.version} on {spark.sparkContext.master} started in {time.monotonic() - t0:.1f}s "
        f"(JVM CPU {jvm_cpu_seconds(spark) or 0:.1f}s)"
    )
    try:
        if bootstrap is None:
            wait_for_file(bootstrap_file)  # type: ignore[arg-type]  # checked before Spark started
            bootstrap = bootstrap_file.read_text().strip()
        live = StreamingHashtags(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"},
            window,
            watermark,
            to_topic,
            str(work / "stream-checkpoint"),
            every,
        )
        threading.Thread(target=lambda: (wait_for_file(work / DRAIN), live.drain()), daemon=True).start()
        t0 = time.monotonic()
        live.run_in(spark, None, str(work / "stream.json"))
        sys.stdout.flush()
        note(f"live job drained and stopped ({time.monotonic() - t0:.1f}s after it started)")

        wait_for_file(work / SEGMENTS_FINAL)
        t0 = time.monotonic()
        options = {"path": data_dir, "subscribe": topic}
        opt.plan_read(options)  # the same checks as kl-spark hashtags before it loads
        df = spark.read.format("kafkalite").options(**options).load()
        with open(work / "spark.log", "w") as out, contextlib.redirect_stdout(out):
            run_hashtags(df, top_n, window, None, "csv", str(work / "spark.json"), t0)
        note(f"batch job over the segment files took {time.monotonic() - t0:.1f}s (same session)")
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
