"""Partition reassignments (issue 27 §2, KIP-455): AlterPartitionReassignments / ListPartitionReassignments on a
3-broker cluster. A partition with data moves from [0, 1] to [1, 2] while an acks=all producer writes: nothing
acknowledged is lost, the final replicas and ISR are the target, the removed replica's log is deleted. Bad
requests get Kafka's per-partition codes and the brokers stay up."""

from __future__ import annotations

import asyncio
import json

import pytest

from net.connection import BrokerConnection
from net.errors import ErrorCode
from net.schema.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from net.schema.list_partition_reassignments import ListPartitionReassignmentsRequest
from tests.integration.cluster_harness import ClusterHarness, LoadProducer, wait_until

pytestmark = pytest.mark.timeout(180)
TOPIC = "moving"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ClusterHarness(tmp_path_factory.mktemp("reassign"), 3).running() as h:
        yield h


def call(h: ClusterHarness, broker: int, request):
    async def run():
        conn = BrokerConnection("127.0.0.1", h[broker].port, client_id="reassign-test")
        await conn.connect()
        try:
            return await conn.call(request)
        finally:
            conn.close()

    return asyncio.run(run())


def alter(h: ClusterHarness, broker: int, rows: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[ReassignablePartition]] = {}
    for (t, p), replicas in rows.items():
        by_topic.setdefault(t, []).append(
            ReassignablePartition(partition_index=p, replicas=None if replicas is None else tuple(replicas))
        )
    req = AlterPartitionReassignmentsRequest(
        topics=tuple(ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    )
    resp = call(h, broker, req)
    return {(t.name, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}


def ongoing(h: ClusterHarness, broker: int) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    resp = call(h, broker, ListPartitionReassignmentsRequest(topics=None))
    assert resp.error_code == 0
    return {
        (t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
        for t in resp.topics
        for p in t.partitions
    }


def state(h: ClusterHarness, topic: str, partition: int):
    return next(p for p in h.describe(topic) if p.partition == partition)


def test_a_partition_moves_under_load_and_nothing_acknowledged_is_lost(cluster):
    cluster.create_topic(TOPIC, 1, 2)
    st = state(cluster, TOPIC, 0)
    original = list(st.replicas)
    target = [b for b in sorted(cluster.brokers) if b not in original] + [original[1]]
    dropped = original[0]
    load = LoadProducer(cluster.bootstrap(), TOPIC, "reassign").start()
    load.wait_acked(200, 30)
    # asked of a broker that may not be the controller: forwarded
    other = next(b for b in cluster.brokers if b != cluster.controller_id())
    assert alter(cluster, other, {(TOPIC, 0): target}) == {(TOPIC, 0): 0}
    wait_until(lambda: sorted(state(cluster, TOPIC, 0).replicas) == sorted(target), 60, "reassignment completed")
    load.wait_acked(load.acked_count() + 100, 30)
    stats = load.stop()
    final = state(cluster, TOPIC, 0)
    assert list(final.replicas) == target and sorted(final.isr) == sorted(target)
    assert ongoing(cluster, target[0]) == {}
    wait_until(lambda: not (cluster[dropped].data_dir / f"{TOPIC}-0").exists(), 30, "the removed replica's log deleted")
    # nothing acknowledged lost: every acked offset holds its value on the new replicas once the HW passed it
    top = max(o for _, o, _ in stats.acked)
    for b in target:
        wait_until(lambda b=b: max(cluster[b].read_partition(TOPIC, 0), default=-1) >= top, 30, f"{b} caught up")
        log = cluster[b].read_partition(TOPIC, 0)
        missing = [(o, v) for _, o, v in stats.acked if log.get(o, (0, None))[1] != v]
        assert missing == [], f"broker {b} lacks acknowledged records {missing[:5]}"


def test_list_during_a_reassignment_then_cancel_reverts(cluster):
    cluster.create_topic("stuck", 1, 2)
    original = list(state(cluster, "stuck", 0).replicas)
    spare = next(b for b in sorted(cluster.brokers) if b not in original)
    cluster.kill(spare)  # the new replica cannot catch up: the reassignment stays in progress
    try:
        target = [original[0], spare]
        wait_until(lambda: alter(cluster, original[0], {("stuck", 0): target}) == {("stuck", 0): 0}, 30, "started")
        rows = ongoing(cluster, original[0])
        assert rows[("stuck", 0)] == ([original[0], spare, original[1]], [spare], [original[1]])
        assert alter(cluster, original[0], {("stuck", 0): None}) == {("stuck", 0): 0}
        assert ongoing(cluster, original[0]) == {}
        assert list(state(cluster, "stuck", 0).replicas) == original
        assert alter(cluster, original[0], {("stuck", 0): None}) == {
            ("stuck", 0): int(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
        }
    finally:
        cluster.restart(spare)


def test_bad_reassignments_get_kafkas_codes(cluster):
    cluster.create_topic("bad", 1, 2)
    a, b = sorted(cluster.brokers)[:2]
    codes = alter(
        cluster,
        a,
        {
            ("bad", 0): [a, 77],  # unknown broker
            ("bad", 5): [a, b],  # no such partition
            ("nope", 0): [a, b],
        },
    )
    assert codes[("bad", 0)] == int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    assert codes[("bad", 5)] == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert codes[("nope", 0)] == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert alter(cluster, b, {("bad", 0): [a, a]}) == {("bad", 0): int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)}
    assert all(b.alive for b in cluster.brokers.values())


def test_kl_reassign_partitions_generate_execute_verify_list(cluster, tmp_path):
    from click.testing import CliRunner

    from client.cli.reassign_partitions import main

    cluster.create_topic("cli", 2, 2)
    ids = sorted(cluster.brokers)
    run = CliRunner()
    boot = ["--bootstrap-server", cluster.bootstrap()]
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "cli"}]}))
    out = run.invoke(main, [*boot, "--topics-to-move-json-file", str(topics), "--broker-list", f"{ids[1]},{ids[2]}",
                            "--generate"])  # fmt: skip
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert (
        lines[0] == "Current partition replica assignment"
        and lines[3] == "Proposed partition reassignment configuration"
    )
    proposed = json.loads(lines[4])
    assert {tuple(sorted(r["replicas"])) for r in proposed["partitions"]} == {(ids[1], ids[2])}
    plan = tmp_path / "plan.json"
    plan.write_text(lines[4])
    out = run.invoke(main, [*boot, "--reassignment-json-file", str(plan), "--execute", "--throttle", "1000000"])
    assert out.exit_code == 0, out.output
    assert "Successfully started partition reassignments for cli-0,cli-1" in out.output

    def verified() -> bool:
        v = run.invoke(main, [*boot, "--reassignment-json-file", str(plan), "--verify"])
        return v.exit_code == 0 and v.output.count("is completed.") == 2

    wait_until(verified, 60, "kl-reassign-partitions --verify: every partition completed")
    listed = run.invoke(main, [*boot, "--list"])
    assert listed.exit_code == 0 and "No partition reassignments found." in listed.output
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": "cli", "partition": 0, "replicas": [ids[0], 99]}]})
    )
    out = run.invoke(main, [*boot, "--reassignment-json-file", str(bad), "--execute"])
    assert out.exit_code != 0 and "INVALID_REPLICA_ASSIGNMENT" in out.output and "Traceback" not in out.output
    out = run.invoke(main, [*boot, "--reassignment-json-file", str(plan), "--cancel"])
    assert out.exit_code != 0 and "NO_REASSIGNMENT_IN_PROGRESS" in out.output
    assert run.invoke(main, [*boot, "--verify"]).exit_code != 0  # no file: one line, rc != 0


def test_a_reassignment_survives_controller_failover(cluster):
    cluster.create_topic("durable", 1, 2)
    original = list(state(cluster, "durable", 0).replicas)
    spare = next(b for b in sorted(cluster.brokers) if b not in original)
    cluster.kill(spare)  # the new replica cannot catch up yet: the reassignment stays in progress
    target = [original[1], spare]
    wait_until(lambda: alter(cluster, original[1], {("durable", 0): target}) == {("durable", 0): 0}, 30, "started")
    # The controller is killed and started again (with the spare down, a majority needs it back): the controller
    # elected then rebuilt its state from the metadata log, and still knows the reassignment.
    old_controller = cluster.controller_id()
    if old_controller != spare:
        cluster.kill(old_controller)
        cluster.restart(old_controller)
        wait_until(lambda: cluster.controller_id() in original, 60, "a controller again")
        wait_until(lambda: ("durable", 0) in _ongoing_or_empty(cluster, original[0]), 60, "listed after failover")
    cluster.restart(spare)

    def completed() -> bool:  # one broker's view of both (each call may ask another broker, whose image may trail)
        s = state(cluster, "durable", 0)
        return list(s.replicas) == target and sorted(s.isr) == sorted(target)

    wait_until(completed, 60, "completed after failover: the target replicas, all in the ISR")


def _ongoing_or_empty(cluster: ClusterHarness, broker: int) -> dict:
    try:
        return ongoing(cluster, broker)
    except (AssertionError, OSError):
        return {}  # no controller yet (NOT_CONTROLLER) or the broker is between connections


def test_both_apis_on_the_kafka_listener(cluster):
    """Raw Kafka frames (kio-encoded), as a Kafka client sends them: Alter v0 and v1, List v0."""
    from tests.integration.test_log_and_quorum_apis import kafka_call

    broker = sorted(cluster.brokers)[0]
    for version in (0, 1):
        body = {"timeout": 5000, "topics": [{"name": "nope", "partitions": [{"partition_index": 0, "replicas": [1]}]}]}
        answer = kafka_call(cluster, broker, 45, version, body)
        assert answer.error_code == 0
        (row,) = answer.responses[0].partitions
        assert row.error_code == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    listed = kafka_call(cluster, broker, 46, 0, {"timeout": 5000, "topics": None})
    assert listed.error_code == 0 and isinstance(listed.topics, tuple)
