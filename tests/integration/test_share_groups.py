"""Share groups (KIP-932, issue 29 §2) with confluent-kafka's ShareConsumer on one shared 3-broker cluster:
records shared among members with each delivered to one member at a time, redelivery after a lock times out or a
member leaves, rejected records never again, the delivery count limit, and the state surviving a SIGKILL of the
share-partition's leader."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from tests.integration.cluster_harness import ClusterHarness
from tests.integration.test_cli import assert_one_line_error, run

pytestmark = pytest.mark.timeout(240)

LOCK_MS = 3000  # group.share.record.lock.duration.ms, short so that lock expiry is seen in seconds


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(
        tmp_path_factory.mktemp("share-groups"),
        3,
        overrides=[
            "share.auto.offset.reset=earliest",
            f"group.share.record.lock.duration.ms={LOCK_MS}",
            "group.share.delivery.count.limit=3",
            "offsets.topic.num.partitions=4",
        ],
    ).running() as h:
        yield h


def _topic(cluster: ClusterHarness, partitions: int) -> str:
    name = f"share-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions, 3, {"min.insync.replicas": "2"})
    cluster.wait_full_isr(name, partitions)
    return name


def _produce(cluster: ClusterHarness, topic: str, values: list[bytes], partitions: int, **extra: object) -> None:
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all", "linger.ms": 5, **extra})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(30) == 0


def _consumer(cluster: ClusterHarness, group: str, topic: str, **extra: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group, **extra})
    c.subscribe([topic])
    return c


def _poll(c: ShareConsumer, timeout: float = 0.5) -> list:
    out = []
    for m in c.poll(timeout):
        assert m.error() is None, m.error()
        out.append(m)
    return out


def _drain(c: ShareConsumer, want: int, deadline_s: float = 30, stop: threading.Event | None = None) -> list[bytes]:
    got: list[bytes] = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end and not (stop and stop.is_set()):
        got += [m.value() for m in _poll(c)]
    return got


def test_records_are_shared_among_two_members_each_delivered_once(cluster):
    topic = _topic(cluster, 3)
    group = f"g-{topic}"
    values = [f"r{i}".encode() for i in range(300)]
    # Few records per fetch, so that both members fetch while records remain (max.poll.records is ShareFetch's
    # max_records). A share fetch acquires whole log batches (Kafka's MaxRecords is a soft limit), so each
    # record is a batch of its own here (batch.num.messages=1): else one fetch could take a partition's whole
    # batch of up to 100 records.
    members = [_consumer(cluster, group, topic, **{"max.poll.records": "10"}) for _ in range(2)]
    got: list[list[bytes]] = [[], []]
    done = threading.Event()

    def run(i: int) -> None:
        end = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < end:
            got[i] += [m.value() for m in _poll(members[i], 0.2)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        # Both members in the group (polling) before there is anything to share: a fetch round takes tens of ms,
        # so one member alone could drain the 300 records before the other's first heartbeat is answered.
        time.sleep(3)
        _produce(cluster, topic, values, 3, **{"batch.num.messages": 1})
        end = time.monotonic() + 60
        while len(got[0]) + len(got[1]) < len(values) and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(0.5)  # anything delivered twice would show up now
    finally:
        done.set()
        for t in threads:
            t.join(30)
        for c in members:
            c.close()
    counts = Counter(got[0] + got[1])
    assert set(counts) == set(values), f"missing: {len(set(values) - set(counts))}"
    assert [v for v, n in counts.items() if n > 1] == []  # implicit acks within the lock: no redelivery
    assert got[0] and got[1], (len(got[0]), len(got[1]))


def test_a_record_held_by_one_member_goes_to_another_once_its_lock_runs_out(cluster):
    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    values = [f"h{i}".encode() for i in range(20)]
    _produce(cluster, topic, values, 1)
    holder = _consumer(cluster, group, topic, **{"share.acknowledgement.mode": "explicit"})
    other = _consumer(cluster, group, topic)
    try:
        held = _drain(holder, len(values))
        assert sorted(held) == sorted(values)
        # held, not acknowledged: the other member gets nothing while the locks last
        t0 = time.monotonic()
        early = _drain(other, 1, deadline_s=LOCK_MS / 1000 * 0.5)
        assert early == [] or time.monotonic() - t0 >= LOCK_MS / 1000 * 0.9
        again = _drain(other, len(values), deadline_s=LOCK_MS / 1000 + 20)
        assert sorted(again) == sorted(values)
    finally:
        other.close()
        holder.close()


def test_released_records_are_redelivered_rejected_never_and_the_delivery_limit_archives(cluster):
    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    values = [b"accept", b"release", b"reject", b"forever"]
    _produce(cluster, topic, values, 1)
    c = _consumer(cluster, group, topic, **{"share.acknowledgement.mode": "explicit"})
    deliveries: Counter[bytes] = Counter()
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            batch = _poll(c)
            for m in batch:
                v = m.value()
                deliveries[v] += 1
                if v == b"accept" or (v == b"release" and deliveries[v] == 2):
                    kind = AcknowledgeType.ACCEPT
                elif v == b"reject":
                    kind = AcknowledgeType.REJECT
                else:
                    kind = AcknowledgeType.RELEASE  # "forever" is released until the delivery limit archives it
                c.acknowledge(m, kind)
            if batch:
                c.commit_sync(10)
            if deliveries[b"forever"] >= 3 and time.monotonic() > end - 55:
                # nothing more may come: poll a little longer to see that nothing is redelivered
                if not any(_poll(c, 0.5) for _ in range(4)):
                    break
    finally:
        c.close()
    assert deliveries == {b"accept": 1, b"release": 2, b"reject": 1, b"forever": 3}


def test_acknowledged_state_survives_a_sigkill_of_the_share_partition_leader(cluster):
    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    values = [f"k{i}".encode() for i in range(30)]
    _produce(cluster, topic, values, 1)
    first = _consumer(cluster, group, topic, **{"share.acknowledgement.mode": "explicit", "max.poll.records": "10"})
    accepted: list[bytes] = []
    rejected: list[bytes] = []
    try:
        end = time.monotonic() + 30
        while not accepted and time.monotonic() < end:
            for i, m in enumerate(_poll(first)):
                kind = AcknowledgeType.REJECT if i % 3 == 0 else AcknowledgeType.ACCEPT
                first.acknowledge(m, kind)
                (rejected if kind == AcknowledgeType.REJECT else accepted).append(m.value())
        first.commit_sync(10)  # answered once the share coordinator has the state replicated
    finally:
        first.close()
    assert accepted and rejected
    victim = cluster.describe(topic)[0].leader
    cluster.kill(victim)
    try:
        others = [i for i in cluster.brokers if i != victim]
        wait_leader = time.monotonic() + 30
        while time.monotonic() < wait_leader:
            parts = cluster.describe(topic, others)
            if parts and parts[0].leader in others:
                break
            time.sleep(0.2)
        second = _consumer(cluster, group, topic)
        try:
            rest = set(values) - set(accepted) - set(rejected)
            got = _drain(second, len(rest), deadline_s=60)
            got += _drain(second, 1, deadline_s=2)  # nothing accepted or rejected comes back late either
        finally:
            second.close()
        # The new leader read the group's state: what was accepted or rejected is never delivered again, and the
        # rest is (without the state it would start again from the earliest offset and deliver all 30).
        assert sorted(got) == sorted(rest)
    finally:
        cluster.restart(victim)
        cluster.wait_all_registered()


HOLDER = """
import sys
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
held = 0
while True:
    msgs = list(c.poll(0.5))
    held += len(msgs)
    if msgs:
        print(held, flush=True)  # acquired and never acknowledged: this process is killed holding them
        break
import time
time.sleep(600)
"""


def test_records_of_a_member_killed_while_holding_them_are_redelivered(cluster):
    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    values = [f"d{i}".encode() for i in range(15)]
    _produce(cluster, topic, values, 1)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, cluster.kafka_bootstrap(), group, topic], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        held = int(proc.stdout.readline())
        assert held >= 1
        proc.send_signal(signal.SIGKILL)  # no leave, no release: only the acquisition locks bring them back
        proc.wait(10)
        t0 = time.monotonic()
        survivor = _consumer(cluster, group, topic)
        try:
            got = _drain(survivor, len(values), deadline_s=LOCK_MS / 1000 + 30)
        finally:
            survivor.close()
        assert sorted(got) == sorted(values)
        assert time.monotonic() - t0 >= LOCK_MS / 1000 * 0.5  # not before the dead member's locks ran out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_kl_share_groups_lists_and_describes_a_share_group(cluster):
    topic = _topic(cluster, 2)
    group = f"g-{topic}"
    _produce(cluster, topic, [f"c{i}".encode() for i in range(10)], 2)
    members = [_consumer(cluster, group, topic, **{"client.id": f"cli-{i}"}) for i in range(2)]
    try:
        got = []
        end = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            for c in members:
                got += [m.value() for m in _poll(c, 0.2)]
        for c in members:
            _poll(c, 0.2)  # the last poll's implicit acknowledgements go out with this one
        boot = ["--bootstrap-server", cluster.bootstrap()]
        listed = run("share_groups", *boot, "--list")
        assert listed.returncode == 0, listed.stderr
        assert group in listed.stdout.split()
        with_state = run("share_groups", *boot, "--list", "--state", "stable")
        assert [ln.split() for ln in with_state.stdout.splitlines() if group in ln] == [[group, "Stable"]]
        state = run("share_groups", *boot, "--describe", "--group", group, "--state")
        assert state.returncode == 0, state.stderr
        header, row = [ln for ln in state.stdout.splitlines() if ln.strip()]
        assert header.split()[:2] == ["GROUP", "COORDINATOR"] and row.split()[0] == group
        assert row.split()[-2:] == ["Stable", "2"]
        described = run("share_groups", *boot, "--describe", "--group", group, "--members")
        rows = [ln.split() for ln in described.stdout.splitlines() if ln.startswith(group)]
        assert sorted(r[3] for r in rows) == ["cli-0", "cli-1"]
        assert all(r[4] == "2" and r[5] == f"{topic}:0,1" for r in rows)  # every member shares both partitions
        offsets = run("share_groups", *boot, "--describe", "--group", group)
        assert offsets.returncode == 0, offsets.stderr
        parts = [ln.split() for ln in offsets.stdout.splitlines() if ln.startswith(group)]
        # every record accepted: each start offset is the partition's end, no lag
        assert sorted((p[2], p[3], p[4]) for p in parts) == [("0", "5", "0"), ("1", "5", "0")]
    finally:
        for c in members:
            c.close()
    missing = run("share_groups", "--bootstrap-server", cluster.bootstrap(), "--describe", "--group", "no-such-group")
    assert_one_line_error(missing, "does not exist")


def _group_coordinator(cluster: ClusterHarness, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    # the coordinator of a group id is the leader of its __consumer_offsets partition, whatever the group's type
    desc = a.describe_consumer_groups([group])[group].result(10)
    return desc.coordinator.id


def test_members_keep_consuming_through_a_sigkill_of_the_group_coordinator(cluster):
    topic = _topic(cluster, 2)
    group = f"g-{topic}"
    c = _consumer(cluster, group, topic)
    try:
        _produce(cluster, topic, [f"a{i}".encode() for i in range(10)], 2)
        before = _drain(c, 10)
        assert len(before) == 10
        c.commit_sync(10)  # the last poll's implicit acknowledgements, durable before the kill
        victim = _group_coordinator(cluster, group)
        cluster.kill(victim)
        try:
            after_values = [f"b{i}".encode() for i in range(10)]
            _produce(cluster, topic, after_values, 2)
            # the member's heartbeats find the new coordinator, which knows no member: it joins again (epoch 0)
            # and keeps its partitions; the records produced after the kill all come
            got = _drain(c, 10, deadline_s=60)
            assert sorted(got) == sorted(after_values)
        finally:
            cluster.restart(victim)
            cluster.wait_all_registered()
    finally:
        c.close()


def _set_group_config(cluster: ClusterHarness, group: str, name: str, value: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]
    ).values():
        f.result(15)


def test_a_group_config_set_by_incremental_alter_configs_applies_to_that_group_only(cluster):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    _produce(cluster, topic, [f"old{i}".encode() for i in range(5)], 1)
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    res = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "latest", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for f in admin.incremental_alter_configs([res]).values():
        f.result(15)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    (configs,) = [f.result(15) for f in described.values()]
    assert configs["share.auto.offset.reset"].value == "latest"
    assert configs["share.record.lock.duration.ms"].value == str(LOCK_MS)  # the broker's, not overridden
    bad = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry("share.delivery.count.limit", "99", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception, match="INVALID_CONFIG|not in"):
        for f in admin.incremental_alter_configs([bad]).values():
            f.result(15)

    c = _consumer(cluster, group, topic)
    try:
        # the group starts at the end (its own config), though the brokers' default is earliest
        boot = ["--bootstrap-server", cluster.bootstrap()]
        end = time.monotonic() + 30
        while time.monotonic() < end:
            assert _poll(c, 0.3) == []
            out = run("share_groups", *boot, "--describe", "--group", group).stdout
            if any(ln.split()[:4] == [group, topic, "0", "5"] for ln in out.splitlines()):
                break
        else:
            raise AssertionError("the share-partition never started at offset 5")
        new = [f"new{i}".encode() for i in range(5)]
        _produce(cluster, topic, new, 1)
        assert sorted(_drain(c, 5)) == sorted(new)
    finally:
        c.close()


def test_our_share_consumer_shares_a_group_with_confluent_kafkas(cluster):
    from client import ShareConsumer as OurShareConsumer

    topic = _topic(cluster, 2)
    group = f"g-{topic}"
    values = [f"o{i}".encode() for i in range(40)]
    _produce(cluster, topic, values, 2)
    theirs = _consumer(cluster, group, topic, **{"max.poll.records": "5"})
    ours = OurShareConsumer(cluster.bootstrap(), group, max_poll_records=5)
    ours.subscribe([topic])
    got: dict[str, list[bytes]] = {"theirs": [], "ours": []}
    try:
        end = time.monotonic() + 60
        while len(got["theirs"]) + len(got["ours"]) < len(values) and time.monotonic() < end:
            got["theirs"] += [m.value() for m in _poll(theirs, 0.2)]
            got["ours"] += [r.value for r in ours.poll(200)]
        for _ in range(3):  # anything delivered twice would come now
            got["theirs"] += [m.value() for m in _poll(theirs, 0.2)]
            got["ours"] += [r.value for r in ours.poll(200)]
    finally:
        ours.close()
        theirs.close()
    counts = Counter(got["theirs"] + got["ours"])
    assert set(counts) == set(values) and max(counts.values()) == 1
    assert got["theirs"] and got["ours"], {k: len(v) for k, v in got.items()}


def test_our_share_consumer_rejects_releases_and_its_records_return_when_it_closes(cluster):
    from client import ShareConsumer as OurShareConsumer

    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    values = [f"e{i}".encode() for i in range(6)]
    _produce(cluster, topic, values, 1)
    _set_group_config(cluster, group, "share.record.lock.duration.ms", "60000")  # a lock cannot be what frees them
    first = OurShareConsumer(cluster.bootstrap(), group, acknowledgement_mode="explicit")
    first.subscribe([topic])
    try:
        held: list = []
        end = time.monotonic() + 30
        while len(held) < len(values) and time.monotonic() < end:
            held += first.poll(300)
        assert sorted(r.value for r in held) == sorted(values)
        by_value = {r.value: r for r in held}
        first.acknowledge(by_value[b"e0"], 3)  # REJECT: never again
        first.acknowledge(by_value[b"e1"], 1)  # ACCEPT
        first.acknowledge(by_value[b"e2"], 2)  # RELEASE: redelivered
        first.commit()
    finally:
        first.close()  # e3-e5 acquired, never acknowledged: released by the closing share session, not by a lock
    second = OurShareConsumer(cluster.bootstrap(), group)
    second.subscribe([topic])
    try:
        t0 = time.monotonic()
        again: list = []
        end = time.monotonic() + 30
        while len(again) < 4 and time.monotonic() < end:
            again += second.poll(300)
        assert sorted(r.value for r in again) == [b"e2", b"e3", b"e4", b"e5"]
        assert time.monotonic() - t0 < 30
        assert second.poll(1000) == []  # e0 rejected, e1 accepted: nothing more
    finally:
        second.close()


def test_forged_share_requests_get_their_errors_at_once(cluster):
    """Bad input on the native listener: each answered with Kafka's error, quickly, and nothing stalls."""
    import asyncio
    import datetime

    from net.connection import BrokerConnection
    from net.errors import ErrorCode, KafkaLiteError
    from net.schema.share_acknowledge import ShareAcknowledgeRequest
    from net.schema.share_fetch import AcknowledgementBatch, FetchPartition, FetchTopic, ShareFetchRequest
    from net.schema.share_group_heartbeat import ShareGroupHeartbeatRequest

    topic = _topic(cluster, 1)
    _produce(cluster, topic, [b"x"] * 3, 1)
    leader = cluster.describe(topic)[0].leader

    async def go() -> None:
        from client.cluster import KafkaLiteClient
        from client.transactions import KEY_TYPE_GROUP, find_coordinator

        kc = KafkaLiteClient(cluster.bootstrap(), "forger", 10000, 60000)
        await kc.refresh_metadata([topic])
        tid = uuid.UUID(kc.metadata.topics[topic].topic_id)
        conn = BrokerConnection(cluster[leader].host, cluster[leader].port, "forger")
        await conn.connect(timeout=10)
        try:
            huge = (AcknowledgementBatch(first_offset=0, last_offset=2**62, acknowledge_types=(1,)),)
            part = FetchPartition(partition_index=0, acknowledgement_batches=huge)
            base = dict(group_id=f"forged-{topic}", member_id="m", max_wait=datetime.timedelta(0), max_records=10)
            t0 = time.monotonic()
            a = await conn.call(ShareAcknowledgeRequest(group_id="g", member_id="m", share_session_epoch=5), 10)
            assert a.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
            a = await conn.call(ShareFetchRequest(**base, topics=(FetchTopic(topic_id=tid, partitions=(part,)),)), 10)
            assert a.error_code == ErrorCode.INVALID_REQUEST  # acknowledgements in a session's first request
            opened = FetchTopic(topic_id=tid, partitions=(FetchPartition(partition_index=0),))
            a = await conn.call(ShareFetchRequest(**base, topics=(opened,)), 10)
            assert a.error_code == 0
            a = await conn.call(
                ShareFetchRequest(
                    **base, share_session_epoch=1, topics=(FetchTopic(topic_id=tid, partitions=(part,)),)
                ),
                10,
            )
            (row,) = a.responses[0].partitions
            assert row.acknowledge_error_code == ErrorCode.INVALID_RECORD_STATE  # 2**62 offsets: refused, not walked
            for mode in (2, 127, -1):  # share_acquire_mode: 0 batch-optimized, 1 record-limit, nothing else
                a = await conn.call(ShareFetchRequest(**base, share_session_epoch=2, share_acquire_mode=mode), 10)
                assert a.error_code == ErrorCode.INVALID_REQUEST, mode
            coordinator = None
            for _ in range(100):  # __consumer_offsets is made on the first FindCoordinator
                try:
                    coordinator = await find_coordinator(kc, f"forged-{topic}", KEY_TYPE_GROUP)
                    break
                except KafkaLiteError:
                    await asyncio.sleep(0.2)
            assert coordinator is not None
            hb = ShareGroupHeartbeatRequest(group_id=f"forged-{topic}", member_id="m", member_epoch=7)
            a = await (await kc.coordinator_connection(coordinator)).call(hb, 10)
            assert a.error_code == ErrorCode.UNKNOWN_MEMBER_ID
            assert time.monotonic() - t0 < 10
        finally:
            conn.close()
            await kc.close()

    asyncio.run(go())


def test_share_acquire_mode_record_limit_is_exact_and_batch_optimized_ends_on_a_batch(cluster):
    """KIP-1206: record-limit acquires max_records exactly; batch-optimized (the default) acquires to the end of
    the log batch the limit falls in, so the records answered are whole batches, each acquired whole."""
    import asyncio
    import datetime

    from net import batch as batch_fmt
    from net.connection import BrokerConnection
    from net.schema.share_fetch import FetchPartition, FetchTopic, ShareFetchRequest

    topic = _topic(cluster, 1)
    _produce(cluster, topic, [b"v"] * 200, 1, **{"linger.ms": 200})  # a few batches of many records
    leader = cluster.describe(topic)[0].leader

    async def fetch(member: str, mode: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        from client.cluster import KafkaLiteClient

        kc = KafkaLiteClient(cluster.bootstrap(), "mode", 10000, 60000)
        await kc.refresh_metadata([topic])
        tid = uuid.UUID(kc.metadata.topics[topic].topic_id)
        await kc.close()
        conn = BrokerConnection(cluster[leader].host, cluster[leader].port, "mode")
        await conn.connect(timeout=10)
        try:
            req = ShareFetchRequest(
                group_id=f"mode-{topic}",
                member_id=member,
                max_wait=datetime.timedelta(seconds=5),
                min_bytes=1,
                max_records=7,
                batch_size=7,
                share_acquire_mode=mode,
                topics=(FetchTopic(topic_id=tid, partitions=(FetchPartition(partition_index=0),)),),
            )
            (row,) = (await conn.call(req, 20)).responses[0].partitions
            acquired = [(a.first_offset, a.last_offset) for a in row.acquired_records]
            batches = [(h.base_offset, h.last_offset) for _, h in batch_fmt.iter_batches(row.records)]
            return acquired, batches
        finally:
            conn.close()

    acquired, _ = asyncio.run(fetch("exact", 1))
    assert sum(b - a + 1 for a, b in acquired) == 7, acquired
    acquired, batches = asyncio.run(fetch("whole", 0))  # the same group: the records after the first 7
    assert acquired and batches, (acquired, batches)
    first, last = acquired[0][0], acquired[-1][1]
    assert sum(b - a + 1 for a, b in acquired) > 7 or batches[-1][1] - batches[0][0] < 7, (acquired, batches)
    assert last == batches[-1][1], (acquired, batches)  # ends where a batch ends
    assert first == 7 and batches[0][0] <= first, (acquired, batches)
