"""kl-perf: kafka-producer-perf-test / kafka-consumer-perf-test / end-to-end latency.

Runs the asyncio clients on one uvloop: the sending loop yields to the sender
every few hundred records, so no thread hand-off sits on the measured path.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import struct
import sys
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from client.accumulator import ProducerBatch
from client.cli.common import (
    bootstrap_option,
    client_config_option,
    client_kwargs,
    command_config_option,
    one_line_errors,
    parse_kv,
)
from client.config import ConsumerConfig, ProducerConfig
from client.consumer import AsyncConsumer, TopicPartition
from client.producer import AsyncProducer
from net.version import version_option

REPORT_INTERVAL = 2.0
_TS = struct.Struct(">q")


def percentiles(values: Sequence[float], ps: tuple[float, ...]) -> list[float]:
    """Nearest-rank percentiles (the smallest value with at least p of the values at or below it), for
    fractions p in (0, 1]; 0.0 each for no values. The one definition kl-perf and every bench script use."""
    if not values:
        return [0.0] * len(ps)
    s = sorted(values)
    return [s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))] for p in ps]


class Stats:
    """Latency and throughput accounting in Kafka's perf-test wording."""

    def __init__(self, record_size: int) -> None:
        self.record_size = record_size
        self.start = time.monotonic()
        self.count = 0
        self.latencies = array("d")
        self.window_start = self.start
        self.window_count = 0
        self.window_lat = array("d")

    def record_batch(self, n: int, latencies: list[float]) -> None:
        self.count += n
        self.window_count += n
        self.latencies.extend(latencies)
        self.window_lat.extend(latencies)

    def _line(self, count: int, elapsed: float, lat: array[float]) -> str:
        rate = count / elapsed if elapsed > 0 else 0.0
        mb = rate * self.record_size / (1024 * 1024)
        avg = sum(lat) / len(lat) if lat else 0.0
        mx = max(lat) if lat else 0.0
        return (
            f"{count} records sent, {rate:.1f} records/sec ({mb:.2f} MB/sec), {avg:.2f} ms avg latency, "
            f"{mx:.2f} ms max latency"
        )

    def maybe_report(self) -> None:
        now = time.monotonic()
        if now - self.window_start >= REPORT_INTERVAL:
            click.echo(self._line(self.window_count, now - self.window_start, self.window_lat) + ".", err=True)
            self.window_start, self.window_count, self.window_lat = now, 0, array("d")

    def summary(self) -> tuple[str, dict[str, Any]]:
        elapsed = time.monotonic() - self.start
        p50, p95, p99, p999 = percentiles(self.latencies, (0.5, 0.95, 0.99, 0.999))
        line = (
            self._line(self.count, elapsed, self.latencies)
            + f", {p50:.0f} ms 50th, {p95:.0f} ms 95th, {p99:.0f} ms 99th, {p999:.0f} ms 99.9th."
        )
        rate = self.count / elapsed if elapsed else 0.0
        return line, {
            "records": self.count,
            "records_per_sec": rate,
            "mb_per_sec": rate * self.record_size / 1048576,
            "p50_ms": p50,
            "p95_ms": p95,
            "p99_ms": p99,
            "p999_ms": p999,
            "max_ms": max(self.latencies) if self.latencies else 0.0,
        }


class Throttle:
    """Keeps a target rate (records/s); -1 means as fast as possible."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.monotonic()

    async def wait(self, sent: int) -> None:
        if self.rate <= 0:
            return
        ahead = sent / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            await asyncio.sleep(ahead)


def _producer_config(props: tuple[str, ...], acks: str, command_config: Path | None = None) -> dict[str, Any]:
    """--command-config, then --producer-props, then --acks: the producer's keyword arguments (schema-checked)."""
    return {**client_kwargs(ProducerConfig, command_config, parse_kv(props, "--producer-props")), "acks": acks}


async def run_produce(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    config: dict[str, Any],
    transaction_duration_ms: int | None = None,
) -> dict[str, Any]:
    """With a transactional.id in `config`, the records go in transactions committed every
    `transaction_duration_ms` (kafka-producer-perf-test's --transaction-duration-ms; default 3000)."""
    producer = AsyncProducer(bootstrap, **config)
    await producer.start()
    await producer.partitions_for(topic)
    transactional = producer.transactional_id is not None
    txn_s = (transaction_duration_ms or 3000) / 1000
    if transactional:
        await producer.init_transactions()
        producer.begin_transaction()
    txn_start = time.monotonic()
    stats = Stats(record_size)

    def on_batch(b: ProducerBatch, _sent: float) -> None:
        now_ms = time.time() * 1000
        stats.record_batch(len(b.records), [now_ms - t for t in b.timestamps])

    producer.on_batch_complete = on_batch
    payload = os.urandom(record_size)
    throttle = Throttle(throughput)
    send = producer.send
    acc = producer.accumulator
    step = 500
    sent = 0
    try:
        while sent < num_records:
            n = min(step, num_records - sent)
            for _ in range(n):
                send(topic, payload)
            sent += n
            # Yield so the sender can run; wait while the buffer is full (backpressure, like max.block.ms).
            await asyncio.sleep(0)
            while acc.buffered >= acc.buffer_memory:
                await asyncio.sleep(0.001)
            await throttle.wait(sent)
            stats.maybe_report()
            if transactional and time.monotonic() - txn_start >= txn_s:
                await producer.commit_transaction()
                producer.begin_transaction()
                txn_start = time.monotonic()
        if transactional:
            await producer.commit_transaction()
        else:
            await producer.flush()
    finally:
        await producer.close()
    line, result = stats.summary()
    click.echo(line)
    return result


async def run_consume(
    bootstrap: str, topic: str, num_records: int, timeout_ms: int, config: dict[str, Any]
) -> dict[str, Any]:
    # This process is ours: decoding may pause the GC (see AsyncConsumer).
    consumer = AsyncConsumer(bootstrap, **{"auto_offset_reset": "earliest", "pause_gc_while_decoding": True, **config})
    await consumer.start()
    await consumer.client.refresh_metadata([topic])
    n = consumer.client.metadata.partition_count(topic)
    if n is None:
        from net.errors import UnknownTopicOrPartitionError

        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    await consumer.assign([TopicPartition(topic, p) for p in range(n)])
    count = nbytes = 0
    start = time.monotonic()
    last_report = start
    window = 0
    try:
        while count < num_records:
            records = await consumer.poll(timeout_ms)
            if not records:
                click.echo(f"no records for {timeout_ms} ms; stopping after {count}", err=True)
                break
            count += len(records)
            window += len(records)
            nbytes += sum(len(r[5]) for r in records if r[5] is not None)
            now = time.monotonic()
            if now - last_report >= REPORT_INTERVAL:
                click.echo(f"{count} records consumed, {window / (now - last_report):.1f} records/sec", err=True)
                last_report, window = now, 0
    finally:
        await consumer.close()
    elapsed = time.monotonic() - start
    mb = nbytes / 1048576
    click.echo("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec")
    click.echo(
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(time.time() - elapsed))}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}, {mb:.4f}, {mb / elapsed:.4f}, {count}, {count / elapsed:.4f}"
    )
    return {"records": count, "records_per_sec": count / elapsed, "mb_per_sec": mb / elapsed}


async def run_end_to_end(
    bootstrap: str, topic: str, seconds: float, throughput: float, record_size: int, config: dict[str, Any]
) -> dict[str, Any]:
    """Produce at a fixed rate with the send time in each value; a consumer measures arrival."""
    consumer = AsyncConsumer(bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=100)
    await consumer.start()
    n = len(await _partitions(consumer, topic))
    await consumer.assign([TopicPartition(topic, p) for p in range(n)])
    await consumer.seek_to_end()
    producer = AsyncProducer(bootstrap, **config)
    await producer.start()
    await producer.partitions_for(topic)
    pad = os.urandom(max(0, record_size - 8))
    total = int(seconds * throughput)
    latencies = array("d")

    async def consume() -> None:
        got = 0
        deadline = time.monotonic() + seconds + 10
        while got < total and time.monotonic() < deadline:
            for r in await consumer.poll(500):
                latencies.append((time.time_ns() - _TS.unpack_from(r.value)[0]) / 1e6)
                got += 1

    reader = asyncio.create_task(consume())
    throttle = Throttle(throughput)
    for i in range(total):
        producer.send(topic, _TS.pack(time.time_ns()) + pad)
        if i % 10 == 9:
            await throttle.wait(i + 1)
    await producer.flush()
    await reader
    await producer.close()
    await consumer.close()
    p50, p99, p999 = percentiles(latencies, (0.5, 0.99, 0.999))
    click.echo(
        f"{len(latencies)} of {total} records at {throughput:.0f} records/sec: end-to-end latency "
        f"{p50:.2f} ms 50th, {p99:.2f} ms 99th, {p999:.2f} ms 99.9th."
    )
    return {"records": len(latencies), "sent": total, "p50_ms": p50, "p99_ms": p99, "p999_ms": p999}


async def _partitions(consumer: AsyncConsumer, topic: str) -> list[int]:
    await consumer.client.refresh_metadata([topic])
    n = consumer.client.metadata.partition_count(topic)
    if n is None:
        from net.errors import UnknownTopicOrPartitionError

        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    return list(range(n))


def _run(coro) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    import uvloop

    return uvloop.run(coro)


def _emit_json(path: str | None, result: dict[str, Any]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f)


@click.group()
@version_option()
def main() -> None:
    """Performance tests in the style of Kafka's perf-test tools."""


@main.command()
@bootstrap_option
@client_config_option("--producer.config")
@click.option("--topic", required=True)
@click.option("--num-records", type=int, required=True)
@click.option("--record-size", type=int, default=100, show_default=True)
@click.option("--throughput", type=float, default=-1, show_default=True, help="Records/s cap; -1 for none.")
@click.option("--acks", default="1", show_default=True, type=click.Choice(["all", "-1", "0", "1"]))
@click.option(
    "--producer-props",
    "props",
    multiple=True,
    metavar="KEY=VALUE",
    help="Producer configs, kafka-producer-perf-test's name for them (kl-produce's is --producer-property).",
)
@click.option("--transactional-id", default=None, help="Produce in transactions with this transactional.id.")
@click.option(
    "--transaction-duration-ms",
    type=int,
    default=None,
    help="Commit a transaction this often (default 3000 with --transactional-id; implies the default id "
    "performance-producer-default-transactional-id without it).",
)
@click.option("--json-out", default=None, help="Also write the result as JSON to this file.")
@one_line_errors
def produce(
    bootstrap_server: str,
    command_config: Path | None,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    acks: str,
    props: tuple[str, ...],
    transactional_id: str | None,
    transaction_duration_ms: int | None,
    json_out: str | None,
) -> None:
    """Like kafka-producer-perf-test."""
    config = _producer_config(props, acks, command_config)
    if transaction_duration_ms is not None and transactional_id is None and "transactional_id" not in config:
        transactional_id = "performance-producer-default-transactional-id"  # kafka-producer-perf-test's default
    if transactional_id is not None:
        config["transactional_id"] = transactional_id
    if config.get("transactional_id") is not None and acks not in ("all", "-1"):
        raise click.UsageError("a transactional producer needs --acks all")
    run = run_produce(bootstrap_server, topic, num_records, record_size, throughput, config, transaction_duration_ms)
    _emit_json(json_out, _run(run))


@main.command()
@bootstrap_option
@client_config_option("--consumer.config")
@click.option("--topic", required=True)
@click.option("--messages", "num_records", type=int, required=True)
@click.option("--timeout-ms", type=int, default=10000, show_default=True)
@click.option("--max-poll-records", type=int, default=10000, show_default=True)
@click.option("--json-out", default=None)
@one_line_errors
def consume(
    bootstrap_server: str,
    command_config: Path | None,
    topic: str,
    num_records: int,
    timeout_ms: int,
    max_poll_records: int,
    json_out: str | None,
) -> None:
    """Like kafka-consumer-perf-test: read from the beginning."""
    config = {**client_kwargs(ConsumerConfig, command_config), "max_poll_records": max_poll_records}
    _emit_json(json_out, _run(run_consume(bootstrap_server, topic, num_records, timeout_ms, config)))


@main.command("end-to-end")
@bootstrap_option
@command_config_option
@click.option("--topic", required=True)
@click.option("--seconds", type=float, default=10, show_default=True)
@click.option("--throughput", type=float, default=10000, show_default=True)
@click.option("--record-size", type=int, default=100, show_default=True)
@click.option("--acks", default="1", show_default=True, type=click.Choice(["all", "-1", "0", "1"]))
@click.option("--producer-props", "props", multiple=True, metavar="KEY=VALUE")
@click.option("--json-out", default=None)
@one_line_errors
def end_to_end(
    bootstrap_server: str,
    command_config: Path | None,
    topic: str,
    seconds: float,
    throughput: float,
    record_size: int,
    acks: str,
    props: tuple[str, ...],
    json_out: str | None,
) -> None:
    """Produce at a fixed rate and report end-to-end latency percentiles."""
    if record_size < 8:
        raise click.UsageError("--record-size must be >= 8 (the send time is in the first 8 bytes)")
    cfg = _producer_config(props, acks, command_config)
    cfg.setdefault("linger_ms", 0)
    _emit_json(json_out, _run(run_end_to_end(bootstrap_server, topic, seconds, throughput, record_size, cfg)))


if __name__ == "__main__":
    sys.exit(main())
