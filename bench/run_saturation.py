"""Saturation: how much server CPU each system spends per message, with 1, 2 and 4 client processes.

    .venv/bin/python -m bench.run_saturation [--runs 3] [--num-records 300000] [--clients 1,2,4]

One client process in Python cannot load a server to its limit, so single-client throughput measures the
client as much as the server. Here N producer processes (each its own partition / stream / subject,
100-byte values, acks=1 or the peer's equivalent, every system driven by its best Python set-up: Kafka
Lite's batching producer at its default batch.size and at Kafka's 16 KiB, redis-py with hiredis and
pipelines of 1,000 XADDs, nats-py on uvloop with 1,000 async publishes in flight) write `--num-records`
records each at once, against a fresh Kafka Lite broker, Redis Streams (AOF everysec) and NATS JetStream.
For each N the section reports the aggregate msgs/s, the server's CPU use in cores, and the server's CPU
seconds per million messages: the last is the broker's cost, whatever the clients manage. Systems are
interleaved within each run. On this 2-core machine the clients and the server share the cores, so
aggregate msgs/s flattens once they compete; CPU per million messages is the figure to compare.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import sys
import time
from collections.abc import Callable, Iterator

import uvloop

from bench.peers import nats_jetstream, redis_streams
from bench.peers._common import base_value, cpu_seconds, free_port, server, stop_child, temp_dir
from bench.run_single_broker import DEFAULT_BATCH, _tool, kafka_lite_broker, machine_info
from bench.sections import bench_parser, md_table, median_range, replace_section

START_MARK = "<!-- saturation:start -->"
END_MARK = "<!-- saturation:end -->"
RECORD_SIZE = 100
KAFKA_16K = "Kafka Lite, batch.size=16384"  # Kafka's default batch size, next to our producer's default
SYSTEMS = ("Kafka Lite", KAFKA_16K, "Redis Streams", "NATS JetStream")


# --- one producer process per client, per system ------------------------------------------------------


def _kafka_lite_client(address: tuple[str, int], index: int, n: int, go: mp.Event) -> None:
    from client.producer import AsyncProducer

    bootstrap, batch_size = address

    async def main() -> None:
        p = AsyncProducer(bootstrap, acks="1", batch_size=batch_size)
        await p.start()
        await p.partitions_for("saturation")
        value = bytes(base_value(RECORD_SIZE))
        go.wait()
        for i in range(n):
            p.send("saturation", value, partition=index)
            if i % 1000 == 999:
                await asyncio.sleep(0)  # let the sender drain closed batches
        await p.flush()
        await p.close()

    uvloop.run(main())


def _redis_client(port: int, index: int, n: int, go: mp.Event) -> None:
    r = redis_streams._client(port)
    go.wait()
    redis_streams._produce(r, [f"sat-{index}"], n, bytes(base_value(RECORD_SIZE)))
    r.close()


def _nats_client(port: int, index: int, n: int, go: mp.Event) -> None:
    async def main() -> None:
        nc, js = await nats_jetstream._connect(port)
        value = bytes(base_value(RECORD_SIZE))
        acks = nats_jetstream._AckErrors()
        go.wait()
        for _ in range(n):
            (await js.publish_async(f"bench.{index}", value)).add_done_callback(acks)
        await js.publish_async_completed()
        acks.check()
        await nc.close()

    uvloop.run(main())


# --- the servers ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def kafka_lite(clients: int, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[int, Callable, object]]:
    import subprocess

    with kafka_lite_broker() as broker:
        subprocess.run(
            [
                _tool("kl-topics"),
                "--bootstrap-server",
                broker.bootstrap,
                "--create",
                "--topic",
                "saturation",
                "--partitions",
                str(clients),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield broker.proc.pid, _kafka_lite_client, (broker.bootstrap, batch_size)


@contextlib.contextmanager
def redis(clients: int) -> Iterator[tuple[int, Callable, object]]:
    with temp_dir("sat-redis-") as d:
        port = free_port()
        with server(redis_streams._server_argv(port, str(d)), port, d) as proc:
            yield proc.pid, _redis_client, port


@contextlib.contextmanager
def nats(clients: int) -> Iterator[tuple[int, Callable, object]]:
    with temp_dir("sat-nats-") as d:
        port = free_port()
        with server(nats_jetstream._server_argv(port, str(d)), port, d) as proc:
            uvloop.run(nats_jetstream._setup_stream(port))
            yield proc.pid, _nats_client, port


SERVERS = {
    "Kafka Lite": kafka_lite,
    KAFKA_16K: lambda clients: kafka_lite(clients, 16384),
    "Redis Streams": redis,
    "NATS JetStream": nats,
}


def measure(system: str, clients: int, per_client: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    with SERVERS[system](clients) as (pid, target, address):
        go = ctx.Event()
        procs = [ctx.Process(target=target, args=(address, i, per_client, go)) for i in range(clients)]
        for p in procs:
            p.start()
        try:
            time.sleep(2.0)  # the clients connect and look up metadata before the clock starts
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            go.set()
            for p in procs:
                p.join(600)
                if p.exitcode != 0:
                    raise RuntimeError(f"{system}: a client process exited with {p.exitcode}")
            wall, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
        finally:
            for p in procs:
                stop_child(p)
    total = clients * per_client
    return {"msgs_s": total / wall, "server_cores": cpu / wall, "cpu_s_per_m": cpu / (total / 1e6)}


def render(results: dict[tuple[str, int], list[dict[str, float]]], clients: list[int], cmd: str, n: int) -> str:
    m = machine_info()
    runs = max(len(v) for v in results.values())
    rows = []
    for system in SYSTEMS:
        for c in clients:
            rs = results.get((system, c), [])
            rows.append(
                [
                    system,
                    str(c),
                    median_range([r["msgs_s"] for r in rs]),
                    median_range([r["server_cores"] for r in rs], ".2f"),
                    median_range([r["cpu_s_per_m"] for r in rs], ".2f"),
                ]
            )
    ratio_rows = []
    for c in clients:
        ours = results.get(("Kafka Lite", c), [])
        for peer in SYSTEMS[2:]:
            theirs = results.get((peer, c), [])
            ratios = [t["cpu_s_per_m"] / o["cpu_s_per_m"] for o, t in zip(ours, theirs)]
            ratio_rows.append([str(c), peer, median_range(ratios, ".2f")])
    busiest = max((r["server_cores"] for rs in results.values() for r in rs), default=0.0)
    limit = (
        f"The busiest server used {busiest:.2f} cores at most: on this {m['nproc']}-core machine the Python client "
        "processes, which share the cores, were the limit, not the servers; the servers' CPU per message is the "
        "figure that compares them."
        if busiest < 0.8 * int(m["nproc"] if m["nproc"].isdigit() else 1)
        else f"The busiest server used {busiest:.2f} cores."
    )
    return "\n".join(
        [
            "## Saturation: server CPU per million messages",
            "",
            "```bash",
            cmd,
            "```",
            "",
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; median of {runs} runs (min–max), "
            f"systems interleaved in each run. Machine: {m['cpu']}, {m['nproc']} cores, {m['memory']}, "
            f"{m['python']}; clients and server share the cores. Kafka Lite's producer batch.size: {DEFAULT_BATCH:,} "
            f"(its default) and 16,384 (Kafka's). Each of N client processes produces {n:,} "
            f"records of {RECORD_SIZE} B to its own partition (stream, subject) at once; the server's CPU "
            "seconds come from /proc/PID/stat over the produce.",
            "",
            md_table(["System", "Clients", "Aggregate msgs/s", "Server cores", "Server CPU s / 1M msgs"], rows),
            "",
            limit,
            "",
            "Peer's server CPU per message over Kafka Lite's (in each run; above 1: the peer's server works "
            "harder per message):",
            "",
            md_table(["Clients", "Peer", "Peer / Kafka Lite CPU per message"], ratio_rows),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, 300_000)
    ap.add_argument("--clients", default="1,2,4", help="client process counts (default 1,2,4)")
    args = ap.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    cmd = " ".join([".venv/bin/python -m bench.run_saturation", *(sys.argv[1:] if argv is None else argv)])
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    for run in range(args.runs):
        for c in clients:
            for system in SYSTEMS:
                r = measure(system, c, args.num_records)
                results.setdefault((system, c), []).append(r)
                print(
                    f"run {run + 1} {system:15s} {c} clients: {r['msgs_s']:>10,.0f} msgs/s, server "
                    f"{r['server_cores']:.2f} cores, {r['cpu_s_per_m']:.2f} CPU s / 1M msgs",
                    flush=True,
                )
    replace_section(args.out, START_MARK, END_MARK, render(results, clients, cmd, args.num_records))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
