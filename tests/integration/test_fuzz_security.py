"""Hypothesis fuzzing of both listeners of a SASL broker (issue 14 §7): random, truncated and mutated frames,
SaslHandshake (v0 with its bare token frames, v1) and SaslAuthenticate (native msgpack and Kafka binary) sent
before, during and instead of a login. The broker must not crash, stall (a real login and produce still work
between examples), grow without bound, or lose what was written."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client import Admin, Consumer, NewTopic, Producer
from net.protocol import ApiKey
from net.security import SaslClient
from tests.conftest import free_port, wait_port

ROOT = Path(__file__).resolve().parents[2]
# KL_SOAK=1: ten times the examples, from a fresh random seed each run (the suite's run is derandomized).
SOAK = os.environ.get("KL_SOAK") == "1"
EXAMPLES = 1500 if SOAK else 150
pytestmark = pytest.mark.timeout(2400 if SOAK else 240)
LOGIN = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "SCRAM-SHA-256",
    "sasl_username": "admin",
    "sasl_password": "admin-secret",
}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzzsec")
    port, kport = free_port(), free_port()
    log = open(d / "broker.log", "wb")
    proc = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/kl-broker"), "start", "--id", "1", "--port", str(port), "--kafka-port", str(kport),
            "--data-dir", str(d / "data"), "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
            "--override", "security.protocol=SASL_PLAINTEXT",
            "--override", "sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN",
            "--override", "connections.max.unauthenticated.ms=2000",
            "--override", "socket.partial.request.timeout.ms=1000",
            "--override", "connection.failed.authentication.delay.ms=0",
        ],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_port(port, proc=proc)
        wait_port(kport, proc=proc)
        yield proc, port, kport, d / "broker.log"
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def native_frame(api: int, body: object, corr: int = 1) -> bytes:
    payload = msgpack.packb([api, 0, corr, "fuzz", body], use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def kafka_frame(api: int, version: int, body: bytes, corr: int = 1) -> bytes:
    header = struct.pack(">hhih", api, version, corr, 4) + b"fuzz"
    return struct.pack(">i", len(header) + len(body)) + header + body


def kafka_str(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def templates() -> list[tuple[str, bytes]]:
    first = SaslClient("SCRAM-SHA-256", "admin", "admin-secret", c_nonce="fuzznonce").first()
    return [
        ("native", native_frame(ApiKey.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"})),
        ("native", native_frame(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": first})),
        ("native", native_frame(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": b"\0admin\0guess"})),
        ("native", native_frame(ApiKey.METADATA, {"topics": None})),
        ("kafka", kafka_frame(17, 1, kafka_str(b"SCRAM-SHA-256"))),
        ("kafka", kafka_frame(17, 0, kafka_str(b"SCRAM-SHA-256"))),  # then bare tokens (pre-KIP-152)
        ("kafka", struct.pack(">i", len(first)) + first),  # a bare SASL token frame
        ("kafka", kafka_frame(36, 0, struct.pack(">i", len(first)) + first)),
        ("kafka", kafka_frame(18, 3, b"\x00\x00\x00")),
        # other apis before the login, with null arrays (issue 25 §5): closed unparsed, never a traceback
        ("kafka", kafka_frame(3, 4, struct.pack(">i", -1) + b"\x01")),  # Metadata v4, topics null
        ("kafka", kafka_frame(15, 0, struct.pack(">i", -1))),  # DescribeGroups v0, groups null (non-nullable)
        ("kafka", kafka_frame(0, 3, kafka_str(b"") + struct.pack(">hii", 1, 100, -1))),  # Produce v3, null data
    ]


TEMPLATES = templates()


@st.composite
def conversations(draw) -> tuple[str, list[bytes]]:
    """A listener and the byte chunks sent on one connection: valid login frames, mutated or cut."""
    listener = draw(st.sampled_from(["native", "kafka"]))
    chunks = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["template", "mutated", "truncated", "random"]))
        t = draw(st.sampled_from([f for lst, f in TEMPLATES if lst == listener]))
        if kind == "template":
            chunks.append(t)
        elif kind == "mutated":
            b = bytearray(t)
            for _ in range(draw(st.integers(1, 6))):
                b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
            chunks.append(bytes(b))
        elif kind == "truncated":
            chunks.append(t[: draw(st.integers(0, len(t) - 1))])
        else:
            chunks.append(draw(st.binary(min_size=1, max_size=64)))
    return listener, chunks


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fill(port: int, topic: str, n: int) -> None:
    """Create `topic` (one partition) and write v0..v<n-1> to it, logged in as admin."""
    with Admin(f"127.0.0.1:{port}", **LOGIN) as a:
        a.create_topics([NewTopic(topic, 1, 1)])
    with Producer(f"127.0.0.1:{port}", **LOGIN) as p:
        for i in range(n):
            p.send(topic, f"v{i}".encode())
        p.flush(20)


def test_fuzzed_logins_on_both_listeners(sasl_broker):
    proc, port, kport, log = sasl_broker
    fill(port, "kept", 100)
    rss_before = rss_kb(proc.pid)
    examples = 0

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not SOAK, suppress_health_check=[HealthCheck.too_slow])
    @given(conversations())
    def one(conv: tuple[str, list[bytes]]) -> None:
        nonlocal examples
        examples += 1
        listener, chunks = conv
        with socket.create_connection(("127.0.0.1", port if listener == "native" else kport), timeout=5) as s:
            for c in chunks:
                try:
                    s.sendall(c)
                except OSError:
                    break  # the broker closed it: that is allowed
            s.settimeout(0.2)
            try:
                while s.recv(65536):
                    pass
            except (TimeoutError, OSError):
                pass
        assert proc.poll() is None, "the broker died"
        if examples % 25 == 0:  # not stalled: a real login and a write are served at once
            t0 = time.monotonic()
            with Producer(f"127.0.0.1:{port}", **LOGIN) as p:
                p.send("kept", b"probe")
                p.flush(10)
            assert time.monotonic() - t0 < 10

    one()
    assert examples == EXAMPLES
    # no unbounded memory: connections and half-read frames are gone once closed
    assert rss_kb(proc.pid) - rss_before < 100_000, "broker RSS grew by more than 100 MB"
    # data intact: every record written before and during the fuzzing reads back, in order
    with Consumer(f"127.0.0.1:{port}", auto_offset_reset="earliest", **LOGIN) as c:
        c.assign([("kept", 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 106 and time.monotonic() < deadline:
            got += [r.value for r in c.poll(1000)]
    assert got[:100] == [f"v{i}".encode() for i in range(100)] and got[100:] == [b"probe"] * 6
    assert "Traceback" not in log.read_text()
