"""Single-broker benchmark: Kafka Lite against Redis Streams and NATS JetStream on this machine.

    .venv/bin/python -m bench.run_single_broker [--runs 3] [--num-records 2000000] [--latency-seconds 10]
                                                [--skip-peers] [--out docs/BENCHMARKS.md]

Each run starts a fresh Kafka Lite broker in a temp dir and, for 1 and 8 partitions, produces N records
of 100 bytes with acks=1 into a fresh topic and consumes them all (kl-perf produce / consume); then it
measures end-to-end latency at 10,000 msgs/s on a 1-partition topic (kl-perf end-to-end) and stops the
broker. The same workload then runs against Redis Streams and NATS JetStream (bench.peers). The physical
limits (loopback TCP, fsynced disk writes) are measured once at the end. The median over the runs of
every figure, with min and max, goes into the single-broker section of docs/BENCHMARKS.md.

Every server is bound to 127.0.0.1 and stopped when its step ends, on error or on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import limits
from bench.peers import kafka_lite, nats_jetstream, redis_streams
from bench.peers._common import HOST, MB, cpu_seconds, free_port, server, temp_dir
from bench.sections import md_table, replace_section
from client.config import ProducerConfig

RECORD_SIZE = 100
PARTITION_COUNTS = (1, 8)
LATENCY_RATE = 10_000
ACKS = "1"
# Kafka Lite's producer default batch.size, read from the producer's config schema so the section states what ran.
DEFAULT_BATCH = int(ProducerConfig().batch_size)
KAFKA_BATCH = 16384  # Kafka's default batch.size

TARGET_PRODUCE = 500_000  # msgs/s, one broker, 100-byte values, acks=1
TARGET_CONSUME = 1_000_000  # msgs/s
TARGET_RATIO = 3.0  # Kafka Lite / the faster of the two peers

KAFKA, REDIS, NATS = "kafka_lite", "redis_streams", "nats_jetstream"
SYSTEMS = (KAFKA, REDIS, NATS)
PEERS = (REDIS, NATS)
LABEL = {KAFKA: "Kafka Lite", REDIS: "Redis Streams", NATS: "NATS JetStream"}

NATIVE_TOOL = {
    KAFKA: "kl-perf",
    REDIS: f"redis-benchmark -c 1 -P {redis_streams.BATCH}",
    NATS: "a Go nats.go publisher",
}

START_MARK = "<!-- single-broker:start -->"
END_MARK = "<!-- single-broker:end -->"

Figures = dict[str, float]  # metric key -> value, for one system in one run


def produce_key(p: int) -> str:
    return f"produce_msgs_s/{p}"


def produce_mb_key(p: int) -> str:
    return f"produce_mb_s/{p}"


def produce16k_key(p: int) -> str:
    return f"produce_msgs_s_16k/{p}"


def cpu_key(what: str, p: int) -> str:
    """Server CPU microseconds per record: `what` is produce, consume or native (the system's own generator)."""
    return f"server_cpu_us_{what}/{p}"


def native_key(p: int) -> str:
    """Produce msgs/s from the system's own load generator (Kafka Lite: kl-perf; Redis: redis-benchmark; NATS:
    a compiled nats.go publisher)."""
    return f"native_produce_msgs_s/{p}"


def consume_key(p: int) -> str:
    return f"consume_msgs_s/{p}"


class StepError(RuntimeError):
    """A benchmark step failed; the message is what the tool said, verbatim."""


# --------------------------------------------------------------------------------------------- progress


@dataclass
class Progress:
    t0: float = field(default_factory=time.monotonic)
    errors: list[str] = field(default_factory=list)

    def say(self, msg: str) -> None:
        elapsed = int(time.monotonic() - self.t0)
        print(f"[{elapsed // 60:3d}:{elapsed % 60:02d}] {msg}", flush=True)

    def step(self, label: str, fn: Callable[[], Any], describe: Callable[[Any], str] = lambda _: "ok") -> Any:
        """Run one step; on failure record the error and return None so the remaining steps still run."""
        self.say(f"{label} ...")
        t = time.monotonic()
        try:
            out = fn()
        except Exception as e:  # noqa: BLE001 - any failure of one step is reported, the rest still run
            self.fail(label, e)
            return None
        self.say(f"{label}: {describe(out)} ({time.monotonic() - t:.1f} s)")
        return out

    def fail(self, label: str, e: BaseException) -> None:
        text = str(e) if isinstance(e, StepError) else f"{type(e).__name__}: {e}"
        self.errors.append(f"{label}: {text}")
        self.say(f"{label}: FAILED\n{text}")


def _plural(p: int) -> str:
    return f"{p} partition{'s' if p != 1 else ''}"


def _rate(msgs_s: float) -> str:
    return f"{msgs_s:,.0f} msgs/s ({msgs_s * RECORD_SIZE / MB:.1f} MB/s)"


# --------------------------------------------------------------------------------------------- Kafka Lite


def _tool(name: str) -> str:
    """A console script of this venv (next to the running interpreter), else from PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise StepError(f"'{name}' not found next to {sys.executable} or on PATH; run: pip install -e .")
    return found


@dataclass
class Broker:
    bootstrap: str
    workdir: Path
    proc: subprocess.Popen[bytes]

    def cpu_seconds(self) -> float:
        """utime + stime of the broker process so far (0 if it is gone)."""
        return cpu_seconds(self.proc.pid)


@contextlib.contextmanager
def kafka_lite_broker() -> Iterator[Broker]:
    with temp_dir("bench-kafka-lite-") as d:
        port = free_port()
        argv = [
            _tool("kl-broker"),
            "start",
            "--id",
            "1",
            "--host",
            HOST,
            "--port",
            str(port),
            "--data-dir",
            str(d / "data"),
        ]
        with server(argv, port, d) as proc:
            yield Broker(f"{HOST}:{port}", d, proc)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run_tool(argv: list[str], timeout: float, json_out: Path) -> dict[str, Any]:
    shown = shlex.join([Path(argv[0]).name, *argv[1:]])
    json_out.unlink(missing_ok=True)
    try:
        proc = subprocess.run(
            [*argv, "--json-out", str(json_out)],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise StepError(f"`{shown}` did not finish within {timeout:.0f} s (killed); stderr:\n{_tail(err)}") from None
    if proc.returncode != 0:
        raise StepError(f"`{shown}` exited with {proc.returncode}; stderr:\n{_tail(proc.stderr)}")
    if not json_out.exists():
        raise StepError(f"`{shown}` wrote no {json_out.name}; stderr:\n{_tail(proc.stderr)}")
    return dict(json.loads(json_out.read_text()))


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "<empty>"


def _tool_timeout(num_records: int) -> float:
    return 120 + num_records / 5_000  # generous (2M records: ~8 min) but bounded


def _cpu_note(broker: Broker, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run fn, adding the broker's and the client's CPU use over its wall time, in cores."""
    b0, c0, t0 = broker.cpu_seconds(), _children_cpu(), time.monotonic()
    out = fn()
    wall = time.monotonic() - t0
    out["broker_cpu_s"] = broker.cpu_seconds() - b0
    out["broker_cores"] = out["broker_cpu_s"] / wall
    out["client_cores"] = (_children_cpu() - c0) / wall
    return out


def run_kafka_lite(progress: Progress, tag: str, num_records: int, latency_seconds: float) -> Figures:
    figs: Figures = {}
    perf, topics = _tool("kl-perf"), _tool("kl-topics")

    def create(broker: Broker, topic: str, partitions: int) -> None:
        argv = [
            topics,
            "--bootstrap-server",
            broker.bootstrap,
            "--create",
            "--topic",
            topic,
            "--partitions",
            str(partitions),
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            shown = shlex.join(["kl-topics", *argv[1:]])
            raise StepError(f"`{shown}` exited with {proc.returncode}; output:\n{_tail(proc.stdout + proc.stderr)}")

    def produce(broker: Broker, topic: str, batch_size: int = DEFAULT_BATCH) -> dict[str, Any]:
        out = _run_tool(
            [
                perf,
                "produce",
                "--bootstrap-server",
                broker.bootstrap,
                "--topic",
                topic,
                "--num-records",
                str(num_records),
                "--record-size",
                str(RECORD_SIZE),
                "--acks",
                ACKS,
                "--producer-props",
                f"batch.size={batch_size}",
            ],
            _tool_timeout(num_records),
            broker.workdir / "produce.json",
        )
        if out.get("records") != num_records:
            raise StepError(f"kl-perf produce reported {out.get('records')} of {num_records} records: {out}")
        return out

    def consume(broker: Broker, topic: str) -> dict[str, Any]:
        out = _run_tool(
            [perf, "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--messages", str(num_records)],
            _tool_timeout(num_records),
            broker.workdir / "consume.json",
        )
        if out.get("records") != num_records:
            raise StepError(f"kl-perf consume read {out.get('records')} of {num_records} records: {out}")
        return out

    def cores(out: dict[str, Any]) -> str:
        return f"broker {out['broker_cores']:.2f} cores, client {out['client_cores']:.2f} cores"

    label = f"{tag} {LABEL[KAFKA]}"
    try:
        with kafka_lite_broker() as broker:
            progress.say(f"{label}: broker up on {broker.bootstrap} (data in {broker.workdir})")
            for p in PARTITION_COUNTS:
                topic = f"perf-{p}p"
                if (
                    progress.step(
                        f"{label} create topic {topic} ({_plural(p)})",
                        lambda t=topic, n=p: create(broker, t, n) or True,
                    )
                    is None
                ):  # noqa: B023 - called at once
                    continue
                out = progress.step(
                    f"{label} produce {num_records:,} x {RECORD_SIZE} B, {_plural(p)}",
                    lambda: _cpu_note(broker, lambda: produce(broker, topic)),  # noqa: B023
                    lambda o: f"{_rate(o['records_per_sec'])}, {cores(o)}",
                )
                if out is None:
                    continue  # nothing to consume
                figs[produce_key(p)] = out["records_per_sec"]
                figs[produce_mb_key(p)] = out["records_per_sec"] * RECORD_SIZE / MB
                figs[f"produce_cores_broker/{p}"] = out["broker_cores"]
                figs[f"produce_cores_client/{p}"] = out["client_cores"]
                figs[cpu_key("produce", p)] = out["broker_cpu_s"] / num_records * 1e6
                # kl-perf is Kafka Lite's own load generator: its row beside the peers' own is the figure above
                figs[native_key(p)] = out["records_per_sec"]
                figs[cpu_key("native", p)] = figs[cpu_key("produce", p)]
                out = progress.step(
                    f"{label} consume {num_records:,}, {_plural(p)}",
                    lambda: _cpu_note(broker, lambda: consume(broker, topic)),  # noqa: B023
                    lambda o: f"{_rate(o['records_per_sec'])}, {cores(o)}",
                )
                if out is not None:
                    figs[consume_key(p)] = out["records_per_sec"]
                    figs[f"consume_cores_broker/{p}"] = out["broker_cores"]
                    figs[f"consume_cores_client/{p}"] = out["client_cores"]
                    figs[cpu_key("consume", p)] = out["broker_cpu_s"] / num_records * 1e6
                # The same produce at Kafka's default batch.size, into a topic of its own.
                small = f"perf-{p}p-16k"
                if progress.step(f"{label} create topic {small}", lambda t=small, n=p: create(broker, t, n) or True):
                    out = progress.step(
                        f"{label} produce {num_records:,} x {RECORD_SIZE} B, {_plural(p)}, batch.size={KAFKA_BATCH}",
                        lambda: _cpu_note(broker, lambda: produce(broker, small, KAFKA_BATCH)),  # noqa: B023
                        lambda o: f"{_rate(o['records_per_sec'])}, {cores(o)}",
                    )
                    if out is not None:
                        figs[produce16k_key(p)] = out["records_per_sec"]
            topic = "e2e-1p"
            if (
                progress.step(f"{label} create topic {topic} (1 partition)", lambda: create(broker, topic, 1) or True)
                is not None
            ):
                out = progress.step(
                    f"{label} end-to-end latency at {LATENCY_RATE:,} msgs/s for {latency_seconds:g} s",
                    lambda: kafka_lite.run_latency(broker.bootstrap, topic, LATENCY_RATE, latency_seconds, RECORD_SIZE),
                    _latency_text,
                )
                if out is not None:
                    figs.update(_latency_figs(out["p50_ms"], out["p99_ms"], out.get("count"), out.get("sent")))
            progress.say(f"{label}: stopping broker")
    except Exception as e:  # noqa: BLE001 - broker start/stop failures end this system's run only
        progress.fail(f"{label} broker", e)
    return figs


def _latency_text(out: dict[str, Any]) -> str:
    got = out.get("records", out.get("count"))
    return f"p50 {out['p50_ms']:.2f} ms, p99 {out['p99_ms']:.2f} ms ({got} of {out.get('sent')} received)"


def _latency_figs(p50: float, p99: float, received: Any, sent: Any) -> Figures:
    figs: Figures = {"e2e_p50_ms": float(p50), "e2e_p99_ms": float(p99)}
    if received is not None:
        figs["e2e_received"] = float(received)
    if sent is not None:
        figs["e2e_sent"] = float(sent)
    return figs


# --------------------------------------------------------------------------------------------- peers


PEER_MODULE = {REDIS: "bench.peers.redis_streams", NATS: "bench.peers.nats_jetstream"}


def _peer_process(system: str, argv: list[str], timeout: float) -> dict[str, Any]:
    """One peer measurement in a process of its own (`python -m bench.peers.<peer> ...`), as kl-perf is one:
    its client's interpreter, GC and CPU are its own, not this benchmark's."""
    shown = shlex.join(["python", "-m", PEER_MODULE[system], *argv])
    try:
        proc = subprocess.run(
            [sys.executable, "-m", PEER_MODULE[system], *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StepError(f"`{shown}` did not finish within {timeout:.0f} s (killed)") from None
    if proc.returncode != 0:
        raise StepError(f"`{shown}` exited with {proc.returncode}; stderr:\n{_tail(proc.stderr)}")
    return dict(json.loads(proc.stdout))


def run_peer(progress: Progress, tag: str, system: str, num_records: int, latency_seconds: float) -> Figures:
    label = f"{tag} {LABEL[system]}"
    figs: Figures = {}
    timeout = _tool_timeout(num_records) * 2
    for p in PARTITION_COUNTS:
        base = ["--num-records", str(num_records), "--record-size", str(RECORD_SIZE), "--partitions", str(p)]
        out = progress.step(
            f"{label} produce + consume {num_records:,} x {RECORD_SIZE} B, {_plural(p)}",
            lambda: _peer_process(system, [*base, "--skip-latency"], timeout)["throughput"],  # noqa: B023
            lambda o: f"produce {_rate(o['produce_msgs_s'])}, consume {_rate(o['consume_msgs_s'])}",
        )
        if out is not None:
            figs[produce_key(p)] = out["produce_msgs_s"]
            figs[produce_mb_key(p)] = out["produce_mb_s"]
            figs[consume_key(p)] = out["consume_msgs_s"]
            figs[cpu_key("produce", p)] = out["produce_server_cpu_s"] / num_records * 1e6
            figs[cpu_key("consume", p)] = out["consume_server_cpu_s"] / num_records * 1e6
        out = progress.step(
            f"{label} produce {num_records:,} x {RECORD_SIZE} B, {_plural(p)}, {NATIVE_TOOL[system]}",
            lambda: _peer_process(system, [*base, "--skip-throughput", "--skip-latency", "--native"], timeout)[  # noqa: B023
                "native"
            ],
            lambda o: f"{_rate(o['produce_msgs_s'])}, server {o['produce_server_cpu_s']:.2f} CPU s",
        )
        if out is not None:
            figs[native_key(p)] = out["produce_msgs_s"]
            figs[cpu_key("native", p)] = out["produce_server_cpu_s"] / num_records * 1e6
    latency = ["--skip-throughput", "--latency-rate", str(LATENCY_RATE), "--latency-seconds", f"{latency_seconds:g}"]
    out = progress.step(
        f"{label} end-to-end latency at {LATENCY_RATE:,} msgs/s for {latency_seconds:g} s",
        lambda: _peer_process(system, latency, latency_seconds * 4 + 120)["latency"],
        _latency_text,
    )
    if out is not None:
        figs.update(_latency_figs(out["p50_ms"], out["p99_ms"], out.get("count"), out.get("sent")))
    return figs


# --------------------------------------------------------------------------------------------- statistics


@dataclass
class Stat:
    median: float
    low: float
    high: float
    n: int


def stat(values: list[float]) -> Stat | None:
    return Stat(statistics.median(values), min(values), max(values), len(values)) if values else None


def collect(runs: list[dict[str, Figures]], system: str, key: str) -> Stat | None:
    return stat([r[system][key] for r in runs if key in r.get(system, {})])


def ratio_stat(runs: list[dict[str, Figures]], key: str) -> Stat | None:
    """Kafka Lite / the faster peer, computed within each run, then summarised over the runs."""
    ratios = []
    for r in runs:
        ours = r.get(KAFKA, {}).get(key)
        peers = [r.get(p, {}).get(key) for p in PEERS]
        if ours is not None and all(v is not None for v in peers):
            ratios.append(ours / max(peers))  # type: ignore[type-var]
    return stat(ratios)


def faster_peer_names(runs: list[dict[str, Figures]], key: str) -> str:
    names = []
    for r in runs:
        vals = {p: r.get(p, {}).get(key) for p in PEERS}
        if all(v is not None for v in vals.values()):
            names.append(LABEL[max(vals, key=lambda p: vals[p])])  # type: ignore[arg-type,return-value]
    return ", ".join(sorted(set(names))) or "n/a"


# --------------------------------------------------------------------------------------------- machine


def _cmd(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (out.stdout or out.stderr).strip() or "unknown"


def machine_info() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
                break
    nproc = _cmd(["nproc"])
    if nproc == "unknown":
        nproc = str(len(os.sched_getaffinity(0)))
    return {
        "nproc": nproc,
        "memory": mem,
        "cpu": cpu,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "redis": " ".join(_cmd(["redis-server", "--version"]).split()[:3]),
        "nats": _cmd(["nats-server", "--version"]),
    }


def _proc_cpu() -> dict[int, tuple[float, str]]:
    """pid -> (utime + stime in seconds, command line) for every process we can read."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            out[int(d.name)] = ((int(stat[11]) + int(stat[12])) / tick, cmd or d.name)
    return out


def background_load(seconds: float = 2.0) -> list[tuple[float, str]]:
    """Other processes busy right now (> 0.1 core over `seconds`): they compete with the benchmark for CPU."""
    before = _proc_cpu()
    time.sleep(seconds)
    after = _proc_cpu()
    me = os.getpid()
    busy = [
        ((cpu - before[pid][0]) / seconds, cmd)
        for pid, (cpu, cmd) in after.items()
        if pid in before and pid != me and (cpu - before[pid][0]) / seconds > 0.1
    ]
    return sorted(busy, reverse=True)


def _machine_busy_s() -> float:
    """CPU seconds all cores spent busy since boot (user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its finished children (tools, servers, latency consumers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class OutsideLoad:
    """Average CPU (in cores) used by everything but this benchmark since construction."""

    def __init__(self) -> None:
        self.busy, self.own, self.t = _machine_busy_s(), _own_cpu_s(), time.monotonic()

    def cores(self) -> float:
        busy, own = _machine_busy_s() - self.busy, _own_cpu_s() - self.own
        return max(0.0, busy - own) / max(1e-9, time.monotonic() - self.t)


def kafka_lite_durability() -> str:
    try:
        from broker.log.config import LogConfig

        cfg = LogConfig()
        if cfg.flush_messages >= (1 << 63) - 1 and cfg.flush_ms >= (1 << 63) - 1:
            return "no fsync on the append path (`flush.messages` / `flush.ms` unset, as in Kafka)"
        return f"`flush.messages={cfg.flush_messages}`, `flush.ms={cfg.flush_ms}`"
    except Exception as e:  # noqa: BLE001 - informational only
        return f"unknown ({type(e).__name__})"


# --------------------------------------------------------------------------------------------- markdown


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def cell(s: Stat | None, suffix: str = "", runs: int = 1) -> str:
    if s is None:
        return "n/a"
    text = f"{_num(s.median)}{suffix}" if s.n == 1 else f"{_num(s.median)}{suffix} ({_num(s.low)}–{_num(s.high)})"
    return text if s.n >= runs else f"{text} [{s.n} of {runs} runs]"


def status(s: Stat | None, target: float) -> str:
    if s is None:
        return "n/a"
    return "**MET**" if s.median >= target else "**MISSED**"


def _load_text(busy: list[tuple[float, str]]) -> str:
    if not busy:
        return "none"
    return ", ".join(f"{cores:.2f} cores `{cmd[:70]}{'…' if len(cmd) > 70 else ''}`" for cores, cmd in busy)


def render(
    args: argparse.Namespace,
    command: str,
    date: str,
    machine: dict[str, str],
    elapsed_s: float,
    runs: list[dict[str, Figures]],
    lim: dict[str, Any] | None,
    errors: list[str],
    background: list[tuple[str, list[tuple[float, str]]]],
    others: list[tuple[str, float]],
) -> str:
    systems = [KAFKA] if args.skip_peers else list(SYSTEMS)
    n_runs = len(runs)
    agg = f"median of {n_runs} run{'s' if n_runs != 1 else ''}" + (", min–max" if n_runs > 1 else "")
    lines = [
        "## Single broker",
        "",
        "Generated by `bench/run_single_broker.py` from the figures it measured; do not edit by hand.",
        "",
        "```bash",
        command,
        "```",
        "",
        f"- Date: `{date}` (took {elapsed_s / 60:.1f} min)",
        f"- Machine: {machine['nproc']} CPUs (`nproc`), {machine['memory']} RAM, {machine['cpu']}",
        f"- Kernel: {machine['kernel']}; Python: {machine['python']}",
        f"- Peers: {machine['redis']}; {machine['nats']}",
        f"- Workload: {args.num_records:,} records of {RECORD_SIZE} bytes per partition count, acks=1, "
        f"into a fresh topic / stream, then all of them consumed; end-to-end latency at {LATENCY_RATE:,} msgs/s "
        f"for {args.latency_seconds:g} s on one partition. {n_runs} run{'s' if n_runs != 1 else ''}, "
        "each with fresh servers; every figure is the median over the runs, with (min–max).",
        "- MB/s is decimal megabytes of record values (msgs/s × 100 B / 10^6) for every system.",
        f"- Batching: Kafka Lite's producer packs up to batch.size={DEFAULT_BATCH:,} bytes per partition per "
        f"batch (its default), and a second produce row uses Kafka's default, {KAFKA_BATCH:,}; Redis gets "
        f"{redis_streams.BATCH:,} XADDs per pipeline round trip; NATS keeps {nats_jetstream.IN_FLIGHT:,} "
        "publishes in flight.",
        "- Each system's load generator and consumer run in processes of their own (kl-perf; "
        "`python -m bench.peers.<peer>`), and each Python consumer pauses the cyclic GC while it parses a "
        "batch (kl-perf's `pause_gc_while_decoding`).",
        "",
        f"### Server CPU per record ({agg})",
        "",
        "Microseconds of the server process's CPU (user + system, all threads, from /proc) per record, over each "
        "phase: what each server costs per message whoever the client is (lower is better). The last rows load "
        "each server from its own fast client: Kafka Lite's is kl-perf (the first rows again), Redis's "
        f"`{NATIVE_TOOL[REDIS]}` (C), NATS's {NATIVE_TOOL[NATS]} (natscli's `nats bench --js` is not packaged in "
        "Debian; nats.go is): what the servers take when the client is not Python.",
        "",
    ]
    cpu_rows: list[tuple[str, str]] = []
    for what, title in (("produce", "Produce"), ("consume", "Consume")):
        for p in PARTITION_COUNTS:
            cpu_rows.append((f"{title}, {_plural(p)} (µs per record)", cpu_key(what, p)))
    for p in PARTITION_COUNTS:
        own = f"Produce from the system's own load generator, {_plural(p)} (µs per record)"
        cpu_rows.append((own, cpu_key("native", p)))
    for p in PARTITION_COUNTS:
        cpu_rows.append((f"Produce msgs/s from the system's own load generator, {_plural(p)}", native_key(p)))
    lines.append(
        md_table(
            ["Figure", *(LABEL[s] for s in systems)],
            ([name, *(cell(collect(runs, s, key), "", n_runs) for s in systems)] for name, key in cpu_rows),
        )
    )
    lines += ["", f"### Kafka Lite vs peers ({agg})", ""]
    rows: list[tuple[str, str, str]] = []
    for p in PARTITION_COUNTS:
        rows.append((f"Produce msgs/s, {_plural(p)}", produce_key(p), ""))
        rows.append((f"Produce MB/s, {_plural(p)}", produce_mb_key(p), ""))
        rows.append((f"Produce msgs/s, {_plural(p)}, batch.size={KAFKA_BATCH:,}", produce16k_key(p), ""))
    for p in PARTITION_COUNTS:
        rows.append((f"Consume msgs/s, {_plural(p)}", consume_key(p), ""))
    rows.append((f"End-to-end p50 at {LATENCY_RATE:,} msgs/s", "e2e_p50_ms", " ms"))
    rows.append((f"End-to-end p99 at {LATENCY_RATE:,} msgs/s", "e2e_p99_ms", " ms"))
    lines.append(
        md_table(
            ["Figure", *(LABEL[s] for s in systems)],
            (
                [
                    name,
                    *(
                        cell(collect(runs, s, key), suffix, n_runs) if s == KAFKA or "16k" not in key else "–"
                        for s in systems
                    ),
                ]
                for name, key, suffix in rows
            ),
        )
    )

    targets = []
    for p in PARTITION_COUNTS:
        st = collect(runs, KAFKA, produce_key(p))
        targets.append(
            [
                f"Produce ≥ {TARGET_PRODUCE:,} msgs/s, {_plural(p)}",
                cell(st, " msgs/s", n_runs),
                status(st, TARGET_PRODUCE),
            ]
        )
    for p in PARTITION_COUNTS:
        st = collect(runs, KAFKA, consume_key(p))
        targets.append(
            [
                f"Consume ≥ {TARGET_CONSUME:,} msgs/s, {_plural(p)}",
                cell(st, " msgs/s", n_runs),
                status(st, TARGET_CONSUME),
            ]
        )
    for what, keyf in (("Produce", produce_key), ("Consume", consume_key)):
        for p in PARTITION_COUNTS:
            st = None if args.skip_peers else ratio_stat(runs, keyf(p))
            targets.append(
                [
                    f"{what} ≥ {TARGET_RATIO:g}× the faster peer, {_plural(p)}",
                    "peers skipped" if args.skip_peers else cell(st, "×", n_runs),
                    status(st, TARGET_RATIO),
                ]
            )
    lines += ["", "### Targets", "", md_table(["Target", "Measured", "Status"], targets)]
    lines += [
        "",
        "One broker, 100-byte values, acks=1. A target is MET when the median over the runs reaches it. "
        "The ratios are Kafka Lite / the faster of Redis Streams and NATS JetStream, taken within each run "
        "(both measured back to back on the same machine), then summarised over the runs.",
    ]
    if not args.skip_peers:
        faster = "; ".join(
            f"{what} at {p}p: {faster_peer_names(runs, keyf(p))}"
            for what, keyf in (("produce", produce_key), ("consume", consume_key))
            for p in PARTITION_COUNTS
        )
        lines.append(f"Faster peer: {faster}.")

    lines += ["", "### Physical limits (measured once)", ""]
    if lim:
        lines.append(
            md_table(
                ["Limit", "Measured"],
                [
                    [
                        "Loopback TCP, iperf3 single stream",
                        f"{lim['loopback_gbit_s']:.1f} Gbit/s ({lim['loopback_mb_s']:,.0f} MB/s)",
                    ],
                    [
                        f"Sequential disk write, 1 GiB + fsync, in `{lim['disk_dir']}`",
                        f"{lim['disk_write_mb_s']:,.0f} MB/s",
                    ],
                ],
            )
        )
        best = max(
            (collect(runs, s, produce_mb_key(p)) for s in systems for p in PARTITION_COUNTS),
            key=lambda st: st.median if st else -1.0,
        )
        if best is not None:
            wire, disk = best.median / lim["loopback_mb_s"], best.median / lim["disk_write_mb_s"]
            lines += [
                "",
                f"The highest median produce rate above, {best.median:.1f} MB/s of values, is "
                f"{wire * 100:.1f}% of loopback bandwidth and {disk * 100:.1f}% of disk write bandwidth.",
            ]
    else:
        lines.append("Not measured (failed; see Errors).")

    cores = {
        f"{what} {p}p": (
            collect(runs, KAFKA, f"{what}_cores_broker/{p}"),
            collect(runs, KAFKA, f"{what}_cores_client/{p}"),
        )
        for what in ("produce", "consume")
        for p in PARTITION_COUNTS
    }
    core_text = "; ".join(
        f"{k}: broker {b.median:.2f}, client {c.median:.2f}" for k, (b, c) in cores.items() if b is not None and c
    )
    lines += [
        "",
        "### Setup notes",
        "",
        f"- Everything runs on this one machine over 127.0.0.1: all processes (broker or server, load "
        f"generator, latency consumer) share its {machine['nproc']} cores."
        + (
            f" Measured Kafka Lite CPU use in cores (CPU seconds / wall seconds over the whole `kl-perf` "
            f"invocation, median): {core_text}."
            if core_text
            else ""
        )
        + " How much of a core each system's server needs per message is the saturation section's figure.",
        "- Kafka Lite: one broker (`kl-broker start`) with its default configuration, "
        f"{kafka_lite_durability()}; load from `kl-perf produce` / `consume` (acks=1), one fresh topic per "
        "measurement; latency from bench/peers/kafka_lite.py: a paced producer (linger.ms=0) here and the "
        "consumer in a second process, as for the peers.",
        f'- Redis Streams: `redis-server --appendonly yes --appendfsync everysec --save ""`; redis-py with '
        f"hiredis; one stream per partition, XADD in non-transactional pipelines of {redis_streams.BATCH:,} "
        f"commands, read back with XREAD COUNT {redis_streams.READ_COUNT:,}; latency with a blocking XREAD in "
        "a second process.",
        f"- NATS JetStream: `nats-server -js`, one stream with file storage, partitions are subjects "
        f"`bench.<p>`; nats-py on uvloop, `publish_async` with a window of {nats_jetstream.IN_FLIGHT:,} "
        f"unacked publishes, read back by a pull consumer (fetch {nats_jetstream.FETCH:,}, AckPolicy NONE); "
        "latency with a push consumer in a second process. JetStream acks once the write reaches the OS and "
        "fsyncs only every `sync_interval` (2 min by default), a weaker guarantee than Redis "
        "`appendfsync everysec`.",
        "- Other processes already busy (> 0.1 core over 2 s) when each run started, competing for the same "
        "cores: " + "; ".join(f"{when}: {_load_text(busy)}" for when, busy in background) + ". "
        "Average CPU used by processes outside this benchmark during each run (machine busy time from "
        "/proc/stat minus this benchmark's own and its children's): "
        + "; ".join(f"{when}: {c:.2f} cores" for when, c in others)
        + ".",
        "",
        "<details><summary>Every run</summary>",
        "",
    ]
    every = []
    for s in systems:
        for k in sorted({k for r in runs for k in r.get(s, {})}):
            vals = [r.get(s, {}).get(k) for r in runs]
            every.append([LABEL[s], k, *("n/a" if v is None else _num(v) for v in vals)])
    lines += [md_table(["System", "Figure", *(f"Run {i + 1}" for i in range(n_runs))], every), "", "</details>"]

    if errors:
        lines += ["", "### Errors", "", "These steps failed; their figures are missing above (n/a).", ""]
        for e in errors:
            lines += ["```text", e.replace("```", "'''"), "```", ""]
        lines.pop()
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run_single_broker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="independent runs; figures are their median (default 3)")
    ap.add_argument("--num-records", type=int, default=2_000_000, help="records per produce/consume (default 2M)")
    ap.add_argument("--latency-seconds", type=float, default=10.0, help="length of each latency test (default 10)")
    ap.add_argument("--skip-peers", action="store_true", help="measure Kafka Lite only")
    ap.add_argument("--out", default="docs/BENCHMARKS.md", help="markdown file to write (default docs/BENCHMARKS.md)")
    a = ap.parse_args(argv)
    if not 1 <= a.runs <= 20:
        ap.error("--runs must be between 1 and 20")
    if a.num_records < 1 or a.latency_seconds <= 0:
        ap.error("--num-records and --latency-seconds must be positive")
    return a


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Ctrl-C and SIGTERM raise KeyboardInterrupt, which unwinds through the `finally`s that stop every server.
    # Our own handler rather than the default one: asyncio.run() would turn the default one into a task
    # cancellation, which a client library can swallow (nats-py did); it also revives a SIGINT inherited ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    command = shlex.join(
        [".venv/bin/python", "-m", "bench.run_single_broker", *(sys.argv[1:] if argv is None else argv)]
    )
    date = _cmd(["date", "-u"])
    machine = machine_info()
    progress = Progress()
    progress.say(
        f"{command}\n        {machine['nproc']} CPUs, {machine['memory']}, {machine['cpu']}, "
        f"{machine['python']}, {machine['kernel']}"
    )
    runs: list[dict[str, Figures]] = []
    background: list[tuple[str, list[tuple[float, str]]]] = []
    others: list[tuple[str, float]] = []  # CPU used by processes outside the benchmark, per run
    try:
        for i in range(args.runs):
            tag = f"run {i + 1}/{args.runs}"
            busy = background_load()
            background.append((f"run {i + 1}", busy))
            progress.say(f"{tag}: other busy processes: {_load_text(busy)}")
            outside = OutsideLoad()
            run: dict[str, Figures] = {KAFKA: run_kafka_lite(progress, tag, args.num_records, args.latency_seconds)}
            if not args.skip_peers:
                for peer in PEERS:
                    run[peer] = run_peer(progress, tag, peer, args.num_records, args.latency_seconds)
            runs.append(run)
            others.append((f"run {i + 1}", outside.cores()))
            progress.say(f"{tag}: processes outside the benchmark used {others[-1][1]:.2f} cores on average")
        lim = progress.step(
            "physical limits (iperf3 loopback, 1 GiB fsynced write)",
            limits.run,
            lambda o: f"loopback {o['loopback_gbit_s']:.1f} Gbit/s, disk {o['disk_write_mb_s']:,.0f} MB/s",
        )
    except KeyboardInterrupt:
        progress.say(f"interrupted; servers stopped, {args.out} not written")
        return 130
    out = Path(args.out)
    replace_section(
        out,
        START_MARK,
        END_MARK,
        render(
            args, command, date, machine, time.monotonic() - progress.t0, runs, lim, progress.errors, background, others
        ),
    )
    progress.say(f"wrote {out}")
    print(render_summary(args, runs), flush=True)
    if progress.errors:
        progress.say(f"{len(progress.errors)} step(s) failed:")
        for e in progress.errors:
            print(e, flush=True)
        return 1
    return 0


def render_summary(args: argparse.Namespace, runs: list[dict[str, Figures]]) -> str:
    systems = [KAFKA] if args.skip_peers else list(SYSTEMS)
    keys = [
        *(produce_key(p) for p in PARTITION_COUNTS),
        *(consume_key(p) for p in PARTITION_COUNTS),
        "e2e_p50_ms",
        "e2e_p99_ms",
    ]
    width = max(len(k) for k in keys)
    out = [f"{'median':<{width}}  " + "  ".join(f"{LABEL[s]:>16}" for s in systems)]
    for k in keys:
        out.append(
            f"{k:<{width}}  "
            + "  ".join(f"{(_num(st.median) if (st := collect(runs, s, k)) else 'n/a'):>16}" for s in systems)
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
