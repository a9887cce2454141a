"""Process/port plumbing shared by the peer benchmarks and bench/limits.py."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path

from client.cli.perf import percentiles

HOST = "127.0.0.1"
MB = 1_000_000  # MB/s figures use decimal megabytes of value payload


def need_binary(name: str, apt_package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"'{name}' not found on PATH; install it with: apt-get install {apt_package}")
    return path


def free_port() -> int:
    # The kernel picks an unused port; the small race until the server binds it is acceptable for a bench.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    # For one-shot servers (iperf3 -s -1) a probe connection would use up their single session.
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return any(r[1] == f"0100007F:{port:04X}" and r[3] == "0A" for r in rows)  # 0A = LISTEN


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(
    port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 15.0, connect_probe: bool = True
) -> None:
    ready = _accepting if connect_probe else _listening
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: {_tail(log)}")
        if ready(port):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{proc.args[0]} did not listen on {HOST}:{port} within {timeout}s: {_tail(log)}")


def _tail(log: Path, n: int = 2000) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return "<no log>"


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


@contextlib.contextmanager
def server(
    argv: Sequence[str], port: int, workdir: Path, connect_probe: bool = True
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the block exits (normally, on error or on Ctrl-C)."""
    log = workdir / "server.log"
    with open(log, "wb") as out:
        # Own session: Ctrl-C must reach only us, so the server is shut down in order by the finally below.
        proc = subprocess.Popen(
            list(argv),
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_port(port, proc, log, connect_probe=connect_probe)
        yield proc
    finally:
        stop(proc)


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def latency_summary(lat_ns: list[int], sent: int) -> dict[str, float | int]:
    p50, p99, top = (v / 1e6 for v in percentiles(lat_ns, (0.5, 0.99, 1.0))) if lat_ns else (float("nan"),) * 3
    return {
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": top,
        "count": len(lat_ns),
        "sent": sent,
    }


def stamped(value: bytearray) -> bytes:
    """Value whose first 8 bytes are the send time, so any process on this host can compute latency."""
    value[:8] = time.time_ns().to_bytes(8, "big")
    return bytes(value)


def base_value(record_size: int) -> bytearray:
    if record_size < 8:
        raise ValueError("record_size must be >= 8 to carry the send timestamp")
    return bytearray(os.urandom(record_size))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) so far; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic GC paused while a batch of replies is parsed: what Kafka Lite's consumer does in kl-perf
    (`pause_gc_while_decoding`), so the peers' Python clients get the same treatment."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def result(
    num_records: int, record_size: int, produce_s: float, consume_s: float, server_cpu_s: tuple[float, float]
) -> dict[str, float]:
    """Throughput figures, with the server's CPU seconds over the produce and the consume."""
    return {
        "produce_msgs_s": num_records / produce_s,
        "produce_mb_s": num_records * record_size / produce_s / MB,
        "consume_msgs_s": num_records / consume_s,
        "produce_s": produce_s,
        "consume_s": consume_s,
        "produce_server_cpu_s": server_cpu_s[0],
        "consume_server_cpu_s": server_cpu_s[1],
    }


def stop_child(proc: BaseProcess) -> None:
    """Stop a multiprocessing.Process we started, bounded in time."""
    if proc.is_alive():
        proc.terminate()
        proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join(5)


def peer_main(
    name: str,
    doc: str | None,
    run: Callable[..., dict],
    run_latency: Callable[..., dict],
    run_native: Callable[..., dict],
) -> None:
    """The command line shared by the peer modules: throughput, latency and the native load generator's
    produce, as JSON on stdout. bench/run_single_broker.py runs each in a process of its own, as kl-perf is."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--num-records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--latency-rate", type=int, default=10_000)
    ap.add_argument("--latency-seconds", type=float, default=5.0)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--native", action="store_true", help="also produce with the peer's own load generator")
    a = ap.parse_args()
    if a.num_records < 1 or a.partitions < 1 or a.record_size < 8:
        ap.error("--num-records and --partitions must be positive, --record-size at least 8")
    report: dict[str, object] = {
        "peer": name,
        "num_records": a.num_records,
        "record_size": a.record_size,
        "partitions": a.partitions,
    }
    if not a.skip_throughput:
        report["throughput"] = run(a.num_records, a.record_size, a.partitions)
    if a.native:
        report["native"] = run_native(a.num_records, a.record_size, a.partitions)
    if not a.skip_latency:
        report["latency"] = run_latency(a.latency_rate, a.latency_seconds, a.record_size)
    print(json.dumps(report, indent=2))


async def paced_sends(rate: int, total: int, seconds: float, send: Callable[[int], Awaitable[int]]) -> int:
    """Call `send(n)` with the number of records due on a schedule of `rate` per second, until `total`
    were sent or 3 x `seconds` passed; `send` returns how many it sent. Falling behind turns into small
    bursts, not backlog. Returns the number sent."""
    import asyncio

    loop = asyncio.get_running_loop()
    start, sent = loop.time(), 0
    while sent < total and loop.time() - start < seconds * 3:
        due = min(total, int((loop.time() - start) * rate) + 1)
        if due <= sent:
            await asyncio.sleep(max(0.0, start + sent / rate - loop.time()))
            continue
        sent += await send(due - sent)
    return sent
