"""`kl-spark stream-hashtags`: the live job. One Structured Streaming query over running brokers whose every
micro-batch is printed as Spark's console sink prints it, written to `--to-topic` with the `kafkalite` sink
(key `window_start|hashtag`, the latest value per key is the count), and kept for the final summary.

Stops on Ctrl-C / SIGTERM, after `--idle-timeout` seconds without a new record, or once drained: on SIGUSR1
(or `drain()`) it reads every record the topics hold now and stops, with no idle wait. Either way the query is
stopped between micro-batches, so what was printed and written is whole."""

from __future__ import annotations

import json
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click

from pipeline import jobs
from pipeline.text import format_table

TOP_N = 10


class StreamingHashtags:
    def __init__(
        self,
        options: dict[str, str],
        window: str,
        watermark: str,
        to_topic: str | None,
        checkpoint: str | None,
        every: str,
    ) -> None:
        self.options = options
        self.window = window
        self.watermark = watermark
        self.to_topic = to_topic
        self.checkpoint = checkpoint
        self.every = every
        self.counts: dict[tuple[str, str, str], int] = {}  # (window start, window end, hashtag) -> latest count
        self.records = 0
        self._stop = threading.Event()
        self._drain = threading.Event()

    def drain(self) -> None:
        """Read what the topics hold now, then stop (the input is known to be complete: no idle wait)."""
        self._drain.set()

    def _sink_options(self) -> dict[str, str]:
        keep = {k: v for k, v in self.options.items() if k.startswith("kafka.")}
        return {**keep, "topic": self.to_topic or ""}

    def _batch(self, batch_df: Any, batch_id: int) -> None:
        """One micro-batch's updated window counts: printed, written to the topic, remembered."""
        batch_df.persist()
        try:
            rows = batch_df.orderBy("window_start", "hashtag").collect()
            if not rows:
                return
            click.echo("-------------------------------------------")
            click.echo(f"Batch: {batch_id}")
            click.echo("-------------------------------------------")
            click.echo(
                format_table(
                    ["window_start", "window_end", "hashtag", "count"],
                    [[r["window_start"], r["window_end"], f"#{r['hashtag']}", r["count"]] for r in rows],
                )
            )
            if self.to_topic:
                # Exactly once: the batch's counts become visible together, and a batch Spark replays after a
                # crash (same query id, same batch id) commits once (pipeline/sink.py).
                query_id = batch_df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
                sink = jobs.as_records(batch_df).write.format("kafkalite").mode("append")
                sink = sink.options(**self._sink_options()).option("exactlyOnce", "true")
                sink.option("txnAppId", f"kl-stream-hashtags-{query_id}").option("txnVersion", str(batch_id)).save()
            for r in rows:
                self.counts[(str(r["window_start"]), str(r["window_end"]), r["hashtag"])] = r["count"]
        finally:
            batch_df.unpersist()

    def run(
        self, master: str | None, conf: dict[str, str], idle_timeout: float | None, summary_json: str | None
    ) -> None:
        """In a Spark session of its own, stopped at the end."""
        from pipeline.session import spark_session

        spark = spark_session(master, "kl-spark stream-hashtags", {"spark.sql.shuffle.partitions": "4", **conf})
        try:
            self.run_in(spark, idle_timeout, summary_json)
        finally:
            spark.stop()

    def run_in(self, spark: Any, idle_timeout: float | None, summary_json: str | None) -> None:
        """In a given Spark session (left running: a caller's next job reuses it)."""
        base = Path(self.checkpoint) if self.checkpoint else Path(tempfile.mkdtemp(prefix="kl-stream-hashtags-"))
        handlers = {signal.SIGINT: self._stop.set, signal.SIGTERM: self._stop.set, signal.SIGUSR1: self.drain}
        before = {}
        if threading.current_thread() is threading.main_thread():  # only there can Python take signals
            before = {sig: signal.signal(sig, lambda *_, f=f: f()) for sig, f in handlers.items()}
        df = spark.readStream.format("kafkalite").options(**self.options).load()
        counts = jobs.stream_hashtags(df, self.window, self.watermark)
        query = (
            counts.writeStream.outputMode("update")
            .foreachBatch(self._batch)
            .option("checkpointLocation", str(base / "hashtags"))
            .trigger(processingTime=self.every)
            .start()
        )
        click.echo(
            f"streaming {self.options['subscribe']} from {self.options['kafka.bootstrap.servers']}: "
            f"{self.window} windows, {self.watermark} watermark, checkpoint {base}"
            + (f", counts to topic {self.to_topic}" if self.to_topic else ""),
            err=True,
        )
        try:
            self._watch(query, idle_timeout)
        finally:
            if query.isActive:
                query.stop()
            for sig, handler in before.items():  # what comes next in the session stops as it did before
                signal.signal(sig, handler)
        self._summary(summary_json)

    def _watch(self, query: Any, idle_timeout: float | None) -> None:
        last_input = time.monotonic()
        seen: set[int] = set()

        def count_new() -> None:
            nonlocal last_input
            for p in query.recentProgress:
                if p["batchId"] in seen:
                    continue
                seen.add(p["batchId"])
                if p["numInputRows"]:
                    self.records += p["numInputRows"]
                    last_input = time.monotonic()

        while query.isActive and not self._stop.is_set():
            self._stop.wait(0.5)
            count_new()
            if self._drain.is_set() and query.isActive:
                click.echo("draining: reading every record the topics hold, then stopping", err=True)
                query.processAllAvailable()  # returns once a micro-batch has committed the topics' ends
                count_new()
                break
            if query.status["isTriggerActive"]:
                last_input = max(last_input, time.monotonic() - 0.5)  # a micro-batch under way is not idle
            if idle_timeout is not None and time.monotonic() - last_input > idle_timeout:
                click.echo(f"no new record for {idle_timeout:g}s: stopping", err=True)
                break
        if query.exception() is not None:
            raise click.ClickException(f"the streaming query failed: {str(query.exception()).splitlines()[0]}")
        # Stop between micro-batches, so what was printed and written is whole.
        deadline = time.monotonic() + 60
        while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.1)
        query.stop()
        count_new()  # the last micro-batch's progress

    def _summary(self, summary_json: str | None) -> None:
        totals: Counter[str] = Counter()
        for (_, _, tag), n in self.counts.items():
            totals[tag] += n
        top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_N]
        click.echo(f"\nread {self.records} records; final counts over {len({k[:2] for k in self.counts})} windows")
        click.echo(format_table(["rank", "hashtag", "count"], [[i + 1, f"#{h}", c] for i, (h, c) in enumerate(top)]))
        if summary_json:
            windows = [[s, e, t, n] for (s, e, t), n in sorted(self.counts.items())]
            with open(summary_json, "w") as f:
                json.dump({"records": self.records, "top": top, "windows": windows}, f)
