"""Transactions as clients use them (issue 28 §3), on one shared 3-broker cluster: Kafka Lite's own producer and
consumer, confluent-kafka (librdkafka) and kafka-python against each other: commit, abort, abort then commit,
offsets sent in a transaction, a zombie fenced, a transaction left open past its timeout aborted by the
coordinator, a transaction committed from another process, and the CLIs' flags."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from client.sync import Consumer, Producer, end_transaction, transaction_state
from net.errors import ErrorCode, KafkaLiteError
from tests.integration.cluster_harness import ClusterHarness
from tests.integration.test_cli import run

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(
        tmp_path_factory.mktemp("txn-clients"),
        3,
        overrides=[
            "group.initial.rebalance.delay.ms=0",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
            "transaction.state.log.num.partitions=4",
            "log.cleaner.backoff.ms=500",  # the compaction test's passes come quickly
        ],
    ).running() as h:
        yield h


def _topic(cluster: ClusterHarness, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions, 3, {"min.insync.replicas": "2"})
    return name


def read_all(bootstrap: str, topic: str, isolation: str, expect: int | None = None, partitions: int = 2) -> list[bytes]:
    """Every value of `topic` a consumer with `isolation` sees, read from the start until it is quiet."""
    with Consumer(bootstrap, auto_offset_reset="earliest", isolation_level=isolation) as c:
        c.assign([(topic, p) for p in range(partitions)])
        got: list[bytes] = []
        quiet_until = time.monotonic() + 3
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            batch = c.poll(300)
            got += [r.value for r in batch]
            if batch:
                quiet_until = time.monotonic() + 1.5
            if (expect is not None and len(got) >= expect and time.monotonic() > quiet_until - 1) or (
                time.monotonic() > quiet_until
            ):
                break
    return sorted(got)


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def test_commit_abort_and_abort_then_commit_with_our_client(cluster):
    topic = _topic(cluster)
    with Producer(cluster.bootstrap(), transactional_id=f"ours-{topic}", linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        for v in values("committed", 20):
            p.send(topic, v)
        p.commit_transaction()
        p.begin_transaction()
        for v in values("aborted", 20):
            p.send(topic, v)
        p.flush()  # the aborted records are in the log: only the marker hides them
        p.abort_transaction()
        p.begin_transaction()
        for v in values("retried", 20):
            p.send(topic, v)
        p.commit_transaction()
    committed = sorted(values("committed", 20) + values("retried", 20))
    assert read_all(cluster.bootstrap(), topic, "read_committed", 40) == committed
    everything = read_all(cluster.bootstrap(), topic, "read_uncommitted", 60)
    assert everything == sorted(committed + values("aborted", 20)), "markers leaked or records missing"


def test_records_after_an_abort_of_unsent_ones_are_committed(cluster):
    """An abort drops records still lingering (linger.ms), then the next transaction writes to the same
    partition: its records are sent and committed (they once joined the dropped batch: committed, never sent)."""
    topic = _topic(cluster, 1)
    with Producer(cluster.bootstrap(), transactional_id=f"linger-{topic}", linger_ms=60000) as p:
        p.init_transactions()
        p.begin_transaction()
        for v in values("dropped", 5):
            p.send(topic, v, partition=0)
        p.abort_transaction()
        p.begin_transaction()
        for v in values("kept", 5):
            p.send(topic, v, partition=0)
        p.commit_transaction()
    assert read_all(cluster.bootstrap(), topic, "read_committed", 5, partitions=1) == sorted(values("kept", 5))


def test_calls_out_of_order_fail_with_a_clear_error_and_nothing_is_sent(cluster):
    topic = _topic(cluster)
    with Producer(cluster.bootstrap(), transactional_id=f"order-{topic}") as p:
        with pytest.raises(KafkaLiteError, match="UNINITIALIZED"):
            p.begin_transaction()
        p.init_transactions()
        with pytest.raises(KafkaLiteError, match="begin_transaction"):
            p.send(topic, b"outside")
    assert read_all(cluster.bootstrap(), topic, "read_uncommitted") == []


def test_a_zombie_is_fenced_by_a_new_producer_with_the_same_id(cluster):
    topic = _topic(cluster)
    txn_id = f"zombie-{topic}"
    with Producer(cluster.bootstrap(), transactional_id=txn_id) as old:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie")
        old.flush()
        with Producer(cluster.bootstrap(), transactional_id=txn_id) as new:
            new.init_transactions()  # aborts the old one's transaction and fences it
            new.begin_transaction()
            new.send(topic, b"new")
            new.commit_transaction()
        with pytest.raises(KafkaLiteError) as e:
            old.commit_transaction()
        assert e.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
    assert read_all(cluster.bootstrap(), topic, "read_committed", 1) == [b"new"]


def test_a_transaction_left_open_past_its_timeout_is_aborted_by_the_coordinator(cluster):
    topic = _topic(cluster)
    txn_id = f"timeout-{topic}"
    with Producer(cluster.bootstrap(), transactional_id=txn_id, transaction_timeout_ms=1000) as p:
        p.init_transactions()
        p.begin_transaction()
        for v in values("late", 5):
            p.send(topic, v)
        p.flush()
        deadline = time.monotonic() + 20
        while transaction_state(cluster.bootstrap(), txn_id) not in ("CompleteAbort", "Empty"):
            assert time.monotonic() < deadline, "the coordinator did not abort the expired transaction"
            time.sleep(0.2)
        with pytest.raises(KafkaLiteError) as e:
            p.commit_transaction()
        assert e.value.code in (
            ErrorCode.PRODUCER_FENCED,
            ErrorCode.INVALID_PRODUCER_EPOCH,
            ErrorCode.INVALID_TXN_STATE,
        )
    assert read_all(cluster.bootstrap(), topic, "read_committed") == []


def test_a_transaction_is_committed_from_another_process(cluster):
    """The Spark sink's two phases: a task writes and leaves its transaction open, the driver commits it."""
    topic = _topic(cluster)
    txn_id = f"resume-{topic}"
    with Producer(cluster.bootstrap(), transactional_id=txn_id) as p:
        p.init_transactions()
        p.begin_transaction()
        for v in values("resumed", 10):
            p.send(topic, v)
        p.flush()
        pid, epoch = p.producer_id_and_epoch
    assert transaction_state(cluster.bootstrap(), txn_id) == "Ongoing"
    assert read_all(cluster.bootstrap(), topic, "read_committed") == []
    end_transaction(cluster.bootstrap(), txn_id, pid, epoch, commit=True)
    # Answered once PrepareCommit is durable (as Kafka): the markers may still be on their way.
    assert transaction_state(cluster.bootstrap(), txn_id) in ("PrepareCommit", "CompleteCommit")
    end_transaction(cluster.bootstrap(), txn_id, pid, epoch, commit=True)  # a repeated commit is answered as done
    assert transaction_state(cluster.bootstrap(), txn_id) == "CompleteCommit"  # ... once the markers are written
    assert read_all(cluster.bootstrap(), topic, "read_committed", 10) == sorted(values("resumed", 10))


def test_offsets_sent_in_a_transaction_commit_with_it_and_never_with_an_abort(cluster):
    src, dst = _topic(cluster, 1), _topic(cluster, 1)
    group = f"g-{src}"
    with Producer(cluster.bootstrap()) as p:
        for v in values("in", 10):
            p.send(src, v, partition=0)
        p.flush()
    with (
        Consumer(cluster.bootstrap(), group_id=group, auto_offset_reset="earliest", enable_auto_commit=False) as c,
        Producer(cluster.bootstrap(), transactional_id=f"ctp-{src}") as p,
    ):
        c.subscribe([src])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += c.poll(500)
        assert len(got) == 10
        p.init_transactions()
        p.begin_transaction()
        p.send(dst, b"out-aborted")
        p.send_offsets_to_transaction({(src, 0): 5}, c.group_metadata())
        p.abort_transaction()
        assert c.committed((src, 0)) in (None, -1), "an aborted transaction's offsets were committed"
        p.begin_transaction()
        p.send(dst, b"out-committed")
        p.send_offsets_to_transaction({(src, 0): 10}, c.group_metadata())
        p.commit_transaction()
        deadline = time.monotonic() + 10
        while c.committed((src, 0)) != 10:
            assert time.monotonic() < deadline, "the committed transaction's offsets never became visible"
            time.sleep(0.2)
    assert read_all(cluster.bootstrap(), dst, "read_committed", 1, partitions=1) == [b"out-committed"]


def test_read_committed_consumers_wait_for_offsets_an_open_transaction_holds(cluster):
    """KIP-447: while a transaction holds offsets of a group, OffsetFetch with require_stable answers
    UNSTABLE_OFFSET_COMMIT, so a read_committed consumer (ours, librdkafka's) never resumes from the offset
    the transaction is about to replace; read_uncommitted ones get the committed offset at once."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    src = _topic(cluster, 1)
    group = f"g-{src}"
    with (
        Consumer(cluster.bootstrap(), group_id=group, enable_auto_commit=False) as c,
        Producer(cluster.bootstrap(), transactional_id=f"stable-{src}") as p,
    ):
        c.assign([(src, 0)])
        c.commit({(src, 0): 3})
        p.init_transactions()
        p.begin_transaction()
        p.send_offsets_to_transaction({(src, 0): 7}, c.group_metadata())
        assert c.committed((src, 0)) == 3  # read_uncommitted: not held
        ck = confluent_kafka.Consumer(
            {"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group, "isolation.level": "read_committed"}
        )
        try:
            tp = confluent_kafka.TopicPartition(src, 0)
            with pytest.raises(confluent_kafka.KafkaException):  # retried until its timeout, never answered 3
                ck.committed([tp], timeout=2)
            with Consumer(cluster.bootstrap(), group_id=group, isolation_level="read_committed") as rc:
                waited = threading.Thread(target=lambda: (time.sleep(1.0), p.commit_transaction()))
                waited.start()
                t0 = time.monotonic()
                assert rc.committed((src, 0)) == 7  # waited for the commit, not answered 3
                assert time.monotonic() - t0 >= 0.5
                waited.join()
            assert ck.committed([tp], timeout=10)[0].offset == 7
        finally:
            ck.close()


def test_confluent_kafka_and_kafka_python_interoperate_with_ours(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = _topic(cluster)
    kafka = cluster.kafka_bootstrap()
    p = confluent_kafka.Producer({"bootstrap.servers": kafka, "transactional.id": f"ck-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    for v in values("ck-aborted", 5):
        p.produce(topic, v)
    p.abort_transaction(30)
    p.begin_transaction()
    for v in values("ck-committed", 5):
        p.produce(topic, v)
    p.commit_transaction(30)
    # ours reads librdkafka's transactions
    assert read_all(cluster.bootstrap(), topic, "read_committed", 5) == sorted(values("ck-committed", 5))
    # kafka-python's transactional producer
    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=kafka, transactional_id=f"kp-{topic}", enable_idempotence=True)
    kp.init_transactions()
    kp.begin_transaction()
    kp.send(topic, b"kp-aborted")
    kp.abort_transaction()
    kp.begin_transaction()
    kp.send(topic, b"kp-committed")
    kp.commit_transaction()
    kp.close()
    # librdkafka's read_committed consumer reads ours
    with Producer(cluster.bootstrap(), transactional_id=f"ours-x-{topic}") as ours:
        ours.init_transactions()
        ours.begin_transaction()
        ours.send(topic, b"ours-aborted")
        ours.flush()
        ours.abort_transaction()
        ours.begin_transaction()
        ours.send(topic, b"ours-committed")
        ours.commit_transaction()
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"ck-{topic}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.assign([confluent_kafka.TopicPartition(topic, q, 0) for q in range(2)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 7 and time.monotonic() < deadline:
        seen += [m.value() for m in c.consume(100, 0.5) if m.error() is None]
    c.close()
    assert sorted(seen) == sorted([*values("ck-committed", 5), b"kp-committed", b"ours-committed"])


def test_the_clis_produce_in_a_transaction_and_read_committed(cluster):
    topic = _topic(cluster, 1)
    bs = ["--bootstrap-server", cluster.bootstrap()]
    cp = run("produce", *bs, "--topic", topic, "--transactional-id", "cli", stdin="a\nb\nc\n")
    assert cp.returncode == 0, cp.stderr
    cp = run(
        "consume",
        *bs,
        "--topic",
        topic,
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--max-messages",
        "3",
        "--timeout-ms",
        "20000",
    )
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split() == ["a", "b", "c"]
    bad = run("consume", *bs, "--topic", topic, "--isolation-level", "x")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_kl_transactions_lists_describes_and_finds_open_transactions(cluster):
    topic = _topic(cluster, 1)
    bs = ["--bootstrap-server", cluster.bootstrap()]
    with Producer(cluster.bootstrap(), transactional_id=f"cli-{topic}") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"open", partition=0)
        p.flush()
        pid, epoch = p.producer_id_and_epoch
        listed = run("transactions", *bs, "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split("\n")[0].split() == [
            "TransactionalId",
            "Coordinator",
            "ProducerId",
            "TransactionState",
        ]
        assert any(r.split()[0] == f"cli-{topic}" and r.split()[3] == "Ongoing" for r in listed.stdout.splitlines())
        described = run("transactions", *bs, "describe", "--transactional-id", f"cli-{topic}")
        assert described.returncode == 0, described.stderr
        row = described.stdout.splitlines()[1].split()
        assert row[1:5] == [f"cli-{topic}", str(pid), str(epoch), "Ongoing"] and row[-1] == f"{topic}-0"
        producers = run("transactions", *bs, "describe-producers", "--topic", topic, "--partition", "0")
        assert producers.returncode == 0, producers.stderr
        mine = [r.split() for r in producers.stdout.splitlines()[1:] if r.split()[0] == str(pid)]
        assert mine and mine[0][-1] == "0"  # the open transaction starts at offset 0
        found = []
        for broker in (1, 2, 3):  # the partition's leader reports the open transaction, the others nothing
            hanging = run(
                "transactions", *bs, "find-hanging", "--broker-id", str(broker), "--max-transaction-timeout", "0"
            )
            assert hanging.returncode == 0, hanging.stderr
            found += [r.split() for r in hanging.stdout.splitlines()[1:] if r.split()[:3] == [topic, "0", str(pid)]]
        assert len(found) == 1 and found[0][5] == "0", found
        p.commit_transaction()
    missing = run("transactions", *bs, "describe", "--transactional-id", "no-such-id")
    assert missing.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def _replica_batches(cluster: ClusterHarness, topic: str) -> dict[int, list[tuple]]:
    """Each broker's batches of `topic`-0 from its files: (producer id, is control, values)."""
    from net import batch as fmt

    out: dict[int, list[tuple]] = {}
    for b in cluster.brokers.values():
        rows: list[tuple] = []
        for seg in sorted((b.data_dir / f"{topic}-0").glob("*.log")):
            data = seg.read_bytes()
            try:
                for pos, h in fmt.iter_batches(data, validate_crc=True):
                    vals = () if h.is_control else tuple(r[3] for r in fmt.records_of(data, pos, h))
                    rows.append((h.producer_id, h.is_control, vals))
            except fmt.InvalidBatch:
                pass  # a tail being written, or a file swapped while read: the next look sees it whole
        out[b.id] = rows
    return out


def _wait_replicas(cluster: ClusterHarness, topic: str, ok, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(ok(rows) for rows in _replica_batches(cluster, topic).values()):
            return
        time.sleep(0.3)
    raise AssertionError(f"{what}: {_replica_batches(cluster, topic)}")


def test_the_cleaner_removes_aborted_records_and_lone_markers_and_spares_an_open_transaction(cluster):
    """A compacted topic on every replica's cleaner: an aborted transaction's records go (the abort marker stays
    while they are there), an open transaction's records and everything after its start stay (cleaning stops at
    the LSO), and the abort marker, alone, goes (delete.retention.ms=0)."""
    topic = f"txn-compact-{uuid.uuid4().hex[:8]}"
    configs = {"cleanup.policy": "compact", "segment.bytes": "200", "min.cleanable.dirty.ratio": "0.01"}
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2", "delete.retention.ms": "0", **configs})
    bs = cluster.bootstrap()

    def values(rows: list[tuple]) -> list[bytes]:
        return [v for _, control, vals in rows if not control for v in vals]

    with Producer(bs, linger_ms=0) as plain, Producer(bs, transactional_id=f"a-{topic}") as a:
        with Producer(bs, transactional_id=f"b-{topic}") as b, Producer(bs, transactional_id=f"c-{topic}") as c:
            for txn in (a, b, c):
                txn.init_transactions()
            a.begin_transaction()
            a.send(topic, b"committed", key=b"k1", partition=0)
            a.commit_transaction()
            b.begin_transaction()
            b.send(topic, b"aborted", key=b"k1", partition=0)
            b.send(topic, b"aborted", key=b"k2", partition=0)
            b.flush()
            b.abort_transaction()
            aborted_pid = b.producer_id_and_epoch[0]
            for i in range(3):  # rolls: the transactions above end up in closed segments
                plain.send(topic, b"filler-%d" % i, key=b"f%d" % i, partition=0)
                plain.flush()
            c.begin_transaction()
            c.send(topic, b"open", key=b"k3", partition=0)
            c.flush()
            for i in range(3):  # above the LSO: k1=late must not supersede k1=committed yet
                plain.send(topic, b"late" if i == 0 else b"more-%d" % i, key=b"k1" if i == 0 else b"m%d" % i,
                           partition=0)  # fmt: skip
                plain.flush()

            orphans: list[list[tuple]] = []

            def aborted_gone(rows: list[tuple]) -> bool:
                # Never an aborted record without its abort marker: a read_committed reader would take it as
                # committed. Once the records are gone the marker is alone, and delete.retention.ms=0 lets the next
                # pass (below the LSO) take it, so it may already be gone here too.
                if b"aborted" in values(rows) and (aborted_pid, True, ()) not in rows:
                    orphans.append(rows)
                return b"aborted" not in values(rows)

            _wait_replicas(cluster, topic, aborted_gone, "the aborted records were not removed")
            assert not orphans, f"aborted records without their abort marker: {orphans[0]}"
            for rows in _replica_batches(cluster, topic).values():
                assert b"committed" in values(rows) and b"open" in values(rows) and b"late" in values(rows)
            c.commit_transaction()
            for i in range(3):  # more closed segments after the commit: the next passes clean up to them
                plain.send(topic, b"after-%d" % i, key=b"g%d" % i, partition=0)
                plain.flush()

            def settled(rows: list[tuple]) -> bool:
                return (aborted_pid, True, ()) not in rows and b"committed" not in values(rows)

            _wait_replicas(cluster, topic, settled, "the lone abort marker or the superseded record stayed")
    for rows in _replica_batches(cluster, topic).values():
        assert b"open" in values(rows) and b"late" in values(rows)
    assert _txn_index_entries(cluster, topic) == {1: [], 2: [], 3: []}
    assert read_all(bs, topic, "read_committed", partitions=1).count(b"open") == 1


def _txn_index_entries(cluster: ClusterHarness, topic: str) -> dict[int, list]:
    """Each broker's aborted transactions of `topic`-0, from its `.txnindex` files (Kafka's layout)."""
    from broker.log.txn_index import decode_entries

    out = {}
    for b in cluster.brokers.values():
        files = sorted((b.data_dir / f"{topic}-0").glob("*.txnindex"))
        out[b.id] = [t for f in files for t in decode_entries(f.read_bytes(), f)]
    return out


def test_aborted_data_stays_hidden_after_every_broker_is_sigkilled(cluster):
    """The aborted transaction is in each replica's .txnindex (written by the leader at the marker, by the
    followers as they replicate it); after SIGKILL and restart of every broker (the active segments are
    recovered, their .txnindex rebuilt from the markers) read_committed still skips the aborted records, with
    our consumer and with librdkafka's. This test restarts the shared cluster: it runs last."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = _topic(cluster, 1)
    with Producer(cluster.bootstrap(), transactional_id=f"kill-{topic}", linger_ms=1) as p:
        p.init_transactions()
        for tag, commit in (("before", True), ("aborted", False), ("after", True)):
            p.begin_transaction()
            for v in values(tag, 10):
                p.send(topic, v, partition=0)
            p.flush()
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
        pid = p.producer_id_and_epoch[0]
    committed = sorted(values("before", 10) + values("after", 10))
    assert read_all(cluster.bootstrap(), topic, "read_committed", 20, partitions=1) == committed
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(len(e) == 1 for e in _txn_index_entries(cluster, topic).values()):
        time.sleep(0.2)  # the followers replicate the marker
    entries = _txn_index_entries(cluster, topic)
    assert all(len(e) == 1 for e in entries.values()), entries
    assert {(e[0].producer_id, e[0].first_offset, e[0].last_offset) for e in entries.values()} == {(pid, 11, 21)}

    for b in cluster.brokers:  # offsets: 0-9 before, 10 its commit, 11-20 aborted, 21 the abort marker
        cluster.kill(b)
    for b in cluster.brokers.values():
        b.start(wait=False)
    for b in cluster.brokers.values():
        b.wait_listening()
    cluster.wait_all_registered()
    cluster.wait_full_isr(topic, 1)

    assert {tuple(e) for es in _txn_index_entries(cluster, topic).values() for e in es} == {tuple(entries[1][0])}, (
        "the rebuilt .txnindex differs"
    )
    assert read_all(cluster.bootstrap(), topic, "read_committed", 20, partitions=1) == committed
    assert read_all(cluster.bootstrap(), topic, "read_uncommitted", 30, partitions=1) == sorted(
        committed + values("aborted", 10)
    )
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap(),
            "group.id": f"ck-{topic}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 20 and time.monotonic() < deadline:
            seen += [m.value() for m in c.consume(100, 0.5) if m.error() is None]
        seen += [m.value() for m in c.consume(100, 1.0) if m.error() is None]  # nothing aborted comes later
    finally:
        c.close()
    assert sorted(seen) == committed
