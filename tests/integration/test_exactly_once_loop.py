"""Exactly once through faults (issue 28 §4): a confluent-kafka consume-transform-produce loop (read_committed
input, transactional output, the consumer's offsets sent in each transaction) while the input's leader, the
output's leader and the transaction coordinator are SIGKILLed in turn and restarted: every input record
appears exactly once in the output, read with read_committed.

The loop runs in a child process and the faults come from this one. librdkafka has open lock-order deadlocks that a
broker kill can reach (issues 5476 and 5511: a broker decommissioned while a request to it is in flight); blocked
in C, a thread of this process would not even see pytest-timeout's signal, and one such hang stopped a whole CI
run. A child that overstays its deadline is killed and the test fails, naming the call it was stuck in."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from client.sync import Consumer, Producer, with_client
from client.transactions import KEY_TYPE_TRANSACTION, find_coordinator
from net.errors import KafkaLiteError
from tests.integration.cluster_harness import ClusterHarness

pytestmark = pytest.mark.timeout(360)
N = 3000
TXN_ID = "eos-loop"
SHARES = (0.25, 0.5, 0.75)  # a fault when this much of the input is committed
LOOP_S = 200  # the loop's own deadline, inside the test's timeout: a stall fails with what it was stuck at
CLIENT_CONFIG = {
    # librdkafka (2.10+) re-bootstraps when every broker it knows is down at once, which a client with sparse
    # connections sees when the broker it talks to is killed after the two it stopped talking to. Re-bootstrapping
    # decommissions every known broker, and a decommissioned broker with a request in flight reaches librdkafka's
    # open deadlocks (issue 5511: a decommissioned group coordinator hangs send_offsets_to_transaction; issue
    # 5476: an OffsetForLeaderEpoch in flight deadlocks the consumer's toppar lock). The broker cannot prevent it
    # (Kafka's own brokers would be seen the same way), so the loop's clients recover through metadata
    # refreshes, not re-bootstrap.
    "metadata.recovery.strategy": "none",
}


def _retrying(ask: Callable[[], int]) -> int:
    """A restarted broker may not know the cluster yet: ask again until someone answers."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return ask()
        except KafkaLiteError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def leader_of(cluster: ClusterHarness, topic: str) -> int:
    return _retrying(lambda: next(p.leader for p in cluster.describe(topic) if p.partition == 0))


def coordinator_of(cluster: ClusterHarness) -> int:
    return _retrying(
        lambda: with_client(
            cluster.bootstrap(), {}, "find-coordinator", lambda c: find_coordinator(c, TXN_ID, KEY_TYPE_TRANSACTION), 30
        )
    )


def transform_loop(kafka: str, committed: Any, kills_started: Any, step: Any, result: Any) -> None:
    """The child process: consume from eos-in, produce each record to eos-out and commit the consumer's offsets
    in the same transaction, until N input records are committed. `committed` (shared) is the progress the
    parent's faults follow; the loop goes on past a fault's share only once that fault is there, so it runs
    through it. `step` names the librdkafka call under way, for the parent's report if the child hangs."""
    import confluent_kafka as ck

    def at(what: str) -> None:
        step.value = what.encode()[:63]

    try:
        consumer = ck.Consumer(
            {
                "bootstrap.servers": kafka,
                "group.id": "eos-loop",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **CLIENT_CONFIG,
            }
        )
        consumer.subscribe(["eos-in"])
        producer = ck.Producer(
            {"bootstrap.servers": kafka, "transactional.id": TXN_ID, "transaction.timeout.ms": 20000, **CLIENT_CONFIG}
        )
        at("init_transactions")
        producer.init_transactions(60)
        deadline = time.monotonic() + LOOP_S

        def finish_after(e: ck.KafkaException) -> bool:
            """librdkafka's rules after a failed transactional call: retry the commit while the error is
            retriable, abort when the transaction requires it (False: aborted), fail on a fatal error."""
            while True:
                assert time.monotonic() < deadline, f"still retrying the commit at {committed.value}: {e}"
                err = e.args[0]
                if err.txn_requires_abort():
                    at("abort_transaction")
                    producer.abort_transaction(30)
                    return False
                if not err.retriable():
                    raise e
                try:
                    at("commit_transaction (retry)")
                    producer.commit_transaction(30)
                    return True
                except ck.KafkaException as again:
                    e = again

        while committed.value < N:
            assert time.monotonic() < deadline, f"stuck at {committed.value} committed"
            due = sum(1 for share in SHARES if committed.value >= share * N)
            while kills_started.value < due:
                assert time.monotonic() < deadline, f"fault {due} never came ({committed.value} committed)"
                time.sleep(0.05)
            at("consume")
            msgs = [m for m in consumer.consume(100, 1.0) if m.error() is None]
            if not msgs:
                continue
            try:
                producer.begin_transaction()
                at("produce")
                for m in msgs:
                    producer.produce("eos-out", m.value(), partition=0)
                offsets, group = consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
                at("send_offsets_to_transaction")
                producer.send_offsets_to_transaction(offsets, group, 30)
                at("commit_transaction")
                producer.commit_transaction(30)
                committed.value += len(msgs)
            except ck.KafkaException as e:
                if not finish_after(e):  # aborted: read again from the group's committed offsets
                    at("committed (after abort)")
                    for tp in consumer.committed(consumer.assignment(), 30):
                        consumer.seek(ck.TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                at("committed")
                committed.value = sum(max(tp.offset, 0) for tp in consumer.committed(consumer.assignment(), 30))
        result.put(None)
        at("close")
        consumer.close()
    except BaseException as e:  # noqa: BLE001 - reported to the test in the parent
        result.put(f"{type(e).__name__}: {e}\n{traceback.format_exc()}")


def test_consume_transform_produce_is_exactly_once_through_leader_and_coordinator_kills(cluster_factory):
    pytest.importorskip("confluent_kafka")
    cluster: ClusterHarness = cluster_factory(
        3,
        overrides=[
            "transaction.state.log.num.partitions=3",
            "group.initial.rebalance.delay.ms=0",
            # Kafka Metadata names a fenced broker for a session timeout (as Kafka names a crashed one until its
            # session expires); a victim on a loaded machine is out 7-20 s before it registers again, and
            # librdkafka decommissions a broker a Metadata answer leaves out (a decommissioned group coordinator:
            # librdkafka issue 5511). A killed broker is still fenced at once (its connections close).
            "broker.session.timeout.ms=30000",
        ],
    )
    cluster.create_topic("eos-in", 1, 3, {"min.insync.replicas": "2"})
    cluster.create_topic("eos-out", 1, 3, {"min.insync.replicas": "2"})
    with Producer(cluster.bootstrap(), acks="all") as p:
        for i in range(N):
            p.send("eos-in", f"r{i}".encode(), partition=0)
        p.flush()

    ctx = multiprocessing.get_context("spawn")  # no fork of this process's threads (pytest's, other clients')
    committed, kills_started, step = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Array("c", 64)
    result = ctx.Queue()
    child = ctx.Process(
        target=transform_loop, args=(cluster.kafka_bootstrap(), committed, kills_started, step, result), daemon=True
    )
    child.start()
    done = threading.Event()
    kills: list[tuple] = []
    killer_error: list[str] = []

    def killer() -> None:
        """At a quarter, a half and three quarters of the input: kill a leader or the coordinator, restart it,
        and wait until it is registered again (the faults come in turn, each one over before the next)."""
        try:
            for share, what in zip(SHARES, ("input leader", "output leader", "transaction coordinator"), strict=True):
                while committed.value < share * N and not done.is_set():
                    time.sleep(0.05)
                if done.is_set():
                    return
                victim = {
                    "input leader": lambda: leader_of(cluster, "eos-in"),
                    "output leader": lambda: leader_of(cluster, "eos-out"),
                    "transaction coordinator": lambda: coordinator_of(cluster),
                }[what]()
                killed = time.monotonic()
                cluster.kill(victim)
                kills.append((what, victim))
                kills_started.value += 1
                time.sleep(2)
                cluster.restart(victim)
                cluster.wait_all_registered(60)
                kills[-1] += (round(time.monotonic() - killed, 1),)  # seconds out, for the report
        except Exception as e:  # noqa: BLE001 - the test fails with it
            killer_error.append(repr(e))

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    outcome: str | None = "no answer"
    try:
        deadline = time.monotonic() + LOOP_S + 30  # the child's own deadline fails it first, with its reason
        while time.monotonic() < deadline and not killer_error:
            try:
                outcome = result.get(timeout=0.5)
                break
            except queue.Empty:
                if not child.is_alive():
                    outcome = f"the loop's process died (exit code {child.exitcode})"
                    break
        else:
            outcome = f"the loop hung in {step.value.decode()!r}" if not killer_error else killer_error[0]
    finally:
        done.set()
        t.join(90)
        child.join(30)  # closing the consumer; a client stuck in close (librdkafka 5476) does not fail the test
        if child.is_alive():
            child.kill()
            child.join(10)
    assert not killer_error, f"the fault injection failed: {killer_error[0]} (kills {kills})"
    assert outcome is None, f"{outcome} (committed {committed.value}, kills {kills})"
    assert [k[0] for k in kills] == ["input leader", "output leader", "transaction coordinator"]
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest", isolation_level="read_committed") as c:
        c.assign([("eos-out", 0)])
        end = c.list_offsets([("eos-out", 0)], -1)[("eos-out", 0)]
        got: list[bytes] = []
        wait = time.monotonic() + 60
        while c.position(("eos-out", 0)) < end and time.monotonic() < wait:
            got += [r.value for r in c.poll(500)]
    counts = Counter(got)
    assert set(counts) == {f"r{i}".encode() for i in range(N)}, f"lost: {N - len(counts)}"
    assert max(counts.values()) == 1, f"duplicated: {[v for v, n in counts.items() if n > 1][:5]}"
