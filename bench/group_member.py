"""One consumer-group member for bench/run_groups.py, as its own process (one core's worth of Python).

    python -m bench.group_member BOOTSTRAP GROUP TOPIC OUT --mode throughput|timeline [options]

throughput: consume until nothing arrives for --idle-s, then write {"count", "first", "last"} (wall
            times of the first and last record) as JSON to OUT.
timeline:   until SIGTERM, append one line per run of consecutive offsets of a partition per poll,
            "<wall time> R <partition> <records> <first offset> <last offset>", plus "<wall time> A|V
            <partitions>" on assignment and revocation, flushed every poll, so a SIGKILL loses nothing
            already received.

--client confluent runs the same member on confluent-kafka (librdkafka, the client most Kafka users run)
against the brokers' Kafka listeners: BOOTSTRAP is then their Kafka bootstrap.
--group-protocol consumer joins with KIP-848's protocol instead of the classic one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Iterable

from client.consumer import AsyncConsumer
from client.subscription import ConsumerRebalanceListener


def receipt_lines(now: float, records: Iterable[tuple[int, int]]) -> str:
    """'<now> R <partition> <count> <first> <last>' per run of consecutive offsets of a partition, from
    (partition, offset) pairs in the order received: what the bench checks for lost and repeated records."""
    runs: dict[int, list[list[int]]] = {}
    for p, o in records:
        mine = runs.setdefault(p, [])
        if mine and mine[-1][1] + 1 == o:
            mine[-1][1] = o
        else:
            mine.append([o, o])
    return "".join(f"{now:.6f} R {p} {b - a + 1} {a} {b}\n" for p in sorted(runs) for a, b in runs[p])


async def run(args: argparse.Namespace) -> None:
    if os.environ.get("KL_MEMBER_LOG"):
        logging.basicConfig(level=logging.INFO, format="%(created).6f %(name)s %(message)s")
    # The consumer protocol (KIP-848): the broker sets the session, the heartbeat and the assignor
    # (group.consumer.*), so the member sends none of them, as Kafka's consumer refuses them then.
    timing = (
        {}
        if args.group_protocol == "consumer"
        else {
            "session_timeout_ms": args.session_timeout_ms,
            "heartbeat_interval_ms": min(3000, args.session_timeout_ms // 3),
            "partition_assignment_strategy": args.strategy,
        }
    )
    consumer = AsyncConsumer(
        args.bootstrap,
        group_id=args.group,
        group_protocol=args.group_protocol,
        auto_offset_reset="earliest",
        max_poll_records=10000,
        **timing,
    )
    await consumer.start()
    out = open(args.out, "a", buffering=1)

    class Listener(ConsumerRebalanceListener):  # partitions lost (fenced) are written as revoked, its default
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
                out.write(receipt_lines(now, ((r.partition, r.offset) for r in records)))
        elif args.mode == "throughput" and count and time.monotonic() - idle_since > args.idle_s:
            break
    if args.mode == "throughput":
        out.write(json.dumps({"count": count, "first": first, "last": last}) + "\n")
    await consumer.close()  # its revocation is written too
    out.close()


def run_confluent(args: argparse.Namespace) -> None:
    """The timeline member on confluent-kafka: same output, eager `range` unless --strategy says otherwise."""
    from confluent_kafka import Consumer

    out = open(args.out, "a", buffering=1)

    def on_assign(consumer: Consumer, tps: list) -> None:
        out.write(
            f"{time.time():.6f} A {' '.join(str(tp.partition) for tp in sorted(tps, key=lambda t: t.partition))}\n"
        )

    def on_revoke(consumer: Consumer, tps: list) -> None:
        out.write(
            f"{time.time():.6f} V {' '.join(str(tp.partition) for tp in sorted(tps, key=lambda t: t.partition))}\n"
        )

    timing = (
        {"group.protocol": "consumer"}
        if args.group_protocol == "consumer"
        else {
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": min(3000, args.session_timeout_ms // 3),
            "partition.assignment.strategy": args.strategy,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            **timing,
            # KL_MEMBER_LOG: librdkafka's group and protocol decisions on stderr, for the bench's timeline.
            **({"debug": "cgrp"} if os.environ.get("KL_MEMBER_LOG") else {}),
        }
    )
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    out.write(f"{time.time():.6f} J\n")
    while not stop:
        msgs = consumer.consume(num_messages=10000, timeout=0.1)
        got = [(m.partition(), m.offset()) for m in msgs if m.error() is None]
        if got:
            out.write(receipt_lines(time.time(), got))
    consumer.close()
    out.close()


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
    ap.add_argument("--client", choices=["own", "confluent"], default="own")
    ap.add_argument(
        "--group-protocol",
        choices=["classic", "consumer"],
        default="classic",
        help="Kafka's group.protocol: consumer is KIP-848's (session, heartbeat and assignor set by the broker)",
    )
    args = ap.parse_args()
    if args.client == "confluent":
        run_confluent(args)
        return
    import uvloop

    uvloop.run(run(args))


if __name__ == "__main__":
    main()
