"""The CLIs as a user runs them: Kafka's flags and output, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(90)


def run(module: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"client.cli.{module}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )


def assert_one_line_error(cp: subprocess.CompletedProcess, needle: str) -> None:
    assert cp.returncode != 0
    assert "Traceback" not in cp.stderr
    lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, cp.stderr
    assert needle in lines[0], cp.stderr


def test_topics_create_describe_alter_list_delete(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    cp = run(
        "topics",
        *bs,
        "--create",
        "--topic",
        "orders",
        "--partitions",
        "3",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=3600000",
    )
    assert cp.returncode == 0 and cp.stdout.strip() == "Created topic orders.", cp.stderr
    cp = run("topics", *bs, "--describe", "--topic", "orders")
    lines = cp.stdout.splitlines()
    assert lines[0].startswith("Topic: orders\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=3600000" in lines[0]
    assert lines[1] == "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1"
    assert len(lines) == 4
    cp = run("topics", *bs, "--alter", "--topic", "orders", "--config", "retention.bytes=1000000")
    assert cp.returncode == 0, cp.stderr
    assert "retention.bytes=1000000" in run("topics", *bs, "--describe", "--topic", "orders").stdout
    assert run("topics", *bs, "--list").stdout.split() == ["orders"]
    assert_one_line_error(run("topics", *bs, "--create", "--topic", "orders"), "TOPIC_ALREADY_EXISTS")
    assert run("topics", *bs, "--create", "--topic", "orders", "--if-not-exists").returncode == 0
    assert run("topics", *bs, "--delete", "--topic", "orders").stdout.strip() == "Deleted topic orders."
    assert run("topics", *bs, "--list").stdout.strip() == ""


def test_produce_consume_console(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert run("topics", *bs, "--create", "--topic", "lines", "--partitions", "1").returncode == 0
    cp = run("produce", *bs, "--topic", "lines", "--key-separator", ":", stdin="a:one\nb:two\nc:three\n")
    assert cp.returncode == 0, cp.stderr
    cp = run(
        "consume", *bs, "--topic", "lines", "--from-beginning", "--max-messages", "3", "--print-key", "--print-offset"
    )
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["Offset:0\ta\tone", "Offset:1\tb\ttwo", "Offset:2\tc\tthree"]
    assert "Processed a total of 3 messages" in cp.stderr
    cp = run("consume", *bs, "--topic", "lines", "--partition", "0", "--offset", "1", "--timeout-ms", "1500")
    assert cp.returncode == 0 and cp.stdout.splitlines() == ["two", "three"]


def test_cli_errors_are_one_line(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert_one_line_error(run("produce", *bs, "--topic", "bad/name", stdin="x\n"), "INVALID_TOPIC_EXCEPTION")
    assert_one_line_error(run("consume", *bs, "--topic", "bad/name", "--timeout-ms", "100"), "INVALID_TOPIC_EXCEPTION")
    assert_one_line_error(run("topics", "--bootstrap-server", "127.0.0.1:1", "--list"), "no broker reachable")
    assert_one_line_error(run("topics", "--bootstrap-server", "nonsense", "--list"), "HOST:PORT")
    assert_one_line_error(
        run("topics", *bs, "--create", "--topic", "x", "--config", "retention.ms=abc"), "INVALID_CONFIG"
    )


def test_perf_tools(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert run("topics", *bs, "--create", "--topic", "perf", "--partitions", "2").returncode == 0
    cp = run("perf", "produce", *bs, "--topic", "perf", "--num-records", "20000", "--record-size", "100")
    assert cp.returncode == 0, cp.stderr
    final = cp.stdout.strip().splitlines()[-1]
    assert final.startswith("20000 records sent, ") and "ms 99.9th." in final
    cp = run("perf", "consume", *bs, "--topic", "perf", "--messages", "20000")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines()[-1].split(", ")[4] == "20000"


def test_broker_bad_config_is_one_line(tmp_path):
    cp = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli",
            "start",
            "--id",
            "1",
            "--data-dir",
            str(tmp_path),
            "--override",
            "log.retention.ms=forever",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert_one_line_error(cp, "log.retention.ms")
    conf = tmp_path / "server.properties"
    conf.write_text("broker.id=1\nno.such.key=1\n")
    cp = subprocess.run(
        [sys.executable, "-m", "broker.cli", "start", "--config", str(conf)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert_one_line_error(cp, "no.such.key")


def test_broker_configs_describes_the_effective_config(tmp_path):
    conf = tmp_path / "server.properties"
    conf.write_text("broker.id=4\nlog.segment.bytes=2048\n")
    cmd = [sys.executable, "-m", "broker.cli", "configs", "--config", str(conf), "--override", "port=9999"]
    cp = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[0] == "All configs for broker 4 are:"
    assert "  port=9999 sensitive=false synonyms={STATIC_BROKER_CONFIG:port=9999}" in lines
    assert "  log.segment.bytes=2048 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=2048}" in lines
    assert "  num.partitions=1 sensitive=false synonyms={DEFAULT_CONFIG:num.partitions=1}" in lines
    cp = subprocess.run(cmd + ["--override", "port=x"], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert_one_line_error(cp, "'port': expected an integer")
    # a password-type key is never printed (Kafka's sensitive=true, value null)
    jaas = 'sasl.jaas.config=x required username="broker" password="s3cret";'
    cp = subprocess.run(cmd + ["--override", jaas], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert "s3cret" not in cp.stdout
    assert "  sasl.jaas.config=null sensitive=true synonyms={STATIC_BROKER_CONFIG:sasl.jaas.config=null}" in cp.stdout


def test_broker_format_writes_the_first_users_once(tmp_path):
    """kl-broker format (kafka-storage.sh format --add-scram): specs from stdin, salted on disk."""
    conf = tmp_path / "server.properties"
    conf.write_text(f"broker.id=1\nlog.dirs={tmp_path / 'data'}\n")
    fmt = [sys.executable, "-m", "broker.cli", "format", "--config", str(conf)]
    specs = "SCRAM-SHA-256=[name=admin,password=pw-admin-1]\n# a comment\nSCRAM-SHA-512=[name=broker,password=pw-b-2]\n"
    cp = subprocess.run([*fmt, "--add-scram-file", "-"], input=specs, capture_output=True, text=True, cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == f"Formatted {tmp_path / 'data'} with 2 SCRAM credential(s)"
    records = (tmp_path / "data/bootstrap.records").read_text()
    assert '"name": "admin"' in records and '"name": "broker"' in records and "pw-admin-1" not in records
    again = subprocess.run([*fmt, "--add-scram-file", "-"], input=specs, capture_output=True, text=True, cwd=ROOT)
    assert_one_line_error(again, "already formatted")
    ok = subprocess.run([*fmt, "--ignore-formatted"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and "already formatted" in ok.stdout
    assert (tmp_path / "data/bootstrap.records").read_text() == records
    (tmp_path / "data/bootstrap.records").unlink()
    bad = subprocess.run([*fmt, "--add-scram", "SCRAM-SHA-256=[name=x]"], capture_output=True, text=True, cwd=ROOT)
    assert_one_line_error(bad, "has no password")


def test_producing_to_a_missing_topic_creates_it_as_kafka_does(broker_factory):
    """auto.create.topics.enable (default true): kl-produce to a new topic creates it with num.partitions; a
    consumer never creates one; with the setting off the producer gets UNKNOWN_TOPIC_OR_PARTITION."""
    b = broker_factory(extra=["--override", "num.partitions=2"])
    bs = ["--bootstrap-server", b.bootstrap]
    cp = run("produce", *bs, "--topic", "quickstart-events", stdin="hello\nworld\n")
    assert cp.returncode == 0, cp.stderr
    cp = run("consume", *bs, "--topic", "quickstart-events", "--from-beginning", "--max-messages", "2")
    assert cp.returncode == 0 and sorted(cp.stdout.split()) == ["hello", "world"]
    assert "PartitionCount: 2" in run("topics", *bs, "--describe", "--topic", "quickstart-events").stdout
    waited = run("consume", *bs, "--topic", "never", "--timeout-ms", "100")  # waits for it, as Kafka's does
    assert waited.returncode == 0 and "'never' does not exist yet" in waited.stderr, waited.stderr
    assert "never" not in run("topics", *bs, "--list").stdout
    off = broker_factory(extra=["--override", "auto.create.topics.enable=false"])
    cp = run("produce", "--bootstrap-server", off.bootstrap, "--topic", "nope", stdin="x\n")
    assert_one_line_error(cp, "UNKNOWN_TOPIC_OR_PARTITION")


def test_command_config_files_and_alter_partitions(broker, tmp_path):
    """--command-config FILE (Java properties, Kafka's names) on every CLI, checked by the client's config
    schema; kl-topics --alter --partitions grows a topic as kafka-topics.sh does."""
    bs = ["--bootstrap-server", broker.bootstrap]
    good = tmp_path / "client.properties"
    good.write_text("# as Kafka's tools take it\nclient.id = ops-tools\nrequest.timeout.ms=15000\n")
    assert (
        run("topics", *bs, "--command-config", str(good), "--create", "--topic", "cc", "--partitions", "1").returncode
        == 0
    )
    cp = run("topics", *bs, "--command-config", str(good), "--alter", "--topic", "cc", "--partitions", "3")
    assert cp.returncode == 0, cp.stderr
    assert "PartitionCount: 3" in run("topics", *bs, "--describe", "--topic", "cc").stdout
    assert_one_line_error(run("topics", *bs, "--alter", "--topic", "cc", "--partitions", "2"), "INVALID_PARTITIONS")
    producer_cfg = tmp_path / "producer.properties"
    producer_cfg.write_text("linger.ms=1\ncompression.type=zstd\nacks=all\n")
    cp = run("produce", *bs, "--topic", "cc", "--command-config", str(producer_cfg), "--partition", "0", stdin="z\n")
    assert cp.returncode == 0, cp.stderr
    cp = run("consume", *bs, "--topic", "cc", "--command-config", str(good), "--from-beginning", "--max-messages", "1")
    assert cp.returncode == 0 and cp.stdout.strip() == "z"
    assert run("groups", *bs, "--command-config", str(good), "--list").returncode == 0
    bad = tmp_path / "bad.properties"
    bad.write_text("request.timeout.ms=soon\n")
    assert_one_line_error(run("topics", *bs, "--command-config", str(bad), "--list"), "request.timeout.ms")
    bad.write_text("no.such.key=1\n")
    assert_one_line_error(
        run("groups", *bs, "--command-config", str(bad), "--list"), "unknown admin config 'no.such.key'"
    )
    assert_one_line_error(run("topics", *bs, "--command-config", str(tmp_path / "nope"), "--list"), "no such file")
    cp = subprocess.run(
        [sys.executable, "-m", "client.dashboard", *bs, "--command-config", str(bad), "--http-port", "1"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert_one_line_error(cp, "unknown admin config")


def test_topics_replica_assignment_as_kafka_topics_takes_it(broker):
    """--replica-assignment on --create and --alter (the existing partitions' lists skipped), and its errors."""
    bs = ["--bootstrap-server", broker.bootstrap]
    me = str(broker.broker_id)
    cp = run("topics", *bs, "--create", "--topic", "placed", "--replica-assignment", f"{me},{me}")
    assert cp.returncode == 0 and cp.stdout.strip() == "Created topic placed.", cp.stderr
    cp = run(
        "topics", *bs, "--alter", "--topic", "placed", "--partitions", "3", "--replica-assignment", f"{me},{me},{me}"
    )
    assert cp.returncode == 0, cp.stderr
    described = run("topics", *bs, "--describe", "--topic", "placed").stdout
    assert described.count(f"Replicas: {me}\t") == 3, described
    assert_one_line_error(
        run("topics", *bs, "--create", "--topic", "x", "--replica-assignment", f"{me}:7"), "INVALID_REPLICA_ASSIGNMENT"
    )
    assert_one_line_error(run("topics", *bs, "--create", "--topic", "x", "--replica-assignment", "1:b"), "broker ids")
    assert_one_line_error(
        run("topics", *bs, "--create", "--topic", "x", "--partitions", "2", "--replica-assignment", me),
        "replaces --partitions",
    )
