"""One consumer-group member for bench/run_groups.py, as its own process (one core's worth of Python).

    python -m bench.group_member BOOTSTRAP GROUP TOPIC OUT --mode throughput|timeline [options]

throughput: consume until nothing arrives for --idle-s, then write {"count", "first", "last"} (wall
            times of the first and last record) as JSON to OUT.
share:      the same as a share-group member (KIP-932, client/share_consumer.py, implicit acknowledgement):
            GROUP is the share group.
timeline:   until SIGTERM, append one line per run of consecutive offsets of a partition per poll,
            "<wall time> R <partition> <records> <first offset> <last offset>", plus "<wall time> A|V
            <partitions>" on assignment and revocation, flushed every poll, so a SIGKILL loses nothing
            already received.
control:    the timeline's R lines from a consumer in no group: --partitions partitions of TOPIC assigned, read
            from their ends on (GROUP is ignored). What it receives is what the brokers let any consumer read,
            so a group's stop is the group's own only where the control kept receiving.

--group-protocol consumer makes the own client's member use the consumer group protocol (KIP-848): its
session timeout and heartbeat interval are then the brokers' group.consumer.* (the options below are ignored).
--client confluent runs the same member on confluent-kafka (librdkafka, the client most Kafka users run)
against the brokers' Kafka listeners: BOOTSTRAP is then their Kafka bootstrap.
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

EMPTY_S = 20.0  # a throughput member that has received nothing for this long stops


class Tally:
    """What a throughput member received: how many records, the first and last receipt (wall clock)."""

    def __init__(self) -> None:
        self.count, self.first, self.last, self.idle_since = 0, 0.0, 0.0, time.monotonic()

    def add(self, n: int, now: float) -> None:
        if n:
            if not self.count:
                self.first = now
            self.count += n
            self.last, self.idle_since = now, time.monotonic()

    def idle_past(self, idle_s: float) -> bool:
        """Nothing for `idle_s` since the last receipt, or for EMPTY_S if nothing came at all (a member that
        got no partition: more members than partitions)."""
        return time.monotonic() - self.idle_since > (idle_s if self.count else max(idle_s, EMPTY_S))

    def result(self) -> str:
        return json.dumps({"count": self.count, "first": self.first, "last": self.last}) + "\n"


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


async def wait_for_go(args: argparse.Namespace) -> None:
    """--go-file: say ready (OUT.ready) once started, then subscribe only when the bench creates the go file, so
    that the members of a throughput measurement join together rather than as their processes come up."""
    if not args.go_file:
        return
    open(args.out + ".ready", "w").close()
    while not os.path.exists(args.go_file):
        await asyncio.sleep(0.01)


async def run(args: argparse.Namespace) -> None:
    if os.environ.get("KL_MEMBER_LOG"):
        logging.basicConfig(level=logging.INFO, format="%(created).6f %(name)s %(message)s")
    if args.mode == "share":
        await run_share(args)
        return
    if args.mode == "control":
        await run_control(args)
        return
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
    await wait_for_go(args)
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
    tally = Tally()
    while not stop.is_set():
        records = await consumer.poll(100)
        now = time.time()
        tally.add(len(records), now)
        if records and args.mode == "timeline":
            out.write(receipt_lines(now, ((r.partition, r.offset) for r in records)))
        elif not records and args.mode == "throughput" and tally.idle_past(args.idle_s):
            break
    await consumer.close()  # before the file closes: leaving calls the listener's on_partitions_revoked
    if args.mode == "throughput":
        out.write(tally.result())
    out.close()


async def run_control(args: argparse.Namespace) -> None:
    """The control consumer (module docstring): no group, every partition assigned, from its end."""
    consumer = AsyncConsumer(args.bootstrap, auto_offset_reset="latest", max_poll_records=10000)
    await consumer.start()
    await consumer.assign([(args.topic, p) for p in range(args.partitions)])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    with open(args.out, "a", buffering=1) as out:
        out.write(f"{time.time():.6f} A {' '.join(str(p) for p in range(args.partitions))}\n")
        while not stop.is_set():
            records = await consumer.poll(100)
            if records:
                out.write(receipt_lines(time.time(), ((r.partition, r.offset) for r in records)))
    await consumer.close()


async def run_share(args: argparse.Namespace) -> None:
    """A share-group member counting what it is given until nothing comes for --idle-s (implicit acks: each
    poll accepts the previous one's records, close() the last ones)."""
    from client.share_consumer import AsyncShareConsumer

    consumer = AsyncShareConsumer(args.bootstrap, args.group, max_poll_records=args.max_poll_records or 500)
    await consumer.start()
    await wait_for_go(args)
    consumer.subscribe([args.topic])
    tally = Tally()
    while True:
        records = await consumer.poll(100)
        tally.add(len(records), time.time())
        if not records and tally.idle_past(args.idle_s):
            break
    await consumer.close()
    with open(args.out, "a") as out:
        out.write(tally.result())


def _rdkafka_overrides(spec: str) -> dict[str, str]:
    """'key=value,key=value' → librdkafka config entries (empty: none)."""
    pairs = [item.split("=", 1) for item in spec.split(",") if item.strip()]
    bad = [item for item in pairs if len(item) != 2]
    if bad:
        raise SystemExit(f"KL_MEMBER_RDKAFKA: expected key=value items, got {spec!r}")
    return {k.strip(): v.strip() for k, v in pairs}


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
            # KL_MEMBER_DEBUG widens it (e.g. cgrp,fetch,topic,metadata,broker) to follow one partition's fetches.
            **({"debug": os.environ.get("KL_MEMBER_DEBUG", "cgrp")} if os.environ.get("KL_MEMBER_LOG") else {}),
            # KL_MEMBER_RDKAFKA="key=value,...": librdkafka settings for an experiment (e.g.
            # reconnect.backoff.max.ms=1000, the Java client's default, against librdkafka's 10000).
            **_rdkafka_overrides(os.environ.get("KL_MEMBER_RDKAFKA", "")),
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
    ap.add_argument("--mode", choices=["throughput", "timeline", "share", "control"], default="throughput")
    ap.add_argument("--partitions", type=int, default=1, help="control: how many partitions TOPIC has")
    ap.add_argument("--go-file", default="", help="subscribe once this file exists (see wait_for_go)")
    ap.add_argument("--max-poll-records", type=int, default=0, help="share: max.poll.records (0: 500, Kafka's)")
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
