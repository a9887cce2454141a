"""The nemesis' transactional workload and its checker (issue 28 §4, "Chaos").

Several transactional producers (Kafka Lite's own, and librdkafka's through the Kafka listeners) write
transactions spanning 2-3 partitions of two topics; every record is `<producer>:<txn>:<index>:<size>`, so the
checker knows which transaction it belongs to and how many records that transaction has. Each transaction is
committed or aborted at random (an intended abort), and now and then abandoned open until the coordinator's
transaction.timeout.ms aborts it. A producer that fails (fenced, timed out, a coordinator gone) is closed and
recreated with the same transactional.id, whose init_transactions fences the old one and completes or aborts
what it left. Each transaction's outcome is what the client saw: committed (commit returned), aborted (never
asked to commit), or unknown (commit raised). A read_committed consumer polls alongside.

After the cluster is healed, `check_transactions` judges a read_committed read of everything (and the
concurrent consumer's view, once it has caught up): (a) no record of an aborted transaction is visible;
(b) each transaction is visible whole, across every partition it wrote, or not at all; (c) every committed
transaction is visible; (d) no record appears twice. An unknown outcome may go either way, but all or nothing.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaException
from confluent_kafka import Producer as KafkaProducer

from client.sync import Consumer, Producer
from net.errors import KafkaLiteError
from tests.nemesis.runner import PollingConsumer

TOPICS = {"txn-a": 3, "txn-b": 2}
PARTITIONS = [(t, p) for t, n in TOPICS.items() for p in range(n)]
# How long a transaction may stay open before its coordinator aborts it: short, so an abandoned one is
# aborted within the run (the brokers check every transaction.abort.timed.out.transaction.cleanup.interval.ms).
TXN_TIMEOUT_MS = 4000
BROKER_OVERRIDES = [
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
    "transaction.state.log.num.partitions=4",
]

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
TxnKey = tuple[str, int]  # (producer name, transaction number)
Record = tuple[str, int, int, bytes]  # (topic, partition, offset, value)


def encode(name: str, txn: int, index: int, size: int) -> bytes:
    return f"{name}:{txn}:{index}:{size}".encode()


def decode(value: bytes) -> tuple[TxnKey, int, int]:
    """(transaction, index, size) of a record's value; ValueError for anything the workload never wrote."""
    name, txn, index, size = value.decode().split(":")
    return (name, int(txn)), int(index), int(size)


@dataclass
class Txn:
    tps: list[tuple[str, int]]
    size: int
    outcome: str = ""  # COMMITTED / ABORTED / UNKNOWN once the client knows (or gave up)
    note: str = ""  # why: "intended", "abandoned", or the error seen
    producer: str = ""  # the producer id and epoch that wrote it, for the report


class TxnClient(Protocol):
    """The calls the workload makes, on either client; ERRORS: the exceptions after which it is recreated."""

    ERRORS: tuple[type[BaseException], ...]

    def init(self) -> None: ...
    def begin(self) -> None: ...
    def send(self, topic: str, partition: int, value: bytes) -> None: ...
    def flush(self) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...
    def ident(self) -> str: ...
    def take_delivered(self) -> list[str]: ...


class OurTxnClient:
    """Kafka Lite's producer (client/transactions.py), through the Kafka Lite listeners."""

    ERRORS: tuple[type[BaseException], ...] = (KafkaLiteError, TimeoutError)

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.p = Producer(
            bootstrap,
            transactional_id=transactional_id,
            transaction_timeout_ms=TXN_TIMEOUT_MS,
            linger_ms=2,
            request_timeout_ms=3000,
            delivery_timeout_ms=12000,
            max_block_ms=8000,
        )
        self.delivered: list[str] = []  # each record's outcome as its callback saw it, for the report

    def init(self) -> None:
        self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.p.send(topic, value, partition=partition, on_delivery=self._delivered)

    def _delivered(self, err: Any, md: Any) -> None:
        self.delivered.append(f"{err}" if err is not None else f"{md.topic}-{md.partition}@{md.offset}")

    def flush(self) -> None:
        self.p.flush(12)

    def commit(self) -> None:
        self.p.commit_transaction(12)

    def abort(self) -> None:
        self.p.abort_transaction(12)

    def close(self) -> None:
        self.p.close(2)

    def ident(self) -> str:
        pid, epoch = self.p.producer_id_and_epoch
        return f"producer id {pid} epoch {epoch}"

    def take_delivered(self) -> list[str]:
        out, self.delivered = self.delivered, []
        return out


class ConfluentTxnClient:
    """librdkafka's transactional producer, through the Kafka listeners."""

    ERRORS: tuple[type[BaseException], ...] = (KafkaException, BufferError)

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.p = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
                "linger.ms": 2,
                "request.timeout.ms": 3000,
                "message.timeout.ms": 3900,  # librdkafka: at most transaction.timeout.ms
                "retry.backoff.ms": 50,
                "log_level": 0,
                "error_cb": lambda err: None,  # connection errors while brokers are down: the calls report
            }
        )

    def init(self) -> None:
        self.p.init_transactions(12)

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.p.produce(topic, value, partition=partition)
        self.p.poll(0)

    def flush(self) -> None:
        if self.p.flush(12):
            raise KafkaException("flush timed out")

    def commit(self) -> None:
        self.p.commit_transaction(12)

    def abort(self) -> None:
        self.p.abort_transaction(12)

    def close(self) -> None:
        self.p.purge()
        self.p.flush(0)

    def ident(self) -> str:
        return "librdkafka"

    def take_delivered(self) -> list[str]:
        return []


class TxnProducer:
    """One transactional.id in a thread: transactions of 2-3 partitions, committed (about 70%), aborted, or
    (rarely) abandoned open until the coordinator times them out; recreated after any error."""

    def __init__(self, make: Callable[[], TxnClient], name: str, seed: int) -> None:
        self.make = make
        self.name = name
        self.rnd = random.Random(f"{seed}-{name}")
        self.txns: dict[int, Txn] = {}
        self.errors: list[str] = []
        self.generations = 0  # producers created (1 + recreations)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"txn-{name}", daemon=True)
        self._client: TxnClient | None = None

    # --- the producer's life ---

    def _fresh(self) -> TxnClient:
        """A new producer with the same transactional.id, initialized (fencing the old one), retried until
        it works or the run stops."""
        while True:
            try:
                c = self.make()
                self.generations += 1
            except (KafkaLiteError, KafkaException) as e:
                self.errors.append(f"create: {e}")
                time.sleep(0.5)
                continue
            try:
                c.init()
                return c
            except c.ERRORS as e:  # the coordinator down or moving: until the faults heal
                self.errors.append(f"init_transactions: {e}")
                self._close(c)
                time.sleep(0.3)

    def _close(self, c: TxnClient) -> None:
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - a failed producer may fail to close too; it is dropped anyway
            self.errors.append(f"close: {e}")

    def _run(self) -> None:
        n = 0
        self._client = self._fresh()
        while not self._stop.is_set():
            self._one(n)
            n += 1
            time.sleep(self.rnd.uniform(0, 0.03))
        if self._client is not None:
            self._close(self._client)

    def _one(self, n: int) -> None:
        c = self._client or self._fresh()
        self._client = c
        tps = self.rnd.sample(PARTITIONS, self.rnd.choice([2, 2, 3]))
        per_tp = [self.rnd.randint(1, 4) for _ in tps]
        txn = self.txns[n] = Txn(tps, sum(per_tp), producer=c.ident())
        roll = self.rnd.random()
        intent = COMMITTED if roll < 0.7 else ("abandon" if roll > 0.97 else ABORTED)
        try:
            c.take_delivered()  # what it reports at the commit is this transaction's alone
            c.begin()
            i = 0
            for (topic, p), k in zip(tps, per_tp, strict=True):
                for _ in range(k):
                    c.send(topic, p, encode(self.name, n, i, txn.size))
                    i += 1
            if intent != COMMITTED and self.rnd.random() < 0.7:
                c.flush()  # the records reach the log: only the abort marker hides them
        except c.ERRORS as e:
            txn.outcome, txn.note = ABORTED, f"send: {e}"  # never asked to commit
            self._restart(c, e)
            return
        if intent == "abandon":
            # Left open: the coordinator aborts it after transaction.timeout.ms; the next producer's
            # init_transactions comes after that.
            txn.outcome, txn.note = ABORTED, "abandoned"
            self._client = None
            self._stop.wait(TXN_TIMEOUT_MS / 1000 + 1.5)
            self._close(c)
            return
        try:
            if intent == COMMITTED:
                c.commit()
                txn.outcome = COMMITTED
                txn.note = f"acks {c.take_delivered()}"
            else:
                c.abort()
                txn.outcome, txn.note = ABORTED, "intended"
        except c.ERRORS as e:
            txn.outcome = UNKNOWN if intent == COMMITTED else ABORTED
            txn.note = f"{'commit' if intent == COMMITTED else 'abort'}: {e}"
            self._restart(c, e)

    def _restart(self, c: TxnClient, e: BaseException) -> None:
        self.errors.append(f"{type(e).__name__}: {e}")
        self._close(c)
        self._client = None

    def start(self) -> TxnProducer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not stop within {timeout}s: {self.errors[-3:]}"

    def counts(self) -> Counter:
        return Counter(t.outcome for t in self.txns.values())


class CommittedReader(PollingConsumer):
    """A read_committed consumer of every partition of both topics, polling in a thread while the faults run."""

    def __init__(self, bootstrap: str) -> None:
        consumer = Consumer(
            bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            request_timeout_ms=5000,
            max_poll_records=2000,
        )
        consumer.assign(PARTITIONS)
        super().__init__(consumer, "read-committed")

    def seen(self) -> list[Record]:
        return [(r.topic, r.partition, r.offset, r.value) for r in list(self.records)]

    def positions(self) -> dict[tuple[str, int], int]:
        """The next offset it will read in each partition (from what it has read: the thread owns the consumer)."""
        out = dict.fromkeys(PARTITIONS, 0)
        for t, p, off, _ in self.seen():
            out[(t, p)] = max(out[(t, p)], off + 1)
        return out


def read_everything(bootstrap: str, isolation: str, timeout: float = 60) -> tuple[list[Record], dict]:
    """Every record of both topics a fresh consumer with `isolation` reads, up to each partition's end
    (read_committed: the last stable offset, which must have reached the high watermark: no transaction is
    left open once the producers stopped and the coordinators finished). Returns (records, end offsets)."""
    out: list[Record] = []
    with Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest", request_timeout_ms=10000) as c:
        c.assign(PARTITIONS)
        deadline = time.monotonic() + timeout
        while True:
            ends = {(tp.topic, tp.partition): off for tp, off in c.list_offsets(PARTITIONS, -1).items()}
            if isolation != "read_committed":
                break
            with Consumer(bootstrap, request_timeout_ms=10000) as u:
                hws = {(tp.topic, tp.partition): off for tp, off in u.list_offsets(PARTITIONS, -1).items()}
            if ends == hws:
                break
            assert time.monotonic() < deadline, f"transactions left open: last stable offsets {ends}, ends {hws}"
            time.sleep(0.5)
        pos = dict.fromkeys(PARTITIONS, 0)
        while any(pos[tp] < ends[tp] for tp in PARTITIONS):
            assert time.monotonic() < deadline, f"{isolation} read stopped at {pos}, ends {ends}"
            for tp in PARTITIONS:  # markers and aborted records are skipped: the position says how far it got
                pos[tp] = c.position(tp)
            for r in c.poll(300):
                out.append((r.topic, r.partition, r.offset, r.value))
    return out, ends


@dataclass
class Verdict:
    visible: dict[TxnKey, set[int]] = field(default_factory=dict)
    outcomes: Counter = field(default_factory=Counter)
    committed_visible: int = 0
    unknown_visible: int = 0
    unknown_invisible: int = 0
    aborted_in_log: int = 0  # aborted transactions with records in the log (hidden only by their markers)

    def summary(self) -> str:
        return (
            f"outcomes {dict(self.outcomes)}; visible: {self.committed_visible} committed, "
            f"{self.unknown_visible} unknown (and {self.unknown_invisible} unknown not visible); "
            f"{self.aborted_in_log} aborted transactions had records in the log"
        )


def check_transactions(
    txns: dict[TxnKey, Txn], committed: list[Record], where: str = "read_committed", uncommitted: list[Record] = ()
) -> Verdict:
    """(a) nothing aborted visible, (b) all or nothing, (c) every committed transaction visible, (d) no record
    twice. Raises AssertionError naming the first anomaly of each kind."""
    v = Verdict(outcomes=Counter(t.outcome for t in txns.values()))
    at: dict[tuple[TxnKey, int], list[tuple[str, int, int]]] = {}
    for topic, p, off, value in committed:
        try:
            key, index, size = decode(value)
        except ValueError:
            raise AssertionError(f"{where}: {topic}-{p}@{off} holds {value!r}, which no producer wrote") from None
        t = txns.get(key)
        assert t is not None, f"{where}: {topic}-{p}@{off} {value!r} of a transaction never begun"
        assert size == t.size, f"{where}: {topic}-{p}@{off} {value!r}: size differs from what was sent ({t.size})"
        at.setdefault((key, index), []).append((topic, p, off))
        v.visible.setdefault(key, set()).add(index)
    logged: dict[TxnKey, list[str]] = {}
    for topic, p, off, value in uncommitted:
        key, index, _ = decode(value)
        logged.setdefault(key, []).append(f"{index}@{topic}-{p}:{off}")
    twice = {k: locs for k, locs in at.items() if len(set(locs)) > 1}
    assert not twice, f"{where}: (d) records visible twice: {sorted(twice.items())[:3]}"
    for key, t in sorted(txns.items()):
        seen = v.visible.get(key, set())
        label = (
            f"{where}: transaction {key[0]}#{key[1]} ({t.outcome} {t.note}; {t.producer}; {t.size} records over "
            f"{t.tps}; in the log: {logged.get(key, '?') if uncommitted else 'not read'})"
        )
        if t.outcome == ABORTED:
            assert not seen, f"{label}: (a) aborted, yet {len(seen)} of its records are visible"
        elif seen:
            missing = sorted(set(range(t.size)) - seen)
            assert not missing, f"{label}: (b) partly visible, records {missing} missing"
        elif t.outcome == COMMITTED:
            raise AssertionError(f"{label}: (c) acknowledged as committed, none of its records visible")
        if t.outcome == COMMITTED:
            v.committed_visible += 1
        elif t.outcome == UNKNOWN:
            v.unknown_visible += bool(seen)
            v.unknown_invisible += not seen
    in_log = {decode(val)[0] for *_, val in uncommitted}
    v.aborted_in_log = sum(1 for k in in_log if txns.get(k) and txns[k].outcome == ABORTED)
    return v


def all_transactions(producers: list[TxnProducer]) -> dict[TxnKey, Txn]:
    out = {(tp.name, n): t for tp in producers for n, t in tp.txns.items()}
    unfinished = [k for k, t in out.items() if not t.outcome]
    assert not unfinished, f"transactions without an outcome after the producers stopped: {unfinished[:5]}"
    return out


def describe_errors(producers: list[TxnProducer]) -> str:
    def short(e: Any) -> str:
        return str(e)[:120]

    return "; ".join(
        f"{p.name}: {p.generations} producers, errors {[short(e) for e in p.errors[-2:]]}" for p in producers
    )
