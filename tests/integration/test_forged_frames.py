"""Issue 25 §3: one forged frame must not break an open cluster.

On `kl-cluster up --brokers 3` (PLAINTEXT, the default), one unauthenticated native frame per broker,
`[52, 0, 1, "x", {"m": ["be", 2147483647, 3]}]`, used to force an election whose next epoch overflowed the
metadata log's int32 field (the controller crashed, every metadata change failed with NOT_CONTROLLER), and
with 2**63-1 the epoch 2**63 was persisted to quorum-state. Here the same frames, and the other requests
only brokers send each other, go to every listener of an open cluster: the native and Kafka listeners (which
serve clients and refuse broker-only requests), and the inter-broker and heartbeat listeners without the
cluster's secret (and with a wrong one). The controller and its epoch stay as they were, nothing out of range
is persisted, and a topic can be created right after, replicated between the brokers.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest

from net.connection import BrokerConnection
from net.errors import KafkaLiteError
from net.messages import decode, encode
from net.protocol import TYPED_SINCE, ApiKey
from net.schema.fetch import FetchPartition, FetchRequest, FetchTopic
from net.schema.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from net.schema.messages import MESSAGES
from net.security import ClientSecurity
from net.wire_types import INT32_MAX
from tests.integration.cluster_harness import HOST, wait_until
from tests.integration.test_ports import free_layout

ROOT = Path(__file__).resolve().parents[2]
KL = [sys.executable, "-m", "client.cli.cluster"]
N = 3
EPOCHS = (2**31 - 1, 2**63 - 1)


def native_frame(api: int, body: Any, corr: int = 1) -> bytes:
    """A native request: a map body in version 0, a typed message (net/schema/) in its typed version."""
    version = 0
    if not isinstance(body, dict):
        version, body = TYPED_SINCE[api], encode(body)
    payload = msgpack.packb([api, version, corr, "x", body], use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def kafka_frame(api: int, corr: int = 1) -> bytes:
    """A Kafka request header v1 (api key, version 0, correlation id, client id "x") with an empty body."""
    payload = struct.pack(">hhih", api, 0, corr, 1) + b"x"
    return struct.pack(">I", len(payload)) + payload


def forged_bodies(victim: int) -> list[tuple[int, Any]]:
    """The attack: quorum messages with huge epochs, and every other request only brokers send."""
    out: list[tuple[int, Any]] = []
    for epoch in EPOCHS:
        out += [
            (ApiKey.QUORUM, {"m": ["be", epoch, victim]}),
            (ApiKey.QUORUM, {"m": ["es", epoch, victim, epoch, epoch, 0]}),
            (ApiKey.QUORUM, {"m": ["ev", epoch, victim, victim]}),
        ]
    out += [
        (ApiKey.ALTER_PARTITION, {"topic": "t", "partition": 0, "leader": victim, "leader_epoch": 2**31 - 1,
                                  "partition_epoch": 2**63 - 1, "isr": [victim]}),
        (ApiKey.BROKER_REGISTRATION, {"broker_id": victim, "kafka_host": "evil.example", "kafka_port": 1}),
        (ApiKey.BROKER_HEARTBEAT, {"broker_id": victim, "incarnation": 1, "epoch": 2**31 - 1, "leader": victim}),
        (ApiKey.UPDATE_METADATA, {"applied": 2**40, "timeout_ms": 60_000}),
        (ApiKey.ENVELOPE, {"api_key": 43, "request": [1, None, 60000], "principal": "User:admin"}),
        (ApiKey.FETCH, {"replica_id": victim, "max_wait_ms": 0, "topics": [["__cluster_metadata", [[0, 0, 1024]]]]}),
        # The typed follower request (native v1): a follower's fetch. (ListOffsets with a replica id is served to
        # clients, as Kafka does: test_list_offsets_with_a_replica_id_reads_no_internal_log below.)
        (ApiKey.FETCH, FetchRequest(replica_id=victim, topics=(FetchTopic(topic="__cluster_metadata", partitions=(
            FetchPartition(partition_max_bytes=1024),)),))),
        (ApiKey.CREATE_TOPICS, {"forwarded": True, "topics": [{"name": "forged", "num_partitions": 1,
                                                                "replication_factor": 1}]}),
    ]  # fmt: skip
    return out


def exchange(port: int, frames: list[bytes], timeout: float = 3.0) -> bytes:
    """Send `frames` on one connection and read what comes back until the broker closes it or goes quiet."""
    got = b""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(b"".join(frames))
        s.settimeout(1.0)
        try:
            while chunk := s.recv(65536):
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return got


def answers(raw: bytes) -> list[dict]:
    out, pos = [], 0
    while pos + 4 <= len(raw):
        (n,) = struct.unpack_from(">I", raw, pos)
        out.append(msgpack.unpackb(raw[pos + 4 : pos + 4 + n], raw=False, strict_map_key=False)[1])
        pos += 4 + n
    return out


def request(port: int, api: ApiKey, body: dict, security: ClientSecurity | None = None) -> dict:
    async def go() -> dict:
        conn = BrokerConnection(HOST, port, "attacker", security)
        try:
            await conn.connect(timeout=5)
            return await conn.request(api, body, timeout=10)
        finally:
            conn.close()

    return asyncio.run(go())


def send_oneway(port: int, api: ApiKey, body: dict, security: ClientSecurity) -> None:
    async def go() -> None:
        conn = BrokerConnection(HOST, port, "attacker", security)
        try:
            await conn.connect(timeout=5)
            conn.send(api, body, expect_response=False)
            await conn.request(ApiKey.API_VERSIONS, {}, timeout=10)  # answered after the one-way message
        finally:
            conn.close()

    asyncio.run(go())


@pytest.fixture(scope="module")
def open_cluster(tmp_path_factory):
    data = tmp_path_factory.mktemp("forged")
    base = free_layout(N, kafka=True)
    argv = ["up", "--brokers", str(N), "--base-port", str(base), "--kafka-base-port", str(base + 300)]
    up = subprocess.run([*KL, *argv, "--data-dir", str(data)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        yield data, base
    finally:
        subprocess.run([*KL, "down", "--data-dir", str(data)], cwd=ROOT, capture_output=True, timeout=60)


def quorum_states(data: Path) -> dict[int, dict]:
    return {i: json.loads((data / f"broker-{i}" / "quorum-state").read_text()) for i in range(1, N + 1)}


def controller_view(port: int) -> tuple[int, int]:
    meta = request(port, ApiKey.METADATA, {"topics": []})
    return meta["controller_id"], meta["broker_info"]["controller_epoch"]


def test_forged_broker_frames_on_every_listener_change_nothing(open_cluster):
    data, base = open_cluster
    native = [base + n for n in range(N)]
    kafka = [base + 300 + n for n in range(N)]
    secret = data / "inter-broker.secret"
    assert secret.stat().st_mode & 0o777 == 0o600  # kl-cluster up made the cluster's secret, owner only

    controller, epoch = controller_view(native[0])
    assert controller in range(1, N + 1) and 0 < epoch < INT32_MAX
    before = quorum_states(data)
    victim = next(b for b in range(1, N + 1) if b != controller)

    # Where the broker-only listeners are is no secret: ApiVersions on the native listener names them.
    hidden: list[int] = []
    for port in native:
        versions = request(port, ApiKey.API_VERSIONS, {})
        hidden += [versions["inter_broker_port"], versions["heartbeat_port"]]
        assert versions["inter_broker_port"] not in native + kafka

    bodies = forged_bodies(victim)
    frames = [native_frame(api, body, corr) for corr, (api, body) in enumerate(bodies, start=1)]
    for port in native:
        refused = answers(exchange(port, frames))
        # The one-way quorum messages get no answer; every other request is refused, none served.
        assert len(refused) == sum(api != ApiKey.QUORUM for api, _ in bodies)
        assert all(a.get("error_code") for a in refused), refused
    for port in kafka:
        exchange(port, [kafka_frame(api) for api in (52, 56, 62, 63)] + frames)  # Kafka's Vote .. BrokerHeartbeat
    for port in hidden:
        refused = answers(exchange(port, frames))
        # Without the secret's login: "log in first", then the connection is closed.
        assert refused and all(a["error_code"] == 58 for a in refused), refused
    wrong = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "__kafkalite_broker", "not-the-cluster-secret")
    for port in hidden:
        with pytest.raises(KafkaLiteError, match="(?i)auth"):
            request(port, ApiKey.QUORUM, {"m": ["be", EPOCHS[0], victim]}, wrong)

    # A peer that does know the secret (a broker gone wrong) is still refused numbers out of their wire type,
    # before anything uses them: the quorum message is dropped, AlterPartition answered INVALID_REQUEST.
    right = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "__kafkalite_broker", secret.read_text().strip())
    broker_1 = hidden[0]  # broker 1's inter-broker listener
    send_oneway(broker_1, ApiKey.QUORUM, {"m": ["be", 2**63 - 1, victim]}, right)
    bad = dict(forged_bodies(victim))[ApiKey.ALTER_PARTITION]
    refused_epoch = request(broker_1, ApiKey.ALTER_PARTITION, bad, right)
    assert refused_epoch["error_code"] == 42 and "out of range" in refused_epoch["error_message"]
    wait_until(
        lambda: "dropping malformed quorum message" in (data / "broker-1.log").read_text(),
        10,
        "broker 1 drops the out-of-range quorum message",
    )

    # Every broker still follows the same controller in the same epoch: a topic replicated 3 ways needs the
    # controller to write its metadata log (where the overflow crashed it) and the brokers to talk to each other.
    create = subprocess.run(
        [sys.executable, "-m", "client.cli.topics", "--bootstrap-server", f"{HOST}:{native[1]}", "--create",
         "--topic", "after-the-attack", "--partitions", "3", "--replication-factor", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert create.returncode == 0, create.stderr

    def replicated() -> bool:
        meta = request(native[2], ApiKey.METADATA, {"topics": ["after-the-attack"]})
        parts = meta["topics"][0]["partitions"]
        return len(parts) == 3 and all(p[2] >= 0 and len(p[5]) == 3 for p in parts)  # leader, ISR

    wait_until(replicated, 30, "the new topic's partitions have 3 in-sync replicas")
    for port in native:
        assert controller_view(port) == (controller, epoch)
    after = quorum_states(data)
    assert {i: s["epoch"] for i, s in after.items()} == {i: s["epoch"] for i, s in before.items()}
    assert all(0 <= s["epoch"] <= INT32_MAX for s in after.values())
    logs = "".join((data / f"broker-{i}.log").read_text() for i in range(1, N + 1))
    assert "refused QUORUM" in logs and "Traceback" not in logs


def test_list_offsets_with_a_replica_id_reads_no_internal_log(open_cluster):
    """ListOffsets with a broker's replica id is served to clients, as Kafka serves it (the log end offset, an
    offset DESCRIBE may see), on every client listener: it reaches no log that is not a topic's. The metadata log
    answers UNKNOWN_TOPIC_OR_PARTITION, as a topic that does not exist would."""
    _, base = open_cluster
    body = ListOffsetsRequest(
        replica_id=1,
        topics=(ListOffsetsTopic(name="__cluster_metadata", partitions=(ListOffsetsPartition(timestamp=-1),)),),
    )
    for port in (base, base + 1):
        (raw,) = answers(exchange(port, [native_frame(ApiKey.LIST_OFFSETS, body)]))
        answer = decode(MESSAGES[ApiKey.LIST_OFFSETS][1], raw)
        rows = [(p.error_code, p.offset) for t in answer.topics for p in t.partitions]
        assert rows == [(3, -1)], rows  # UNKNOWN_TOPIC_OR_PARTITION, no offset
