"""kl-spark: Spark batch jobs over broker segment files (hashtags, stats, export), and a streaming job over
running brokers (stream-hashtags).

    kl-spark hashtags --path /tmp/kl --topic tweets --window 1m --top 10 --output out/ --format csv
    kl-spark stream-hashtags --bootstrap-server localhost:9092 --topic tweets --window 30s --watermark 1m \\
                             --to-topic hashtag-counts
    kl-spark stats    --path d1,d2,d3 --topic tweets
    kl-spark export   --path d1 --topic tweets --output tweets.parquet \\
                      --starting-offsets '{"tweets":{"0":100}}'
    spark-submit pipeline/kl_spark.py hashtags --path ... --topic tweets

The options are checked (and the replicas chosen) before Spark starts, so a typo costs no JVM.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import click

from client.cli.common import bootstrap_option, command_config_option, one_line_errors, parse_kv
from net.version import version_option
from pipeline import options as opt
from pipeline.remote import RemotePlan, plan_remote_read
from pipeline.session import SparkSetupError
from pipeline.text import format_table


def _spark_message(e: Exception) -> str:
    """One line out of a Spark/Py4J error: our own error if a task or the planner raised one."""
    text = str(e)
    m = re.search(r"pipeline\.\w+\.(\w+Error): ([^\n]+)", text)
    if m:
        return m.group(2).strip()
    m = re.search(r"(\w+(?:Error|Exception)): ([^\n]+)", text)
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return (m.group(0) if m else first)[:500]


def spark_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Spark's errors (Py4J, AnalysisException, PythonException) become one line too."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, KeyboardInterrupt, ValueError, OSError):
            raise
        except SparkSetupError as e:
            raise click.ClickException(str(e)) from None
        except Exception as e:
            if type(e).__module__.startswith(("pyspark", "py4j")):
                raise click.ClickException(_spark_message(e)) from None
            raise

    return wrapper


@dataclass(frozen=True)
class Source:
    """What every job reads (the data source options) and where Spark runs."""

    paths: tuple[str, ...]
    bootstrap: str | None
    command_config: Any
    topics: tuple[str, ...]
    pattern: str | None
    assign: str | None
    starting_offsets: str | None
    ending_offsets: str | None
    extra: tuple[str, ...]
    master: str | None
    confs: tuple[str, ...]

    def options(self) -> dict[str, str]:
        """The `kafkalite` source options, spelled as Spark's Kafka source spells them."""
        if not self.paths and not self.bootstrap:
            raise click.UsageError("give --path (segment files) or --bootstrap-server (running brokers), or both")
        options = {"path": ",".join(self.paths)} if self.paths else {}
        if self.bootstrap:
            options["kafka.bootstrap.servers"] = self.bootstrap
            options.update({f"kafka.{k}": v for k, v in _client_props(self.command_config).items()})
        if self.topics:
            options["subscribe"] = ",".join(self.topics)
        for key, value in (
            ("subscribePattern", self.pattern),
            ("assign", self.assign),
            ("startingOffsets", self.starting_offsets),
            ("endingOffsets", self.ending_offsets),
        ):
            if value is not None:
                options[key] = value
        options.update(parse_kv(self.extra, "--option"))
        return options


_SOURCE_PARAMS = [f.name for f in fields(Source)]


def source_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the options every job takes and hands them to the command as one `source: Source`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        source = Source(**{name: kwargs.pop(name) for name in _SOURCE_PARAMS})
        return fn(*args, source=source, **kwargs)

    decorators = [
        click.option(
            "--path",
            "paths",
            multiple=True,
            metavar="DIR[,DIR]",
            help="Broker data directories (or a kl-cluster --data-dir); repeat or comma-separate for replicas. "
            "With --bootstrap-server: this host's data directories, read where they hold a committed replica.",
        ),
        click.option(
            "--bootstrap-server",
            "bootstrap",
            default=None,
            metavar="HOST:PORT[,HOST:PORT]",
            help="Plan from running brokers (kafka.bootstrap.servers): each task reads a local replica if its host "
            "has one ($KAFKALITE_DATA_DIR or --path), else fetches from the leader.",
        ),
        command_config_option,
        click.option("--topic", "topics", multiple=True, metavar="TOPIC", help="Topics to read (subscribe)."),
        click.option("--pattern", default=None, metavar="REGEX", help="Read every topic matching (subscribePattern)."),
        click.option("--assign", default=None, metavar="JSON", help='Exact partitions: {"tweets":[0,1]}.'),
        click.option("--starting-offsets", default=None, help='earliest (default) or JSON {"tweets":{"0":23}}.'),
        click.option("--ending-offsets", default=None, help="latest (default) or JSON; exclusive."),
        click.option("--option", "extra", multiple=True, metavar="KEY=VALUE", help="Any other source option."),
        click.option("--master", default=None, help="Spark master: local[*] (default), local[N], spark://HOST:PORT."),
        click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Spark configuration."),
    ]
    for d in reversed(decorators):
        wrapper = d(wrapper)
    return wrapper


def _start(source: Source, app: str, options: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """Plan without Spark first (clear errors, no JVM for a typo), then start Spark and load."""
    options = options or source.options()
    plan = plan_remote_read(options) if source.bootstrap else opt.plan_read(options)
    options = opt.pin_offsets(options, plan.spans)  # Spark reads (every time) exactly what is printed
    from pipeline.session import spark_session

    t0 = time.monotonic()
    spark = spark_session(source.master, app, parse_kv(source.confs, "--conf"))
    click.echo(
        f"spark {spark.version} on {spark.sparkContext.master} (started in {time.monotonic() - t0:.1f}s)", err=True
    )
    df = spark.read.format("kafkalite").options(**options).load()
    return spark, df, plan


def describe_plan(plan: opt.ReadPlan | RemotePlan) -> str:
    if isinstance(plan, RemotePlan):
        spans: dict[tuple[str, int], list] = {}
        for r in plan.ranges:
            span = spans.setdefault((r.topic, r.partition), [r.start, r.end, 0])
            span[0], span[1], span[2] = min(span[0], r.start), max(span[1], r.end), span[2] + 1
        rows = [[t, p, a, b, n] for (t, p), (a, b, n) in sorted(spans.items())]
        return format_table(["topic", "partition", "from", "to (high watermark)", "tasks"], rows)
    rows = [
        [p.topic, p.partition, p.data_dir, p.start, p.end, p.committed, p.committed_source, len(p.slices)]
        for p in plan.partitions
    ]
    return format_table(
        ["topic", "partition", "replica read", "from", "to", "committed", "committed by", "tasks"], rows
    )


@click.group()
@version_option()
def main() -> None:
    """Spark batch jobs over Kafka Lite segment files (the `kafkalite` data source)."""


@main.command()
@one_line_errors
def check() -> None:
    """Check that Spark can run here (Java 17+, pyspark 4, pyarrow) and say which Java is used."""
    from pipeline.session import check_environment

    try:
        click.echo(check_environment())
    except SparkSetupError as e:
        raise click.ClickException(str(e)) from None


@main.command()
@source_options
@click.option("--top", "top_n", type=click.IntRange(1), default=10, show_default=True, help="How many hashtags.")
@click.option("--window", default="1m", show_default=True, help="Tumbling window of event time: 30s, 1m, 1h, ...")
@click.option("--output", default=None, metavar="DIR", help="Write DIR/overall and DIR/windows.")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True)
@click.option("--summary-json", default=None, metavar="FILE", help="Also write the totals and top list as JSON.")
@one_line_errors
@spark_errors
def hashtags(source: Source, top_n: int, window: str, output: str | None, fmt: str, summary_json: str | None) -> None:
    """Top hashtags overall and per time window, counted over distinct tweet ids."""
    from pipeline import jobs

    jobs.window_duration(window)  # a bad --window fails before Spark starts
    t0 = time.monotonic()
    spark, df, plan = _start(source, "kl-spark hashtags")
    try:
        run_hashtags(df, top_n, window, output, fmt, summary_json, t0)
    finally:
        spark.stop()


def run_hashtags(
    df: Any, top_n: int, window: str, output: str | None, fmt: str, summary_json: str | None, t0: float
) -> None:
    """The hashtags job over a loaded DataFrame, in the caller's Spark session (scripts/demo.sh reuses its
    live job's): prints the top lists, writes --output and --summary-json."""
    from pipeline import jobs

    res = jobs.hashtags(df, top_n, window)
    windows = res.windows.collect()
    if output:
        for name, frame in (("overall", res.overall), ("windows", res.windows)):
            w = frame.coalesce(1).write.mode("overwrite")
            (w.option("header", "true").csv if fmt == "csv" else w.parquet)(f"{output}/{name}")
    click.echo(f"read {res.records} records ({res.tweets} distinct tweets) in {time.monotonic() - t0:.1f}s")
    click.echo(f"\ntop {top_n} hashtags overall")
    click.echo(format_table(["rank", "hashtag", "count"], [[i + 1, f"#{h}", c] for i, (h, c) in enumerate(res.top)]))
    click.echo(f"\ntop {top_n} hashtags per {window} window")
    click.echo(
        format_table(
            ["window start", "window end", "rank", "hashtag", "count"],
            [[r["window_start"], r["window_end"], r["rank"], f"#{r['hashtag']}", r["count"]] for r in windows],
        )
    )
    if output:
        click.echo(f"\nwrote {output}/overall and {output}/windows ({fmt})")
    if summary_json:
        with open(summary_json, "w") as f:
            json.dump({"records": res.records, "tweets": res.tweets, "top": res.top}, f)


@main.command()
@source_options
@one_line_errors
@spark_errors
def stats(source: Source) -> None:
    """Per partition: records, bytes, first/last offset and timestamp, distinct keys."""
    from pipeline import jobs

    spark, df, plan = _start(source, "kl-spark stats")
    try:
        df = df.select("topic", "partition", "offset", "timestamp", "key", "value").cache()  # one scan, two queries
        rows = jobs.stats(df)
        per_topic = jobs.distinct_keys(df)
    finally:
        spark.stop()
    click.echo(describe_plan(plan))
    click.echo("")
    click.echo(
        format_table(
            [
                "topic",
                "partition",
                "records",
                "bytes",
                "first offset",
                "last offset",
                "first timestamp",
                "last timestamp",
                "distinct keys",
            ],
            [
                [
                    r["topic"],
                    r["partition"],
                    r["records"],
                    r["bytes"],
                    r["first_offset"],
                    r["last_offset"],
                    r["first_timestamp"],
                    r["last_timestamp"],
                    r["distinct_keys"],
                ]
                for r in rows
            ],
        )
    )
    for topic, n in sorted(per_topic.items()):
        total = sum(r["records"] for r in rows if r["topic"] == topic)
        click.echo(f"{topic}: {total} records, {n} distinct keys")


@main.command()
@source_options
@click.option("--output", required=True, metavar="DIR", help="Parquet output, partitioned topic=/partition=.")
@click.option("--overwrite", is_flag=True, help="Replace DIR if it exists.")
@click.option("--include-headers", is_flag=True, help="Keep record headers (includeHeaders=true).")
@one_line_errors
@spark_errors
def export(source: Source, output: str, overwrite: bool, include_headers: bool) -> None:
    """Write a topic (or an offset range of it) to Parquet, one directory per topic-partition."""
    from pipeline import jobs

    options = source.options()
    if include_headers:
        options["includeHeaders"] = "true"
    t0 = time.monotonic()
    spark, df, plan = _start(source, "kl-spark export", options)
    try:
        written = jobs.export(df, output, "overwrite" if overwrite else "errorifexists")
    finally:
        spark.stop()
    click.echo(format_table(["topic", "partition", "rows"], [list(w) for w in written]))
    click.echo(f"wrote {sum(w[2] for w in written)} records to {output} in {time.monotonic() - t0:.1f}s")


@main.command("stream-hashtags")
@bootstrap_option
@command_config_option
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC", help="Topics to read (subscribe).")
@click.option("--window", default="30s", show_default=True, help="Tumbling window of event time: 30s, 1m, 1h, ...")
@click.option("--watermark", default="1m", show_default=True, help="How late an event may come (and dedup horizon).")
@click.option("--to-topic", default=None, metavar="TOPIC", help="Also write each window's count to this topic.")
@click.option("--starting-offsets", type=click.Choice(["earliest", "latest"]), default="latest", show_default=True)
@click.option("--checkpoint", default=None, metavar="DIR", help="Spark checkpoint dir: a restart goes on from it.")
@click.option("--trigger", "every", default="2 seconds", show_default=True, help="Micro-batch interval.")
@click.option("--max-offsets-per-trigger", type=click.IntRange(1), default=None, help="Cap records per micro-batch.")
@click.option("--idle-timeout", type=click.FloatRange(0, min_open=True), default=None, metavar="SECONDS",
              help="Stop once no record has arrived for this long (else run until Ctrl-C).")  # fmt: skip
@click.option("--summary-json", default=None, metavar="FILE", help="At the end, write the final counts as JSON.")
@click.option("--master", default=None, help="Spark master: local[*] (default), local[N], spark://HOST:PORT.")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Spark configuration.")
@one_line_errors
@spark_errors
def stream_hashtags(
    bootstrap_server: str,
    command_config: Any,
    topics: tuple[str, ...],
    window: str,
    watermark: str,
    to_topic: str | None,
    starting_offsets: str,
    checkpoint: str | None,
    every: str,
    max_offsets_per_trigger: int | None,
    idle_timeout: float | None,
    summary_json: str | None,
    master: str | None,
    confs: tuple[str, ...],
) -> None:
    """Live hashtag counts per window of event time, from running brokers (Structured Streaming).

    Runs until Ctrl-C / SIGTERM, --idle-timeout, or SIGUSR1: that drains it (every record the topics hold
    is read and counted, then it stops), for a caller that knows the input is complete."""
    from pipeline import jobs
    from pipeline.streaming_job import StreamingHashtags

    jobs.window_duration(window)
    jobs.window_duration(watermark)
    options = {
        "kafka.bootstrap.servers": bootstrap_server,
        "subscribe": ",".join(topics),
        "startingOffsets": starting_offsets,
        **{f"kafka.{k}": v for k, v in _client_props(command_config).items()},
    }
    if max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    job = StreamingHashtags(options, window, watermark, to_topic, checkpoint, every)
    job.run(master, parse_kv(confs, "--conf"), idle_timeout, summary_json)


def _client_props(command_config: Any) -> dict[str, str]:
    """--command-config's client properties (security settings), for the source's and sink's kafka.* options."""
    if command_config is None:
        return {}
    from net.config_def import read_properties

    if not command_config.is_file():
        raise click.ClickException(f"--command-config {command_config}: no such file")
    props = dict(read_properties(command_config))
    props.pop("bootstrap.servers", None)
    return props


if __name__ == "__main__":
    sys.exit(main())
