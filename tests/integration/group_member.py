"""A consumer-group member process for the group tests: consume, record, commit (at-least-once).

Each processed record is appended to OUT as "R <partition> <offset> <value>" and flushed before the
offsets are committed; each successful commit is logged as "C <partition> <offset>". So after a
SIGKILL the file shows exactly which records were processed and what had been committed.

    python tests/integration/group_member.py BOOTSTRAP GROUP TOPIC OUT [strategy] [session_ms]
"""

from __future__ import annotations

import os
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from client.sync import Consumer  # noqa: E402
from net.errors import KafkaLiteError  # noqa: E402


def main() -> None:
    bootstrap, group, topic, out_path = sys.argv[1:5]
    strategy = sys.argv[5] if len(sys.argv) > 5 else "range"
    session_ms = int(sys.argv[6]) if len(sys.argv) > 6 else 3000
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = open(out_path, "a", buffering=1)
    consumer = Consumer(
        bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(100, session_ms // 10),
        partition_assignment_strategy=strategy,
        client_id=f"member-{os.getpid()}",
    )

    def commit(offsets=None) -> None:
        try:
            consumer.commit(offsets)
        except KafkaLiteError as e:
            out.write(f"E commit failed: {e}\n")
            return
        for tp, off in (offsets or {}).items():
            out.write(f"C {tp[1]} {off}\n")

    class Listener:
        def on_partitions_revoked(self, revoked):
            mine = {tp: consumer.position(tp) for tp in revoked}
            commit(mine)
            out.write(f"V {sorted(tp.partition for tp in revoked)}\n")

        def on_partitions_assigned(self, assigned):
            out.write(f"A {sorted(tp.partition for tp in assigned)}\n")

    consumer.subscribe([topic], listener=Listener())
    out.write(f"S {os.getpid()}\n")
    while not stop.is_set():
        records = consumer.poll(200)
        if not records:
            continue
        out.write("".join(f"R {r.partition} {r.offset} {r.value.decode()}\n" for r in records))
        out.flush()
        positions = {}
        for r in records:
            positions[(r.topic, r.partition)] = r.offset + 1
        commit({consumer_tp(r): positions[(r.topic, r.partition)] for r in records})
    consumer.close()
    out.write("X\n")
    out.close()


def consumer_tp(r):  # type: ignore[no-untyped-def]
    from client.consumer import TopicPartition

    return TopicPartition(r.topic, r.partition)


if __name__ == "__main__":
    main()
