"""KIP-890 part 1 and `kl-transactions abort` (issue 28 §1), on real brokers.

With transaction.partition.verification.enable (the default), a partition leader asks the transaction coordinator
before a transaction's first batch on a partition: a late produce (its transaction aborted meanwhile, by the client
or by the coordinator's timeout) is refused and leaves no hanging transaction, while transactions go on as before.
With it off, the old behaviour: the late produce opens a transaction no coordinator will end, which holds the last
stable offset (and read_committed consumers) back until `kl-transactions abort` writes its abort marker."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest

from client.sync import Consumer, Producer, transaction_state, with_client
from net import batch as batch_fmt
from net.errors import ErrorCode
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from net.schema.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from tests.integration.cluster_harness import ClusterHarness
from tests.integration.test_cli import assert_one_line_error, run

pytestmark = pytest.mark.timeout(180)
TXN_OVERRIDES = [
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=200",
    "transaction.state.log.num.partitions=4",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three brokers, verification on (the default): the coordinator is mostly another broker than the leader."""
    with ClusterHarness(tmp_path_factory.mktemp("verify"), 3, overrides=TXN_OVERRIDES).running() as h:
        yield h


@pytest.fixture(scope="module")
def unverified(tmp_path_factory):
    """One broker with transaction.partition.verification.enable=false: Kafka before 3.6."""
    overrides = [*TXN_OVERRIDES, "transaction.partition.verification.enable=false"]
    with ClusterHarness(tmp_path_factory.mktemp("unverified"), 1, overrides=overrides).running() as h:
        yield h


def _topic(h: ClusterHarness, partitions: int = 2) -> str:
    name = f"kip890-{uuid.uuid4().hex[:8]}"
    rf = len(h.brokers)
    h.create_topic(name, partitions, rf, {"min.insync.replicas": str(min(rf, 2))})
    return name


def raw_produce(
    h: ClusterHarness, topic: str, partition: int, pid: int, epoch: int, tid: str | None, value: bytes = b"late"
) -> list[Any]:
    """One transactional batch of (pid, epoch), sequence 0, as a late or forged produce: the answer's row
    [partition, error, base offset, ...]."""
    now = int(time.time() * 1000)
    batch = batch_fmt.build(
        [(0, 0, None, value, None)],
        now,
        now,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
    )
    request = ProduceRequest(
        transactional_id=tid,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=batch),)),
        ),
    )

    async def send(client: Any) -> list[Any]:
        conn = await client.connection(await client.leader_for(topic, partition))
        answer = await conn.call(request, 30)  # typed (net/schema/)
        [[row]] = [t.partition_responses for t in answer.responses]
        return [row.index, row.error_code, row.base_offset, row.error_message]

    return with_client(h.bootstrap(), {}, "raw-produce", send, 30)


def offsets(h: ClusterHarness, topic: str, partition: int) -> tuple[int, int]:
    """(latest under read_uncommitted = the high watermark, latest under read_committed = the LSO)."""

    async def ask(client: Any) -> tuple[int, int]:
        conn = await client.connection(await client.leader_for(topic, partition))
        out = []
        for isolation in (0, 1):
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation,
                topics=(
                    ListOffsetsTopic(
                        name=topic, partitions=(ListOffsetsPartition(partition_index=partition, timestamp=-1),)
                    ),
                ),
            )
            answer = await conn.call(request, 30)
            row = answer.topics[0].partitions[0]
            assert row.error_code == 0, row
            out.append(row.offset)
        return out[0], out[1]

    return with_client(h.bootstrap(), {}, "offsets", ask, 30)


def hanging(h: ClusterHarness, topic: str) -> list[list[str]]:
    """find-hanging's rows for `topic` over every broker (any age)."""
    rows = []
    for b in h.brokers:
        cp = run("transactions", "--bootstrap-server", h.bootstrap(), "find-hanging", "--broker-id", str(b),
                 "--max-transaction-timeout", "0")  # fmt: skip
        assert cp.returncode == 0, cp.stderr
        rows += [r.split() for r in cp.stdout.splitlines()[1:] if r.split()[0] == topic]
    return rows


def read_committed(h: ClusterHarness, topic: str, partition: int, expect: int, timeout: float = 20) -> list[bytes]:
    with Consumer(h.bootstrap(), auto_offset_reset="earliest", isolation_level="read_committed") as c:
        c.assign([(topic, partition)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            got += [r.value for r in c.poll(300)]
    return got


def wait_state(h: ClusterHarness, tid: str, states: tuple[str, ...]) -> None:
    deadline = time.monotonic() + 30
    while transaction_state(h.bootstrap(), tid) not in states:
        assert time.monotonic() < deadline, f"{tid} never reached {states}"
        time.sleep(0.1)


def aborted_transaction(p: Producer, topic: str) -> tuple[int, int]:
    """A transaction on partition 0 that the client aborts itself (its epoch stays): the producer's id and epoch."""
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, b"aborted", partition=0)
    p.flush()
    pid_epoch = p.producer_id_and_epoch
    p.abort_transaction()
    return pid_epoch


def test_a_late_produce_after_an_abort_is_refused_and_nothing_hangs(cluster):
    topic = _topic(cluster)
    tid = f"late-{topic}"
    with Producer(cluster.bootstrap(), transactional_id=tid, linger_ms=1) as p:
        pid, epoch = aborted_transaction(p, topic)
        # A produce of the aborted transaction arriving late, on a partition it never added: the coordinator knows
        # no ongoing transaction with it, so the leader refuses it (Kafka: INVALID_TXN_STATE). While the abort's
        # markers are still being written (PrepareAbort) the coordinator says CONCURRENT_TRANSACTIONS, which the
        # leader answers NOT_ENOUGH_REPLICAS, and a producer retries, as Kafka's do.
        deadline = time.monotonic() + 15
        while (row := raw_produce(cluster, topic, 1, pid, epoch, tid))[1] == ErrorCode.NOT_ENOUGH_REPLICAS:
            assert time.monotonic() < deadline, f"still NOT_ENOUGH_REPLICAS after 15 s: {row}"
            time.sleep(0.1)
        assert row[1] == ErrorCode.INVALID_TXN_STATE, row
        # The producer goes on: its next transaction commits on both partitions (their first batches verified).
        p.begin_transaction()
        p.send(topic, b"committed-0", partition=0)
        p.send(topic, b"committed-1", partition=1)
        p.commit_transaction()
    # A forged transactional batch without a transactional id cannot open a transaction either.
    row = raw_produce(cluster, topic, 1, 123456789, 0, None)
    assert row[1] == ErrorCode.INVALID_TXN_STATE, row
    assert hanging(cluster, topic) == []
    for partition in (0, 1):
        hw, lso = offsets(cluster, topic, partition)
        assert lso == hw, f"partition {partition}: LSO {lso} stuck below the high watermark {hw}"
    assert read_committed(cluster, topic, 1, 1) == [b"committed-1"]


def test_a_late_produce_after_the_coordinator_aborted_on_timeout_is_refused(cluster):
    topic = _topic(cluster)
    tid = f"timeout-{topic}"
    with Producer(cluster.bootstrap(), transactional_id=tid, transaction_timeout_ms=500, linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"expired", partition=0)
        p.flush()
        pid, epoch = p.producer_id_and_epoch
    wait_state(cluster, tid, ("CompleteAbort",))  # aborted by the coordinator, the epoch bumped (fenced)
    for partition in (0, 1):  # where the transaction was, and where it never was
        row = raw_produce(cluster, topic, partition, pid, epoch, tid)
        assert row[1] in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TXN_STATE), row
    assert hanging(cluster, topic) == []
    for partition in (0, 1):
        hw, lso = offsets(cluster, topic, partition)
        assert lso == hw, f"partition {partition}: LSO {lso} stuck below the high watermark {hw}"


def test_confluent_kafka_transactions_pass_verification(cluster):
    """librdkafka pipelines up to 5 produces per connection: the ones behind a produce waiting for its
    verification append after it, in order (an overtaking one would be OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = _topic(cluster)
    conf = {"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": f"ck-{topic}", "linger.ms": 0,
            "batch.size": 512}  # fmt: skip
    p = confluent_kafka.Producer(conf)
    p.init_transactions(30)
    n, per_txn = 3, 600
    for t in range(n):  # each transaction's first batch per partition is verified again
        p.begin_transaction()
        for i in range(per_txn):
            p.produce(topic, f"ck-{t}-{i}".encode(), partition=i % 2)
        p.commit_transaction(60)
    half = n * per_txn // 2
    got = read_committed(cluster, topic, 0, half) + read_committed(cluster, topic, 1, half)
    assert sorted(got) == sorted(f"ck-{t}-{i}".encode() for t in range(n) for i in range(per_txn))


def test_without_verification_a_late_produce_hangs_until_kl_transactions_abort(unverified):
    h = unverified
    topic = _topic(h)
    tid = f"hang-{topic}"
    with Producer(h.bootstrap(), transactional_id=tid, linger_ms=1) as p:
        pid, epoch = aborted_transaction(p, topic)
    row = raw_produce(h, topic, 1, pid, epoch, tid)  # the old behaviour: appended, a transaction opened for good
    assert row[1] == 0, row
    start = row[2]
    with Producer(h.bootstrap(), transactional_id=f"after-{topic}", linger_ms=1) as q:
        q.init_transactions()
        q.begin_transaction()
        q.send(topic, b"after", partition=1)
        q.commit_transaction()
    hw, lso = offsets(h, topic, 1)
    assert lso == start < hw, (start, lso, hw)  # stuck at the hanging transaction's first offset
    assert read_committed(h, topic, 1, 1, timeout=3) == []  # the committed record stays out of reach
    found = hanging(h, topic)
    assert [r[:3] + [r[5]] for r in found] == [[topic, "1", str(pid), str(start)]], found
    bs = ["--bootstrap-server", h.bootstrap()]
    nothing = run("transactions", *bs, "abort", "--topic", topic, "--partition", "1", "--start-offset", str(start + 1))
    assert_one_line_error(nothing, "no open transaction starts at offset")
    both = run("transactions", *bs, "abort", "--topic", topic, "--partition", "1", "--producer-id", str(pid))
    assert_one_line_error(both, "--coordinator-epoch")
    cp = run("transactions", *bs, "abort", "--topic", topic, "--partition", "1", "--start-offset", str(start))
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == f"Aborted the transaction of producer {pid} (epoch {epoch}) on {topic}-1"
    hw, lso = offsets(h, topic, 1)
    assert lso == hw, (lso, hw)
    assert read_committed(h, topic, 1, 1) == [b"after"]  # read_committed consumers move on; "late" is aborted
    assert hanging(h, topic) == []
    # The explicit form (Kafka's for brokers before 3.0): a forged producer's hanging transaction.
    row = raw_produce(h, topic, 0, 987654321, 3, None, b"forged")
    assert row[1] == 0, row
    assert [r[2] for r in hanging(h, topic)] == ["987654321"]
    cp = run("transactions", *bs, "abort", "--topic", topic, "--partition", "0", "--producer-id", "987654321",
             "--producer-epoch", "3", "--coordinator-epoch", "-1")  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert hanging(h, topic) == []
    hw, lso = offsets(h, topic, 0)
    assert lso == hw, (lso, hw)
