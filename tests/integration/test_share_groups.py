"""Share groups (KIP-932, issue 29 §2) with confluent-kafka's ShareConsumer on one shared 3-broker cluster:
records shared among members with each delivered to one member at a time, redelivery after a lock times out or a
member leaves, rejected records never again, the delivery count limit, and the state surviving a SIGKILL of the
share-partition's leader."""

from __future__ import annotations

import datetime
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
from tests.waiting import wait_until

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
            f"group.share.min.record.lock.duration.ms={LOCK_MS}",  # Kafka's rule: min <= the broker's value
            "group.share.delivery.count.limit=3",
            # A member whose leave is lost (librdkafka's ShareConsumer close sends it once; lost in 2 of 2 loaded
            # CI runs on 28 November 2026) is removed at its session timeout: 15 s rather than Kafka's 45 s, with
            # heartbeats every 3 s (Kafka's 5 s of 45 s), so that _empty waits a third as long for it
            "group.share.session.timeout.ms=15000",
            "group.share.min.session.timeout.ms=15000",
            "group.share.heartbeat.interval.ms=3000",
            "group.share.min.heartbeat.interval.ms=3000",
            "offsets.topic.num.partitions=4",
            # Kafka's 50 partitions of __share_group_state, replicated three times on three brokers: what every
            # broker restart of this module recovers and every follower fetches, for a handful of groups
            "share.coordinator.state.topic.num.partitions=4",
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
        def both_in() -> bool:
            with cluster.admin() as a:
                members = a.describe_share_group(group).members
            return len(members) == 2 and all(any(t.partitions for t in m.assignment.topic_partitions) for m in members)

        wait_until(both_in, 30, "both members in the share group, each with its partitions")
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
        cluster.restore()


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
            # the member's heartbeats find the new coordinator, which loaded the group from __consumer_offsets:
            # it heartbeats on in its epoch with its partitions; the records produced after the kill all come
            got = _drain(c, 10, deadline_s=60)
            assert sorted(got) == sorted(after_values)
        finally:
            cluster.restore()
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


def test_a_read_committed_share_group_gets_committed_transactions_only_and_waits_for_open_ones(cluster):
    """share.isolation.level=read_committed (a group config): an aborted transaction's records are never
    delivered, an open one holds the group back at the last stable offset until it commits; a group left at
    read_uncommitted gets every record at once. The group's bounds are the broker's group.share.min/max.*."""
    topic = _topic(cluster, 1)
    committed_group, everything_group = f"rc-{topic}", f"ru-{topic}"
    with pytest.raises(Exception, match="not in \\[3000, 60000\\]"):
        _set_group_config(cluster, committed_group, "share.record.lock.duration.ms", "1000")
    with pytest.raises(Exception, match="INVALID_CONFIG|not one of"):
        _set_group_config(cluster, committed_group, "share.isolation.level", "read_dirty")
    _set_group_config(cluster, committed_group, "share.isolation.level", "read_committed")
    txn = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": f"t-{topic}"})
    txn.init_transactions(30)

    def transaction(values: list[bytes], end: str | None) -> None:
        txn.begin_transaction()
        for v in values:
            txn.produce(topic, value=v, partition=0)
        assert txn.flush(30) == 0
        if end == "commit":
            txn.commit_transaction(30)
        elif end == "abort":
            txn.abort_transaction(30)

    aborted, committed, still_open = [b"a0", b"a1", b"a2"], [b"c0", b"c1"], [b"o0", b"o1"]
    transaction(aborted, "abort")
    transaction(committed, "commit")
    transaction(still_open, None)
    reader = _consumer(cluster, committed_group, topic)
    everything = _consumer(cluster, everything_group, topic)
    try:
        assert sorted(_drain(everything, 7)) == sorted(aborted + committed + still_open)
        assert sorted(_drain(reader, 2)) == sorted(committed)
        assert _drain(reader, 1, deadline_s=3) == []  # the open transaction holds the group back
        txn.commit_transaction(30)
        assert sorted(_drain(reader, 2)) == sorted(still_open)
        assert _drain(reader, 1, deadline_s=2) == []  # and nothing aborted comes after
    finally:
        reader.close()
        everything.close()


def test_a_share_consumer_over_its_consumer_byte_rate_is_throttled(cluster):
    """consumer_byte_rate counts a share consumer's records as a consumer's (Kafka's fetch quota): ShareFetch answers
    carry throttle_time_ms and librdkafka's throttle_cb sees it; a client id without a quota is not throttled."""
    topic = _topic(cluster, 1)
    slow, free = f"slow-{topic}", f"free-{topic}"
    with cluster.admin() as a:
        # 300 KB read within the quota's 10 s minimum window (Kafka's Rate) is 30 KB/s against 20 KB/s: throttled
        # (30 - 20) / 20 x 11 s, about 6 s; a reading stretched by a busy machine over up to 15 s still exceeds it
        a.alter_client_quotas([("client-id", slow)], {"consumer_byte_rate": 20000.0})
    _produce(cluster, topic, [b"x" * 1024] * 300, 1)
    events: dict[str, list[float]] = {slow: [], free: []}

    def consume(client_id: str, group: str) -> int:
        """Every record; for the throttled client, polls on until its throttle_cb has been called too."""
        noted = events[client_id].append
        c = _consumer(
            cluster, group, topic, **{"client.id": client_id, "throttle_cb": lambda e: noted(e.throttle_time)}
        )
        got, end = 0, time.monotonic() + 30
        try:
            while time.monotonic() < end and not (got >= 300 and (client_id == free or events[client_id])):
                got += len(_poll(c, 0.5))
        finally:
            c.close()
        return got

    assert consume(free, f"gf-{topic}") == 300 and not any(t > 0 for t in events[free])
    assert consume(slow, f"gs-{topic}") == 300
    assert any(t > 0 for t in events[slow]), events[slow]


def test_our_share_consumer_shares_a_group_with_confluent_kafkas(cluster):
    from client import Admin
    from client import ShareConsumer as OurShareConsumer

    topic = _topic(cluster, 2)
    group = f"g-{topic}"
    theirs = _consumer(cluster, group, topic, **{"max.poll.records": "5"})
    ours = OurShareConsumer(cluster.bootstrap(), group, max_poll_records=5)
    ours.subscribe([topic])
    got: dict[str, list[bytes]] = {"theirs": [], "ours": []}
    sent: list[bytes] = []

    def poll_both() -> None:
        got["theirs"] += [m.value() for m in _poll(theirs, 0.2)]
        got["ours"] += [r.value for r in ours.poll(200)]

    try:
        # Both members in the group before any record exists: on a busy machine one client's join can take
        # seconds, and a member alone in the group rightly takes everything there is.
        with Admin(cluster.bootstrap()) as admin:
            deadline = time.monotonic() + 60
            while len(admin.describe_share_group(group).members) < 2:
                assert time.monotonic() < deadline, admin.describe_share_group(group)
                poll_both()
        # Then records in rounds, until each member has had some (a member that never gets one fails here).
        deadline = time.monotonic() + 60
        while not (got["theirs"] and got["ours"]) and time.monotonic() < deadline:
            values = [f"o{len(sent) + i}".encode() for i in range(10)]
            _produce(cluster, topic, values, 2)
            sent += values
            for _ in range(5):
                poll_both()
        deadline = time.monotonic() + 60
        while len(got["theirs"]) + len(got["ours"]) < len(sent) and time.monotonic() < deadline:
            poll_both()
        for _ in range(3):  # anything delivered twice would come now
            poll_both()
    finally:
        ours.close()
        theirs.close()
    counts = Counter(got["theirs"] + got["ours"])
    assert set(counts) == set(sent) and max(counts.values()) == 1
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


# --- offsets of an empty share group: reset, delete; the group deleted (Alter/DeleteShareGroupOffsets, DeleteGroups)


def _produce_at(cluster: ClusterHarness, topic: str, values: list[bytes], timestamp_ms: int) -> None:
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "acks": "all", "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v, partition=0, timestamp=timestamp_ms)
    assert p.flush(30) == 0


def _exactly(cluster: ClusterHarness, group: str, topic: str, want: list[bytes]) -> None:
    """A new member of the group gets exactly `want` (and nothing more within a second), then leaves."""
    c = _consumer(cluster, group, topic)
    try:
        got = _drain(c, len(want), deadline_s=30)
        got += _drain(c, 1, deadline_s=1.5)
        c.commit_sync(10)  # what it accepted is durable before it leaves
    finally:
        c.close()
    assert sorted(got) == sorted(want), (len(got), len(want))


def _empty(cluster: ClusterHarness, group: str) -> None:
    """Waits until the coordinator has the group without members (a closed member has left). A leave that does
    not arrive (librdkafka's ShareConsumer close sends it once; it was lost once in a loaded CI run) leaves the
    member to its session timeout, group.share.session.timeout.ms (15 s here, 45 s in Kafka), as in Kafka: waited
    for too."""
    with cluster.admin() as a:
        end = time.monotonic() + 60
        while a.describe_share_group(group).group_state != "Empty":
            assert time.monotonic() < end, "the share group did not become empty"
            time.sleep(0.2)


def _consumed_group(cluster: ClusterHarness, prefix: str, n: int) -> tuple[str, str, list[bytes]]:
    """A one-partition topic with `n` records, all consumed and accepted by a share group now empty."""
    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    values = [f"{prefix}{i}".encode() for i in range(n)]
    _produce(cluster, topic, values, 1)
    _exactly(cluster, group, topic, values)
    _empty(cluster, group)
    return topic, group, values


def _reset(cluster: ClusterHarness, group: str, topic: str, *how: str) -> subprocess.CompletedProcess:
    boot = ["--bootstrap-server", cluster.bootstrap()]
    return run("share_groups", *boot, "--reset-offsets", "--group", group, "--topic", topic, *how)


def _plan(cp: subprocess.CompletedProcess, group: str) -> list[list[str]]:
    assert cp.returncode == 0, cp.stderr
    lines = [ln.split() for ln in cp.stdout.splitlines() if ln.strip()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], cp.stdout
    return [ln[1:] for ln in lines[1:] if ln[0] == group]


def test_kl_share_groups_resets_an_empty_group_to_earliest_latest_and_a_datetime(cluster):
    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    base = int(time.time() * 1000) - 600_000
    early, late = [f"e{i}".encode() for i in range(5)], [f"l{i}".encode() for i in range(5)]
    _produce_at(cluster, topic, early, base)
    _produce_at(cluster, topic, late, base + 60_000)
    _exactly(cluster, group, topic, early + late)  # all accepted: the start offset is 10
    _empty(cluster, group)
    plan = _plan(_reset(cluster, group, topic, "--to-earliest"), group)  # --dry-run is the default
    assert plan == [[topic, "0", "0"]]
    with cluster.admin() as a:
        assert a.list_share_group_offsets(group) == {(topic, 0): 10}  # a plan only
    boot = ["--bootstrap-server", cluster.bootstrap()]
    every = run("share_groups", *boot, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest")
    assert _plan(every, group) == [[topic, "0", "0"]]  # the topics the group has offsets for
    assert _plan(_reset(cluster, group, topic, "--to-earliest", "--execute"), group) == [[topic, "0", "0"]]
    _exactly(cluster, group, topic, early + late)  # from offset 0 again, each record once
    _empty(cluster, group)
    assert _plan(_reset(cluster, group, f"{topic}:0", "--to-latest", "--execute"), group) == [[topic, "0", "10"]]
    more = [b"m0", b"m1", b"m2"]
    _produce_at(cluster, topic, more, base + 120_000)
    _exactly(cluster, group, topic, more)
    _empty(cluster, group)
    # Kafka's format, in UTC without a zone: half-way between the two batches' timestamps -> offset 5
    when = datetime.datetime.fromtimestamp((base + 30_000) / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    assert _plan(_reset(cluster, group, topic, "--to-datetime", when, "--execute"), group) == [[topic, "0", "5"]]
    _exactly(cluster, group, topic, late + more)


def test_a_reset_of_a_group_with_members_is_refused_and_changes_nothing(cluster):
    from client import ShareConsumer as OurShareConsumer
    from net.errors import ErrorCode, KafkaLiteError

    topic = _topic(cluster, 1)
    group = f"g-{topic}"
    _produce(cluster, topic, [f"n{i}".encode() for i in range(4)], 1)
    member = OurShareConsumer(cluster.bootstrap(), group)
    member.subscribe([topic])
    try:
        got: list = []
        end = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < end:
            got += member.poll(300)
        member.commit()
        refused = _reset(cluster, group, topic, "--to-earliest", "--execute")
        assert_one_line_error(refused, f"Share group '{group}' is not empty.")
        with cluster.admin() as a:
            with pytest.raises(KafkaLiteError) as e:  # the broker's own check, past the tool's
                a.alter_share_group_offsets(group, {(topic, 0): 0})
            assert e.value.code == ErrorCode.NON_EMPTY_GROUP
            with pytest.raises(KafkaLiteError) as e:
                a.delete_share_group_offsets(group, [topic])
            assert e.value.code == ErrorCode.NON_EMPTY_GROUP
            assert a.delete_share_groups([group])[group].code == ErrorCode.NON_EMPTY_GROUP
            assert a.list_share_group_offsets(group) == {(topic, 0): 4}
        assert member.poll(1000) == []  # nothing delivered again
    finally:
        member.close()


def test_deleted_offsets_and_a_deleted_group_start_again_at_share_auto_offset_reset(cluster):
    from confluent_kafka.admin import AdminClient

    topic, other = _topic(cluster, 2), _topic(cluster, 1)
    group = f"g-{topic}"
    values = [f"v{i}".encode() for i in range(6)]
    _produce(cluster, topic, values, 2)
    _produce(cluster, other, [b"o0", b"o1"], 1)
    c = ShareConsumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": group})
    c.subscribe([topic, other])
    try:
        assert sorted(_drain(c, 8)) == sorted(values + [b"o0", b"o1"])
        c.commit_sync(10)
    finally:
        c.close()
    _empty(cluster, group)
    boot = ["--bootstrap-server", cluster.bootstrap()]
    deleted = run("share_groups", *boot, "--delete-offsets", "--group", group, "--topic", topic)
    assert deleted.returncode == 0, deleted.stderr
    assert [ln.split() for ln in deleted.stdout.splitlines() if ln.strip()] == [
        ["TOPIC", "STATUS"],
        [topic, "Successful"],
    ]
    with cluster.admin() as a:
        assert a.list_share_group_offsets(group) == {(other, 0): 2}  # the other topic's state is kept
    again = run("share_groups", *boot, "--delete-offsets", "--group", group, "--topic", topic)
    assert again.returncode != 0 and "There is no offset information to delete." in again.stdout
    _exactly(cluster, group, topic, values)  # share.auto.offset.reset=earliest: every record again
    _empty(cluster, group)
    listed = run("share_groups", *boot, "--delete", "--group", group)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == f"Deletion of requested share groups ('{group}') was successful."
    with cluster.admin() as a:
        assert a.describe_share_group(group).group_state == "Dead"
    gone = run("share_groups", *boot, "--delete", "--group", group)
    assert_one_line_error(gone, f"Group '{group}' is not a share group.")
    _exactly(cluster, group, other, [b"o0", b"o1"])  # its state went with the group
    _exactly(cluster, group, topic, values)
    _empty(cluster, group)
    # confluent-kafka's AdminClient.delete_consumer_groups is DeleteGroups: it deletes a share group too
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    admin.delete_consumer_groups([group])[group].result(15)
    _exactly(cluster, group, topic, values)


def test_a_reset_survives_a_sigkill_of_the_share_coordinator(cluster):
    from broker.share.state_records import SHARE_STATE_TOPIC, partition_for

    topic, group, values = _consumed_group(cluster, "s", 8)
    assert _plan(_reset(cluster, group, f"{topic}:0", "--to-earliest", "--execute"), group) == [[topic, "0", "0"]]
    with cluster.admin() as a:
        topic_id = next(t.topic_id for t in a.describe_topics([topic]))
        n = len(a.describe_topics([SHARE_STATE_TOPIC])[0].partitions)
    state_partition = partition_for((group, topic_id.replace("-", ""), 0), n)
    victim = next(p.leader for p in cluster.describe(SHARE_STATE_TOPIC) if p.partition == state_partition)
    cluster.kill(victim)
    try:
        others = [i for i in cluster.brokers if i != victim]
        end = time.monotonic() + 30
        while not any(p.partition == state_partition and p.leader in others
                      for p in cluster.describe(SHARE_STATE_TOPIC, others)):  # fmt: skip
            assert time.monotonic() < end, "no new share coordinator"
            time.sleep(0.2)
        c = ShareConsumer({"bootstrap.servers": cluster.kafka_bootstrap(others), "group.id": group})
        c.subscribe([topic])
        try:
            got = _drain(c, len(values), deadline_s=60)
            got += _drain(c, 1, deadline_s=1.5)
        finally:
            c.close()
        # the new coordinator loaded the reset state: every record again, each once (without it: nothing)
        assert sorted(got) == sorted(values)
    finally:
        cluster.restore()


def _killed_coordinator(cluster: ClusterHarness, group: str) -> tuple[int, list[int]]:
    """SIGKILLs the group's coordinator (the leader of its __consumer_offsets partition) and waits until another
    broker coordinates the group; (the victim, the others). The test brings the victim back with
    `cluster.restore()`, which also puts every leader back on its preferred replica: else the controller's own
    leader rebalance (5 s after a controller change, as Kafka's) would move coordinators under a later test, and a
    share consumer's leave sent to the old one is lost (the member then waits out its session timeout)."""
    from net.errors import KafkaLiteError

    victim = _group_coordinator(cluster, group)
    cluster.kill(victim)
    others = [i for i in cluster.brokers if i != victim]
    end = time.monotonic() + 60
    while True:
        try:
            with cluster.admin(others, timeout_ms=5000) as a:
                a.describe_share_group(group)
            return victim, others
        except (KafkaLiteError, OSError, TimeoutError):
            assert time.monotonic() < end, "no new group coordinator"
            time.sleep(0.3)


def _listed(cluster: ClusterHarness, group: str, ids: list[int]) -> list[list[str]]:
    """kl-share-groups --list --state: the group's rows (ListGroups of every running broker)."""
    cp = run("share_groups", "--bootstrap-server", cluster.bootstrap(ids), "--list", "--state")
    assert cp.returncode == 0, cp.stderr
    return [ln.split() for ln in cp.stdout.splitlines() if ln.split()[:1] == [group]]


def test_a_share_group_survives_sigkills_of_its_group_coordinator_and_a_deleted_one_stays_deleted(cluster):
    """Issue 29: the share group lives in __consumer_offsets (Kafka's ShareGroup* coordinator records), so a new
    coordinator lists and describes it, its member heartbeats on in its member epoch, its offsets can be reset
    once it is empty, and once deleted it does not come back with the next coordinator."""
    topic = _topic(cluster, 2)
    group = f"g-{topic}"
    values = [f"d{i}".encode() for i in range(10)]
    _produce(cluster, topic, values, 2)
    c = _consumer(cluster, group, topic, **{"client.id": "survivor"})
    try:
        assert sorted(_drain(c, 10)) == sorted(values)
        c.commit_sync(10)  # every record accepted, durable at the share coordinator
        with cluster.admin() as a:
            before = a.describe_share_group(group)
        assert before.group_state == "Stable" and len(before.members) == 1
        victim, others = _killed_coordinator(cluster, group)
        try:
            with cluster.admin(others) as a:
                after = a.describe_share_group(group)
            # the new coordinator loaded the group: its epoch, the member, its epoch and assignment
            assert (after.group_state, after.group_epoch) == ("Stable", before.group_epoch)
            [(m0, m1)] = zip(before.members, after.members)
            assert (m1.member_id, m1.member_epoch, m1.client_id) == (m0.member_id, m0.member_epoch, "survivor")
            assert sorted(p for t in m1.assignment.topic_partitions for p in t.partitions) == [0, 1]
            assert _listed(cluster, group, others) == [[group, "Stable"]]
            # the member heartbeats on at the new coordinator: records produced now come, the accepted ones never
            more = [f"e{i}".encode() for i in range(6)]
            _produce(cluster, topic, more, 2)
            got = _drain(c, 6, deadline_s=60)
            got += _drain(c, 1, deadline_s=1.5)
            assert sorted(got) == sorted(more)
            c.commit_sync(10)
            with cluster.admin(others) as a:
                still = a.describe_share_group(group)
            assert [m.member_id for m in still.members] == [m0.member_id]  # not fenced, not joined again
        finally:
            cluster.restore()
    finally:
        c.close()
    _empty(cluster, group)
    victim, others = _killed_coordinator(cluster, group)
    try:
        assert _listed(cluster, group, others) == [[group, "Empty"]]
        boot = ["--bootstrap-server", cluster.bootstrap(others)]
        described = run("share_groups", *boot, "--describe", "--group", group)
        assert described.returncode == 0, described.stderr
        rows = sorted(ln.split()[2:4] for ln in described.stdout.splitlines() if ln.startswith(group))
        assert rows == [["0", "8"], ["1", "8"]]  # its initialized topic survived: both partitions consumed
        reset = run("share_groups", *boot, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
        assert _plan(reset, group) == [[topic, "0", "0"], [topic, "1", "0"]]
        executed = run(
            "share_groups", *boot, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute"
        )
        assert _plan(executed, group) == [[topic, "0", "0"], [topic, "1", "0"]]
        with cluster.admin(others) as a:
            assert a.list_share_group_offsets(group) == {(topic, 0): 0, (topic, 1): 0}
        deleted = run("share_groups", *boot, "--delete", "--group", group)
        assert deleted.returncode == 0, deleted.stderr
        assert _listed(cluster, group, others) == []
    finally:
        cluster.restore()
    # the deletion was written: the next coordinator does not load the group again
    victim, others = _killed_coordinator(cluster, group)
    try:
        assert _listed(cluster, group, others) == []
        with cluster.admin(others) as a:
            assert a.describe_share_group(group).group_state == "Dead"
        gone = run("share_groups", "--bootstrap-server", cluster.bootstrap(others), "--delete", "--group", group)
        assert_one_line_error(gone, f"Group '{group}' is not a share group.")
    finally:
        cluster.restore()


def test_forged_share_offset_changes_get_kafkas_errors(cluster):
    """Bad values through our admin (the native listener) and a broker-only api on the client listener."""
    import asyncio

    from net.connection import BrokerConnection
    from net.errors import ErrorCode, KafkaLiteError
    from net.schema.alter_share_group_offsets import AlterShareGroupOffsetsRequest
    from net.schema.delete_share_group_offsets import DeleteShareGroupOffsetsRequest
    from net.schema.initialize_share_group_state import (
        InitializeShareGroupStateRequest,
        InitializeStateData,
        PartitionData,
    )

    topic, group, _ = _consumed_group(cluster, "f", 2)
    with cluster.admin() as a:
        answer = a.alter_share_group_offsets(
            group, {(topic, 0): -5, (topic, -1): 0, (topic, 7): 0, ("no-such-topic", 0): 0}
        )
        assert {tp: e.code if e else None for tp, e in answer.items()} == {
            (topic, 0): ErrorCode.INVALID_REQUEST,  # neither an offset nor -1
            (topic, -1): ErrorCode.INVALID_REQUEST,  # a negative partition (Kafka's share coordinator)
            (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        with pytest.raises(KafkaLiteError) as e:
            a.alter_share_group_offsets("no-such-share-group", {(topic, 0): 0})
        assert e.value.code == ErrorCode.GROUP_ID_NOT_FOUND
        with pytest.raises(KafkaLiteError) as e:
            a.delete_share_group_offsets("no-such-share-group", [topic])
        assert e.value.code == ErrorCode.GROUP_ID_NOT_FOUND
        assert a.delete_share_group_offsets(group, ["no-such-topic"])["no-such-topic"].code == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert a.list_share_group_offsets(group) == {(topic, 0): 2}  # nothing changed
        topic_id = uuid.UUID(next(t.topic_id for t in a.describe_topics([topic])))

    async def raw(req: object) -> object:
        broker = next(iter(cluster.brokers))
        conn = BrokerConnection(cluster[broker].host, cluster[broker].port, "forger")
        await conn.connect(timeout=10)
        try:
            return await conn.call(req, 10)
        finally:
            conn.close()

    # an empty group id (our admin refuses it before sending): Kafka's INVALID_GROUP_ID, from any broker
    no_id = asyncio.run(raw(AlterShareGroupOffsetsRequest(group_id="", topics=())))
    assert no_id.error_code == ErrorCode.INVALID_GROUP_ID
    no_id = asyncio.run(raw(DeleteShareGroupOffsetsRequest(group_id="", topics=())))
    assert no_id.error_code == ErrorCode.INVALID_GROUP_ID
    forged = InitializeShareGroupStateRequest(
        group_id=group, topics=(InitializeStateData(topic_id=topic_id, partitions=(PartitionData(start_offset=0),)),)
    )
    with pytest.raises(KafkaLiteError) as e:  # brokers only: served on the inter-broker listener alone
        asyncio.run(raw(forged))
    assert e.value.code == ErrorCode.INVALID_REQUEST
    with cluster.admin() as a:
        assert a.list_share_group_offsets(group) == {(topic, 0): 2}


def _kafka_call(host: str, port: int, api: int, version: int, body: dict) -> dict:
    """One request on a broker's Kafka listener (Kafka's own framing), its answer as plain data."""
    import socket

    from kio.index import load_response_schema
    from kio.serial import entity_reader

    from broker.network.kafka.entities import plain
    from tests.integration.test_kafka_protocol_errors import frame, read_frame

    with socket.create_connection((host, port), timeout=15) as s:
        s.sendall(frame(api, version, 1, body))
        raw = read_frame(s)
    entity, _ = entity_reader(load_response_schema(api, version))(raw, 5)  # flexible: a tagged header
    return plain(entity)


def test_share_group_offsets_altered_and_deleted_over_the_kafka_listener(cluster):
    """AlterShareGroupOffsets v0 and DeleteShareGroupOffsets v0 as a Kafka client sends them (Kafka's Admin)."""
    topic, group, values = _consumed_group(cluster, "k", 6)
    alter = {
        "group_id": group,
        "topics": [{"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 2}]}],
    }
    answers = {i: _kafka_call(b.host, b.kafka_port, 91, 0, alter) for i, b in cluster.brokers.items()}
    at_coordinator = [a for a in answers.values() if a["error_code"] != 16]  # the others: NOT_COORDINATOR
    assert len(at_coordinator) == 1, answers
    (answer,) = at_coordinator
    assert answer["error_code"] == 0
    assert [(t["topic_name"], [p["error_code"] for p in t["partitions"]]) for t in answer["responses"]] == [
        (topic, [0])
    ]
    _exactly(cluster, group, topic, values[2:])
    _empty(cluster, group)
    coordinator = next(cluster.brokers[i] for i, a in answers.items() if a is answer)
    deleted = _kafka_call(
        coordinator.host, coordinator.kafka_port, 92, 0, {"group_id": group, "topics": [{"topic_name": topic}]}
    )
    assert deleted["error_code"] == 0 and [(t["topic_name"], t["error_code"]) for t in deleted["responses"]] == [
        (topic, 0)
    ]
    _exactly(cluster, group, topic, values)  # share.auto.offset.reset=earliest


def test_kl_share_groups_reset_and_delete_usage_errors_are_one_line(cluster):
    topic = _topic(cluster, 1)
    boot = ["--bootstrap-server", cluster.bootstrap()]
    reset = ["--reset-offsets", "--group", f"g-{topic}"]
    for args, needle in [
        ([*reset, "--topic", topic], "--to-datetime, --to-earliest, --to-latest"),
        ([*reset, "--to-earliest"], "--all-topics, --topic"),
        ([*reset, "--topic", topic, "--to-latest", "--execute", "--dry-run"], "only accepts one of --execute and"),
        ([*reset, "--topic", topic, "--to-datetime", "yesterday"], "--to-datetime: 'yesterday'"),
        ([*reset, "--topic", f"{topic}:0,5", "--to-earliest"], f'The partitions "{topic}-5" do not exist'),
        (["--delete-offsets", "--group", "g"], "--delete-offsets takes the following options: --group, --topic"),
        (["--list", "--delete"], "Command must include exactly one action"),
        (["--delete", "--group", "no-such-share-group"], "Group 'no-such-share-group' is not a share group."),
    ]:
        assert_one_line_error(run("share_groups", *boot, *args), needle)


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
