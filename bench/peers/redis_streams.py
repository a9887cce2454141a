"""Redis Streams peer: AOF everysec (the closest Redis analogue of a periodically fsynced log).

redis-py runs with hiredis, its C reply parser (the bench extras install it; the run refuses without it),
and pipelines BATCH commands per round trip, as a batching producer does."""

from __future__ import annotations

import csv
import multiprocessing as mp
import subprocess
import time
from multiprocessing.synchronize import Event

import redis
import redis.utils

from bench.peers._common import (
    HOST,
    base_value,
    cpu_seconds,
    free_port,
    gc_paused,
    latency_summary,
    need_binary,
    peer_main,
    result,
    server,
    stamped,
    stop_child,
    temp_dir,
)

BATCH = 1000  # commands per pipeline round trip, like a batching producer
READ_COUNT = 10_000
DEADLINE_S = 600.0  # hard cap on any single phase


def _server_argv(port: int, workdir: str) -> list[str]:
    return [
        need_binary("redis-server", "redis-server"),
        "--bind",
        HOST,
        "--port",
        str(port),
        "--dir",
        workdir,
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
    ]


def _produce(r: redis.Redis, keys: list[str], num_records: int, value: bytes) -> float:
    t0 = time.perf_counter()
    for start in range(0, num_records, BATCH):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + BATCH, num_records)):
            pipe.xadd(keys[i % len(keys)], {"v": value})
        pipe.execute()
    return time.perf_counter() - t0


def _consume(r: redis.Redis, keys: list[str], num_records: int, record_size: int) -> float:
    last: dict[str, bytes | str] = {k: "0-0" for k in keys}
    got = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + DEADLINE_S
    while got < num_records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumed only {got}/{num_records} records")
        with gc_paused():
            resp = r.xread(last, count=READ_COUNT)  # type: ignore[arg-type]
        if not resp:
            raise RuntimeError(f"streams exhausted after {got}/{num_records} records")
        for key, entries in resp:
            last[key.decode()] = entries[-1][0]
            got += len(entries)
            if len(entries[-1][1][b"v"]) != record_size:
                raise RuntimeError("unexpected value size read back")
    return time.perf_counter() - t0


def _client(port: int) -> redis.Redis:
    if not redis.utils.HIREDIS_AVAILABLE:
        raise RuntimeError(
            "hiredis is not installed: pip install -e '.[bench]' (redis-py would parse replies in Python)"
        )
    return redis.Redis(host=HOST, port=port)


def run(num_records: int, record_size: int = 100, partitions: int = 1) -> dict[str, float]:
    with temp_dir("peer-redis-") as d:
        port = free_port()
        with server(_server_argv(port, str(d)), port, d) as proc:
            r = _client(port)
            try:
                keys = [f"bench-{p}" for p in range(partitions)]
                cpu0 = cpu_seconds(proc.pid)
                produce_s = _produce(r, keys, num_records, bytes(base_value(record_size)))
                cpu1 = cpu_seconds(proc.pid)
                consume_s = _consume(r, keys, num_records, record_size)
                cpu2 = cpu_seconds(proc.pid)
            finally:
                r.close()
    return result(num_records, record_size, produce_s, consume_s, (cpu1 - cpu0, cpu2 - cpu1))


def run_native(num_records: int, record_size: int = 100, partitions: int = 1) -> dict[str, float]:
    """The same XADDs from Redis's own load generator: `redis-benchmark -c 1 -P BATCH`, one connection
    pipelining BATCH commands, as the redis-py producer does, into `partitions` streams (`-r`: the key's
    `__rand_int__` becomes 0 .. partitions-1). What the server takes when the client is C, not Python."""
    with temp_dir("peer-redis-native-") as d:
        port = free_port()
        with server(_server_argv(port, str(d)), port, d) as proc:
            value = "v" * record_size  # printable: it travels as a command-line argument
            key = "bench-__rand_int__" if partitions > 1 else "bench-0"
            argv = [need_binary("redis-benchmark", "redis-tools"), "-h", HOST, "-p", str(port), "-c", "1"]
            argv += ["-P", str(BATCH), "-n", str(num_records), "-r", str(partitions), "--csv"]
            cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
            out = subprocess.run(
                [*argv, "XADD", key, "*", "v", value], capture_output=True, text=True, timeout=DEADLINE_S, check=True
            )
            wall, cpu = time.perf_counter() - t0, cpu_seconds(proc.pid) - cpu0
            r = _client(port)
            try:
                stored = sum(int(r.xlen(k)) for k in r.scan_iter("bench-*"))  # type: ignore[arg-type]
            finally:
                r.close()
    if stored != num_records:
        raise RuntimeError(f"redis-benchmark stored {stored} of {num_records} entries")
    rows = list(csv.reader(out.stdout.splitlines()))
    rps = float(rows[1][1])  # "test","rps",...: the rate redis-benchmark measured itself
    return {"produce_msgs_s": rps, "produce_s": wall, "produce_server_cpu_s": cpu, "tool": "redis-benchmark"}


def _latency_consumer(port: int, key: str, expected: int, timeout: float, ready: Event, out: mp.Queue) -> None:
    r = _client(port)
    lat: list[int] = []
    last: bytes | str = "0-0"
    ready.set()
    deadline = time.monotonic() + timeout
    while len(lat) < expected and time.monotonic() < deadline:
        resp = r.xread({key: last}, count=READ_COUNT, block=200)
        now = time.time_ns()  # one receive time per batch: every entry in it became visible to us at this instant
        for _, entries in resp or []:
            last = entries[-1][0]
            lat.extend(now - int.from_bytes(fields[b"v"][:8], "big") for _, fields in entries)
    r.close()
    out.put(lat)


def run_latency(rate: int = 10_000, seconds: float = 5.0, record_size: int = 100) -> dict[str, float | int]:
    total = int(rate * seconds)
    ctx = mp.get_context("spawn")
    with temp_dir("peer-redis-lat-") as d:
        port = free_port()
        with server(_server_argv(port, str(d)), port, d):
            ready, out = ctx.Event(), ctx.Queue()
            consumer = ctx.Process(target=_latency_consumer, args=(port, "lat", total, seconds + 30, ready, out))
            consumer.start()
            try:
                if not ready.wait(30):
                    raise TimeoutError("latency consumer did not start")
                sent = _paced_produce(port, "lat", rate, total, seconds, base_value(record_size))
                lat: list[int] = out.get(timeout=seconds + 60)
                consumer.join(10)
            finally:
                stop_child(consumer)
    return latency_summary(lat, sent)


def _paced_produce(port: int, key: str, rate: int, total: int, seconds: float, value: bytearray) -> int:
    r = _client(port)
    sent = 0
    start = time.monotonic()
    try:
        # Sends whatever the schedule says is due; falling behind turns into small pipelined bursts, not backlog.
        while sent < total and time.monotonic() - start < seconds * 3:
            due = min(total, int((time.monotonic() - start) * rate) + 1)
            if due <= sent:
                time.sleep(max(0.0, start + sent / rate - time.monotonic()))
                continue
            n = min(due - sent, BATCH)
            pipe = r.pipeline(transaction=False)
            for _ in range(n):
                pipe.xadd(key, {"v": stamped(value)})
            pipe.execute()
            sent += n
    finally:
        r.close()
    return sent


def main() -> None:
    peer_main("redis_streams", __doc__, run, run_latency, run_native)


if __name__ == "__main__":
    main()
