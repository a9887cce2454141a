"""Replication throttles (issue 27 §2, KIP-73) on a 3-broker cluster.

A partition of a few MB moved with `kl-reassign-partitions --throttle` takes at least what its bytes over the
rate allow (Kafka's quota: a first burst of rate x (samples - 1) x sample, then the rate, overshot by at most a
fetch per window), the same move unthrottled is much faster, and an acks=all producer on another topic is not
slowed meanwhile. Replicas in the ISR are never throttled: acks=all to a topic with every replica throttled at
1 kB/s is not held back. `--verify` removes the throttles; DescribeConfigs shows the dynamic broker configs (both
listeners, confluent-kafka included); bad values get Kafka's codes."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from client.admin import NewTopic
from client.cli.configs import main as kl_configs
from client.cli.reassign_partitions import main as kl_reassign
from client.sync import Producer
from client.topic_partition import TopicPartition
from net.errors import ErrorCode, KafkaLiteError
from tests.integration.cluster_harness import ClusterHarness, wait_until

pytestmark = pytest.mark.timeout(240)

LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
WINDOWS, SAMPLE_S = 2, 1  # replication.quota.window.num / .size.seconds: a short window keeps the test short
FETCH_MAX = 262144  # replica.fetch.max.bytes: how far one fetch may take a throttle over its rate
RATE = 1_000_000  # bytes/s
MOVED = 5_000_000  # payload bytes in the moving partitions (the log holds a little more: batch headers)
DYNAMIC_BROKER_CONFIG = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(
        tmp_path_factory.mktemp("throttles"),
        3,
        overrides=[
            f"replication.quota.window.num={WINDOWS}",
            f"replication.quota.window.size.seconds={SAMPLE_S}",
            f"replica.fetch.max.bytes={FETCH_MAX}",
        ],
    ).running() as h:
        yield h


def fill(h: ClusterHarness, topic: str, payload: int) -> None:
    """`payload` bytes of incompressible records into partition 0 of `topic`."""
    size = 10_000
    with Producer(h.bootstrap(), acks="1", linger_ms=5) as p:
        for _ in range(payload // size):
            p.send(topic, os.urandom(size), partition=0)
        p.flush()


def create_on(h: ClusterHarness, topic: str, replicas: list[int], configs: dict[str, str] | None = None) -> None:
    with h.admin() as a:
        a.create_topics([NewTopic(topic, configs=configs, replica_assignments={0: replicas})])
    h.wait_full_isr(topic, 1, len(replicas))


def plan(tmp_path, topic: str, replicas: list[int]) -> str:
    path = tmp_path / f"{topic}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}))
    return str(path)


def moved(h: ClusterHarness, topic: str, target: list[int]) -> bool:
    with h.admin() as a:
        ongoing = a.list_partition_reassignments([TopicPartition(topic, 0)])
    return not ongoing and list(h.describe(topic)[0].replicas) == target


def timed_move(h: ClusterHarness, tmp_path, topic: str, target: list[int], *throttle: str) -> float:
    boot = ["--bootstrap-server", h.bootstrap()]
    start = time.monotonic()
    out = CliRunner().invoke(kl_reassign, [*boot, "--reassignment-json-file", plan(tmp_path, topic, target),
                                           "--execute", *throttle])  # fmt: skip
    assert out.exit_code == 0, out.output
    wait_until(lambda: moved(h, topic, target), 120, f"{topic} moved to {target}", interval=0.05)
    return time.monotonic() - start


def acks_all_latencies(h: ClusterHarness, topic: str, n: int) -> list[float]:
    took = []
    with Producer(h.bootstrap(), acks="all") as p:
        for i in range(n):
            t = time.monotonic()
            p.send(topic, b"steady-%d" % i, partition=i % 3)
            p.flush()
            took.append(time.monotonic() - t)
    return took


def test_a_throttled_move_takes_its_bytes_over_the_rate_and_acks_all_elsewhere_is_not_slowed(cluster, tmp_path):
    create_on(cluster, "unthrottled", [1])
    create_on(cluster, "throttled", [1])
    cluster.create_topic("steady", 3, 3)
    fill(cluster, "unthrottled", MOVED)
    fill(cluster, "throttled", MOVED)
    acks_all_latencies(cluster, "steady", 3)  # warm: metadata and connections

    fast = timed_move(cluster, tmp_path, "unthrottled", [2])
    try:
        throttled_move(cluster, tmp_path, fast)
    finally:  # whatever failed, the other tests run without these throttles
        with cluster.admin() as a:
            for b in cluster.brokers:
                a.alter_broker_configs(b, {LEADER_RATE: None, FOLLOWER_RATE: None})
            a.alter_configs("throttled", {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None})


def throttled_move(cluster: ClusterHarness, tmp_path, fast: float) -> None:
    boot = ["--bootstrap-server", cluster.bootstrap()]
    start = time.monotonic()
    out = CliRunner().invoke(kl_reassign, [*boot, "--reassignment-json-file", plan(tmp_path, "throttled", [2]),
                                           "--execute", "--throttle", str(RATE)])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "Warning: You must run --verify periodically" in out.output
    assert f"The inter-broker throttle limit was set to {RATE} B/s" in out.output
    # meanwhile: acks=all to a topic without throttles, every partition on the brokers of the move
    latencies = acks_all_latencies(cluster, "steady", 15)
    still_moving = not moved(cluster, "throttled", [2])
    # the throttles, as kafka-reassign-partitions.sh sets them, while it runs
    with cluster.admin() as a:
        configs = a.describe_configs("throttled")
        rates = {b: a.describe_broker_configs(b) for b in (1, 2)}
    wait_until(lambda: moved(cluster, "throttled", [2]), 120, "throttled moved to [2]", interval=0.05)
    slow = time.monotonic() - start

    assert still_moving, "the acks=all produce ran while the throttled move was in progress"
    assert configs[LEADER_REPLICAS][0] == "0:1" and configs[FOLLOWER_REPLICAS][0] == "0:2"
    for b in (1, 2):
        assert rates[b][LEADER_RATE] == (str(RATE), DYNAMIC_BROKER_CONFIG), rates[b]
        assert rates[b][FOLLOWER_RATE] == (str(RATE), DYNAMIC_BROKER_CONFIG), rates[b]
    # Kafka's quota lets rate x (samples - 1) x sample through at once, and a fetch may take it over the rate by
    # one fetch's worth, at most once per window of samples: no faster than this can MOVED bytes move.
    burst = RATE * (WINDOWS - 1) * SAMPLE_S + FETCH_MAX
    most_per_second = RATE + FETCH_MAX / (WINDOWS * SAMPLE_S)
    lower = (MOVED - burst) / most_per_second
    assert slow >= lower, (slow, lower)
    assert fast * 2 < slow, (fast, slow)
    # not held back for anything like the time the throttle holds the moving partition
    assert max(latencies) < lower / 2, (latencies, lower)

    # --verify, once done, removes every throttle (Kafka's lines)
    out = CliRunner().invoke(kl_reassign, [*boot, "--reassignment-json-file", plan(tmp_path, "throttled", [2]),
                                           "--verify"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "Reassignment of partition throttled-0 is completed." in out.output
    assert "Clearing broker-level throttles on brokers 1,2,3" in out.output
    assert "Clearing topic-level throttles on topic throttled" in out.output
    with cluster.admin() as a:
        configs = a.describe_configs("throttled")
        assert configs[LEADER_REPLICAS] == ("", True) and configs[FOLLOWER_REPLICAS] == ("", True)
        for b in (1, 2, 3):
            rates = a.describe_broker_configs(b)
            assert rates[LEADER_RATE][1] != DYNAMIC_BROKER_CONFIG and rates[FOLLOWER_RATE][1] != DYNAMIC_BROKER_CONFIG


def test_in_sync_replicas_are_never_throttled(cluster):
    """Every replica of the topic throttled, 1 kB/s on every broker (the cluster default): acks=all of 300 kB
    (five minutes at that rate) is not held back, because its followers are in the ISR."""
    configs = {LEADER_REPLICAS: "*", FOLLOWER_REPLICAS: "*"}
    cluster.create_topic("insync", 1, 3, configs)
    with cluster.admin() as a:
        a.alter_broker_configs(None, {LEADER_RATE: "1000", FOLLOWER_RATE: "1000"})
        assert a.describe_broker_configs(None) == {LEADER_RATE: ("1000", 3), FOLLOWER_RATE: ("1000", 3)}
        assert a.describe_broker_configs(3)[LEADER_RATE] == ("1000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    try:
        start = time.monotonic()
        with Producer(cluster.bootstrap(), acks="all", linger_ms=5) as p:
            for _ in range(300):
                p.send("insync", os.urandom(1000), partition=0)
            p.flush(timeout=30)
        assert time.monotonic() - start < 30
        assert cluster.high_watermarks("insync", 1)[0] == 300
    finally:
        with cluster.admin() as a:
            a.alter_broker_configs(None, {LEADER_RATE: None, FOLLOWER_RATE: None})


def test_kl_configs_sets_describes_and_deletes_a_broker_throttle(cluster):
    boot = ["--bootstrap-server", cluster.bootstrap()]
    run = CliRunner()
    out = run.invoke(kl_configs, [*boot, "--entity-type", "brokers", "--entity-name", "2", "--alter",
                                  "--add-config", f"{LEADER_RATE}=500000,{FOLLOWER_RATE}=600000"])  # fmt: skip
    assert out.exit_code == 0 and out.output.strip() == "Completed updating config for broker 2.", out.output
    out = run.invoke(kl_configs, [*boot, "--entity-type", "brokers", "--entity-name", "2", "--describe"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        "Dynamic configs for broker 2 are:",
        f"  {FOLLOWER_RATE}=600000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{FOLLOWER_RATE}=600000}}",
        f"  {LEADER_RATE}=500000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{LEADER_RATE}=500000}}",
    ]
    out = run.invoke(kl_configs, [*boot, "--entity-type", "brokers", "--describe"])  # every broker, the default
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    heads = [n for n, line in enumerate(lines) if not line.startswith("  ")]
    assert [lines[n] for n in heads] == [f"Dynamic configs for broker {b} are:" for b in (1, 2, 3)] + [
        "Default configs for brokers in the cluster are:"
    ]
    assert lines[heads[1] + 1].startswith(f"  {FOLLOWER_RATE}=600000") and heads[2] == heads[1] + 3
    out = run.invoke(kl_configs, [*boot, "--entity-type", "brokers", "--entity-name", "2", "--alter",
                                  "--delete-config", f"{LEADER_RATE},{FOLLOWER_RATE}"])  # fmt: skip
    assert out.exit_code == 0, out.output
    out = run.invoke(kl_configs, [*boot, "--entity-type", "brokers", "--entity-name", "2", "--describe"])
    assert out.output.splitlines() == ["Dynamic configs for broker 2 are:"]
    out = run.invoke(kl_configs, [*boot, "--entity-type", "brokers", "--entity-name", "2", "--alter",
                                  "--add-config", f"{LEADER_RATE}=-1"])  # fmt: skip
    assert out.exit_code != 0 and "INVALID_REQUEST" in out.output and "Traceback" not in out.output


def test_bad_throttle_configs_get_kafkas_codes(cluster):
    with cluster.admin() as a:
        before = a.describe_broker_configs(1)
        for broker, changes, code in [
            (1, {LEADER_RATE: "-5"}, ErrorCode.INVALID_REQUEST),  # Kafka's code for a bad broker value
            (1, {LEADER_RATE: "fast"}, ErrorCode.INVALID_REQUEST),
            (1, {"log.dirs": "/elsewhere"}, ErrorCode.INVALID_REQUEST),  # static: not dynamically updatable
        ]:
            with pytest.raises(KafkaLiteError) as e:
                a.alter_broker_configs(broker, changes)
            assert e.value.code == code, (changes, e.value)
        cluster.create_topic("lists", 1, 1)
        for bad in ("0-1", "0:1,x", "*,0:1", "0:"):
            with pytest.raises(KafkaLiteError) as e:
                a.alter_configs("lists", {LEADER_REPLICAS: bad})
            assert e.value.code == ErrorCode.INVALID_CONFIG, bad
        assert a.describe_broker_configs(1) == before  # nothing was stored
    assert all(b.alive for b in cluster.brokers.values())


def test_confluent_kafka_alters_and_describes_a_broker_throttle(cluster):
    ck = pytest.importorskip("confluent_kafka.admin")
    admin = ck.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    resource = ck.ConfigResource(
        ck.ResourceType.BROKER,
        "3",
        incremental_configs=[ck.ConfigEntry(LEADER_RATE, "123456", incremental_operation=ck.AlterConfigOpType.SET)],
    )
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=20)
    described = admin.describe_configs([ck.ConfigResource(ck.ResourceType.BROKER, "3")])
    entries = next(iter(described.values())).result(timeout=20)
    entry = entries[LEADER_RATE]
    dynamic = ck.ConfigSource.DYNAMIC_BROKER_CONFIG
    assert entry.value == "123456" and entry.source in (dynamic, dynamic.value), entry
    assert not entry.is_read_only and entries["log.dirs"].is_read_only
    bad = ck.ConfigResource(
        ck.ResourceType.BROKER,
        "3",
        incremental_configs=[ck.ConfigEntry(LEADER_RATE, "-1", incremental_operation=ck.AlterConfigOpType.SET)],
    )
    with pytest.raises(Exception) as e:
        for fut in admin.incremental_alter_configs([bad]).values():
            fut.result(timeout=20)
    assert "INVALID_REQUEST" in str(e.value) or "InvalidRequest" in str(e.value), e.value
    delete = ck.ConfigResource(
        ck.ResourceType.BROKER,
        "3",
        incremental_configs=[ck.ConfigEntry(LEADER_RATE, None, incremental_operation=ck.AlterConfigOpType.DELETE)],
    )
    for fut in admin.incremental_alter_configs([delete]).values():
        fut.result(timeout=20)
    with cluster.admin() as a:
        assert a.describe_broker_configs(3)[LEADER_RATE][1] == 5  # DEFAULT_CONFIG again
