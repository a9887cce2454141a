"""Where a confluent-kafka consume spends its time (issue 13 §5's 1,000,000 msgs/s target).

    .venv/bin/python -m bench.profile_kafka_consume [--num-records 1000000]

One broker (Kafka listener), the bench's 8-partition topic filled by confluent-kafka (acks=1), then read back
by bench/run_kafka_clients.py's own confluent-kafka consumer, in a process of its own under cProfile, while
the CPU time of the broker and of the consumer process (librdkafka's threads included) is read from /proc.
Prints the rate, each side's CPU seconds and cores, and the consumer's top functions. Nothing is written to
docs/BENCHMARKS.md: the section quotes what this prints.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import multiprocessing as mp
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.peers._common import free_port, wait_port
from bench.run_kafka_clients import PARTITIONS, _confluent_consume, _confluent_produce

ROOT = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _profiled_consume(bootstrap: str, topic: str, n: int, out: mp.Queue) -> None:
    prof = cProfile.Profile()
    inner: mp.Queue = mp.Queue()
    prof.enable()
    _confluent_consume(bootstrap, topic, n, "1", inner)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(6)
    out.put({**inner.get(), "cpu": cpu_seconds(os.getpid()), "profile": text.getvalue()})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-records", type=int, default=1_000_000)
    a = ap.parse_args(argv)
    data = Path(tempfile.mkdtemp(prefix="kl-prof-"))
    port, kport = free_port(), free_port()
    broker = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "start", "--id", "1", "--port", str(port), "--kafka-port", str(kport)]
        + ["--data-dir", str(data / "broker")],
        cwd=ROOT,
        stdout=open(data / "broker.log", "wb"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
    )
    try:
        wait_port(kport, broker, data / "broker.log", 30)
        bootstrap = f"127.0.0.1:{kport}"
        kl_topics = str(Path(sys.executable).parent / "kl-topics")
        create = [kl_topics, "--bootstrap-server", f"127.0.0.1:{port}", "--create", "--topic", "prof"]
        subprocess.run([*create, "--partitions", str(PARTITIONS)], check=True, capture_output=True)
        q: mp.Queue = mp.Queue()
        producer = mp.Process(target=_confluent_produce, args=(bootstrap, "prof", a.num_records, "1", q))
        producer.start()
        producer.join()
        q.get()
        before, t0 = cpu_seconds(broker.pid), time.monotonic()
        consumer = mp.Process(target=_profiled_consume, args=(bootstrap, "prof", a.num_records, q))
        consumer.start()
        r = q.get()
        consumer.join()
        wall, broker_cpu = time.monotonic() - t0, cpu_seconds(broker.pid) - before
        print(f"confluent-kafka consume: {r['consume']:,.0f} msgs/s ({a.num_records:,} records, {wall:.2f} s wall)")
        print(f"  broker CPU   {broker_cpu:.2f} s ({broker_cpu / wall:.2f} cores)")
        print(f"  consumer CPU {r['cpu']:.2f} s ({r['cpu'] / wall:.2f} cores, librdkafka's threads included)")
        print(r["profile"])
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
