"""The rest of issue 25's probe (§5), each attack done against a real broker: password guessing is slowed to one
answer per connection.failed.authentication.delay.ms while other clients are served; Kafka frames sent before a
login are not parsed, and null arrays after it cost the sender its connection, never a traceback; silent TLS
connections are cut at connections.max.unauthenticated.ms from accept and the broker's memory comes back after
such a flood; PLAIN over a plaintext listener is warned about at start."""

from __future__ import annotations

import selectors
import socket
import statistics
import struct
import threading
import time
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client import Admin, NewTopic
from net.protocol import ApiKey
from tests.integration.cluster_harness import ClusterHarness
from tests.integration.test_fuzz_security import LOGIN, rss_kb
from tests.integration.test_kafka_protocol_errors import closed, frame, read_frame

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)
DELAY_S = 0.1  # connection.failed.authentication.delay.ms: Kafka's default, not overridden here


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with ClusterHarness(
        tmp_path_factory.mktemp("hardening"),
        1,
        overrides=["security.protocol=SASL_PLAINTEXT", "sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN"],
        extra_args=["--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]"],
        client_config=LOGIN,
    ).running() as h:
        yield h


def native_frame(api: int, body: object, corr: int = 1) -> bytes:
    payload = msgpack.packb([api, 0, corr, "guess", body], use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def native_answer(s: socket.socket) -> dict:
    head = s.recv(4, socket.MSG_WAITALL)
    assert len(head) == 4, "connection closed"
    return msgpack.unpackb(s.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL), raw=False)[1]


def guess_native(port: int, password: str) -> float:
    """One PLAIN guess on a new connection to the native listener: how long its answer took."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(native_frame(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"}))
        assert native_answer(s)["error_code"] == 0
        t0 = time.monotonic()
        s.sendall(native_frame(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": f"\0admin\0{password}".encode()}, 2))
        assert native_answer(s)["error_code"] == 58  # SASL_AUTHENTICATION_FAILED
        return time.monotonic() - t0


def kafka_login(s: socket.socket, password: str) -> int:
    """SaslHandshake v1 + SaslAuthenticate v0 with PLAIN on the Kafka listener: the answer's error code."""
    s.sendall(frame(17, 1, 1, {"mechanism": "PLAIN"}))
    read_frame(s)
    s.sendall(frame(36, 0, 2, {"auth_bytes": f"\0admin\0{password}".encode()}))
    body = read_frame(s)
    return struct.unpack_from(">h", body, 4)[0]  # SaslAuthenticate v0: correlation id, then error_code


def guess_kafka(port: int, password: str) -> float:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.monotonic()
        assert kafka_login(s, password) == 58
        return time.monotonic() - t0


def test_plain_over_a_plaintext_listener_is_warned_about(broker):
    logs = broker[1].logs()
    for listener in ("native", "kafka"):
        assert f"the {listener} listener accepts SASL PLAIN without TLS" in logs


def test_password_guessing_is_slowed_and_other_clients_are_served(broker):
    b = broker[1]
    # One connection at a time, on each listener: every wrong password waits the delay before its answer.
    for guess in (guess_native, guess_kafka):
        port = b.port if guess is guess_native else b.kafka_port
        t0 = time.monotonic()
        took = [guess(port, f"guess{i}") for i in range(8)]
        rate = len(took) / (time.monotonic() - t0)
        assert min(took) >= DELAY_S * 0.95, f"{guess.__name__}: a wrong password answered in {min(took):.3f}s"
        assert rate <= 1 / DELAY_S, f"{guess.__name__}: {rate:.0f} guesses/s on one connection"
        print(f"{guess.__name__}: {rate:.1f} guesses/s on one connection")
    # Ten guessers at once, while a logged-in client asks for metadata: the guessers get at most ten answers
    # per delay, and the delay is a timer, not a stall (a sleeping event loop would hold every request).
    guesses: list[float] = []
    stop = threading.Event()

    def guesser(n: int) -> None:
        while not stop.is_set():
            guesses.append(guess_native(b.port, f"g{n}"))

    with Admin(broker.bootstrap(), **LOGIN) as a:
        a.list_topics()
        threads = [threading.Thread(target=guesser, args=(n,)) for n in range(10)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        served = []
        while time.monotonic() - t0 < 2.0:
            r0 = time.monotonic()
            a.list_topics()
            served.append(time.monotonic() - r0)
        stop.set()
        for t in threads:
            t.join(20)
        elapsed = time.monotonic() - t0
    rate = len(guesses) / elapsed
    assert guesses and min(guesses) >= DELAY_S * 0.95
    assert rate <= 10 / DELAY_S, f"{rate:.0f} guesses/s over ten connections"
    assert len(served) >= 10 and statistics.median(served) < DELAY_S, (
        f"metadata while guessed at: {len(served)} answers, median {statistics.median(served) * 1000:.0f} ms"
    )
    print(
        f"guesses/s over ten connections: {rate:.1f}; metadata meanwhile: median"
        f" {statistics.median(served) * 1000:.1f} ms"
    )


# Requests of many apis (versions before flexible encoding, so an array length is an int32), some with a null
# array: sent before a login (never parsed) and after one. Each with whether nulling its first one-element array
# is refused (the schema forbids null there: the connection is closed) or answered (null means "all").
NULLED = [
    (frame(3, 4, 7, {"topics": [{"name": "t"}]}), False),
    (frame(0, 3, 7, {"acks": 1, "timeout": 100, "topic_data": [{"name": "t", "partition_data": []}]}), True),
    (frame(15, 0, 7, {"groups": ["g"]}), True),
    (frame(19, 4, 7, {"topics": [{"name": "x", "num_partitions": 1, "replication_factor": 1}], "timeout": 1000}), True),
    (frame(32, 3, 7, {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": ["a"]}]}), True),
    (frame(2, 1, 7, {"replica_id": -1, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}), True),
]
KAFKA_FRAMES = [f for f, _ in NULLED] + [
    frame(3, 9, 7, {"topics": None}),
    frame(9, 8, 7, {"groups": [{"group_id": "g"}]}),
]
API_VERSIONS = frame(18, 3, 4242, {"client_software_name": "t", "client_software_version": "1"})


def _null_at_first_array(data: bytes) -> bytes:
    """The same frame with its first one-element legacy array length (int32 1) set to -1."""
    at = data.find(b"\x00\x00\x00\x01", 14)
    assert at > 0
    return data[:at] + b"\xff\xff\xff\xff" + data[at + 4 :]


def answered_or_closed(s: socket.socket) -> bool:
    """Send ApiVersions behind what was sent: True once its answer arrives (everything before it was
    answered), False if the broker closed the connection first."""
    s.sendall(API_VERSIONS)
    try:
        while True:
            if struct.unpack_from(">i", read_frame(s))[0] == 4242:
                return True
    except (AssertionError, OSError):
        return False


@st.composite
def kafka_frames(draw) -> bytes:
    data = draw(st.sampled_from(KAFKA_FRAMES))
    kind = draw(st.sampled_from(["as is", "null array", "mutated"]))
    if kind == "null array" and data.find(b"\x00\x00\x00\x01", 14) > 0:
        return _null_at_first_array(data)
    if kind == "mutated":
        b = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            b[draw(st.integers(4, len(b) - 1))] = draw(st.integers(0, 255))
        return bytes(b)
    return data


def test_kafka_frames_before_and_after_login_never_cost_a_traceback(broker):
    b = broker[1]
    examples = 0

    @settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(kafka_frames(), st.booleans())
    def one(data: bytes, logged_in: bool) -> None:
        nonlocal examples
        examples += 1
        with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=5) as s:
            if logged_in:
                assert kafka_login(s, "admin-secret") == 0
            s.sendall(data)
            if not logged_in:  # anything but the login before it: closed unanswered
                assert closed(s)
            else:  # answered, or this connection closed: either way the broker goes on
                answered_or_closed(s)
        assert b.alive

    one()
    assert examples == 120
    for data, refused in NULLED:  # a null where the schema forbids it closes this connection; else answered
        with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=5) as s:
            assert kafka_login(s, "admin-secret") == 0
            s.sendall(_null_at_first_array(data))
            assert answered_or_closed(s) is not refused, data[4:8]
    with Admin(broker.bootstrap(), **LOGIN) as a:  # still serving
        a.create_topics([NewTopic("after-fuzz", 1, 1)])
        assert "after-fuzz" in a.list_topics()
    logs = b.logs()
    assert "Traceback" not in logs and "NoneType" not in logs
    assert "non-nullable field" in logs


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    import subprocess

    certs = tmp_path_factory.mktemp("certs")
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(certs), "broker", "127.0.0.1"], check=True)
    with ClusterHarness(
        tmp_path_factory.mktemp("tlsflood"),
        1,
        overrides=[
            "security.protocol=SASL_SSL",
            f"ssl.keystore.location={certs / 'broker.pem'}",
            "connections.max.unauthenticated.ms=2000",
        ],
        extra_args=["--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]"],
        client_config={**LOGIN, "security_protocol": "SASL_SSL", "ssl_ca_location": str(certs / "ca.pem")},
    ).running() as h:
        yield h


FLOOD = 2000
DEADLINE_S = 2.0


def test_silent_tls_connections_are_cut_at_the_deadline_and_memory_comes_back(tls_broker):
    """Connections that never send a ClientHello (half to each listener) are closed by the broker
    connections.max.unauthenticated.ms after it accepted them, and its RSS returns near where it was."""
    b = tls_broker[1]
    assert b.proc is not None
    with Admin(tls_broker.bootstrap(), **tls_broker.client_config) as a:
        a.list_topics()  # the broker's steady state, a TLS login included
    rss_before = rss_kb(b.proc.pid)
    sel = selectors.DefaultSelector()
    opened: dict[socket.socket, float] = {}
    cut: dict[socket.socket, float] = {}
    try:
        for i in range(FLOOD):
            s = socket.create_connection(("127.0.0.1", b.kafka_port if i % 2 else b.port), timeout=10)
            opened[s] = time.monotonic()
            sel.register(s, selectors.EVENT_READ)
        last_open = time.monotonic()
        rss_peak = rss_kb(b.proc.pid)
        while len(cut) < FLOOD and time.monotonic() - last_open < DEADLINE_S + 15:
            for key, _ in sel.select(0.5):
                s = key.fileobj  # type: ignore[assignment]
                try:
                    gone = s.recv(1) == b""
                except OSError:
                    gone = True
                if gone:
                    cut[s] = time.monotonic()
                    sel.unregister(s)
        # Each is closed at the deadline from its accept; the broker may accept the last ones (up to its
        # backlog of 1,024) a few seconds after they connected, on a busy machine: asyncio's own default
        # kept every one open for 60 s.
        assert len(cut) == FLOOD, f"{FLOOD - len(cut)} silent TLS connections still open"
        assert max(cut.values()) - last_open <= DEADLINE_S + 8
        assert min(cut[s] - opened[s] for s in cut) >= DEADLINE_S * 0.9
    finally:
        for s in opened:
            s.close()
        sel.close()

    def settled() -> int:
        return rss_kb(b.proc.pid)

    deadline = time.monotonic() + 10
    while settled() - rss_before > 30_000 and time.monotonic() < deadline:
        time.sleep(0.5)
    rss_after = settled()
    print(f"RSS before {rss_before // 1024} MB, during the flood {rss_peak // 1024} MB, after {rss_after // 1024} MB")
    assert rss_after - rss_before <= 30_000, f"RSS {rss_before // 1024} -> {rss_after // 1024} MB after the flood"
    with Admin(tls_broker.bootstrap(), **tls_broker.client_config) as a:
        assert isinstance(a.list_topics(), (list, dict, set))  # still serving TLS logins
