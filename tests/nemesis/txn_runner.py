"""Run the seeded nemesis against the transactional workload (tests/nemesis/transactions.py): producers of
both clients and a read_committed consumer under kills (the transaction coordinator's broker among them),
pauses, cuts and kill-all; then heal, stop the producers, and check a read_committed read of everything and
what the concurrent consumer saw."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from client.transactions import KEY_TYPE_TRANSACTION, find_coordinator
from net.errors import KafkaLiteError
from tests.integration.cluster_harness import ClusterHarness, wait_until
from tests.nemesis.runner import NemesisRun, apply, play
from tests.nemesis.schedule import Fault
from tests.nemesis.transactions import (
    TOPICS,
    CommittedReader,
    ConfluentTxnClient,
    OurTxnClient,
    TxnProducer,
    Verdict,
    all_transactions,
    check_transactions,
    describe_errors,
    read_everything,
)


@dataclass
class TxnNemesisRun(NemesisRun):
    producers: list[TxnProducer] = field(default_factory=list)
    verdict: Verdict | None = None


def transaction_coordinator(h: ClusterHarness, transactional_id: str) -> int | None:
    """The broker coordinating `transactional_id` now (FindCoordinator key_type 1), None if none answers."""
    try:
        with h.admin(timeout_ms=3000) as a:
            return a._lt.run(find_coordinator(a._impl.client, transactional_id, KEY_TYPE_TRANSACTION), 5)
    except (KafkaLiteError, TimeoutError):
        return None


def run_txn_nemesis(
    h: ClusterHarness, seed: int, schedule: list[Fault], producers: int = 2, confluent: int = 1, duration: float = 0.0
) -> TxnNemesisRun:
    """Load, faults, heal, check. Raises AssertionError naming the anomaly and the seed."""
    run = TxnNemesisRun(seed, schedule)
    for topic, n in TOPICS.items():
        h.create_topic(topic, n, 3, {"min.insync.replicas": "2"})
    bs, kbs = h.bootstrap(), h.kafka_bootstrap()
    names = [f"t{seed}x{i}" for i in range(producers)] + [f"c{seed}x{i}" for i in range(confluent)]
    for name in names:
        if name.startswith("t"):
            run.producers.append(TxnProducer(lambda n=name: OurTxnClient(bs, n), name, seed))
        else:
            run.producers.append(TxnProducer(lambda n=name: ConfluentTxnClient(kbs, n), name, seed))
    reader = CommittedReader(bs).start()
    for p in run.producers:
        p.start()

    def fault(f: Fault) -> None:
        if f.kind != "kill-coordinator":
            return apply(h, f, run)
        tid = names[int(f.at_s * 100) % len(names)]
        coordinator = transaction_coordinator(h, tid)
        apply(h, dataclasses.replace(f, kind="kill", broker=coordinator or f.broker), run)
        run.applied[-1] += f" (coordinator of {tid}: {coordinator})"

    try:
        play(h, schedule, fault, duration)
        for p in run.producers:
            p.stop()
        txns = all_transactions(run.producers)
        for topic, n in TOPICS.items():
            h.wait_full_isr(topic, n)
        committed, _ = read_everything(h.bootstrap(), "read_committed")
        uncommitted, _ = read_everything(h.bootstrap(), "read_uncommitted")
        run.verdict = check_transactions(txns, committed, "read_committed read after healing", uncommitted)
        # The consumer that ran alongside: once it has read up to the end, it saw the same, whole transactions.
        last = {(t, p): off + 1 for t, p, off, _ in sorted(committed, key=lambda r: r[2])}
        wait_until(
            lambda: all(reader.positions()[tp] >= off for tp, off in last.items()),
            60,
            "the concurrent read_committed consumer reached the end",
            0.3,
        )
        check_transactions(txns, reader.seen(), "read_committed consumer during the faults")
    except AssertionError as e:
        raise AssertionError(f"{e}\n  ({run.describe()}; {describe_errors(run.producers)})") from None
    finally:
        reader.stop()
    return run
