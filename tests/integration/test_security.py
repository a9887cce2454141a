"""Security as users meet it (issue 14), on one 3-broker SASL_SSL cluster with the ACL authorizer on:
real Kafka clients and ours log in with SCRAM over TLS, wrong passwords and plaintext clients are refused,
ACLs decide (and survive a controller failover), and a forged broker message changes nothing."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import msgpack
import pytest

from client import Consumer, Producer
from client.admin import NewTopic
from client.sync import Admin
from net.acl import AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType, ResourceType
from net.errors import ErrorCode, KafkaLiteError, SaslAuthenticationError
from net.protocol import ApiKey
from tests.integration.cluster_harness import ClusterHarness, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
kafka = pytest.importorskip("kafka", reason="pip install -e '.[test]' (kafka-python)")

ROOT = Path(__file__).resolve().parents[2]
MECH = "SCRAM-SHA-256"
BROKER_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-secret";'


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(d), "broker", "127.0.0.1", "localhost"], check=True)
    return d


def sasl_ssl_cluster(root: Path, n: int, certs: Path) -> ClusterHarness:
    """n brokers with SASL_SSL on every listener, SCRAM users admin and broker, the ACL authorizer on."""
    overrides = [
        "security.protocol=SASL_SSL",
        f"sasl.enabled.mechanisms={MECH},SCRAM-SHA-512",
        f"sasl.mechanism.inter.broker.protocol={MECH}",
        f"sasl.jaas.config={BROKER_JAAS}",
        f"ssl.keystore.location={certs / 'broker.pem'}",
        f"ssl.truststore.location={certs / 'ca.pem'}",
        "authorizer=acl",
        "super.users=User:admin;User:broker",
        "connections.max.unauthenticated.ms=3000",
    ]
    scram = [f"{MECH}=[name=admin,password=admin-secret]", f"{MECH}=[name=broker,password=b-secret]"]
    return ClusterHarness(
        root,
        n,
        overrides=overrides,
        extra_args=[x for s in scram for x in ("--add-scram", s)],
        client_config=ours("admin", "admin-secret", certs),
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, certs):
    h = sasl_ssl_cluster(tmp_path_factory.mktemp("secure"), 3, certs)
    try:
        h.start()
        yield h
    finally:
        h.cleanup()


def ours(user: str, password: str, certs: Path) -> dict:
    """Our clients' keyword arguments (librdkafka's key names with '_')."""
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": MECH,
        "sasl_username": user,
        "sasl_password": password,
        "ssl_ca_location": str(certs / "ca.pem"),
    }


def kafka_conf(cluster: ClusterHarness, user: str, password: str, certs: Path) -> dict:
    return {
        "bootstrap.servers": cluster.kafka_bootstrap(),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECH,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(certs / "ca.pem"),
    }


def add_user(cluster: ClusterHarness, user: str, password: str) -> None:
    """As on Kafka, a new login reaches each broker through the cluster metadata a moment after the
    controller accepted it: wait until every running broker takes it."""
    with cluster.admin() as a:
        a.alter_user_scram_credentials([(user, MECH, password, 4096)])
    login = dict(cluster.client_config, sasl_username=user, sasl_password=password)

    def accepted(b: int) -> bool:
        with Admin(cluster.bootstrap([b]), request_timeout_ms=5000, **login) as a:
            return a.list_topics() is not None

    for b in cluster.brokers:
        wait_until(lambda b=b: accepted(b), 20, f"{user}'s login on broker {b}")


def grant(cluster: ClusterHarness, principal: str, op: AclOperation, rt: ResourceType, name: str) -> None:
    with cluster.admin() as a:
        a.create_acls([AclBinding(rt, name, PatternType.LITERAL, principal, "*", op, AclPermission.ALLOW)])


def cli(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".venv/bin" / tool), *args], capture_output=True, text=True, timeout=60)


def test_kafka_clients_and_ours_log_in_with_scram_over_tls(cluster, certs):
    cluster.create_topic("secure-t", 2)
    conf = kafka_conf(cluster, "admin", "admin-secret", certs)
    p = confluent_kafka.Producer(conf)
    for i in range(20):
        p.produce("secure-t", f"ck-{i}".encode())
    assert p.flush(20) == 0
    kp = kafka.KafkaProducer(
        bootstrap_servers=cluster.kafka_bootstrap(),
        security_protocol="SASL_SSL",
        sasl_mechanism=MECH,
        sasl_plain_username="admin",
        sasl_plain_password="admin-secret",
        ssl_cafile=str(certs / "ca.pem"),
    )
    kp.send("secure-t", b"kafka-python").get(20)
    kp.close()
    with Producer(cluster.bootstrap(), **ours("admin", "admin-secret", certs)) as ours_p:
        ours_p.send("secure-t", b"native")
        ours_p.flush(20)
    with Consumer(cluster.bootstrap(), auto_offset_reset="earliest", **ours("admin", "admin-secret", certs)) as c:
        c.assign([("secure-t", 0), ("secure-t", 1)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 22 and time.monotonic() < deadline:
            got += [r.value for r in c.poll(1000)]
    assert sorted(got) == sorted([f"ck-{i}".encode() for i in range(20)] + [b"kafka-python", b"native"])


def test_kcat_produces_and_consumes_over_sasl_ssl(cluster, certs):
    """Debian's kcat (librdkafka 2.0.2) over SCRAM and TLS: tests/integration/test_kafka_sasl.py has SASL_PLAINTEXT."""
    from tests.integration.test_kafka_clients import need

    kcat = need("kcat", "apt-get install -y kcat")
    cluster.create_topic("secure-kcat", 1)
    login = [f"-X{k}={v}" for k, v in kafka_conf(cluster, "admin", "admin-secret", certs).items()]
    put = subprocess.run(
        [kcat, "-P", *login, "-t", "secure-kcat", "-X", "acks=all"],
        input="".join(f"tls-{i}\n" for i in range(10)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert put.returncode == 0, put.stderr
    got = subprocess.run(
        [kcat, "-C", *login, "-t", "secure-kcat", "-o", "beginning", "-e", "-f", "%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0 and got.stdout.splitlines() == [f"tls-{i}" for i in range(10)], got.stderr


def test_describe_configs_never_shows_the_brokers_password(cluster, certs):
    """Kafka's PASSWORD keys: a broker's sasl.jaas.config is described as sensitive with no value."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(kafka_conf(cluster, "admin", "admin-secret", certs))
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([res])[res].result(20)
    jaas = configs["sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None
    assert configs["security.protocol"].value == "SASL_SSL" and not configs["security.protocol"].is_sensitive
    assert all("b-secret" not in (c.value or "") for c in configs.values())


def test_wrong_password_and_plaintext_clients_are_refused(cluster, certs):
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        with Admin(cluster.bootstrap(), request_timeout_ms=5000, **ours("admin", "nope", certs)) as a:
            a.list_topics()
    r = cli("kl-topics", "--bootstrap-server", cluster.bootstrap(), "--list")  # PLAINTEXT to a TLS listener
    assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0
    # confluent-kafka with a wrong password: librdkafka reports an authentication error
    errors: list = []
    bad = confluent_kafka.Producer({**kafka_conf(cluster, "admin", "nope", certs), "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        bad.poll(0.5)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors
    assert "invalid credentials" in errors[0].str()
    # TLS without the CA: the handshake fails, nothing is sent in the clear
    with socket.create_connection(("127.0.0.1", cluster[1].port), timeout=5) as s:
        ctx = ssl.create_default_context()
        with pytest.raises(ssl.SSLError):
            ctx.wrap_socket(s, server_hostname="127.0.0.1")


def test_acls_decide_what_alice_may_do(cluster, certs, tmp_path):
    add_user(cluster, "alice", "alice-secret")
    props = tmp_path / "admin.properties"
    props.write_text(
        f"security.protocol=SASL_SSL\nsasl.mechanism={MECH}\nsasl.username=admin\nsasl.password=admin-secret\n"
        f"ssl.ca.location={certs / 'ca.pem'}\n"
    )
    r = cli(
        "kl-acls", "--bootstrap-server", cluster.bootstrap(), "--command-config", str(props),
        "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in r.stdout
    cluster.create_topic("orders", 3)
    alice = ours("alice", "alice-secret", certs)
    with Producer(cluster.bootstrap(), **alice) as p:
        for i in range(10):
            p.send("orders", f"o{i}".encode(), key=b"k")
        p.flush(20)

    def consume(group: str | None = None) -> list:
        kw = {"group_id": group} if group else {}
        with Consumer(cluster.bootstrap(), auto_offset_reset="earliest", **kw, **alice) as c:
            if group:
                c.subscribe(["orders"])
            else:
                c.assign([("orders", p) for p in range(3)])
            got: list = []
            deadline = time.monotonic() + 15
            while len(got) < 10 and time.monotonic() < deadline:
                got += c.poll(1000)
            return got

    with pytest.raises(KafkaLiteError) as e:
        consume()
    assert e.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    grant(cluster, "User:alice", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert len(wait_until(lambda: consume(), 20, "alice reads orders once granted Read")) == 10
    with pytest.raises(KafkaLiteError) as e:
        consume("alice-group")  # READ on the group is still missing
    assert e.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    grant(cluster, "User:alice", AclOperation.READ, ResourceType.GROUP, "alice-group")
    assert len(wait_until(lambda: consume("alice-group"), 30, "alice consumes in her group")) == 10
    # Metadata hides what alice may not describe; deleting needs DELETE
    cluster.create_topic("hidden", 1)
    with Admin(cluster.bootstrap(), **alice) as a:
        assert "orders" in a.list_topics() and "hidden" not in a.list_topics()
    alice_props = tmp_path / "alice.properties"
    alice_props.write_text(props.read_text().replace("admin-secret", "alice-secret").replace("=admin", "=alice"))
    r = cli("kl-topics", "--bootstrap-server", cluster.bootstrap(), "--command-config", str(alice_props),
            "--delete", "--topic", "orders")  # fmt: skip
    assert r.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in r.stderr and "Traceback" not in r.stderr
    with cluster.admin() as a:
        assert "orders" in a.list_topics()


def test_acls_survive_a_controller_failover(cluster, certs):
    grant(cluster, "User:carol", AclOperation.DESCRIBE, ResourceType.TOPIC, "failover")
    before = cluster.controller_id()
    cluster.kill(before)
    try:
        others = [b for b in cluster.brokers if b != before]
        wait_until(lambda: cluster.controller_id() in others, 30, "a new controller")
        with cluster.admin(others) as a:
            found = a.describe_acls(AclBindingFilter(principal="User:carol"))
        assert [(b.resource_name, b.operation) for b in found] == [("failover", AclOperation.DESCRIBE)]
        grant(cluster, "User:carol", AclOperation.WRITE, ResourceType.TOPIC, "failover")  # the new controller commits
    finally:
        cluster.restart(before)
    with cluster.admin([before]) as a:
        wait_until(
            lambda: len(a.describe_acls(AclBindingFilter(principal="User:carol"))) == 2,
            20,
            "the restarted broker's ACLs",
        )


def test_leader_elections_need_alter_on_the_cluster(cluster, certs, tmp_path):
    """ElectLeaders (issue 24 §3) needs ALTER on the cluster, as in Kafka: without it a user is refused on both
    listeners and by kl-leader-election, and nothing moves; granted it, the same user's election is answered."""
    import os
    import sys

    from client.topic_partition import TopicPartition
    from net.acl import CLUSTER_NAME
    from net.protocol import ElectionType

    cluster.create_topic("elect-t", 2)
    add_user(cluster, "erin", "e-secret")
    grant(cluster, "User:erin", AclOperation.DESCRIBE, ResourceType.TOPIC, "elect-t")  # describing is not enough
    asked = [TopicPartition("elect-t", 0)]
    erin = ours("erin", "e-secret", certs)
    with Admin(cluster.bootstrap(), **erin) as a:
        with pytest.raises(KafkaLiteError) as e:
            a.elect_leaders(ElectionType.PREFERRED, asked)
        assert e.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    from confluent_kafka.admin import AdminClient

    ck_admin = AdminClient(kafka_conf(cluster, "erin", "e-secret", certs))
    ck_asked = [confluent_kafka.TopicPartition("elect-t", 0)]
    with pytest.raises(confluent_kafka.KafkaException) as ke:
        ck_admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED, ck_asked).result(30)
    assert ke.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    props = tmp_path / "erin.properties"
    props.write_text(
        f"security.protocol=SASL_SSL\nsasl.mechanism={MECH}\nsasl.username=erin\nsasl.password=e-secret\n"
        f"ssl.ca.location={certs / 'ca.pem'}\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "client.cli.leader_election", "--bootstrap-server", cluster.bootstrap(),
         "--command-config", str(props), "--election-type", "PREFERRED", "--all-topic-partitions"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "Error: Not authorized to perform leader election: CLUSTER_AUTHORIZATION_FAILED: User:erin is not "
        "authorized to ALTER the cluster (ElectLeaders)"
    ]
    grant(cluster, "User:erin", AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)

    def answered() -> bool:
        with Admin(cluster.bootstrap(), **erin) as a:
            outcome = a.elect_leaders(ElectionType.PREFERRED, asked)[asked[0]]
        return outcome is not None and outcome.code == ErrorCode.ELECTION_NOT_NEEDED

    wait_until(answered, 20, "erin's election answered once she may ALTER the cluster")


def _metadata(cluster: ClusterHarness, broker: int) -> dict:
    with cluster.admin([broker]) as a:
        return a._lt.run(a._impl.client.request(None, ApiKey.METADATA, {"topics": []}))


def test_a_forged_broker_message_changes_nothing(cluster, certs):
    """The frame of the issue: a made-up BeginEpoch for epoch 1,000,000. Unauthenticated, it is answered
    "log in first" and the connection closed; from a logged-in user without ClusterAction it is refused and
    logged. Either way no epoch moves and the controller stays."""
    cluster.wait_all_registered()
    before = {b: _metadata(cluster, b)["broker_info"]["controller_epoch"] for b in (1, 2, 3)}
    controller = cluster.controller_id()
    forged = msgpack.packb([int(ApiKey.QUORUM), 0, 1, "x", {"m": ["be", 1_000_000, 3]}], use_bin_type=True)
    frame = struct.pack(">I", len(forged)) + forged
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    for _ in range(8):
        for b in (1, 2):
            with socket.create_connection(("127.0.0.1", cluster[b].port), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.sendall(frame)
                    s.settimeout(5)
                    answer = b""
                    while chunk := s.recv(4096):  # read to the close
                        answer += chunk
                    # one answer saying a login is needed, then the connection closed: nothing ran
                    _corr, body = msgpack.unpackb(answer[4:], raw=False)
                    assert body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        time.sleep(0.25)
    add_user(cluster, "mallory", "m-secret")
    with Admin(cluster.bootstrap([1]), **ours("mallory", "m-secret", certs)) as a:
        conn = a._lt.run(a._impl.client.any_connection())
        for _ in range(4):
            conn.send(ApiKey.QUORUM, {"m": ["be", 1_000_000, 3]}, expect_response=False)
        body = a._lt.run(conn.request(ApiKey.ALTER_PARTITION, {"topic": "x", "partition": 0, "isr": [1]}))
        assert body["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    time.sleep(1.0)
    after = {b: _metadata(cluster, b)["broker_info"]["controller_epoch"] for b in (1, 2, 3)}
    assert after == before and cluster.controller_id() == controller
    assert "refused QUORUM from User:mallory" in cluster[1].logs()


def test_a_forged_heartbeat_keeps_no_paused_broker_alive(cluster, certs):
    """Heartbeats (broker/controller/heartbeat.py) are what keeps a broker with a busy event loop alive, so they
    are authenticated like every broker message. A paused broker, for which heartbeats are forged to the
    controller's heartbeat listener, without a login and as a user without ClusterAction, is fenced all the
    same; the forgeries are refused and logged."""
    import asyncio

    from net.connection import BrokerConnection
    from net.security import ClientSecurity

    cluster.wait_all_registered()
    add_user(cluster, "mallory", "m-secret")
    controller = cluster.controller_id()
    victim = max(b for b in cluster.brokers if b != controller)
    host, port = "127.0.0.1", cluster[controller].port
    as_admin = ClientSecurity("SASL_SSL", MECH, "admin", "admin-secret", str(certs / "ca.pem"))
    as_mallory = ClientSecurity("SASL_SSL", MECH, "mallory", "m-secret", str(certs / "ca.pem"))
    unauthenticated = ClientSecurity("SSL", ssl_ca_location=str(certs / "ca.pem"))
    forged = {"broker_id": victim, "incarnation": 1, "epoch": 1, "leader": controller}

    async def ask(security: ClientSecurity, at_port: int, body: dict, api: ApiKey = ApiKey.BROKER_HEARTBEAT) -> dict:
        conn = BrokerConnection(host, at_port, "forger", security)
        try:
            await conn.connect(timeout=10)
            return await conn.request(api, body, timeout=10)
        finally:
            conn.close()

    # The heartbeat api is refused on the client listener: to mallory for want of ClusterAction, and to the
    # admin too (brokers only, on their own listener). Where the heartbeat listener is, is no secret: the
    # native listener's ApiVersions names its port.
    assert (
        asyncio.run(ask(as_mallory, port, {"broker_id": victim}))["error_code"]
        == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    assert asyncio.run(ask(as_admin, port, {"broker_id": victim}))["error_code"] == ErrorCode.INVALID_REQUEST
    hb_port = asyncio.run(ask(as_mallory, port, {}, ApiKey.API_VERSIONS))["heartbeat_port"]
    cluster[victim].pause()
    try:
        paused_at = time.monotonic()
        fenced = False
        while not fenced and time.monotonic() - paused_at < 30:
            refused = asyncio.run(ask(as_mallory, hb_port, forged))
            assert refused["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            # Without a login the listener answers "log in first" and closes the connection.
            no_login = asyncio.run(ask(unauthenticated, hb_port, forged))
            assert no_login["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
            fenced = victim not in {b[0] for b in _metadata(cluster, controller).get("brokers") or []}
            time.sleep(0.5)
        took = time.monotonic() - paused_at
        assert fenced, f"broker {victim}, paused, still registered {took:.0f}s later under forged heartbeats"
        assert took < 9 + 5, f"fenced {took:.1f}s after the pause (broker.session.timeout.ms 9 s)"
    finally:
        cluster[victim].resume()
    assert "refused a heartbeat from User:mallory" in cluster[controller].logs()
    cluster.wait_all_registered(60)


def test_a_silent_connection_is_cut_before_logging_in(cluster, certs):
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with socket.create_connection(("127.0.0.1", cluster[1].port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            t0 = time.monotonic()
            s.settimeout(10)
            assert s.recv(1) == b""  # connections.max.unauthenticated.ms=3000 in this cluster
            assert 2.5 < time.monotonic() - t0 < 8


def test_the_short_form_of_the_readme(tmp_path):
    """Issue 14 §8, exactly: one command line turns on SASL_PLAINTEXT, SCRAM and the authorizer; the admin
    from --add-scram creates alice, grants her Write on orders and creates the topic with the CLIs."""
    from tests.conftest import free_port, wait_port

    port, kport = free_port(), free_port()
    log = open(tmp_path / "broker.log", "wb")
    proc = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/kl-broker"), "start", "--id", "1", "--port", str(port), "--kafka-port", str(kport),
            "--data-dir", str(tmp_path / "d1"),
            "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
            "--override", "security.protocol=SASL_PLAINTEXT", "--override", "sasl.enabled.mechanisms=SCRAM-SHA-256",
            "--override", "authorizer=acl", "--override", "super.users=User:admin",
        ],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_port(port, proc=proc)
        admin = tmp_path / "admin.properties"
        admin.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=admin\n"
            "sasl.password=admin-secret\n"
        )
        b, a = ["--bootstrap-server", f"127.0.0.1:{port}"], ["--command-config", str(admin)]
        steps = [
            ("kl-configs", *b, *a, "--alter", "--entity-type", "users", "--entity-name", "alice",
             "--add-config", "SCRAM-SHA-256=[password=alice-secret]"),
            ("kl-acls", *b, *a, "--add", "--allow-principal", "User:alice", "--operation", "Write",
             "--topic", "orders"),
            ("kl-topics", *b, *a, "--create", "--topic", "orders", "--partitions", "3"),
        ]  # fmt: skip
        for step in steps:
            done = cli(*step)
            assert done.returncode == 0 and "Traceback" not in done.stderr, (step, done.stderr)
        alice = {
            "bootstrap.servers": f"127.0.0.1:{kport}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        delivered: list = []
        p = confluent_kafka.Producer(alice)
        p.produce("orders", b"from alice", on_delivery=lambda err, msg: delivered.append(err))
        p.flush(20)
        assert delivered == [None]
        r = cli("kl-topics", *b, "--list")  # no login: one clear line
        assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr and "Traceback" not in r.stderr
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def test_mutual_tls_names_the_client_by_its_certificate(tmp_path, certs):
    """ssl.client.auth=required on an SSL listener: no certificate, no connection; with one, the principal is
    User:CN=<name>, which ACLs (here super.users) see."""
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(certs), "ops"], check=True, capture_output=True)
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(certs), "guest"], check=True, capture_output=True)
    from tests.conftest import free_port, wait_port

    port = free_port()
    log = open(tmp_path / "broker.log", "wb")
    proc = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/kl-broker"), "start", "--id", "1", "--port", str(port),
            "--data-dir", str(tmp_path / "d"),
            "--override", "security.protocol=SSL", "--override", "ssl.client.auth=required",
            "--override", f"ssl.keystore.location={certs / 'broker.pem'}",
            "--override", f"ssl.truststore.location={certs / 'ca.pem'}",
            "--override", "authorizer=acl", "--override", "super.users=User:CN=ops;User:CN=broker",
        ],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def tls(name: str | None) -> dict:
        kw = {"security_protocol": "SSL", "ssl_ca_location": str(certs / "ca.pem"), "request_timeout_ms": 5000}
        if name:
            kw |= {
                "ssl_certificate_location": str(certs / f"{name}.crt"),
                "ssl_key_location": str(certs / f"{name}.key"),
            }
        return kw

    try:
        wait_port(port, proc=proc)
        with Admin(f"127.0.0.1:{port}", **tls("ops")) as a:  # a super user by its certificate
            wait_until(lambda: a.create_topics([NewTopic("mtls", 1, 1)]) is None, 20, "ops creates a topic")
            assert "mtls" in a.list_topics()
        with Admin(f"127.0.0.1:{port}", **tls("guest")) as a:  # a valid certificate, but no ACL: sees nothing
            assert "mtls" not in a.list_topics()
        with pytest.raises(KafkaLiteError):  # no client certificate: the TLS handshake is refused
            with Admin(f"127.0.0.1:{port}", **tls(None)) as a:
                a.list_topics()
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def test_acls_and_users_persist_in_zookeeper_mode(tmp_path_factory, certs):
    """Credentials and ACLs are metadata records: in ZooKeeper mode too they survive a restart of the cluster."""
    from tests.integration.zk_support import require_zookeeper

    require_zookeeper()
    h = ClusterHarness(
        tmp_path_factory.mktemp("zk-secure"),
        1,
        coordination="zookeeper",
        overrides=[
            "security.protocol=SASL_PLAINTEXT",
            f"sasl.enabled.mechanisms={MECH}",
            "authorizer=acl",
            "super.users=User:admin",
        ],  # fmt: skip
        extra_args=["--add-scram", f"{MECH}=[name=admin,password=admin-secret]"],
        client_config={k: v for k, v in ours("admin", "admin-secret", certs).items() if k != "ssl_ca_location"}
        | {"security_protocol": "SASL_PLAINTEXT"},
    )
    try:
        h.start()
        add_user(h, "zed", "zed-secret")
        grant(h, "User:zed", AclOperation.READ, ResourceType.TOPIC, "zk-topic")
        h.restart(1)
        h.wait_all_registered()
        with h.admin() as a:
            assert a.describe_user_scram_credentials(["zed"]) == {"zed": [(MECH, 4096)]}
            acls = a.describe_acls(AclBindingFilter(principal="User:zed"))
        assert [(b.resource_name, b.operation) for b in acls] == [("zk-topic", AclOperation.READ)]
    finally:
        h.cleanup()
