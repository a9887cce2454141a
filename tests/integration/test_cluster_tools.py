"""kl-log-dirs (Kafka's kafka-log-dirs.sh) and kl-metadata-quorum (kafka-metadata-quorum.sh) against a broker with
two data directories, SASL logins and ACLs: each directory and the replicas it holds, with their sizes; the
quorum's status and replication; the flags' errors; and the tools as a user without DESCRIBE on the cluster and
as an anonymous peer, each refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.admin import NewTopic
from client.sync import Admin, Producer
from net.batch import iter_batches
from tests.conftest import ROOT, free_port
from tests.integration.test_cli import assert_one_line_error, run
from tests.waiting import wait_port, wait_until

ADMIN_LOGIN = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
               "sasl_username": "admin", "sasl_password": "admin-secret"}  # fmt: skip
LOGIN = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username={0}\nsasl.password={0}-secret\n"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("log-dirs")
    port = free_port()
    dirs = [tmp / "disk-a", tmp / "disk-b"]
    cmd = [sys.executable, "-m", "broker.cli", "start", "--id", "1", "--port", str(port)]
    cmd += ["--data-dir", ",".join(map(str, dirs))]
    for u in ("admin", "alice"):
        cmd += ["--add-scram", f"SCRAM-SHA-256=[name={u},password={u}-secret]"]
    for o in ("security.protocol=SASL_PLAINTEXT", "sasl.enabled.mechanisms=SCRAM-SHA-256", "authorizer=acl",
              "super.users=User:admin"):  # fmt: skip
        cmd += ["--override", o]
    log = open(tmp / "broker.log", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc=proc)
        for u in ("admin", "alice"):
            (tmp / f"{u}.properties").write_text(LOGIN.format(u))
        login = ADMIN_LOGIN
        bootstrap = f"127.0.0.1:{port}"
        with Admin(bootstrap, **login) as a:
            a.create_topics([NewTopic("spread", 4, 1), NewTopic("other", 1, 1), NewTopic("stamped", 1, 1)])
        with Producer(bootstrap, acks="all", **login) as p:
            for i in range(400):
                p.send("spread", b"v" * 100, partition=i % 4)
            for ts in [1000, 5000, 3000, 5000, 2000]:  # the largest timestamp first at offset 1
                p.send("stamped", b"s", partition=0, timestamp_ms=1_700_000_000_000 + ts)
            p.flush()
        yield {"bootstrap": bootstrap, "dirs": dirs, "tmp": tmp}
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def tool(broker: dict, user: str | None, *args: str, name: str = "log_dirs") -> subprocess.CompletedProcess:
    login = ["--command-config", str(broker["tmp"] / f"{user}.properties")] if user else []
    return run(name, "--bootstrap-server", broker["bootstrap"], *login, *args)


def quorum(broker: dict, user: str | None, *args: str) -> subprocess.CompletedProcess:
    return tool(broker, user, "describe", *args, name="metadata_quorum")


def test_describe_names_each_directory_and_the_replicas_it_holds(broker):
    cp = tool(broker, "admin", "--describe", "--topic-list", "spread")
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 1"]  # fmt: skip
    out = json.loads(lines[2])
    assert out["version"] == 1 and [b["broker"] for b in out["brokers"]] == [1]
    dirs = {d["logDir"]: d for d in out["brokers"][0]["logDirs"]}
    assert set(dirs) == {str(d) for d in broker["dirs"]}, "every data directory is listed"
    assert all(d["error"] is None for d in dirs.values())
    replicas = {p["partition"]: (name, p) for name, d in dirs.items() for p in d["partitions"]}
    assert sorted(replicas) == ["spread-0", "spread-1", "spread-2", "spread-3"], "only the topics asked for"
    assert {name for name, _ in replicas.values()} == set(dirs), "a new log goes to the emptier directory"
    for name, p in replicas.values():  # each size is the partition's files in that directory
        on_disk = sum(f.stat().st_size for f in (Path(name) / p["partition"]).glob("*.log"))
        assert p["size"] == on_disk > 100 * 100 and p["offsetLag"] == 0 and p["isFuture"] is False

    everything = json.loads(tool(broker, "admin", "--describe").stdout.splitlines()[2])
    listed = {p["partition"] for d in everything["brokers"][0]["logDirs"] for p in d["partitions"]}
    assert {"spread-0", "other-0"} <= listed


def test_bad_flags_are_one_line_errors(broker):
    assert_one_line_error(tool(broker, "admin"), "Must specify --describe")
    assert_one_line_error(
        tool(broker, "admin", "--describe", "--broker-list", "1,7"),
        "The given brokers do not exist from --broker-list: 7. Current existent brokers: 1",
    )
    for bad in ("x", "-1", ","):
        assert_one_line_error(tool(broker, "admin", "--describe", "--broker-list", bad), "--broker-list takes")
    cp = tool(broker, "admin", "--describe", "--topic-list", "no-such-topic")
    assert cp.returncode == 0, cp.stderr
    assert all(not d["partitions"] for d in json.loads(cp.stdout.splitlines()[2])["brokers"][0]["logDirs"])


def test_a_user_without_describe_on_the_cluster_and_an_anonymous_peer_are_refused(broker):
    assert_one_line_error(tool(broker, "alice", "--describe"), "CLUSTER_AUTHORIZATION_FAILED")
    cp = tool(broker, None, "--describe")  # no login on a SASL listener
    assert cp.returncode != 0 and "Traceback" not in cp.stderr
    assert "log directories" not in cp.stdout and "logDir" not in cp.stdout


def test_metadata_quorum_status_and_replication(broker):
    cp = quorum(broker, "admin", "--status")
    assert cp.returncode == 0, cp.stderr
    fields = dict(line.split(":", 1) for line in cp.stdout.splitlines())
    fields = {k: v.strip() for k, v in fields.items()}
    assert list(fields) == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                            "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]  # fmt: skip
    assert fields["LeaderId"] == "1" and fields["CurrentVoters"] == "[1]" and fields["CurrentObservers"] == "[]"
    assert int(fields["LeaderEpoch"]) >= 1 and int(fields["HighWatermark"]) > 0 and fields["ClusterId"]
    cp = quorum(broker, "admin", "--replication", "--human-readable")
    assert cp.returncode == 0, cp.stderr
    head, leader = (line.split() for line in cp.stdout.splitlines())
    assert head == ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    assert leader[0] == "1" and int(leader[1]) >= int(fields["HighWatermark"]) and leader[2] == "0"
    assert leader[-1] == "Leader" and leader[4:6] == ["ms", "ago"]
    assert_one_line_error(quorum(broker, "admin"), "One of --status or --replication must be specified")
    assert_one_line_error(quorum(broker, "admin", "--status", "--human-readable"), "only supported along with")
    assert_one_line_error(quorum(broker, "alice", "--status"), "CLUSTER_AUTHORIZATION_FAILED")
    cp = quorum(broker, None, "--status")
    assert cp.returncode != 0 and "Traceback" not in cp.stderr and "LeaderId" not in cp.stdout


def offsets(broker: dict, user: str | None, *args: str) -> subprocess.CompletedProcess:
    return tool(broker, user, *args, name="get_offsets")


def test_get_offsets_prints_each_partition_at_the_time_asked(broker):
    def lines(*args: str) -> list[str]:
        cp = offsets(broker, "admin", *args)
        assert cp.returncode == 0, cp.stderr
        return cp.stdout.splitlines()

    assert lines("--topic", "spread") == [f"spread:{p}:100" for p in range(4)]  # 400 records, 100 per partition
    assert lines("--topic", "spread", "--partitions", "1,3", "--time", "earliest") == ["spread:1:0", "spread:3:0"]
    assert lines("--topic-partitions", "spread:1-3,oth.*") == ["other:0:0", "spread:1:100", "spread:2:100"]
    assert lines("--topic", "stamped", "--time", "max-timestamp") == ["stamped:0:1"]  # KIP-734: the first at the max
    assert lines("--topic", "stamped", "--time", str(1_700_000_002_500)) == ["stamped:0:1"]  # first at/after it
    assert lines("--topic", "stamped", "--time", "0") == ["stamped:0:0"]
    assert lines("--topic", "stamped", "--time", str(1_700_000_005_001)) == []  # none that late: no line
    assert lines("--topic", "stamped,other") == ["other:0:0", "stamped:0:5"]  # a comma means "or", as Kafka's
    assert lines("--topic-partitions", "stamped:") == ["stamped:0:5"]  # `topic:` is every partition
    with Admin(broker["bootstrap"], **ADMIN_LOGIN) as a:  # a group's offsets: __consumer_offsets exists
        a.alter_group_offsets("g-offsets", {("spread", 0): 1})
    every = lines("--time", "-2")
    assert "other:0:0" in every and any(line.startswith("__") for line in every)
    assert not any(line.startswith("__") for line in lines("--exclude-internal-topics"))


def test_get_offsets_bad_input_and_refusals(broker):
    for args, needle in [
        (("--time", "soon"), "Malformed time argument soon"),
        (("--time", "-9"), "Malformed time argument -9"),
        (("--topic", "("), "is not a regular expression"),
        (("--partitions", "-1"), "--partitions takes"),
        (("--topic-partitions", "spread:x"), "Invalid topic-partition filter: spread:x"),
        (("--topic-partitions", "spread", "--topic", "spread"), "cannot be used with"),
        (("--topic", "nothing-matches"), "Could not match any topic-partitions"),
    ]:
        assert_one_line_error(offsets(broker, "admin", *args), needle)
    # alice may describe no topic: she is shown none, so nothing matches (Kafka's "authorized topics")
    assert_one_line_error(offsets(broker, "alice", "--topic", "spread"), "Could not match any topic-partitions")
    cp = offsets(broker, None, "--topic", "spread")
    assert cp.returncode != 0 and "Traceback" not in cp.stderr and "spread:" not in cp.stdout


def test_dump_log_prints_batches_records_markers_and_indexes(broker, tmp_path):
    with Admin(broker["bootstrap"], **ADMIN_LOGIN) as a:
        a.create_topics([NewTopic("dumped", 1, 1, configs={"index.interval.bytes": "0"})])
    with Producer(broker["bootstrap"], acks="all", compression_type="gzip", **ADMIN_LOGIN) as p:
        p.send("dumped", b"hello", key=b"k1", headers=[("h1", b"x")], timestamp_ms=1_700_000_000_000)
        p.flush()
        p.send("dumped", None, key=b"gone", timestamp_ms=1_700_000_000_500)
        p.flush()
    t = Producer(broker["bootstrap"], transactional_id="dump-tx", **ADMIN_LOGIN)
    t.init_transactions()
    t.begin_transaction()
    t.send("dumped", b"in-txn", timestamp_ms=1_700_000_001_000)
    t.commit_transaction()
    t.close()
    [segment] = [d / "dumped-0" / f"{0:020d}.log" for d in broker["dirs"] if (d / "dumped-0").exists()]
    # commit_transaction returns once the commit is decided; the marker is written in the background
    wait_until(lambda: len(list(iter_batches(segment.read_bytes()))) == 4, 30, "the commit marker written")
    index, time_index = segment.with_suffix(".index"), segment.with_suffix(".timeindex")

    cp = run("dump_log", "--files", f"{segment},{index},{time_index}", "--print-data-log")
    assert cp.returncode == 0, cp.stderr
    out = cp.stdout.splitlines()
    assert out[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    batches = [line for line in out if line.startswith("baseOffset:")]
    assert len(batches) == 4 and all(b.endswith("isvalid: true") for b in batches)
    assert "compresscodec: gzip" in batches[0] and "CreateTime: 1700000000000" in batches[0]
    assert "isTransactional: true isControl: true" in batches[3]
    records = [line for line in out if line.startswith("| offset:")]
    assert records[0].endswith("keySize: 2 valueSize: 5 sequence: 0 headerKeys: [h1] key: k1 payload: hello")
    assert records[1].endswith("valueSize: -1 sequence: 1 headerKeys: [] key: gone")  # a tombstone: no payload
    assert records[2].endswith("payload: in-txn")
    assert records[3].endswith("endTxnMarker: COMMIT coordinatorEpoch: 0")
    positions = [int(b.split(" position: ")[1].split()[0]) for b in batches]
    i = out.index(f"Dumping {index}")
    assert out[i + 1 : i + 5] == [f"offset: {o} position: {pos}" for o, pos in zip(range(4), positions, strict=True)]
    j = out.index(f"Dumping {time_index}")
    assert out[j + 1] == "timestamp: 1700000000000 offset: 0"

    # a copy with a flipped byte and a torn tail: the bad batch is marked invalid, the tail counted
    bad = tmp_path / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[positions[1] + 70] ^= 0xFF
    bad.write_bytes(bytes(data) + b"\x00\x00\x00")
    cp = run("dump_log", "--files", str(bad), "--deep-iteration")
    assert cp.returncode == 0, cp.stderr
    flags = [line.rsplit(" ", 1)[1] for line in cp.stdout.splitlines() if line.startswith("baseOffset:")]
    assert flags == ["true", "false", "true", "true"]
    assert cp.stdout.splitlines()[-1] == f"Found 3 invalid bytes at the end of {bad.name}"
    assert_one_line_error(run("dump_log", "--files", str(tmp_path / "missing.log")), "No such file")
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(b"\xff" * 100)
    cp = run("dump_log", "--files", str(garbage))
    assert cp.returncode == 0 and cp.stdout.splitlines()[-1] == "Found 100 invalid bytes at the end of garbage.log"


def loggers(broker: dict, user: str | None, *args: str) -> subprocess.CompletedProcess:
    return tool(broker, user, "--entity-type", "broker-loggers", *args, name="configs")


def test_broker_loggers_with_kl_configs_and_who_may_change_them(broker):
    """kl-configs --entity-type broker-loggers (kafka-configs.sh's): Kafka's lines, a level set and removed; alice,
    without DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster, and an anonymous peer can neither read nor change
    them; bad names are one-line errors and change nothing."""
    with Admin(broker["bootstrap"], **ADMIN_LOGIN) as a:
        inherited = a.describe_broker_loggers(1)["kafkalite.api"]
    cp = loggers(broker, "admin", "--describe", "--entity-name", "1")
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[0] == "Dynamic configs for broker-logger 1 are:"
    assert f"  kafkalite.api={inherited} sensitive=false synonyms={{}}" in lines
    names = [ln.split("=", 1)[0] for ln in lines[1:]]
    assert "  root" in names and names == sorted(names), "every logger, by name, as kafka-configs sorts them"
    cp = loggers(broker, "admin", "--alter", "--entity-name", "1", "--add-config", "kafkalite.api=TRACE")
    assert (cp.returncode, cp.stdout.strip()) == (0, "Completed updating config for broker-logger 1."), cp.stderr
    assert "  kafkalite.api=TRACE sensitive=false synonyms={}" in loggers(broker, "admin", "--describe").stdout
    assert loggers(broker, "admin", "--alter", "--entity-name", "1", "--delete-config", "kafkalite.api").returncode == 0
    with Admin(broker["bootstrap"], **ADMIN_LOGIN) as a:
        assert a.describe_broker_loggers(1)["kafkalite.api"] == inherited

    assert_one_line_error(loggers(broker, "alice", "--describe", "--entity-name", "1"), "CLUSTER_AUTHORIZATION_FAILED")
    assert_one_line_error(
        loggers(broker, "alice", "--alter", "--entity-name", "1", "--add-config", "root=OFF"),
        "CLUSTER_AUTHORIZATION_FAILED",
    )
    cp = loggers(broker, None, "--alter", "--entity-name", "1", "--add-config", "root=OFF")  # no login
    assert cp.returncode != 0 and "Traceback" not in cp.stderr and "Completed" not in cp.stdout
    assert_one_line_error(
        loggers(broker, "admin", "--alter", "--entity-name", "1", "--add-config", "nope=DEBUG"),
        "Invalid broker logger(s): nope",
    )
    assert_one_line_error(
        loggers(broker, "admin", "--alter", "--entity-name", "1", "--add-config", "root=LOUD"),
        "not a supported log level",
    )
    assert_one_line_error(loggers(broker, "admin", "--describe", "--entity-name", "x"), "valid integer broker id")
    assert_one_line_error(loggers(broker, "admin", "--describe", "--entity-name", "7"), "broker 7 is not in")
    with Admin(broker["bootstrap"], **ADMIN_LOGIN) as a:
        after = a.describe_broker_loggers(1)
    assert after["kafkalite.api"] == inherited and after["root"] != "OFF", "nothing refused was applied"
