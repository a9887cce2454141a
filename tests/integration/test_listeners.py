"""Kafka's named listeners (issue 27 §3), on one 3-broker cluster laid out as kafkajs's fixtures lay Kafka out:
PLAINTEXT, SSL and SASL_SSL Kafka-wire listeners on each broker (any free ports here), plus a native-wire
client listener (CLIENTS) next to the built-in NATIVE, KAFKA and BROKER ones. A real Kafka client
(confluent-kafka) produces and consumes on each listener; Metadata answers each with the brokers' endpoints of
the listener it came in on (PLAINTEXT advertises the host name `localhost`, the others `127.0.0.1`: internal
and external addresses); an anonymous client on the SASL listener is refused; a client listener refuses what
only brokers send (a forged BrokerRegistration on a named native-wire listener, and on NATIVE)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from net.connection import BrokerConnection
from net.errors import ErrorCode
from net.protocol import ApiKey
from tests.integration.cluster_harness import ClusterHarness, wait_until
from tests.integration.test_ports import KL, free_layout

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install -e '.[test]' (confluent-kafka)")
from confluent_kafka.admin import AdminClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MECH = "SCRAM-SHA-256"
# kafkajs's layout: one listener per security protocol (Kafka's default map names each by its protocol).
KAFKAJS_LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
ADVERTISED = {"PLAINTEXT": "localhost", "SSL": "127.0.0.1", "SASL_SSL": "127.0.0.1", "CLIENTS": "127.0.0.1"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(d), "broker", "127.0.0.1", "localhost"], check=True)
    return d


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, certs):
    h = ClusterHarness(
        tmp_path_factory.mktemp("listeners"),
        3,
        overrides=[
            # The same config on every broker: port 0 is any free port, which Metadata then names.
            "listeners=PLAINTEXT://:0,SSL://:0,SASL_SSL://:0,CLIENTS://:0",
            "advertised.listeners=PLAINTEXT://localhost:0",
            "listener.security.protocol.map=CLIENTS:PLAINTEXT",
            "listener.wire.map=CLIENTS:native",
            # The SASL listener's own mechanisms (Kafka's per-listener prefix): the broker-wide one differs, so
            # the clients below log in only if the prefix is read.
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            f"listener.name.sasl_ssl.sasl.enabled.mechanisms={MECH}",
            "group.initial.rebalance.delay.ms=0",
            f"ssl.keystore.location={certs / 'broker.pem'}",
            f"ssl.truststore.location={certs / 'ca.pem'}",
        ],
        extra_args=["--add-scram", f"{MECH}=[name=alice,password=alice-secret]"],
    )
    try:
        h.start()
        # Each broker applies the registrations in its own time: wait until every one names every listener.
        wait_until(
            lambda: all(len(endpoints(h, name, via)) == 3 for name in ADVERTISED for via in (1, 2, 3)),
            30,
            "every listener registered, as every broker sees it",
        )
        yield h
    finally:
        h.cleanup()


def native_call(host: str, port: int, api_key: int, body: dict) -> dict:
    async def go() -> dict:
        conn = BrokerConnection(host, port, "listeners-test")
        await conn.connect(5)
        try:
            return await conn.request(api_key, body, timeout=10)
        finally:
            conn.close()

    return asyncio.run(go())


def endpoints(h: ClusterHarness, listener: str, via: int = 1) -> dict[int, tuple[str, int]]:
    """Every broker's endpoint of `listener`, as broker `via`'s native listener names them when asked for it."""
    md = native_call("127.0.0.1", h[via].port, ApiKey.METADATA, {"topics": [], "listener": listener})
    return {b[0]: (b[1], b[2]) for b in md["brokers"]}


def kafka_conf(h: ClusterHarness, listener: str, certs: Path) -> dict:
    eps = endpoints(h, listener)
    conf = {"bootstrap.servers": ",".join(f"{host}:{port}" for host, port in eps.values())}
    if "SSL" in listener:
        conf["security.protocol"] = listener
        conf["ssl.ca.location"] = str(certs / "ca.pem")
    if listener.startswith("SASL"):
        conf.update({"sasl.mechanism": MECH, "sasl.username": "alice", "sasl.password": "alice-secret"})
    return conf


@pytest.mark.parametrize("listener", KAFKAJS_LISTENERS)
def test_each_listener_serves_a_kafka_client_and_names_its_own_endpoints(cluster, certs, listener):
    conf = kafka_conf(cluster, listener, certs)
    md = AdminClient(conf).list_topics(timeout=20)
    eps = endpoints(cluster, listener)
    # Kafka's rule: the brokers as the clients of this listener reach them, its advertised host and port.
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == eps
    assert {b.host for b in md.brokers.values()} == {ADVERTISED[listener]}
    assert len({port for _, port in eps.values()}) == 3  # each broker's own port
    topic = f"lst-{listener.lower()}"
    cluster.create_topic(topic, 3)
    p = confluent_kafka.Producer(conf)
    sent = [f"{listener}-{i}".encode() for i in range(30)]
    for v in sent:
        p.produce(topic, v)
    assert p.flush(30) == 0
    c = confluent_kafka.Consumer(dict(conf, **{"group.id": f"g-{listener}", "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got: list[bytes] = []

    def consumed_all() -> bool:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        return len(got) >= len(sent)

    try:
        wait_until(consumed_all, 60, f"every record consumed on {listener}")
    finally:
        c.close()
    assert sorted(got) == sorted(sent)


def test_internal_and_external_addresses_differ_by_listener(cluster):
    """The same brokers, named by each listener's advertised host: localhost for PLAINTEXT, 127.0.0.1 else."""
    plain, ssl_eps, kafka_eps = (endpoints(cluster, n) for n in ("PLAINTEXT", "SSL", "KAFKA"))
    assert set(plain) == set(ssl_eps) == set(kafka_eps) == {1, 2, 3}
    assert {h for h, _ in plain.values()} == {"localhost"}
    assert {h for h, _ in ssl_eps.values()} == {"127.0.0.1"}
    assert {b: p for b, (_, p) in kafka_eps.items()} == {b: cluster[b].kafka_port for b in (1, 2, 3)}
    # A native-wire client listener answers its own clients with its own endpoints, Kafka's rule too.
    clients = endpoints(cluster, "CLIENTS")
    host, port = clients[2]
    md = native_call(host, port, ApiKey.METADATA, {"topics": []})
    assert {b[0]: (b[1], b[2]) for b in md["brokers"]} == clients


def test_an_anonymous_client_is_refused_on_the_sasl_listener(cluster, certs):
    conf = kafka_conf(cluster, "SASL_SSL", certs)
    anonymous = {k: v for k, v in conf.items() if not k.startswith("sasl.")}
    anonymous["security.protocol"] = "SSL"  # TLS, but no login
    with pytest.raises(confluent_kafka.KafkaException):
        AdminClient(anonymous).list_topics(timeout=4)
    wrong = dict(conf, **{"sasl.password": "guess"})
    with pytest.raises(confluent_kafka.KafkaException):
        AdminClient(wrong).list_topics(timeout=4)
    assert AdminClient(conf).list_topics(timeout=20).brokers  # the listener still serves who logs in


def test_a_client_listener_refuses_broker_only_requests(cluster):
    host, port = endpoints(cluster, "CLIENTS")[1]
    forged = [["PLAINTEXT", "evil.example", 1, "kafka"]]
    body = {"broker_id": 1, "kafka_host": "evil.example", "kafka_port": 1, "listeners": forged}
    for where in ((host, port), ("127.0.0.1", cluster[1].port)):
        answer = native_call(*where, ApiKey.BROKER_REGISTRATION, body)
        assert answer["error_code"] == ErrorCode.INVALID_REQUEST, answer
        assert "inter-broker listener only" in answer["error_message"]
    # Nothing changed: every listener still names the real endpoints.
    assert {h for h, _ in endpoints(cluster, "PLAINTEXT").values()} == {"localhost"}


def test_kl_cluster_up_lays_listeners_out_per_broker(tmp_path):
    """`kl-cluster up --listeners` steps each broker's ports, as kafkajs's compose file gives each broker its
    own block of three; Metadata on broker 2's listener names both brokers' stepped ports."""
    base = free_layout(2, kafka=True, kafka_ports=4)  # all four listener ports checked free, not two of them
    lst = base + 300  # PLAINTEXT_HOST and EXTERNAL: base+300/301 on broker 1, base+302/303 on broker 2
    data = str(tmp_path / "kl")
    argv = ["up", "--brokers", "2", "--base-port", str(base), "--metrics-base-port", "-1", "--data-dir", data]
    argv += ["--listeners", f"PLAINTEXT_HOST://:{lst},EXTERNAL://:{lst + 1}", "--listener-port-step", "2"]
    argv += ["--advertised-listeners", f"PLAINTEXT_HOST://localhost:{lst}"]
    argv += ["--override", "listener.security.protocol.map=PLAINTEXT_HOST:PLAINTEXT,EXTERNAL:PLAINTEXT"]
    up = subprocess.run([*KL, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr

        def named(port: int) -> dict[int, tuple[str, int]]:
            """The brokers as a Kafka client that came in on `port` is told of them."""
            md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
            return {b.id: (b.host, b.port) for b in md.brokers.values()}

        want = {1: ("localhost", lst), 2: ("localhost", lst + 2)}
        wait_until(lambda: named(lst + 2) == want, 30, "both brokers' PLAINTEXT_HOST endpoints")
        # Asked on broker 2's EXTERNAL listener, librdkafka may send its Metadata to broker 1 (the brokers the
        # bootstrap answer named), which under load may not have applied broker 2's registration yet: Kafka's
        # brokers learn each other's registrations from the metadata log too, each at its own pace.
        external = {1: ("127.0.0.1", lst + 1), 2: ("127.0.0.1", lst + 3)}
        wait_until(lambda: named(lst + 3) == external, 30, "both brokers' EXTERNAL endpoints")
    finally:
        subprocess.run([*KL, "down", "--data-dir", data], cwd=ROOT, capture_output=True, timeout=60)
