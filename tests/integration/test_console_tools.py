"""The flags a Kafka user reaches for first (issue 24 §3), run as a user runs them: real brokers as
subprocesses, each CLI as its own process. kl-consume's --property/--formatter/--consumer-property, a group
consumer stopped by SIGINT or SIGTERM, waiting for a topic; kl-produce's --property and --producer-property;
kl-groups' views; kl-topics' partition reports; --version everywhere; errors that name their topic or group;
and the time a new group's first message takes on a fresh cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client.admin import NewTopic
from client.sync import Admin, Producer
from net.errors import UnknownTopicOrPartitionError
from tests.conftest import ROOT, BrokerProcess, free_port, wait_port
from tests.integration.cluster_harness import free_port_runs, wait_until
from tests.integration.test_cli import assert_one_line_error, run

pytestmark = pytest.mark.timeout(180)
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# Issue 24: "a first message to a new group arrives in <= 4 s". Before the fix a new group waited 3 s
# (group.initial.rebalance.delay.ms) on top of a process start slowed by importing hypothesis, pytest and trio
# through kio: 3.7-5.5 s on a quiet machine, 11.5-14.4 s at load 25 on 2 cores; now 0.7-2.6 s and 2.2-5.0 s
# (where a consumer without a group takes 2.3-4.7 s). The bound is checked on the best of three runs; what
# joining adds over a consumer without a group (3 s and more before, ~0.3 s now) catches the old behaviour
# on any machine.
FIRST_MESSAGE_S = 4.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> BrokerProcess:
    """One broker shared by the tests that need no failure (a new group starts at once, as kl-cluster's)."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("console") / "data", extra=["--override", "group.initial.rebalance.delay.ms=0"]
    )
    try:
        yield b.start()
    finally:
        b.cleanup()


def popen(module: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", f"client.cli.{module}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )


def create(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1, **configs: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, partitions, rf, configs)])
    # Created is committed on the controller; every broker learns it a moment later, as in Kafka.
    for address in bootstrap.split(","):
        with Admin(address) as admin:
            wait_until(lambda: _has_leaders(admin, topic), 30, f"{address} to know {topic} and its leaders")


def _has_leaders(admin: Admin, topic: str) -> bool:
    try:
        return all(p.leader >= 0 for p in admin.describe_topics([topic])[0].partitions)
    except UnknownTopicOrPartitionError:
        return False


def produce(bootstrap: str, topic: str, values: list[bytes], key: bytes | None = None, headers=None) -> None:
    with Producer(bootstrap) as p:
        for v in values:
            p.send(topic, v, key=key, headers=headers)
        p.flush()


# --- kl-consume ----------------------------------------------------------------------------------------


def test_consume_properties_and_formatters(broker, tmp_path):
    bs = ["--bootstrap-server", broker.bootstrap]
    create(broker.bootstrap, "fmt")
    produce(broker.bootstrap, "fmt", [b"v1"], key=b"k1", headers=[("h", b"x"), ("n", None)])
    produce(broker.bootstrap, "fmt", [b"v2"])
    base = ["consume", *bs, "--topic", "fmt", "--from-beginning", "--max-messages", "2"]
    cp = run(
        *base,
        "--property",
        "print.key=true",
        "--property",
        "key.separator= | ",
        "--property",
        "print.offset=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.headers=true",
        "--property",
        "null.literal=NIL",
    )
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [
        "Partition:0 | Offset:0 | h:x,n:NIL | k1 | v1",
        "Partition:0 | Offset:1 | NO_HEADERS | NIL | v2",
    ]
    cp = run(
        *base,
        "--property",
        "print.timestamp=true",
        "--property",
        "print.value=false",
        "--property",
        "line.separator=;",
        "--formatter",
        "kafka.tools.DefaultMessageFormatter",
    )
    stamps = cp.stdout.split(";")
    assert stamps[-1] == "" and len(stamps) == 3 and all(s.startswith("CreateTime:") for s in stamps[:2]), cp.stdout
    cp = run(*base, "--formatter", "LoggingMessageFormatter")
    assert cp.stdout.splitlines() == ["v1", "v2"] and "key:k1, value:v1" in cp.stderr, cp.stderr
    cp = run(*base, "--formatter", "org.apache.kafka.tools.consumer.NoOpMessageFormatter")
    assert cp.returncode == 0 and cp.stdout == "" and "Processed a total of 2 messages" in cp.stderr
    assert_one_line_error(run(*base, "--formatter", "com.example.Fancy"), "unknown formatter 'com.example.Fancy'")
    assert_one_line_error(run(*base, "--property", "print.kye=true"), "unknown formatter property 'print.kye'")
    assert_one_line_error(run(*base, "--property", "print.key=yes"), "print.key=yes: expected true or false")
    # --consumer-property and --consumer.config, Kafka's names, checked by the consumer's schema
    cp = run(*base, "--consumer-property", "client.id=console-7", "--consumer-property", "fetch.max.wait.ms=100")
    assert cp.returncode == 0 and cp.stdout.splitlines() == ["v1", "v2"], cp.stderr
    conf = tmp_path / "consumer.properties"
    conf.write_text("max.poll.records=1\n")
    cp = run(*base, "--consumer.config", str(conf), "--property", "print.key=true")
    assert cp.returncode == 0 and cp.stdout.splitlines() == ["k1\tv1", "null\tv2"], cp.stderr
    assert_one_line_error(run(*base, "--consumer-property", "fetch.max.wait.ms=soon"), "fetch.max.wait.ms")
    assert_one_line_error(run(*base, "--consumer-property", "no.such.key=1"), "no.such.key")
    cp = run(*base, "--consumer-property", "auto.offset.reset=latest")
    assert_one_line_error(cp, "--from-beginning contradicts auto.offset.reset=latest")
    # --partition/--offset, and the old shorthand flags
    cp = run(
        "consume", *bs, "--topic", "fmt", "--partition", "0", "--offset", "1", "--timeout-ms", "1500", "--print-offset"
    )
    assert cp.returncode == 0 and cp.stdout.splitlines() == ["Offset:1\tv2"], cp.stderr
    assert_one_line_error(
        run("consume", *bs, "--topic", "fmt", "--partition", "3", "--timeout-ms", "100"), "no partition 3"
    )


def test_consume_waits_for_a_topic_that_does_not_exist_yet(broker):
    p = popen(
        "consume", "--bootstrap-server", broker.bootstrap, "--topic", "later", "--from-beginning", "--max-messages", "1"
    )
    try:
        first = p.stderr.readline()
        assert first.strip() == "Topic 'later' does not exist yet; waiting for it to be created.", first
        assert p.poll() is None  # still waiting, as Kafka's console consumer does
        create(broker.bootstrap, "later")
        produce(broker.bootstrap, "later", [b"arrived"])
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert out.splitlines() == ["arrived"]
    assert "Traceback" not in err and err.count("does not exist yet") == 0  # said once, read above


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_group_consumer_stopped_by_a_signal_commits_and_leaves(broker, sig):
    """Ctrl-C (or SIGTERM from a service manager) ends kl-consume --group cleanly: exit 0, no traceback,
    every printed record committed, and the member gone from the group at once (LeaveGroup), not after the
    session timeout."""
    topic, group = f"sig-{sig.name}", f"g-{sig.name}"
    create(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, [f"m{i}".encode() for i in range(10)])
    p = popen("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group, "--from-beginning")
    try:
        lines = [p.stdout.readline() for _ in range(10)]
        assert [x.strip() for x in lines] == [f"m{i}" for i in range(10)]
        with Admin(broker.bootstrap) as admin:
            assert len(admin.describe_group(group).members) == 1
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert "Traceback" not in err and "Processed a total of 10 messages" in err, err
    with Admin(broker.bootstrap) as admin:
        desc = admin.describe_group(group)
        assert desc.state == "Empty" and desc.members == []
        assert admin.list_group_offsets(group) == {(topic, 0): 10}


# --- kl-produce -----------------------------------------------------------------------------------------


def test_produce_properties(broker, tmp_path):
    bs = ["--bootstrap-server", broker.bootstrap]
    create(broker.bootstrap, "keyed")
    lines = "a:one\nb:two\n-:three\n"
    cp = run(
        "produce",
        *bs,
        "--topic",
        "keyed",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--property",
        "null.marker=-",
        "--producer-property",
        "linger.ms=1",
        stdin=lines,
    )
    assert cp.returncode == 0, cp.stderr
    conf = tmp_path / "producer.properties"
    conf.write_text("acks=all\ncompression.type=zstd\n")
    cp = run(
        "produce",
        *bs,
        "--topic",
        "keyed",
        "--producer.config",
        str(conf),
        "--property",
        "parse.headers=true",
        "--property",
        "parse.key=true",
        stdin="src:cli,v:2\tk\tfour\n",
    )
    assert cp.returncode == 0, cp.stderr
    cp = run(
        "consume",
        *bs,
        "--topic",
        "keyed",
        "--from-beginning",
        "--max-messages",
        "4",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
    )
    assert cp.stdout.splitlines() == [
        "NO_HEADERS\ta\tone",
        "NO_HEADERS\tb\ttwo",
        "NO_HEADERS\tnull\tthree",
        "src:cli,v:2\tk\tfour",
    ], cp.stderr
    cp = run("produce", *bs, "--topic", "keyed", "--property", "parse.key=true", stdin="ok\tfine\nno separator\n")
    assert_one_line_error(cp, "No key separator '\\t' found on line number 2")
    assert_one_line_error(
        run("produce", *bs, "--topic", "keyed", "--producer-property", "linger.ms=never", stdin="x\n"), "linger.ms"
    )
    assert_one_line_error(
        run("produce", *bs, "--topic", "keyed", "--property", "parse.kee=true", stdin="x\n"),
        "unknown --property 'parse.kee'",
    )


# --- kl-groups ------------------------------------------------------------------------------------------


def test_groups_views(broker):
    """--list --state, --describe --all-groups, --members [--verbose], --offsets, --state: Kafka's columns."""
    bs = ["--bootstrap-server", broker.bootstrap]
    create(broker.bootstrap, "views", partitions=2)
    produce(broker.bootstrap, "views", [b"x"] * 4)
    cp = run("consume", *bs, "--topic", "views", "--group", "idle", "--from-beginning", "--max-messages", "4")
    assert cp.returncode == 0, cp.stderr
    live = popen("consume", *bs, "--topic", "views", "--group", "live", "--consumer-property", "client.id=viewer")
    try:
        wait_until(lambda: "live" in run("groups", *bs, "--list", "--state", "Stable").stdout, 30, "live is Stable")
        cp = run("groups", *bs, "--list", "--state")
        rows = [line.split() for line in cp.stdout.splitlines()]
        assert rows[0] == ["GROUP", "STATE"] and ["idle", "Empty"] in rows and ["live", "Stable"] in rows
        empty = [line.split() for line in run("groups", *bs, "--list", "--state", "empty").stdout.splitlines()[1:]]
        assert ["idle", "Empty"] in empty and all(state == "Empty" for _, state in empty), empty
        assert_one_line_error(run("groups", *bs, "--list", "--state", "Sleepy"), "unknown state 'Sleepy'")

        cp = run("groups", *bs, "--describe", "--group", "live", "--members", "--verbose")
        header, row = [line.split() for line in cp.stdout.strip().splitlines()]
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert row[0] == "live" and row[1].startswith("viewer-") and row[3:] == ["viewer", "2", "views(0,1)"]
        cp = run("groups", *bs, "--describe", "--group", "live", "--members")
        assert cp.stdout.split()[:5] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert cp.stdout.split()[5] == "live" and "ASSIGNMENT" not in cp.stdout

        cp = run("groups", *bs, "--describe", "--group", "live", "--state")
        lines = cp.stdout.strip().splitlines()
        assert lines[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert lines[1].split() == ["live", broker.bootstrap, "(1)", "range", "Stable", "1"]

        cp = run("groups", *bs, "--describe", "--all-groups")
        tables = {line.split()[0]: line.split() for line in cp.stdout.splitlines() if line and "GROUP" not in line}
        assert {"idle", "live"} <= set(tables), cp.stdout  # with the other tests' groups
        cp = run("groups", *bs, "--describe", "--all-groups", "--offsets")
        idle = [line.split() for line in cp.stdout.splitlines() if line.startswith("idle ")]
        assert sorted(r[2] for r in idle) == ["0", "1"] and sum(int(r[3]) for r in idle) == 4, cp.stdout
        assert all(r[1] == "views" and r[5] == "0" and r[6:] == ["-", "-", "-"] for r in idle), cp.stdout
        cp = run("groups", *bs, "--describe", "--group", "idle", "--members")
        assert cp.returncode == 0 and cp.stdout.strip() == ""
        assert "Consumer group 'idle' has no active members." in cp.stderr
        assert_one_line_error(run("groups", *bs, "--describe", "--group", "nobody", "--state"), "does not exist")
    finally:
        live.send_signal(signal.SIGTERM)
        live.communicate(timeout=30)
    assert live.returncode == 0


# --- kl-topics's partition reports, the first message of a new group: fresh kl-cluster clusters --------


class LocalCluster:
    """`kl-cluster up` on free ports, in a test's own data dir."""

    def __init__(self, tmp_path: Path, brokers: int) -> None:
        base, metrics = free_port_runs(brokers, brokers)
        self.data = ["--data-dir", str(tmp_path / "kl")]
        up = self.kl("up", "--brokers", str(brokers), "--base-port", str(base), "--metrics-base-port", str(metrics))
        assert up.returncode == 0, up.stderr
        self.bootstrap = up.stdout.splitlines()[0]

    def kl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "client.cli.cluster", *args, *self.data],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kl("down")


def first_message_seconds(bootstrap: str, topic: str, *extra: str) -> float:
    """From launching kl-consume to its first line on stdout: what a user waits."""
    start = time.monotonic()
    p = popen(
        "consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning", "--max-messages", "1", *extra
    )
    try:
        line = p.stdout.readline()
        took = time.monotonic() - start
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert line.strip() == "hello" and p.returncode == 0, err
    return took


@pytest.mark.parametrize("brokers", [3, 1])
def test_first_message_to_a_new_group_within_4_s(tmp_path, brokers):
    """A fresh cluster (the first group also creates __consumer_offsets, 50 partitions), then more new
    groups; each against a consumer without a group in the same run, so the group's own cost shows."""
    with LocalCluster(tmp_path, brokers) as cluster:
        bootstrap = cluster.bootstrap
        create(bootstrap, "first", partitions=3, rf=brokers)
        produce(bootstrap, "first", [b"hello"])
        fresh = first_message_seconds(bootstrap, "first", "--group", "very-first")
        groups, plain = [], []
        for i in range(3):
            plain.append(first_message_seconds(bootstrap, "first"))
            groups.append(first_message_seconds(bootstrap, "first", "--group", f"new-{i}"))
        print(f"{brokers} broker(s): fresh {fresh:.2f} s, new groups {groups}, without a group {plain}")
        assert min(groups) <= FIRST_MESSAGE_S, groups
        # What joining adds over a plain consumer (the same process start, which a loaded machine slows most):
        # 3 s and more before the fix (the initial rebalance delay), ~0.3 s now; creating __consumer_offsets
        # on the fresh cluster adds ~0.3 s more.
        assert min(groups) - min(plain) < 2.0, (groups, plain)
        # The fresh cluster's first group also waits for __consumer_offsets' 50 partitions to be created, and
        # the client's KIP-580 backoff (100, 200, 400, 800 ms) rounds that wait up: 2.2 s more than a plain
        # consumer on a loaded CI machine, 3.6 s on one at half speed (2026-11-28), which a 3 s rebalance delay
        # alone would also add. So the delay is checked where it is set, and the first group's cost bounded.
        with Admin(bootstrap) as admin:
            for broker_id in admin.broker_ids():
                delay = admin.describe_broker_configs(broker_id)["group.initial.rebalance.delay.ms"][0]
                assert delay == "0", (broker_id, delay)
        assert fresh - min(plain) < 5.0, (fresh, plain)


def test_topics_partition_reports(tmp_path):
    with LocalCluster(tmp_path, 3) as cluster:
        bootstrap = cluster.bootstrap
        bs = ["--bootstrap-server", bootstrap]
        create(bootstrap, "r3", partitions=2, rf=3, **{"min.insync.replicas": "2"})
        create(bootstrap, "solo", partitions=1, rf=1)
        with Admin(bootstrap) as admin:
            solo_leader = admin.describe_topics(["solo"])[0].partitions[0].leader
        for report in ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions"):
            cp = run("topics", *bs, "--describe", report)
            assert cp.returncode == 0 and cp.stdout == "", (report, cp.stdout)
        at_min = run("topics", *bs, "--describe", "--at-min-isr-partitions").stdout.splitlines()
        assert at_min == [line for line in at_min if "Topic: solo" in line] and len(at_min) == 1  # ISR 1 = min 1
        victim = solo_leader
        assert cluster.kl("kill", str(victim)).returncode == 0

        def report(flag: str) -> list[str]:
            return run("topics", *bs, "--describe", flag).stdout.splitlines()

        under = wait_until(
            lambda: len(r := report("--under-replicated-partitions")) == 2 and r, 30, "r3's partitions under-replicated"
        )
        assert all(
            line.startswith("\tTopic: r3\tPartition: ") and str(victim) not in line.split("Isr: ")[1] for line in under
        ), under
        unavailable = report("--unavailable-partitions")
        assert unavailable == [f"\tTopic: solo\tPartition: 0\tLeader: none\tReplicas: {victim}\tIsr: {victim}"]
        assert report("--under-min-isr-partitions") == unavailable  # Kafka counts a leaderless partition
        assert sorted(report("--at-min-isr-partitions")) == sorted(under + unavailable)
        assert_one_line_error(run("topics", *bs, "--list", "--unavailable-partitions"), "go with --describe")


# --- every tool ---------------------------------------------------------------------------------------------


def _console_scripts() -> dict[str, str]:
    """Every tool setup.cfg installs, name -> "module:function": a new tool cannot miss its --version."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict((part.strip() for part in line.split("=", 1)) for line in lines)  # type: ignore[misc]


TOOLS = _console_scripts()


def test_every_tool_prints_its_version():
    from importlib.metadata import version

    want = f"{version('kafka-lite')} (Kafka Lite)"
    assert len(TOOLS) >= 13, TOOLS
    for name, target in TOOLS.items():
        module, func = target.split(":")
        cp = subprocess.run(
            [sys.executable, "-c", f"from {module} import {func}; {func}()", "--version"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=ENV,
            timeout=60,
        )
        assert cp.returncode == 0 and cp.stdout.strip() == want, (name, cp.stdout, cp.stderr)


def test_errors_name_the_topic_or_group(tmp_path):
    """With ACLs on, a refused read names the topic, a refused group names the group."""
    port = free_port()
    log = open(tmp_path / "broker.log", "wb")
    users = [f"SCRAM-SHA-256=[name={u},password={u}-secret]" for u in ("admin", "alice")]
    settings = ["security.protocol=SASL_PLAINTEXT", "sasl.enabled.mechanisms=SCRAM-SHA-256", "authorizer=acl",
                "super.users=User:admin"]  # fmt: skip
    cmd = [sys.executable, "-m", "broker.cli", "start", "--id", "1", "--port", str(port)]
    cmd += ["--data-dir", str(tmp_path / "d1"), *(x for u in users for x in ("--add-scram", u))]
    cmd += [x for o in settings for x in ("--override", o)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc=proc)
        login = (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username={0}\n"
            "sasl.password={0}-secret\n"
        )
        (tmp_path / "admin.properties").write_text(login.format("admin"))
        (tmp_path / "alice.properties").write_text(login.format("alice"))
        bs = ["--bootstrap-server", f"127.0.0.1:{port}"]
        admin, alice = (
            ["--command-config", str(tmp_path / "admin.properties")],
            ["--command-config", str(tmp_path / "alice.properties")],
        )
        wait_until(
            lambda: run("topics", *bs, *admin, "--create", "--topic", "x", "--if-not-exists").returncode == 0,
            30,
            "the topic created",
        )
        assert run("produce", *bs, *admin, "--topic", "x", stdin="secret\n").returncode == 0
        grant = ["acls", *bs, *admin, "--add", "--allow-principal", "User:alice"]
        assert run(*grant, "--operation", "Describe", "--topic", "x").returncode == 0
        consume = ["consume", *bs, *alice, "--topic", "x", "--from-beginning", "--timeout-ms", "5000"]
        assert_one_line_error(run(*consume), "TOPIC_AUTHORIZATION_FAILED: not authorized to read topic 'x'")
        assert_one_line_error(
            run("consume", *bs, *alice, "--topic", "y", "--timeout-ms", "5000"),
            "TOPIC_AUTHORIZATION_FAILED: not authorized to read topic 'y'",
        )
        assert run(*grant, "--operation", "Read", "--topic", "x").returncode == 0
        cp = run(*consume, "--group", "g")
        assert_one_line_error(cp, "GROUP_AUTHORIZATION_FAILED")
        assert "group g" in cp.stderr or "group 'g'" in cp.stderr
        assert_one_line_error(run("groups", *bs, *alice, "--describe", "--group", "g"), "GROUP_AUTHORIZATION_FAILED")
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
