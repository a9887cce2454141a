"""Kafka clients log in over SASL as they would to Kafka (issue 24 §1), on one SASL_PLAINTEXT broker with
SCRAM-SHA-256 and PLAIN: Debian's kcat (librdkafka 2.0.2, which needs SaslHandshake v0 advertised and sends
a SCRAM nonce Kafka tolerates) produces and consumes; kafka-python speaking SaslHandshake v0 logs in with bare
token frames; and v0 logins that go wrong (garbage, a wrong password, an oversized token frame, a request
instead of a token) are refused and closed while the broker keeps serving. The client-quota apis are used on a
connection logged in that way."""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from broker.network.kafka.entities import plain
from net.errors import ErrorCode
from net.security import SaslClient
from tests.integration.cluster_harness import ClusterHarness, wait_until
from tests.integration.test_kafka_clients import need
from tests.integration.test_kafka_protocol_errors import closed, frame, read_frame

kafka = pytest.importorskip("kafka", reason="pip install -e '.[test]' (kafka-python)")

MAX_RECEIVE = 65536  # sasl.server.max.receive.size here


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with ClusterHarness(
        tmp_path_factory.mktemp("ksasl"),
        1,
        overrides=[
            "security.protocol=SASL_PLAINTEXT",
            "sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN",
            f"sasl.server.max.receive.size={MAX_RECEIVE}",
        ],
        extra_args=["--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]"],
        client_config={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_username": "admin",
            "sasl_password": "admin-secret",
        },
    ).running() as h:
        yield h


def kcat_login(h: ClusterHarness, mechanism: str, password: str = "admin-secret") -> list[str]:
    return [
        "-b", h.kafka_bootstrap(), "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanism={mechanism}",
        "-X", "sasl.username=admin", "-X", f"sasl.password={password}",
    ]  # fmt: skip


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_kcat_produces_and_consumes_with_sasl(broker, mechanism):
    kcat = need("kcat", "apt-get install -y kcat")
    topic = f"kcat-{mechanism.lower()}"
    broker.create_topic(topic, 1, 1)
    lines = "".join(f"k{i}:{mechanism}-{i}\n" for i in range(20))
    login = kcat_login(broker, mechanism)
    put = subprocess.run(
        [kcat, "-P", *login, "-t", topic, "-K:", "-X", "acks=all"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert put.returncode == 0 and "SASL" not in put.stderr, put.stderr
    got = subprocess.run(
        [kcat, "-C", *login, "-t", topic, "-o", "beginning", "-e", "-f", "%k=%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [f"k{i}={mechanism}-{i}" for i in range(20)]
    # and the same records through our own client's SCRAM login on the native listener
    from client import Consumer

    with Consumer(broker.bootstrap(), auto_offset_reset="earliest", **broker.client_config) as c:
        c.assign([(topic, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(seen) < 20 and time.monotonic() < deadline:
            seen += [r.value for r in c.poll(1000)]
    assert seen == [f"{mechanism}-{i}".encode() for i in range(20)]


def test_kcat_with_a_wrong_password_is_told_so(broker):
    kcat = need("kcat", "apt-get install -y kcat")
    bad = subprocess.run(
        [kcat, "-L", *kcat_login(broker, "SCRAM-SHA-256", "guess"), "-m", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0
    assert "SASL authentication error: Authentication failed during authentication due to invalid credentials" in (
        bad.stderr
    )


def test_kafka_python_logs_in_with_sasl_handshake_v0(broker):
    """kafka-python told the broker is 0.11 uses SaslHandshake v0, then bare size-prefixed SCRAM tokens."""
    import kafka.protocol.sasl as sasl

    broker.create_topic("v0-login", 1, 1)
    bare: list[int] = []
    encode = sasl.SaslBytesRequest.encode

    def counting(self, *args, **kwargs):  # counts the bare token frames the client really sends
        bare.append(len(self._data))
        return encode(self, *args, **kwargs)

    login = dict(
        bootstrap_servers=broker.kafka_bootstrap(),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="admin",
        sasl_plain_password="admin-secret",
        api_version=(0, 11, 0),
    )
    sasl.SaslBytesRequest.encode = counting
    try:
        p = kafka.KafkaProducer(acks="all", **login)
        for i in range(5):
            p.send("v0-login", f"v0-{i}".encode())
        p.flush(20)
        p.close()
        c = kafka.KafkaConsumer("v0-login", auto_offset_reset="earliest", **login)
        values: list[bytes] = []
        deadline = time.monotonic() + 30  # waits on the records, not a fixed time (a busy machine is slow)
        while len(values) < 5 and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=1000).values():
                values += [m.value for m in records]
        c.close()
    finally:
        sasl.SaslBytesRequest.encode = encode
    assert values == [f"v0-{i}".encode() for i in range(5)]
    assert bare and len(bare) % 2 == 0  # two SCRAM tokens per login, each a bare frame


# --- by hand: the bare-token framing, and what an attacker can send after a v0 handshake --------------------


def connect(h: ClusterHarness) -> socket.socket:
    return socket.create_connection(("127.0.0.1", h[1].kafka_port), timeout=10)


def handshake_v0(s: socket.socket, mechanism: str) -> None:
    s.sendall(frame(17, 0, 1, {"mechanism": mechanism}))
    body = read_frame(s)
    corr, code = struct.unpack_from(">ih", body)
    assert (corr, code) == (1, 0)


def bare(token: bytes) -> bytes:
    return struct.pack(">i", len(token)) + token


def read_bare(s: socket.socket) -> bytes:
    head = s.recv(4, socket.MSG_WAITALL)
    assert len(head) == 4, "connection closed"
    return s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)


def metadata_works(s: socket.socket, corr: int = 9) -> bool:
    s.sendall(frame(3, 1, corr, {"topics": None}))
    return struct.unpack_from(">i", read_frame(s))[0] == corr


def test_bare_tokens_after_a_v0_handshake_log_in(broker):
    with connect(broker) as s:  # PLAIN: one token, answered by an empty bare frame
        handshake_v0(s, "PLAIN")
        s.sendall(bare(b"\0admin\0admin-secret"))
        assert read_bare(s) == b""
        assert metadata_works(s)
    with connect(broker) as s:  # SCRAM: two tokens, the server-first and the server-final come back bare
        handshake_v0(s, "SCRAM-SHA-256")
        client = SaslClient("SCRAM-SHA-256", "admin", "admin-secret")
        s.sendall(bare(client.first()))
        s.sendall(bare(client.step(read_bare(s))))
        client.step(read_bare(s))  # checks the server's signature
        assert metadata_works(s)


def refused(h: ClusterHarness, s: socket.socket, within: float = 5.0) -> bool:
    """The broker answers nothing more and closes `s` (after connection.failed.authentication.delay.ms)."""
    s.settimeout(within)
    return closed(s)


@pytest.mark.parametrize(
    "attack",
    ["garbage", "wrong-plain-password", "wrong-scram-proof", "oversized-token", "a-request-instead-of-a-token"],
)
def test_bad_v0_logins_are_refused_closed_and_harmless(broker, attack):
    why = f"exceeds the limit of {MAX_RECEIVE}" if attack == "oversized-token" else "failed login"
    seen_before = broker[1].logs().count(why)
    t0 = time.monotonic()
    with connect(broker) as s:
        if attack == "garbage":
            handshake_v0(s, "SCRAM-SHA-256")
            s.sendall(bare(b"\xff\xfe\x00 not a scram message ,,,=="))
        elif attack == "wrong-plain-password":
            handshake_v0(s, "PLAIN")
            s.sendall(bare(b"\0admin\0guess"))
        elif attack == "wrong-scram-proof":
            handshake_v0(s, "SCRAM-SHA-256")
            client = SaslClient("SCRAM-SHA-256", "admin", "guess")
            s.sendall(bare(client.first()))
            s.sendall(bare(client.step(read_bare(s))))
        elif attack == "oversized-token":
            handshake_v0(s, "SCRAM-SHA-256")
            s.sendall(struct.pack(">i", 64 * 1024 * 1024) + b"n,,n=admin,r=")  # 64 MiB announced, a few sent
        else:  # a Kafka request where the first token belongs: read as a token, and refused
            handshake_v0(s, "PLAIN")
            s.sendall(frame(3, 1, 5, {"topics": None}))
        assert refused(broker, s)
    # refused at once, not after a 64 MiB wait or the 10 s login timeout
    assert time.monotonic() - t0 < 5
    assert broker[1].alive
    with connect(broker) as s:  # the broker keeps serving: a good login on a new connection
        handshake_v0(s, "PLAIN")
        s.sendall(bare(b"\0admin\0admin-secret"))
        assert read_bare(s) == b"" and metadata_works(s)
    logs = broker[1].logs()
    assert "Traceback" not in logs and logs.count(why) > seen_before


def test_a_refused_handshake_closes_the_connection(broker):
    with connect(broker) as s:
        s.sendall(frame(17, 1, 3, {"mechanism": "GSSAPI"}))
        corr, code = struct.unpack_from(">ih", read_frame(s))
        assert (corr, code) == (3, 33)  # UNSUPPORTED_SASL_MECHANISM, then closed as Kafka does
        assert refused(broker, s)


def test_frames_before_the_login_are_bounded_by_sasl_server_max_receive_size(broker):
    with connect(broker) as s:  # a SaslAuthenticate v1 whose frame is larger than the bound: closed at its prefix
        s.sendall(struct.pack(">i", MAX_RECEIVE + 1) + b"\x00\x24\x00\x01")
        assert refused(broker, s)


def kafka_call(s: socket.socket, api_key: int, body: dict, corr: int) -> dict:
    """One v1 (flexible) request of `api_key` on a logged-in connection, and its answer as plain data."""
    s.sendall(frame(api_key, 1, corr, body))
    raw = read_frame(s)
    assert struct.unpack_from(">i", raw)[0] == corr
    entity, _ = entity_reader(load_response_schema(api_key, 1))(raw, 5)  # correlation id, no tagged fields
    return plain(entity)


def test_client_quotas_over_the_kafka_listener(broker):
    """AlterClientQuotas / DescribeClientQuotas (KIP-546) after a v0 login: set, filter, remove; our own admin
    client reads the same quotas over the native listener."""
    from client import Admin

    def entity(**names: str | None) -> list[dict]:
        return [{"entity_type": t.replace("_", "-"), "entity_name": n} for t, n in names.items()]

    def alter(s: socket.socket, entries: list[tuple[list[dict], dict]], validate_only: bool = False) -> list:
        body = {
            "entries": [
                {"entity": e, "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()]}
                for e, ops in entries
            ],
            "validate_only": validate_only,
        }
        return [(r["error_code"], r["error_message"]) for r in kafka_call(s, 49, body, 21)["entries"]]

    def describe(s: socket.socket, *components: tuple[str, int, str | None], strict: bool = False) -> dict:
        body = {"components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components]}
        answer = kafka_call(s, 48, {**body, "strict": strict}, 22)
        assert answer["error_code"] == 0, answer
        return {
            tuple((e["entity_type"], e["entity_name"]) for e in row["entity"]): {
                v["key"]: v["value"] for v in row["values"]
            }
            for row in answer["entries"]
        }

    alice, alice_app, default_client = (
        (("user", "alice"),),
        (("user", "alice"), ("client-id", "app")),
        (("client-id", None),),
    )
    with connect(broker) as s:
        handshake_v0(s, "PLAIN")
        s.sendall(bare(b"\0admin\0admin-secret"))
        assert read_bare(s) == b""
        assert alter(s, [(entity(user="alice"), {"producer_byte_rate": 1e6})], validate_only=True) == [
            (int(ErrorCode.INVALID_REQUEST), "validate_only is not supported for client quotas")
        ]
        assert describe(s, ("user", 0, "alice")) == {}  # nothing was changed
        assert alter(
            s,
            [
                (entity(user="alice"), {"producer_byte_rate": 1e6}),
                (entity(user="alice", client_id="app"), {"consumer_byte_rate": 2e6}),
                (entity(client_id=None), {"request_percentage": 50.0}),
                (entity(ip="10.0.0.1"), {"producer_byte_rate": 1.0}),
            ],
        ) == [(0, None), (0, None), (0, None), (int(ErrorCode.INVALID_REQUEST), "entity types are user and client-id")]
        wait_until(lambda: len(describe(s)) == 3, 10, "the quotas in this broker's metadata")
        assert describe(s, ("user", 0, "alice")) == {
            alice: {"producer_byte_rate": 1e6},
            alice_app: {"consumer_byte_rate": 2e6},
        }
        assert describe(s, ("user", 0, "alice"), strict=True) == {alice: {"producer_byte_rate": 1e6}}
        assert describe(s, ("client-id", 1, None)) == {default_client: {"request_percentage": 50.0}}
        assert describe(s, ("client-id", 2, None)) == {alice_app: {"consumer_byte_rate": 2e6}}
        with Admin(broker.bootstrap(), **broker.client_config) as a:
            assert a.describe_client_quotas() == {
                alice: {"producer_byte_rate": 1e6},
                alice_app: {"consumer_byte_rate": 2e6},
                default_client: {"request_percentage": 50.0},
            }
        assert alter(s, [(entity(user="alice"), {"producer_byte_rate": None})]) == [(0, None)]
        wait_until(lambda: describe(s, ("user", 0, "alice"), strict=True) == {}, 10, "alice's quota removed")
