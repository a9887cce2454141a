"""Kafka Lite's end-to-end latency in the peers' process layout: the consumer in its own (spawned)
process, a paced producer in this one, as bench/peers/redis_streams.py and nats_jetstream.py measure
theirs, so the three systems' latencies come from the same arrangement. The broker is the caller's."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from multiprocessing.synchronize import Event

import uvloop

from bench.peers._common import base_value, latency_summary, paced_sends, stamped, stop_child
from client.consumer import AsyncConsumer, TopicPartition
from client.producer import AsyncProducer


async def _consume(bootstrap: str, topic: str, expected: int, timeout: float, ready: Event) -> list[int]:
    # fetch.max.wait.ms as kl-perf end-to-end sets it; our consumer returns a fetch as soon as data is there.
    consumer = AsyncConsumer(bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=100)
    lat: list[int] = []
    try:
        await consumer.start()
        await consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_end()
        await consumer.position(TopicPartition(topic, 0))
        ready.set()
        deadline = time.monotonic() + timeout
        while len(lat) < expected and time.monotonic() < deadline:
            records = await consumer.poll(200)
            now = time.time_ns()  # one receive time per poll, as the peers take one per read
            lat.extend(now - int.from_bytes(r.value[:8], "big") for r in records)
    finally:
        await consumer.close()
    return lat


def _consumer(bootstrap: str, topic: str, expected: int, timeout: float, ready: Event, out: mp.Queue) -> None:
    out.put(uvloop.run(_consume(bootstrap, topic, expected, timeout, ready)))


async def _paced_produce(bootstrap: str, topic: str, rate: int, total: int, seconds: float, value: bytearray) -> int:
    # linger.ms=0: send as soon as records are due, as the peers do (no batching delay on top of the wire).
    producer = AsyncProducer(bootstrap, acks="1", linger_ms=0)
    sent = 0
    try:
        await producer.start()
        await producer.partitions_for(topic)

        async def send(n: int) -> int:
            for _ in range(n):
                producer.send(topic, stamped(value), partition=0)
            return n

        sent = await paced_sends(rate, total, seconds, send)
        await producer.flush()
    finally:
        with contextlib.suppress(Exception):
            await producer.close()
    return sent


def run_latency(
    bootstrap: str, topic: str, rate: int = 10_000, seconds: float = 5.0, record_size: int = 100
) -> dict[str, float | int]:
    """p50/p99/max latency of `rate` msgs/s for `seconds` on partition 0 of an existing topic."""
    total = int(rate * seconds)
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=_consumer, args=(bootstrap, topic, total, seconds + 30, ready, out))
    consumer.start()
    try:
        if not ready.wait(30):
            raise TimeoutError("latency consumer did not start")
        sent = uvloop.run(_paced_produce(bootstrap, topic, rate, total, seconds, base_value(record_size)))
        lat: list[int] = out.get(timeout=seconds + 60)
        consumer.join(10)
    finally:
        stop_child(consumer)
    return latency_summary(lat, sent)
