"""Does a watched console slow the cluster? 20 browsers' worth of kl-dashboard event streams against one
console, and a producer on the same 3-broker cluster (RF=3, acks=all, kl-perf produce).

Per run, interleaved on one cluster (quiet, watched, quiet, watched, ...): kl-perf produce with no console
viewers, then with 20 open /api/events streams (each read to the end, as a browser tab does). The console
polls the cluster once a second whatever the number of viewers, so the expected cost is small; the check is
that the watched figure is within 10% of the quiet one (medians of --runs).

Writes docs/BENCHMARKS.md between <!-- dashboard:start --> and <!-- dashboard:end -->.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time

import aiohttp

from bench.peers._common import free_port
from bench.run_cluster import Cluster, perf, produce_args
from bench.sections import bench_parser, replace_section

START_MARK = "<!-- dashboard:start -->"
END_MARK = "<!-- dashboard:end -->"
STREAMS = 20


class Streams:
    """N event-stream readers in a thread of their own (their own loop), until stopped."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.n = url, n
        self.events = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _one(self, session: aiohttp.ClientSession) -> None:
        async with session.get(self.url) as r:
            async for line in r.content:
                if line.startswith(b"data: "):
                    json.loads(line[6:])  # a browser parses every snapshot too
                    self.events += 1
                if self._stop.is_set():
                    return

    async def _run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as s:
            tasks = [asyncio.create_task(self._one(s)) for _ in range(self.n)]
            while not self._stop.is_set():
                await asyncio.sleep(0.1)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> "Streams":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def main(argv: list[str] | None = None) -> int:
    args = bench_parser(__doc__, 300000).parse_args(argv)
    c = Cluster()
    port = free_port()
    console = subprocess.Popen(
        [sys.executable, "-m", "client.dashboard", "--bootstrap-server", c.bootstrap, "--http-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    quiet: list[float] = []
    watched: list[float] = []
    events: list[float] = []
    try:
        c.create("bench", 3)
        perf(produce_args(c, "bench", 20000))  # warm-up: leaders and fetchers settled
        time.sleep(2)
        for run in range(args.runs):
            quiet.append(perf(produce_args(c, "bench", args.num_records))["records_per_sec"])
            with Streams(f"http://127.0.0.1:{port}/api/events", STREAMS) as s:
                time.sleep(2)  # every stream connected and receiving
                t0, e0 = time.monotonic(), s.events
                watched.append(perf(produce_args(c, "bench", args.num_records))["records_per_sec"])
                events.append((s.events - e0) / (time.monotonic() - t0) / STREAMS)
            print(f"run {run + 1}: quiet {quiet[-1]:.0f} rec/s, watched {watched[-1]:.0f} rec/s", file=sys.stderr)
    finally:
        console.terminate()
        console.wait(10)
        c.down()
    q, w = statistics.median(quiet), statistics.median(watched)
    slowdown = (q - w) / q * 100
    rate = statistics.median(events)
    today = time.strftime("%Y-%m-%d")

    def verdict(ok: bool) -> str:
        return "MET" if ok else "MISSED"

    body = f"""## Console load: {STREAMS} event streams vs a producer (`python -m bench.run_dashboard`)

`python -m bench.run_dashboard --runs {args.runs} --num-records {args.num_records}` on {today}: a
3-broker kl-cluster (RF=3, acks=all, 3 partitions, 100-byte records, kl-perf produce), runs interleaved quiet / watched;
watched = {STREAMS} `/api/events` streams open on one kl-dashboard, each parsing every snapshot. Median of {args.runs}.
The machine (2 cores) is shared with other engineers' jobs, which may have run meanwhile: figures are noisy.

| | quiet | watched ({STREAMS} streams) |
|---|---:|---:|
| produce, records/s (median) | {q:,.0f} | {w:,.0f} |
| runs | {", ".join(f"{x:,.0f}" for x in quiet)} | {", ".join(f"{x:,.0f}" for x in watched)} |
| snapshots per stream per second | | {rate:.2f} |

Slowdown with {STREAMS} viewers: {slowdown:+.1f}% (the requirement: at most 10%: {verdict(slowdown <= 10)}).
Live updates: {rate:.2f} snapshots per stream per second while the producer saturates both cores (the
requirement: at least one a second: {verdict(rate >= 1)}; the console polls once a second and a
poll that takes longer delays the next).
"""
    replace_section(args.out, START_MARK, END_MARK, body)
    print(body)
    return 0 if slowdown <= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
