"""One consumer-group member for bench/run_groups.py, as its own process (one core's worth of Python).

    python -m bench.group_member BOOTSTRAP GROUP TOPIC OUT --mode throughput|timeline [options]

throughput: consume until nothing arrives for --idle-s, then write {"count", "first", "last"} (wall
            times of the first and last record) as JSON to OUT.
timeline:   until SIGTERM, append one line per partition per poll, "<wall time> R <partition> <records>",
            plus "<wall time> A|V <partitions>" on assignment and revocation, flushed every poll, so a
            SIGKILL loses nothing already received.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import time
from collections import Counter

from client.consumer import AsyncConsumer


async def run(args: argparse.Namespace) -> None:
    if os.environ.get("KL_MEMBER_LOG"):
        logging.basicConfig(level=logging.INFO, format="%(created).6f %(name)s %(message)s")
    consumer = AsyncConsumer(
        args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=min(3000, args.session_timeout_ms // 3),
        partition_assignment_strategy=args.strategy,
        max_poll_records=10000,
    )
    await consumer.start()
    out = open(args.out, "a", buffering=1)

    class Listener:
        def on_partitions_revoked(self, tps: set) -> None:
            out.write(f"{time.time():.6f} V {' '.join(str(tp.partition) for tp in sorted(tps))}\n")

        def on_partitions_assigned(self, tps: set) -> None:
            out.write(f"{time.time():.6f} A {' '.join(str(tp.partition) for tp in sorted(tps))}\n")

    consumer.subscribe([args.topic], listener=Listener())
    out.write(f"{time.time():.6f} J\n")  # started and subscribed: the rebalance it causes starts here
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    count, first, last, idle_since = 0, 0.0, 0.0, time.monotonic()
    while not stop.is_set():
        records = await consumer.poll(100)
        now = time.time()
        if records:
            if not count:
                first = now
            count += len(records)
            last, idle_since = now, time.monotonic()
            if args.mode == "timeline":
                per = Counter(r.partition for r in records)
                out.write("".join(f"{now:.6f} R {p} {n}\n" for p, n in sorted(per.items())))
        elif args.mode == "throughput" and count and time.monotonic() - idle_since > args.idle_s:
            break
    if args.mode == "throughput":
        out.write(json.dumps({"count": count, "first": first, "last": last}) + "\n")
    out.close()
    await consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("group")
    ap.add_argument("topic")
    ap.add_argument("out")
    ap.add_argument("--mode", choices=["throughput", "timeline"], default="throughput")
    ap.add_argument("--strategy", default="range")
    ap.add_argument("--session-timeout-ms", type=int, default=45000)
    ap.add_argument("--idle-s", type=float, default=3.0)
    import uvloop

    uvloop.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
