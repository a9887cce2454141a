"""Three real brokers, real faults (SIGKILL, SIGTERM, SIGSTOP/SIGCONT), and one checker:
every acknowledged record survives at its offset, per-partition order holds, and the replicas'
own segment files agree below the high watermark. The proposal's test matrix ("Testing").

Every fault test runs in both coordination modes (the brokers' own quorum, and ZooKeeper), with the same
checks: the modes differ in who decides, not in what clients and replicas may observe."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from client.consumer import TopicPartition
from client.producer import ProduceError
from client.sync import Consumer, Producer
from net.errors import KafkaLiteError
from tests.conftest import ROOT
from tests.integration.cluster_harness import (
    ClusterHarness,
    LoadConsumer,
    LoadProducer,
    SharedCluster,
    check_consumer_saw,
    full_check,
    read_back,
    wait_consumer_reached,
    wait_until,
)
from tests.integration.zk_support import require_zookeeper

pytestmark = pytest.mark.timeout(150)

RF3_MIN2 = {"min.insync.replicas": "2"}


@pytest.fixture(scope="module", params=["custom", "zookeeper"])
def coordination(request) -> str:
    """Overrides conftest.py's: every cluster of this module runs once per coordination mode. Module-scoped, so
    that pytest runs the tests of one mode, then those of the other, each mode's on its own shared cluster."""
    return request.param


# A dead or paused broker is found out within 3 s rather than the defaults' 9 s (broker.session.timeout.ms;
# zookeeper.session.timeout.ms, what a SIGKILL waits for in ZooKeeper mode, whose ephemeral node must expire):
# what these tests check happens after the detection, the same at any timeout, and each ZooKeeper case was
# ~7 s longer than its custom-mode twin waiting for it. Still above the nemesis' 2 s (FAST_FAILURE_DETECTION),
# so a loaded machine's stalls are not taken for deaths.
DETECTION = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=750",
    "zookeeper.session.timeout.ms=3000",
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory, coordination) -> Iterator[SharedCluster]:
    """The cluster this mode's tests take turns on (restored after each: cluster_harness.py's SharedCluster), rather
    than one cluster (and, in ZooKeeper mode, one ZooKeeper) started per test."""
    if coordination == "zookeeper":
        require_zookeeper()
    shared = SharedCluster(
        lambda: ClusterHarness(tmp_path_factory.mktemp(f"faults-{coordination}"), 3, DETECTION, coordination)
    )
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def cluster(shared, request) -> Iterator[ClusterHarness]:
    """Overrides conftest.py's: this module's clusters detect failures within DETECTION's timeouts; shared by the
    tests of one mode, restored after each (a test that needs other configs takes its own, `cluster_factory`)."""
    yield from shared.turn(request)


@pytest.fixture
def topic() -> str:
    """The test's own topic: on a shared cluster no test sees another's records, partitions or segment files."""
    return f"events-{uuid.uuid4().hex[:8]}"


def _leaders(cluster, topic, ids: list[int] | None = None) -> dict[int, int]:
    return {p.partition: p.leader for p in cluster.describe(topic, ids)}


def _more_acks(producers, n: int, timeout: float = 60) -> None:
    """Each producer gets `n` more acknowledgements: the cluster works (a deadline, not a fixed sleep)."""
    for p, base in [(p, p.acked_count()) for p in producers]:
        p.wait_acked(base + n, timeout)


def _run_2p2c(cluster, topic: str, partitions: int, fault):
    """Two producers and two consumers (each assigned half the partitions) around `fault(producers)`."""
    cluster.create_topic(topic, partitions, 3, RF3_MIN2)
    bs = cluster.bootstrap()
    halves = [list(range(0, partitions, 2)), list(range(1, partitions, 2))]
    consumers = [LoadConsumer(bs, topic, halves[i], f"C{i}").start() for i in range(2)]
    producers = [LoadProducer(bs, topic, f"P{i}").start() for i in range(2)]
    _more_acks(producers, 150)
    fault(producers)
    _more_acks(producers, 150)
    stats = [p.stop() for p in producers]
    for s in stats:
        assert s.flush_error is None, f"{s.name}: {s.flush_error}"
        assert not s.failed, f"{s.name}: {len(s.failed)} failed, first {s.failed[0]}"
    full_check(cluster, topic, partitions, stats, min_acked=400)
    hws = cluster.high_watermarks(topic, partitions)
    for c, half in zip(consumers, halves):
        wait_consumer_reached(c, hws, half)
        c.stop()
        check_consumer_saw(c, stats, half)
    return stats


# The two tests with clusters of their own (other broker configs): first in each mode, while no shared cluster
# is up beside theirs (the shared one starts with the mode's first test that takes it).


def test_broker_default_unclean_leader_election_brings_an_offline_partition_back(cluster_factory, topic):
    """unclean.leader.election.enable=true in the brokers' config (not a topic override): with the last ISR
    member gone, an out-of-sync replica is elected, accepting the loss of what only the ISR had."""
    cluster = cluster_factory(3, overrides=[*DETECTION, "unclean.leader.election.enable=true"])
    cluster.create_topic(topic, 1, 2)
    (st,) = cluster.describe(topic)
    leader = st.leader
    lagging = next(r for r in st.replicas if r != leader)
    cluster.kill(lagging)
    wait_until(lambda: cluster.describe(topic)[0].isr == [leader], 20, f"ISR shrunk to [{leader}]")
    with Producer(cluster.bootstrap(), acks="all") as p:
        for i in range(5):
            p.send(topic, f"only-on-{leader}-{i}".encode())
        p.flush(15)
    cluster.kill(leader)
    cluster.restart(lagging)
    bs = cluster.bootstrap([b for b in cluster.brokers if b != leader])
    wait_until(lambda: cluster.describe(topic, [lagging])[0].leader == lagging, 30, f"{lagging} elected uncleanly")
    with Producer(bs, acks="all", delivery_timeout_ms=15000) as p:
        p.send(topic, b"after")
        p.flush(20)
    values = [r.value for recs in read_back(bs, topic, 1).values() for r in recs]
    assert values == [b"after"], values  # the records only the old ISR had are gone: the price of unclean


def test_high_watermarks_are_checkpointed_on_every_replica(cluster_factory, topic):
    """Each broker writes replication-offset-checkpoint (Kafka's file): what is committed survives a restart,
    and a reader of the segment files (pipeline/segments.py) reads up to it and no further."""
    from broker.log.checkpoint import read_checkpoint
    from broker.log.manager import HW_CHECKPOINT
    from pipeline.segments import COMMITTED_CHECKPOINT, choose_replica, find_replicas

    cluster = cluster_factory(3, overrides=["replica.high.watermark.checkpoint.interval.ms=200"])
    cluster.create_topic(topic, 3, 3, RF3_MIN2)
    with Producer(cluster.bootstrap(), acks="all") as p:
        for i in range(300):
            p.send(topic, f"v{i}".encode(), partition=i % 3)
        p.flush(20)
    want = {(topic, p): 100 for p in range(3)}

    def checkpointed(bid: int) -> dict:
        return {tp: hw for tp, hw in read_checkpoint(cluster[bid].data_dir / HW_CHECKPOINT).items() if tp[0] == topic}

    wait_until(lambda: all(checkpointed(b) == want for b in cluster.brokers), 15, "HW 100 checkpointed everywhere")
    for bid in cluster.brokers:
        assert cluster.stop(bid) == 0
    for bid in cluster.brokers:
        assert checkpointed(bid) == want, f"broker {bid} after a clean shutdown"
    replicas = find_replicas([cluster[b].data_dir for b in cluster.brokers])
    for p in range(3):
        s = choose_replica(replicas[(topic, p)])
        assert (s.committed, s.committed_source) == (100, COMMITTED_CHECKPOINT)


# No fault here: what the coordination mode decides (the cluster's start, the topic's leaders and ISRs) is
# the first half of every fault test of this module, in both modes, before its fault; so the steady state
# runs in the brokers' own quorum only (its ZooKeeper case repeated what those fault tests do first).
STEADY_STATE = pytest.mark.parametrize("coordination", ["custom"], indirect=True)


@STEADY_STATE
def test_1_producer_1_consumer_3_brokers(cluster, topic):
    cluster.create_topic(topic, 3, 3, RF3_MIN2)
    consumer = LoadConsumer(cluster.bootstrap(), topic, [0, 1, 2], "C0").start()
    producer = LoadProducer(cluster.bootstrap(), topic, "P0").start()
    producer.wait_acked(600, 60)
    stats = producer.stop()
    assert stats.flush_error is None and not stats.failed
    full_check(cluster, topic, 3, [stats], min_acked=500)
    hws = cluster.high_watermarks(topic, 3)
    wait_consumer_reached(consumer, hws, [0, 1, 2])
    consumer.stop()
    check_consumer_saw(consumer, [stats], [0, 1, 2])


@STEADY_STATE
def test_2_producers_2_consumers_3_brokers(cluster, topic):
    _run_2p2c(cluster, topic, 4, lambda producers: _more_acks(producers, 200))


@STEADY_STATE
def test_get_offsets_names_a_partition_without_a_leader_and_prints_the_others(cluster, topic, tmp_path):
    """kafka-get-offsets.sh's per-partition answer: with one broker dead, the partitions it alone held (RF 1) have
    no leader; the tool prints the other partitions' offsets, names each leaderless one on stderr after its
    retries (request.timeout.ms), and exits 0, as Kafka's GetOffsetShell does. Before, the first such partition
    failed the whole command and no offset was printed."""
    cluster.create_topic(topic, 4, 1)
    victim = _leaders(cluster, topic)[0]
    cluster.kill(victim)
    wait_until(lambda: _leaders(cluster, topic, [i for i in cluster.brokers if i != victim])[0] == -1, 30,
               "partition 0 without a leader")  # fmt: skip
    leaders = _leaders(cluster, topic, [i for i in cluster.brokers if i != victim])
    gone = sorted(p for p, leader in leaders.items() if leader == -1)
    assert 0 in gone and len(gone) < 4, leaders  # the test needs both kinds: placement spreads RF-1 partitions
    conf = tmp_path / "admin.properties"
    conf.write_text("request.timeout.ms=2000\n")
    cp = subprocess.run(
        [sys.executable, "-m", "client.cli.get_offsets", "--bootstrap-server", cluster.bootstrap(),
         "--topic", topic, "--command-config", str(conf)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [f"{topic}:{p}:0" for p in range(4) if p not in gone]
    skipped = cp.stderr.splitlines()
    assert [line.split(" due to error: ")[0] for line in skipped] == [
        f"Skip getting offsets for topic-partition {topic}-{p}" for p in gone
    ], cp.stderr
    assert all(line.split(" due to error: ")[1].startswith("LEADER_NOT_AVAILABLE") for line in skipped), cp.stderr


def test_follower_sigkill_then_rejoins_isr(cluster, topic):
    # Two partitions: leaders are brokers 1 and 2, so broker 3 only follows.
    cluster.create_topic(topic, 2, 3, RF3_MIN2)
    leaders = _leaders(cluster, topic)
    follower = ({1, 2, 3} - set(leaders.values())).pop()
    bs = cluster.bootstrap()
    consumers = [LoadConsumer(bs, topic, [i], f"C{i}").start() for i in range(2)]
    producers = [LoadProducer(bs, topic, f"P{i}").start() for i in range(2)]
    for p in producers:
        p.wait_acked(100, 20)
    cluster.kill(follower, signal.SIGKILL)
    # The others keep working: acks continue and the follower leaves every ISR.
    wait_until(
        lambda: all(follower not in p.isr for p in cluster.describe(topic)), 15, f"broker {follower} out of the ISRs"
    )
    before = [p.acked_count() for p in producers]
    for p, n in zip(producers, before):
        p.wait_acked(n + 200, 15)
    assert _leaders(cluster, topic) == leaders, "killing a follower moved leaderships"
    cluster.restart(follower)
    parts = cluster.wait_isr_contains(topic, follower, 40)
    assert all(sorted(p.isr) == [1, 2, 3] for p in parts)
    _more_acks(producers, 100)  # acknowledged with the follower back in the ISR
    stats = [p.stop() for p in producers]
    for s in stats:
        assert s.flush_error is None and not s.failed, (s.flush_error, s.failed[:3])
    full_check(cluster, topic, 2, stats, min_acked=800)
    hws = cluster.high_watermarks(topic, 2)
    for i, c in enumerate(consumers):
        wait_consumer_reached(c, hws, [i])
        c.stop()
        check_consumer_saw(c, stats, [i])


def test_leader_sigkill_reelects_and_production_continues(cluster, topic):
    def fault(producers):
        leaders = _leaders(cluster, topic)
        victim = leaders[0]
        cluster.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        parts = wait_until(
            lambda: (ps := cluster.describe(topic)) and all(p.leader > 0 and p.leader != victim for p in ps) and ps,
            15,
            "new leaders for the dead broker's partitions",
        )
        elected = time.monotonic() - t0
        for p in parts:
            if leaders[p.partition] == victim:
                assert p.leader_epoch >= 1 and p.leader in (1, 2, 3) and victim not in p.isr
        # Production continues with the new leader within a few seconds.
        counts = [p.acked_count() for p in producers]
        for p, n in zip(producers, counts):
            p.wait_acked(n + 100, 10)

        def acked_on_p0_after(n0: int) -> bool:
            return any(part == 0 for pr in producers for part, _, _ in pr.stats.acked[n0:])

        wait_until(lambda: all(acked_on_p0_after(n) for n in counts[:1]), 10, "acks on partition 0 after the failover")
        assert elected < 10, f"re-election took {elected:.1f}s"
        cluster.restart(victim)
        cluster.wait_isr_contains(topic, victim, 40)

    _run_2p2c(cluster, topic, 4, fault)


def test_all_brokers_killed_clear_errors_then_recovery(cluster, topic):
    cluster.create_topic(topic, 3, 3, RF3_MIN2)
    bs = cluster.bootstrap()
    load = LoadProducer(bs, topic, "P0").start()
    load.wait_acked(300, 20)
    quick = Producer(bs, acks="all", delivery_timeout_ms=3000, request_timeout_ms=2000, retry_backoff_ms=50)
    consumer = Consumer(bs, auto_offset_reset="earliest", request_timeout_ms=2000, fetch_max_wait_ms=200)
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    consumer.poll(1000)
    try:
        for b in cluster.brokers.values():
            b.kill(signal.SIGKILL)
        # Producer: a clear error within its delivery timeout, no hang.
        errors = []
        for i in range(20):
            quick.send(topic, f"doomed-{i}".encode(), on_delivery=lambda e, md: errors.append(e))
        t0 = time.monotonic()
        with pytest.raises(ProduceError) as exc:
            quick.flush(30)
        took = time.monotonic() - t0
        assert took < 10, f"flush took {took:.1f}s with delivery.timeout.ms=3000"
        assert len(exc.value.failures) == 20 and "20 records not written" in str(exc.value), str(exc.value)
        # No broker was reachable for any attempt: every record is known not to be in the log.
        assert {f.outcome for f in exc.value.failures} == {"not_written"}
        assert len(errors) == 20 and all(e is not None for e in errors)
        # Consumer: after handing out what it had already fetched, polls return nothing (or raise a
        # KafkaLiteError), each within its timeout: no hang.
        empty = 0
        for _ in range(30):
            t0 = time.monotonic()
            try:
                got = consumer.poll(1000)
            except KafkaLiteError:
                got = []
            assert time.monotonic() - t0 < 5, "consumer poll hung with every broker down"
            empty = empty + 1 if not got else 0
            if empty == 3:
                break
        assert empty == 3, "consumer kept returning records with every broker down"
    finally:
        quick.close(5)
        consumer.close(5)
    # Restart: service resumes and nothing acknowledged is lost.
    for b in cluster.brokers.values():
        b.start(wait=False)
    for b in cluster.brokers.values():
        b.wait_listening()
    cluster.wait_full_isr(topic, 3)
    n = load.acked_count()
    load.wait_acked(n + 300, 30)
    stats = load.stop()
    assert stats.flush_error is None and not stats.failed, (stats.flush_error, stats.failed[:3])
    full_check(cluster, topic, 3, [stats], min_acked=600)


def test_leader_paused_past_failure_timeout_steps_down_and_truncates(cluster, topic):
    cluster.create_topic(topic, 3, 3, RF3_MIN2)
    bs = cluster.bootstrap()
    producers = [LoadProducer(bs, topic, f"P{i}").start() for i in range(2)]
    for p in producers:
        p.wait_acked(200, 20)
    leaders = _leaders(cluster, topic)
    victim = leaders[0]
    others = [i for i in cluster.brokers if i != victim]
    cluster[victim].pause()
    try:
        parts = wait_until(
            lambda: (ps := cluster.describe(topic, others)) and all(p.leader in others for p in ps) and ps,
            15,
            "leaderships moved off the paused broker",
        )
        epochs = {p.partition: p.leader_epoch for p in parts}
        counts = [p.acked_count() for p in producers]
        for p, n in zip(producers, counts):
            p.wait_acked(n + 100, 15)
        time.sleep(1)
    finally:
        cluster[victim].resume()
    # Back: it must follow the new leaders (not lead with its stale epoch) and rejoin the ISRs.
    # (Asked of the others: the resumed broker answers from its own image, which may still be stale.)
    parts = cluster.wait_isr_contains(topic, victim, 40, ids=others)
    for p in parts:
        if leaders[p.partition] == victim:
            assert p.leader != victim or p.leader_epoch > epochs[p.partition]
    _more_acks(producers, 100)
    stats = [p.stop() for p in producers]
    for s in stats:
        assert s.flush_error is None and not s.failed, (s.flush_error, s.failed[:3])
    logged = full_check(cluster, topic, 3, stats, min_acked=600)
    # The old leader's log was truncated to match the new leader's: identical, offset by offset,
    # including the leader epoch that wrote each batch (no leftover tail from its deposed epoch).
    for p in range(3):
        new_leader = next(x.leader for x in cluster.describe(topic) if x.partition == p)
        mine = cluster[victim].read_partition(topic, p)
        theirs = cluster[new_leader].read_partition(topic, p)
        hw = (logged[p][-1].offset + 1) if logged[p] else 0
        assert {o: v for o, v in mine.items() if o < hw} == {o: v for o, v in theirs.items() if o < hw}
        stale = {o: v for o, v in mine.items() if o >= hw and theirs.get(o) != v}
        assert not stale, f"broker {victim} kept records of {topic}-{p} its new leader lacks: {list(stale)[:5]}"


def _produce(cluster, brokers: list[int], topic: str, value: bytes) -> None:
    with Producer(cluster.bootstrap(brokers), acks="all", enable_idempotence=True) as producer:
        producer.send(topic, value, partition=0)
        producer.flush(30)


def test_a_consumer_reads_on_from_the_new_leader_while_its_fetch_hangs_on_the_paused_one(cluster, topic):
    """A consumer's fetch sent to a leader that is then paused gets no answer, and its connection stays open, for
    the request timeout (30 s). Once the fetch is overdue (fetch.max.wait.ms + 1 s) the consumer looks the
    leaders up again from another broker, so when the controller has moved the leadership (after the 3 s
    session here) it reads on from the new leader rather than after the request timeout."""
    cluster.create_topic(topic, 1, 3, RF3_MIN2)
    victim = _leaders(cluster, topic)[0]
    others = [i for i in cluster.brokers if i != victim]
    tp = TopicPartition(topic, 0)
    with Consumer(cluster.bootstrap(others), auto_offset_reset="earliest", fetch_max_wait_ms=500) as consumer:
        consumer.assign([tp])
        _produce(cluster, others, topic, b"before")
        wait_until(lambda: any(r.value == b"before" for r in consumer.poll(200)), 20, "the first record read")
        consumer.poll(100)  # a fetch now waits at the leader, in flight when it stops
        cluster[victim].pause()
        try:
            wait_until(
                lambda: all(p.leader in others for p in cluster.describe(topic, others)),
                20,
                "the leadership moved off the paused broker",
            )
            moved_at = time.time()
            _produce(cluster, others, topic, b"after")  # a producer of its own: one that knew the old leader waits
            wait_until(lambda: any(r.value == b"after" for r in consumer.poll(200)), 20, "the record read after it")
            read_at = time.time()
        finally:
            cluster[victim].resume()
    print(f"read from the new leader {read_at - moved_at:.2f}s after the move")
    assert read_at - moved_at < 10, f"read {read_at - moved_at:.1f}s after the leadership moved"


def test_rolling_restart_under_load(cluster, topic):
    def fault(producers):
        for bid in (1, 2, 3):
            assert cluster.stop(bid) == 0, f"broker {bid} did not shut down cleanly"
            assert "shut down cleanly" in cluster[bid].logs()
            cluster[bid].start()
            cluster.wait_isr_contains(topic, bid, 40)
            n = [p.acked_count() for p in producers]
            for p, k in zip(producers, n):
                p.wait_acked(k + 50, 15)

    _run_2p2c(cluster, topic, 3, fault)


def test_min_insync_replicas_rejects_acks_all_and_nothing_becomes_visible(cluster, topic):
    """min.insync.replicas=3 with one replica down: acks=all gets NOT_ENOUGH_REPLICAS, nothing of it is
    ever readable (not even after the replica returns); acks=1 still works."""
    cluster.create_topic(topic, 2, 3, {"min.insync.replicas": "3"})
    follower = ({1, 2, 3} - set(_leaders(cluster, topic).values())).pop()
    cluster.kill(follower)
    wait_until(lambda: all(len(p.isr) == 2 for p in cluster.describe(topic)), 15, "ISRs shrunk to 2")
    bs = cluster.bootstrap()
    with Producer(bs, acks="all", delivery_timeout_ms=3000, request_timeout_ms=2000, retry_backoff_ms=100) as p:
        for i in range(20):
            p.send(topic, f"all-{i}".encode(), partition=i % 2)
        with pytest.raises(ProduceError) as exc:
            p.flush(20)
        assert "min.insync.replicas" in str(exc.value) or "delivery.timeout.ms" in str(exc.value), str(exc.value)
    acked1 = []
    with Producer(bs, acks="1", delivery_timeout_ms=10000) as p:
        for i in range(20):
            p.send(topic, f"one-{i}".encode(), partition=i % 2, on_delivery=lambda e, md: e or acked1.append(md))
        p.flush(15)
    assert len(acked1) == 20
    cluster.restart(follower)
    cluster.wait_full_isr(topic, 2)
    values = [r.value for recs in read_back(cluster.bootstrap(), topic, 2).values() for r in recs]
    assert not [v for v in values if v.startswith(b"all-")], "a record rejected with NOT_ENOUGH_REPLICAS is readable"
    assert sorted(v for v in values if v.startswith(b"one-")) == sorted(f"one-{i}".encode() for i in range(20))


def test_two_of_three_brokers_down_acks_all_fails_acks_1_works(cluster, coordination, topic):
    """In ZooKeeper mode the survivor's controller can shrink the ISR to [survivor] (the custom mode has no
    quorum left to). The high watermark then stays where it was (KIP-966's rule), so neither the failed
    acks=all records nor the acks=1 ones are readable until a second replica is back in the ISR."""
    cluster.create_topic(topic, 3, 3, RF3_MIN2)
    leaders = _leaders(cluster, topic)
    survivor = leaders[0]
    mine = [p for p, leader in leaders.items() if leader == survivor]
    with Producer(cluster.bootstrap(), acks="all") as p:
        for i in range(30):
            p.send(topic, f"before-{i}".encode(), partition=i % 3)
        p.flush(20)
    for bid in cluster.brokers:
        if bid != survivor:
            cluster.kill(bid)
    bs = cluster.bootstrap([survivor])
    with Producer(bs, acks="all", delivery_timeout_ms=3000, request_timeout_ms=1500, retry_backoff_ms=100) as p:
        t0 = time.monotonic()
        for i in range(10):
            p.send(topic, f"all-{i}".encode(), partition=mine[i % len(mine)])
        with pytest.raises(ProduceError) as exc:
            p.flush(20)
        assert time.monotonic() - t0 < 12
        msg = str(exc.value)
        assert any(
            s in msg for s in ("NOT_ENOUGH_REPLICAS", "min.insync.replicas", "not replicated", "timed out", "expired")
        ), msg
    acked1 = []
    with Producer(bs, acks="1", delivery_timeout_ms=10000) as p:
        for i in range(10):
            p.send(
                topic,
                f"one-{i}".encode(),
                partition=mine[i % len(mine)],
                on_delivery=lambda e, md: e or acked1.append(md),
            )
        p.flush(15)
    assert len(acked1) == 10, "acks=1 to a live leader failed"
    # Nothing of the failed acks=all produce is visible to consumers.
    with Consumer(bs, auto_offset_reset="earliest", request_timeout_ms=3000) as c:
        c.assign([TopicPartition(topic, p) for p in mine])
        seen = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            seen += c.poll(300)
    assert not [r for r in seen if r.value.startswith(b"all-")], "records of a failed acks=all produce are readable"
    assert len([r for r in seen if r.value.startswith(b"before-")]) == 10 * len(mine)
    assert not [r for r in seen if r.value.startswith(b"one-")], "committed by an ISR below min.insync.replicas"
    # One replica back: the ISR reaches the minimum again and the acknowledged acks=1 records commit.
    back = next(b for b in cluster.brokers if b != survivor)
    cluster.restart(back)
    cluster.wait_isr_contains(topic, back, 40)
    want = sorted(f"one-{i}".encode() for i in range(10))

    def committed_values() -> list[bytes] | None:
        values = [r.value for recs in read_back(cluster.bootstrap([survivor, back]), topic, 3).values() for r in recs]
        ones = sorted(v for v in values if v.startswith(b"one-"))
        # A partition whose new leader just restarted reads as empty until its followers fetched (the HW is
        # not persisted), so wait for every partition, not only the acks=1 ones.
        return values if ones == want and len([v for v in values if v.startswith(b"before-")]) == 30 else None

    wait_until(committed_values, 40, "the acks=1 records committed once the ISR is back at 2, every partition led")


def test_metrics_under_replicated_while_follower_down(cluster, topic):
    cluster.create_topic(topic, 2, 3, RF3_MIN2)
    leaders = _leaders(cluster, topic)
    follower = ({1, 2, 3} - set(leaders.values())).pop()
    leader = leaders[0]

    def gauge(text: str) -> float:
        for line in text.splitlines():
            if line.startswith("kafkalite_under_replicated_partitions{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("kafkalite_under_replicated_partitions missing:\n" + text[:2000])

    assert gauge(cluster[leader].metrics()) == 0
    cluster.kill(follower)
    wait_until(lambda: gauge(cluster[leader].metrics()) > 0, 15, "under-replicated partitions > 0 on the leader")
    text = cluster[leader].metrics()
    assert "# TYPE kafkalite_under_replicated_partitions gauge" in text
    cluster.restart(follower)
    cluster.wait_isr_contains(topic, follower, 40)
    wait_until(lambda: gauge(cluster[leader].metrics()) == 0, 15, "under-replicated back to 0")


def _produce_raw(address: str, topic: str, partition: int, blob: bytes) -> list:
    """One Produce request (acks=all) with exactly these batch bytes, as a producer's retry sends them."""
    import asyncio

    from net.connection import BrokerConnection
    from net.protocol import ApiKey

    async def go() -> list:
        host, port = address.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "raw-test")
        await conn.connect(5)
        try:
            body = {"acks": -1, "timeout_ms": 5000, "topics": [[topic, [[partition, blob]]]]}
            resp = await conn.request(ApiKey.PRODUCE, body, timeout=10)
        finally:
            conn.close()
        return resp["topics"][0][1][0]

    return asyncio.run(go())


def test_idempotent_retry_to_new_leader_is_not_appended_twice(cluster, topic):
    """An idempotent producer's batch is replicated to the whole ISR, the leader dies before its answer
    arrives, and the producer retries the same batch (same producer id and sequence) to the new leader.
    The new leader holds that batch (it was committed), so it must answer with the original offset and
    not append it again: that is the whole point of idempotence across a failover."""
    import secrets

    from net import batch as batch_fmt

    cluster.create_topic(topic, 1, 3, RF3_MIN2)
    old_leader = _leaders(cluster, topic)[0]
    pid = secrets.randbits(62)
    ts = int(time.time() * 1000)
    first = batch_fmt.build([[i, 0, None, f"P9-{i}".encode(), None] for i in range(3)], ts, ts, 0, pid, 0, 0)
    row = _produce_raw(cluster[old_leader].address, topic, 0, first)
    assert row[1] == 0 and row[2] == 0, row  # no error, base offset 0, and acks=all: every ISR member has it
    cluster.kill(old_leader)
    others = [i for i in cluster.brokers if i != old_leader]
    new_leader = wait_until(
        lambda: (ls := _leaders_via(cluster, topic, others)) and ls[0] in others and ls[0],
        15,
        "a new leader for partition 0",
    )
    row = wait_until(
        lambda: (r := _produce_raw(cluster[new_leader].address, topic, 0, first)) and r[1] == 0 and r,
        10,
        "the retry accepted by the new leader",
    )
    # A second, new batch of the same producer follows the retry.
    second = batch_fmt.build([[i, 0, None, f"P9-{3 + i}".encode(), None] for i in range(2)], ts, ts, 0, pid, 0, 3)
    row2 = _produce_raw(cluster[new_leader].address, topic, 0, second)
    logged = read_back(cluster.bootstrap(others), topic, 1)[0]
    values = [r.value for r in logged]
    assert values == [f"P9-{i}".encode() for i in range(5)], (
        f"retry answered {row} (second batch {row2}); log of the new leader {new_leader}: {values}"
    )
    assert row[2] == 0, f"the retried batch was answered with offset {row[2]}, not its original offset 0"


def _leaders_via(cluster, topic, ids) -> dict[int, int]:
    return {p.partition: p.leader for p in cluster.describe(topic, ids)}
