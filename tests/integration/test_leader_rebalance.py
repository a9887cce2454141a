"""Leaders go back home (issue 24 §3): after a broker restarts, the controller's periodic check moves its
leaderships back to it (auto.leader.rebalance.enable), in both coordination modes; with the check off,
kl-leader-election and a Kafka client's ElectLeaders move them at once, and bad requests get Kafka's
per-partition errors without hurting the brokers. The authorization test is in test_security.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from client.cli.leader_election import main
from client.topic_partition import TopicPartition
from net.errors import ErrorCode
from net.protocol import ApiKey, ElectionType
from tests.conftest import ROOT
from tests.integration.cluster_harness import ClusterHarness, wait_until

pytestmark = pytest.mark.timeout(180)

TOPICS = {"orders": 6, "payments": 3}
CHECK_INTERVAL_S = 1  # leader.imbalance.check.interval.seconds, shortened from Kafka's 300


def leaders(cluster: ClusterHarness, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, preferred replica)"""
    return {p.partition: (p.leader, p.replicas[0]) for p in cluster.describe(topic)}


def at_home(cluster: ClusterHarness) -> bool:
    return all(lead == pref for t in TOPICS for lead, pref in leaders(cluster, t).values())


def led_by(cluster: ClusterHarness, broker: int) -> int:
    return sum(1 for t in TOPICS for lead, _ in leaders(cluster, t).values() if lead == broker)


def bounce(cluster: ClusterHarness, broker: int) -> float:
    """SIGKILL `broker`, see its leaderships move away, start it again and wait until it is back in every ISR
    (the condition for leading again); returns the moment it was started again (monotonic)."""
    assert led_by(cluster, broker) > 0
    cluster.kill(broker)
    wait_until(lambda: led_by(cluster, broker) == 0, 30, f"leaders moved away from broker {broker}")
    restarted = time.monotonic()
    cluster.restart(broker)
    for t in TOPICS:
        cluster.wait_isr_contains(t, broker)
    return restarted


def make_cluster(tmp_path, coordination: str, auto: bool) -> ClusterHarness:
    overrides = [
        f"auto.leader.rebalance.enable={str(auto).lower()}",
        f"leader.imbalance.check.interval.seconds={CHECK_INTERVAL_S}",
    ]
    h = ClusterHarness(tmp_path, 3, overrides, coordination)
    h.start()
    for t, n in TOPICS.items():
        h.create_topic(t, n, 3)
    assert at_home(h)  # creation makes every first replica the leader
    return h


@pytest.mark.parametrize("coordination", ["custom", "zookeeper"])
def test_leaders_return_to_the_restarted_broker_within_the_check_interval(tmp_path, coordination, request):
    if coordination == "zookeeper":
        from tests.integration.zk_support import require_zookeeper

        require_zookeeper()
    cluster = make_cluster(tmp_path, coordination, auto=True)
    try:
        restarted = bounce(cluster, 2)
        # Back in every ISR: the next check (at most one interval away) elects broker 2's preferred partitions
        # back; the slack is for the commit and for every broker's metadata to show it on a loaded machine.
        wait_until(lambda: at_home(cluster), CHECK_INTERVAL_S + 10, "every partition led by its preferred replica")
        took = time.monotonic() - restarted
        print(f"{coordination}: leaders back home {took:.2f} s after broker 2 was started again")
        assert led_by(cluster, 2) == sum(1 for t in TOPICS for _, pref in leaders(cluster, t).values() if pref == 2)
        log = "".join(cluster[b].logs() for b in cluster.brokers)
        assert "leader imbalance above 10%: electing the preferred replicas of" in log
    except BaseException:
        print(cluster.dump_logs())
        raise
    finally:
        cluster.cleanup()


@pytest.fixture(scope="module")
def manual(tmp_path_factory):
    """Auto rebalance off: elections only when asked for."""
    h = make_cluster(tmp_path_factory.mktemp("manual"), "custom", auto=False)
    try:
        yield h
    finally:
        h.cleanup()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "client.cli.leader_election", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )


def test_kl_leader_election_moves_leaders_home_at_once(manual):
    bounce(manual, 3)
    time.sleep(CHECK_INTERVAL_S * 3)  # three check intervals: with the rebalance off, nothing moves
    assert led_by(manual, 3) == 0 and not at_home(manual)
    away = sorted(f"{t}-{p}" for t in TOPICS for p, (lead, pref) in leaders(manual, t).items() if lead != pref)
    r = cli("--bootstrap-server", manual.bootstrap(), "--election-type", "PREFERRED", "--all-topic-partitions")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {', '.join(away)}"
    ]
    # committed before the answer; every broker's metadata shows it a moment later
    wait_until(lambda: at_home(manual), 5, "every partition led by its preferred replica")
    r = cli(
        "--bootstrap-server",
        manual.bootstrap(),
        "--election-type",
        "preferred",
        "--topic",
        "orders",
        "--partition",
        "0",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["Valid replica already elected for partitions orders-0"]


def test_bad_elections_get_kafkas_per_partition_errors_and_the_brokers_stay_up(manual, tmp_path):
    bs = ["--bootstrap-server", manual.bootstrap()]
    plan = tmp_path / "election.json"
    plan.write_text(
        json.dumps({"partitions": [{"topic": "orders", "partition": 1}, {"topic": "orders", "partition": 99},
                                   {"topic": "nope", "partition": 0}, {"topic": "orders", "partition": -1}]})
    )  # fmt: skip
    r = cli(*bs, "--election-type", "PREFERRED", "--path-to-json-file", str(plan))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["Error: 3 replica(s) could not be elected"]
    out = r.stdout.splitlines()
    assert out[0] == "Valid replica already elected for partitions orders-1"
    assert out[1].startswith(
        "Error completing leader election (PREFERRED) for partition: nope-0: UNKNOWN_TOPIC_OR_PARTITION"
    )
    assert out[2].startswith("Error completing leader election (PREFERRED) for partition: orders--1: UNKNOWN_TOPIC")
    assert out[3].startswith("Error completing leader election (PREFERRED) for partition: orders-99: UNKNOWN_TOPIC")
    # UNCLEAN on a partition that has a leader: nothing to do
    r = cli(*bs, "--election-type", "UNCLEAN", "--topic", "payments", "--partition", "2")
    assert r.returncode == 0 and r.stdout.splitlines() == ["Valid replica already elected for partitions payments-2"]
    # usage errors and bad plan files: one line, no request sent (in-process: no broker is needed for them)
    duplicated = tmp_path / "twice.json"
    duplicated.write_text('{"partitions": [{"topic": "orders", "partition": 1}, {"topic": "orders", "partition": 1}]}')
    for args, needle in [
        (["--election-type", "PREFERRED"], "One and only one of the following options is required"),
        (["--election-type", "PREFERRED", "--topic", "orders"], "Missing required option(s): partition"),
        (["--election-type", "PREFERRED", "--all-topic-partitions", "--partition", "1"], "only allowed if topic"),
        (["--all-topic-partitions"], "Missing required option(s): election-type"),
        (["--election-type", "SOMETIMES", "--all-topic-partitions"], "SOMETIMES"),
        (["--election-type", "PREFERRED", "--path-to-json-file", str(tmp_path / "missing.json")], "missing.json"),
        (["--election-type", "PREFERRED", "--path-to-json-file", str(duplicated)], "duplicate partitions: orders-1"),
    ]:
        result = CliRunner().invoke(main, [*bs, *args])
        assert result.exit_code != 0 and isinstance(result.exception, SystemExit), (args, result.exception)
        assert needle in result.output and len(result.output.strip().splitlines()) == 1, (args, result.output)
    # malformed native bodies: INVALID_REQUEST, and the connection and the brokers live on
    with manual.admin() as a:
        client = a._impl.client
        for body in (
            {"election_type": 7, "topics": None},
            {"election_type": 0, "topics": "orders"},
            {"election_type": 0, "topics": [["orders", ["x"]]]},
            {"election_type": 0, "topics": [[1, [0]]]},
        ):
            resp = a._lt.run(client.request(None, ApiKey.ELECT_LEADERS, body))
            assert resp["error_code"] == ErrorCode.INVALID_REQUEST, body
        # any broker takes it: those that are not the controller forward it there (KIP-590)
        a._lt.run(client.refresh_metadata([]))
        for broker in manual.brokers:
            body = {"election_type": 0, "topics": [["orders", [1]]]}
            resp = a._lt.run(client.request(broker, ApiKey.ELECT_LEADERS, body))
            (topic, [(partition, code, _message)]) = resp["topics"][0]
            assert (resp["error_code"], topic, partition, code) == (0, "orders", 1, ErrorCode.ELECTION_NOT_NEEDED)
        outcome = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition("orders", 2**31 - 1)])
        assert outcome[TopicPartition("orders", 2**31 - 1)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert all(b.alive for b in manual.brokers.values())
    manual.wait_full_isr("orders", TOPICS["orders"])


def test_a_kafka_client_elects_preferred_leaders(manual):
    """confluent-kafka's AdminClient.elect_leaders (librdkafka's ElectLeaders) on the Kafka listener."""
    ck = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
    from confluent_kafka.admin import AdminClient

    bounce(manual, 1)
    away = {(t, p) for t in TOPICS for p, (lead, pref) in leaders(manual, t).items() if lead != pref}
    assert away
    admin = AdminClient({"bootstrap.servers": manual.kafka_bootstrap()})
    asked = [ck.TopicPartition(t, p) for t, p in sorted(away)] + [
        ck.TopicPartition("orders", 99),
        ck.TopicPartition("nope", 0),
    ]
    result = admin.elect_leaders(ck.ElectionType.PREFERRED, asked).result(30)
    errors = {(tp.topic, tp.partition): (e.code() if e is not None else None) for tp, e in result.items()}
    assert {tp: errors[tp] for tp in away} == {tp: None for tp in away}
    assert errors[("orders", 99)] == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    assert errors[("nope", 0)] == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    wait_until(lambda: at_home(manual), 5, "every partition led by its preferred replica")
    # again: nothing to do, said with Kafka's ELECTION_NOT_NEEDED
    again = admin.elect_leaders(ck.ElectionType.PREFERRED, [ck.TopicPartition("orders", 0)]).result(30)
    (e,) = again.values()
    assert e is not None and e.code() == ck.KafkaError.ELECTION_NOT_NEEDED
    # every partition (null): only those that needed an election come back, here none
    assert admin.elect_leaders(ck.ElectionType.PREFERRED, None).result(30) == {}


def test_every_elect_leaders_version_on_the_kafka_listener(manual):
    """v0 (preferred only), v1 (election_type, top-level error code) and v2 (flexible), as raw Kafka frames."""
    import socket

    from kio.index import load_response_schema
    from kio.serial import entity_reader

    from tests.integration.test_kafka_protocol_errors import frame, read_frame

    wait_until(lambda: at_home(manual), 30, "every partition led by its preferred replica")
    asked = [{"topic": "orders", "partitions": [0, 99]}, {"topic": "nope", "partitions": [1]}]
    # ELECTION_NOT_NEEDED (84) for a partition led as asked, UNKNOWN_TOPIC_OR_PARTITION (3) for the others
    preferred = {("orders", 0): 84, ("orders", 99): 3, ("nope", 1): 3}
    cases = [
        (0, {"topic_partitions": asked}, preferred),
        (1, {"election_type": 0, "topic_partitions": asked}, preferred),
        (2, {"election_type": 1, "topic_partitions": asked[:1]}, {("orders", 0): 84, ("orders", 99): 3}),
        (2, {"election_type": 0, "topic_partitions": None}, {}),  # every partition: none needed an election
    ]
    with socket.create_connection(("127.0.0.1", manual[1].kafka_port), timeout=10) as s:
        for version, body, want in cases:
            s.sendall(frame(43, version, 40 + version, dict(body, timeout=30000)))
            payload = read_frame(s)
            header = 5 if version >= 2 else 4  # correlation id, then the flexible header's tagged fields
            resp, _ = entity_reader(load_response_schema(43, version))(payload, header)
            got = {
                (r.topic, p.partition_id): int(p.error_code)
                for r in resp.replica_election_results
                for p in r.partition_result
            }
            assert got == want, (version, body)
            if version >= 1:
                assert int(resp.error_code) == 0
