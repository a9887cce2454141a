"""The log cleaner's delete horizon (KIP-534) on a real broker: a tombstone's and a lone abort marker's batches
get the delete-horizon flag at the cleaning that first keeps them, keep that horizon across a broker SIGKILL and
a cleaning after the restart, are read by Kafka clients (confluent-kafka, kafka-python) and ours with every record
timestamp as produced, and go once the horizon has passed, with nothing written meanwhile."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from broker.log.checkpoint import CorruptCheckpointError, read_checkpoint
from client.sync import Consumer
from net import batch as fmt
from tests.integration.cluster_harness import ClusterHarness

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
kafka = pytest.importorskip("kafka", reason="pip install -e '.[test]' (kafka-python)")

pytestmark = pytest.mark.timeout(180)

RETENTION_MS = 20_000  # long enough for a SIGKILL, a restart and a cleaning on a busy machine
T0 = 1_600_000_000_000  # the records' own timestamps, far from any horizon


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(
        tmp_path_factory.mktemp("horizon"),
        1,
        overrides=["log.cleaner.backoff.ms=200", "group.initial.rebalance.delay.ms=0"],
    ).running() as h:
        yield h


Row = tuple[int, bool, int | None, list[tuple[int, bytes | None, bytes | None, int]]]


def stored(pdir: Path) -> list[Row] | None:
    """(base offset, is control, delete horizon, [(offset, key, value, timestamp)]) of every batch in the
    partition's files; None if a file changed under the read (a swap): the caller looks again."""
    rows: list[Row] = []
    try:
        for seg in sorted(pdir.glob("*.log")):
            data = seg.read_bytes()
            for pos, h in fmt.iter_batches(data, validate_crc=True):
                recs = [] if h.is_control else fmt.records_of(data, pos, h)
                rows.append(
                    (h.base_offset, h.is_control, h.delete_horizon_ms,
                     [(h.base_offset + r[0], r[2], r[3], h.first_timestamp + r[1]) for r in recs])
                )  # fmt: skip
    except (fmt.InvalidBatch, FileNotFoundError):
        return None
    return rows


def wait_stored(pdir: Path, ok, what: str, timeout: float = 60, poke=None) -> list[Row]:  # type: ignore[no-untyped-def]
    """The files once `ok(rows)`; `poke()` (a write that gives the cleaner a pass) between looks, if given."""
    deadline = time.monotonic() + timeout
    rows = None
    while time.monotonic() < deadline:
        rows = stored(pdir)
        if rows is not None and ok(rows):
            return rows
        if poke is not None:
            poke()
        time.sleep(0.3)
    raise AssertionError(f"{what}: {rows}")


def tombstone(rows: list[Row]) -> Row | None:
    return next((r for r in rows if any(k == b"deleted" and v is None for _, k, v, _ in r[3])), None)


def abort_marker(rows: list[Row]) -> Row | None:
    """The first control batch while it is there: the abort marker, before the committed record (whose commit
    marker stays: its transaction's record does)."""
    committed = next(o for r in rows for o, k, _, _ in r[3] if k == b"committed")
    return next((r for r in rows if r[1] and r[0] < committed), None)


def cleaned_up_to(data_dir: Path, topic: str) -> int:
    try:
        return read_checkpoint(data_dir / "cleaner-offset-checkpoint").get((topic, 0), -1)
    except CorruptCheckpointError:  # being rewritten
        return -1


def read_kafka(bootstrap: str, topic: str, isolation: str, expect: int) -> list[tuple[int, bytes, bytes | None, int]]:
    """(offset, key, value, timestamp) of what librdkafka's consumer reads from offset 0."""
    c = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}", "isolation.level": isolation,
         "enable.auto.commit": False}
    )  # fmt: skip
    try:
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        out: list = []
        deadline = time.monotonic() + 30
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
        return out
    finally:
        c.close()


def read_kafka_python(bootstrap: str, topic: str, isolation: str, expect: int) -> list[tuple]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), 0)
        out: list = []
        deadline = time.monotonic() + 30
        while len(out) < expect and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                out += [(r.offset, r.key, r.value, r.timestamp) for r in recs]
        return out
    finally:
        c.close()


def read_ours(bootstrap: str, topic: str, isolation: str, expect: int) -> list[tuple]:
    with Consumer(bootstrap, auto_offset_reset="earliest", isolation_level=isolation) as c:
        c.assign([(topic, 0)])
        out: list = []
        deadline = time.monotonic() + 30
        while len(out) < expect and time.monotonic() < deadline:
            out += [(r.offset, r.key, r.value, r.timestamp) for r in c.poll(500)]
        return out


def test_tombstone_and_marker_keep_their_delete_horizon_across_a_restart_and_go_after_it(cluster):
    topic = f"horizon-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(
        topic, 1, 1,
        {"cleanup.policy": "compact", "segment.bytes": "200", "min.cleanable.dirty.ratio": "0.01",
         "delete.retention.ms": str(RETENTION_MS)},
    )  # fmt: skip
    broker = cluster[1]
    pdir = broker.data_dir / f"{topic}-0"
    kb = cluster.kafka_bootstrap()
    p = confluent_kafka.Producer({"bootstrap.servers": kb, "linger.ms": 0, "enable.idempotence": False})
    fillers = 0

    def put(key: bytes, value: bytes | None, ts: int) -> None:
        p.produce(topic, key=key, value=value, partition=0, timestamp=ts)
        assert p.flush(30) == 0

    def filler() -> None:  # a new key: nothing it supersedes, a new closed segment soon after
        nonlocal fillers
        put(b"filler-%d" % fillers, b"x", T0 + 100 + fillers)
        fillers += 1

    put(b"deleted", b"old", T0 + 1)
    put(b"deleted", None, T0 + 2)
    put(b"kept", b"v", T0 + 3)
    txn = confluent_kafka.Producer({"bootstrap.servers": kb, "transactional.id": f"t-{topic}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"aborted", value=b"never", partition=0, timestamp=T0 + 4)
    assert txn.flush(30) == 0  # written, then aborted (an abort purges what librdkafka has not sent)
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"committed", value=b"c", partition=0, timestamp=T0 + 5)
    txn.commit_transaction(30)
    for _ in range(3):
        filler()

    # The first cleaning to keep the tombstone flags it; the abort marker is flagged by the first cleaning that
    # finds none of its records left (each filler is a write that makes the next pass happen).
    rows = wait_stored(
        pdir, lambda rs: (t := tombstone(rs)) and t[2] and (m := abort_marker(rs)) and m[2], "unflagged", poke=filler
    )
    ts_row, marker_row = tombstone(rows), abort_marker(rows)
    assert ts_row is not None and marker_row is not None
    horizon_t, horizon_m = ts_row[2], marker_row[2]
    assert horizon_t is not None and horizon_m is not None
    assert time.time() * 1000 < horizon_t <= horizon_m <= time.time() * 1000 + RETENTION_MS
    assert not any(k == b"aborted" for r in rows for _, k, _, _ in r[3])  # its records went first
    assert [v for r in rows if r[0] == ts_row[0] for _, k, v, t in r[3] if k == b"deleted"] == [None]

    # Kafka clients and ours read the flagged batches with every record's own timestamp, in both isolations.
    expected = sorted(
        [(o, k, v, t) for r in rows if not r[1] for o, k, v, t in r[3]]
    )  # what the files hold, tombstone included
    assert (ts_row[3][0][3], ts_row[3][0][2]) == (T0 + 2, None)
    for isolation in ("read_committed", "read_uncommitted"):
        assert sorted(read_kafka(kb, topic, isolation, len(expected))) == expected, isolation
        assert sorted(read_kafka_python(kb, topic, isolation, len(expected))) == expected, isolation
        assert sorted(read_ours(cluster.bootstrap(), topic, isolation, len(expected))) == expected, isolation

    # A SIGKILL and a restart: the cleaner starts with no memory; a cleaning after it keeps both horizons.
    before = cleaned_up_to(broker.data_dir, topic)
    cluster.kill(1)
    broker.start()
    p = confluent_kafka.Producer({"bootstrap.servers": kb, "linger.ms": 0, "enable.idempotence": False})
    filler()
    filler()
    end = fillers
    wait_stored(pdir, lambda rs: cleaned_up_to(broker.data_dir, topic) > before, "no cleaning after the restart",
                poke=lambda: filler() if fillers < end + 5 else None)  # fmt: skip
    rows = stored(pdir) or wait_stored(pdir, lambda rs: True, "unreadable")
    now = time.time() * 1000
    assert now < horizon_t, "the machine was too slow for RETENTION_MS: the check below would prove nothing"
    assert (t := tombstone(rows)) is not None and t[2] == horizon_t  # kept, and not reset
    assert (m := abort_marker(rows)) is not None and m[2] == horizon_m
    assert (b"deleted", None) in [(r[1], r[2]) for r in read_kafka(kb, topic, "read_committed", len(expected) + 2)]

    # No more writes: each goes once its horizon has passed.
    rows = wait_stored(
        pdir, lambda rs: tombstone(rs) is None and abort_marker(rs) is None, "the tombstone or the marker stayed",
        timeout=(horizon_m - time.time() * 1000) / 1000 + 30,
    )  # fmt: skip
    assert time.time() * 1000 >= horizon_m
    assert not any(k == b"deleted" for r in rows for _, k, _, _ in r[3])
    got = read_kafka(kb, topic, "read_committed", 1 + 1 + fillers)  # kept, committed, the fillers
    assert sorted((k, v) for _, k, v, _ in got) == sorted(
        [(b"kept", b"v"), (b"committed", b"c"), *((b"filler-%d" % i, b"x") for i in range(fillers))]
    )
    assert {k: t for _, k, _, t in got}[b"kept"] == T0 + 3
