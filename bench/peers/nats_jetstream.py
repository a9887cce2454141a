"""NATS JetStream peer: one file-storage stream, "partitions" are subjects bench.<p> within it.

The client runs on uvloop, as Kafka Lite's does (nats-py supports it).

Durability caveat: JetStream acks once the write reaches the OS; it fsyncs only every sync_interval
(2 min by default), weaker than Redis appendfsync everysec.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event
from pathlib import Path

import nats
import nats.aio.msg
import uvloop
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from bench.peers._common import (
    HOST,
    base_value,
    cpu_seconds,
    free_port,
    gc_paused,
    latency_summary,
    need_binary,
    paced_sends,
    peer_main,
    result,
    server,
    stamped,
    stop_child,
    temp_dir,
)

STREAM = "BENCH"
# Unacked async publishes allowed at once (a producer's in-flight window); 1000 beat 4000 and 10000 here.
IN_FLIGHT = 1000
FETCH = 10_000
DEADLINE_S = 600.0  # hard cap on any single phase


def _server_argv(port: int, workdir: str) -> list[str]:
    return [need_binary("nats-server", "nats-server"), "-js", "-sd", workdir, "-a", HOST, "-p", str(port)]


async def _connect(port: int) -> tuple[nats.NATS, JetStreamContext]:
    nc = await nats.connect(f"nats://{HOST}:{port}", connect_timeout=5, max_reconnect_attempts=0)
    return nc, nc.jetstream(publish_async_max_pending=IN_FLIGHT)


async def _setup_stream(port: int) -> None:
    nc, js = await _connect(port)
    try:
        await js.add_stream(StreamConfig(name=STREAM, subjects=["bench.*"], storage=StorageType.FILE))
        # publish_async does not see "no stream" errors as quickly, so fail early if setup did not stick.
        await js.stream_info(STREAM)
    finally:
        await nc.close()


class _AckErrors:
    """Collects failed publish acks without keeping every future alive."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def __call__(self, fut: asyncio.Future[object]) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None:
            self.errors.append(exc)

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} publishes failed, first: {self.errors[0]!r}")


async def _throughput(
    port: int, num_records: int, record_size: int, partitions: int, server_cpu: Callable[[], float]
) -> tuple[float, float, float]:
    """Produce then consume: their seconds, and the server's CPU seconds between the two (`server_cpu()`)."""
    nc, js = await _connect(port)
    try:
        subjects = [f"bench.{p}" for p in range(partitions)]
        value = bytes(base_value(record_size))
        acks = _AckErrors()
        t0 = time.perf_counter()
        for i in range(num_records):
            (await js.publish_async(subjects[i % partitions], value)).add_done_callback(acks)
        await asyncio.wait_for(js.publish_async_completed(), DEADLINE_S)
        produce_s = time.perf_counter() - t0
        acks.check()
        cpu_after_produce = server_cpu()

        # AckPolicy NONE: a Kafka consumer tracks an offset instead of acking each record, so don't charge that.
        sub = await js.pull_subscribe(
            "bench.*", stream=STREAM, config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
        )
        got = 0
        deadline = time.monotonic() + DEADLINE_S
        t0 = time.perf_counter()
        while got < num_records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed only {got}/{num_records} records")
            with gc_paused():
                msgs = await sub.fetch(min(FETCH, num_records - got), timeout=10)
            got += len(msgs)
            if len(msgs[-1].data) != record_size:
                raise RuntimeError("unexpected value size read back")
        consume_s = time.perf_counter() - t0
        return produce_s, consume_s, cpu_after_produce
    finally:
        await nc.close()


def run(num_records: int, record_size: int = 100, partitions: int = 1) -> dict[str, float]:
    with temp_dir("peer-nats-") as d:
        port = free_port()
        with server(_server_argv(port, str(d)), port, d) as proc:
            uvloop.run(_setup_stream(port))
            cpu0 = cpu_seconds(proc.pid)
            produce_s, consume_s, cpu1 = uvloop.run(
                _throughput(port, num_records, record_size, partitions, lambda: cpu_seconds(proc.pid))
            )
            cpu2 = cpu_seconds(proc.pid)
    return result(num_records, record_size, produce_s, consume_s, (cpu1 - cpu0, cpu2 - cpu1))


NATIVE_SOURCE = Path(__file__).with_name("native") / "nats_js_pub.go"


def native_publisher() -> str:
    """bench/peers/native/nats_js_pub.go built (once, into the venv) with Debian's Go and nats.go, in GOPATH mode
    so nothing is downloaded: `nats bench --js` itself (natscli) is not packaged in Debian."""
    out_dir = Path(sys.prefix) / "bench-bin"
    binary = out_dir / "nats_js_pub"
    if binary.exists() and binary.stat().st_mtime >= NATIVE_SOURCE.stat().st_mtime:
        return str(binary)
    go = need_binary("go", "golang-go golang-github-nats-io-go-nats-dev")
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOCACHE": str(out_dir / "go-cache")}
    built = subprocess.run(
        [go, "build", "-o", str(binary), NATIVE_SOURCE.name],
        cwd=NATIVE_SOURCE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if built.returncode != 0:
        raise RuntimeError(
            f"could not build {NATIVE_SOURCE.name} (needs: apt-get install golang-go "
            f"golang-github-nats-io-go-nats-dev): {built.stderr.strip()[-1500:]}"
        )
    return str(binary)


def run_native(num_records: int, record_size: int = 100, partitions: int = 1) -> dict[str, float]:
    """The same publishes from a compiled client: Go's nats.go, PublishAsync with IN_FLIGHT unacked, as the
    nats-py producer does. What the server takes when the client is not Python."""
    publisher = native_publisher()
    with temp_dir("peer-nats-native-") as d:
        port = free_port()
        with server(_server_argv(port, str(d)), port, d) as proc:
            uvloop.run(_setup_stream(port))
            argv = [publisher, "-url", f"nats://{HOST}:{port}", "-msgs", str(num_records), "-size", str(record_size)]
            argv += ["-subjects", str(partitions), "-window", str(IN_FLIGHT)]
            cpu0 = cpu_seconds(proc.pid)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
            cpu = cpu_seconds(proc.pid) - cpu0
            stored = uvloop.run(_stored(port))
    if done.returncode != 0:
        raise RuntimeError(f"nats_js_pub exited with {done.returncode}: {done.stderr.strip()[-1500:]}")
    out = json.loads(done.stdout)
    if out["errors"] or stored != num_records:
        raise RuntimeError(f"nats_js_pub: {out['errors']} failed publishes, {stored} of {num_records} stored")
    return {
        "produce_msgs_s": num_records / out["seconds"],
        "produce_s": out["seconds"],
        "produce_server_cpu_s": cpu,
        "tool": "nats.go",
    }


async def _stored(port: int) -> int:
    nc, js = await _connect(port)
    try:
        return int((await js.stream_info(STREAM)).state.messages)
    finally:
        await nc.close()


async def _latency_consume(port: int, expected: int, timeout: float, ready: Event) -> list[int]:
    nc, js = await _connect(port)
    lat: list[int] = []
    done = asyncio.Event()

    # A callback rather than next_msg(): next_msg wraps every message in wait_for, whose CPU cost on a
    # small box shows up as latency.
    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        lat.append(time.time_ns() - int.from_bytes(msg.data[:8], "big"))
        if len(lat) >= expected:
            done.set()

    try:
        # Push consumer: nats-py's batched pull fetch lingers until the batch fills, which would measure the
        # fetch size rather than the broker. No flow control: nats-py answers it from a 250 ms polling task,
        # which shows up as 100+ ms stalls in p99.
        await js.subscribe(
            "bench.*",
            stream=STREAM,
            cb=on_msg,
            manual_ack=True,
            config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, flow_control=False),
        )
        await nc.flush()
        ready.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), timeout)
    finally:
        await nc.close()
    return lat


def _latency_consumer(port: int, expected: int, timeout: float, ready: Event, out: mp.Queue) -> None:
    out.put(uvloop.run(_latency_consume(port, expected, timeout, ready)))


async def _paced_produce(port: int, rate: int, total: int, seconds: float, value: bytearray) -> int:
    nc, js = await _connect(port)
    acks = _AckErrors()
    sent = 0
    try:

        async def send(n: int) -> int:
            n = min(n, IN_FLIGHT)
            for _ in range(n):
                (await js.publish_async("bench.0", stamped(value))).add_done_callback(acks)
            return n

        sent = await paced_sends(rate, total, seconds, send)
        await asyncio.wait_for(js.publish_async_completed(), 30)
        acks.check()
    finally:
        await nc.close()
    return sent


def run_latency(rate: int = 10_000, seconds: float = 5.0, record_size: int = 100) -> dict[str, float | int]:
    total = int(rate * seconds)
    ctx = mp.get_context("spawn")
    with temp_dir("peer-nats-lat-") as d:
        port = free_port()
        with server(_server_argv(port, str(d)), port, d):
            uvloop.run(_setup_stream(port))
            ready, out = ctx.Event(), ctx.Queue()
            consumer = ctx.Process(target=_latency_consumer, args=(port, total, seconds + 30, ready, out))
            consumer.start()
            try:
                if not ready.wait(30):
                    raise TimeoutError("latency consumer did not start")
                sent = uvloop.run(_paced_produce(port, rate, total, seconds, base_value(record_size)))
                lat: list[int] = out.get(timeout=seconds + 60)
                consumer.join(10)
            finally:
                stop_child(consumer)
    return latency_summary(lat, sent)


def main() -> None:
    peer_main("nats_jetstream", __doc__, run, run_latency, run_native)


if __name__ == "__main__":
    main()
