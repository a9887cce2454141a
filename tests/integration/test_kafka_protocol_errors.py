"""Bad Kafka-protocol input on a live broker's Kafka listener: each gets a clean error or a closed connection,
and the broker stays up, serves other connections and loses nothing."""

from __future__ import annotations

import io
import socket
import struct

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.network.kafka.entities import build, plain
from client.sync import Consumer, Producer
from net import batch as batch_fmt
from net.errors import ErrorCode
from tests.integration.cluster_harness import ClusterHarness


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    h = ClusterHarness(tmp_path_factory.mktemp("kbad"), 1)
    try:
        h.start()
        h.create_topic("safe", 1, 1)
        with Producer(h.bootstrap(), acks="all") as p:
            for i in range(100):
                p.send("safe", f"kept-{i}".encode(), partition=0)
            p.flush()
        yield h
    finally:
        h.cleanup()


def connect(h: ClusterHarness) -> socket.socket:
    return socket.create_connection(("127.0.0.1", h[1].kafka_port), timeout=10)


def frame(api_key: int, version: int, corr: int, body: dict) -> bytes:
    cls = load_request_schema(api_key, version)
    header = HeaderV2 if cls.__flexible__ else HeaderV1
    out = io.BytesIO()
    entity_writer(header)(
        out, header(request_api_key=api_key, request_api_version=version, correlation_id=corr, client_id="t")
    )
    entity_writer(cls)(out, build(cls, body))
    return struct.pack(">i", len(out.getvalue())) + out.getvalue()


def read_frame(s: socket.socket) -> bytes:
    head = s.recv(4, socket.MSG_WAITALL)
    assert len(head) == 4, "connection closed"
    return s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)


def closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return True


def api_versions_works(h: ClusterHarness, s: socket.socket | None = None) -> bool:
    own = s is None
    s = s or connect(h)
    try:
        s.sendall(frame(18, 3, 77, {"client_software_name": "t", "client_software_version": "1"}))
        body = read_frame(s)
        resp, _ = entity_reader(load_response_schema(18, 3))(body, 4)
        return struct.unpack_from(">i", body)[0] == 77 and int(resp.error_code) == 0
    finally:
        if own:
            s.close()


def nothing_lost(h: ClusterHarness) -> None:
    with Consumer(h.bootstrap(), auto_offset_reset="earliest") as c:
        c.assign([("safe", 0)])
        got = []
        while len(got) < 100:
            recs = c.poll(2000)
            assert recs, f"only {len(got)} of 100 records readable"
            got += [r.value for r in recs]
    assert got[:100] == [f"kept-{i}".encode() for i in range(100)]


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack(">i", 3) + b"\x00\x01\x02",  # shorter than a request header
        struct.pack(">i", 12) + struct.pack(">hhi", 0, 9, 5) + b"\xff\xff\xff\xff",  # a body that is not there
        struct.pack(">I", 0x7FFFFFFF) + b"\x00" * 64,  # a 2 GB size prefix
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # not Kafka at all
    ],
    ids=["truncated-header", "truncated-body", "2GB-prefix", "garbage"],
)
def test_unparseable_input_closes_that_connection_only(broker, raw):
    with connect(broker) as s:
        s.sendall(raw)
        assert closed(s)
    assert api_versions_works(broker)
    nothing_lost(broker)


def test_unknown_api_and_bogus_versions_are_answered_and_the_connection_stays(broker):
    with connect(broker) as s:
        raw = struct.pack(">hhih", 4242, 0, 1, -1)
        s.sendall(struct.pack(">i", len(raw)) + raw)
        assert struct.unpack(">ih", read_frame(s)) == (1, ErrorCode.UNSUPPORTED_VERSION)
        raw = struct.pack(">hhih", 0, 99, 2, -1)  # Produce v99
        s.sendall(struct.pack(">i", len(raw)) + raw)
        assert struct.unpack(">ih", read_frame(s)) == (2, ErrorCode.UNSUPPORTED_VERSION)
        # a version Kafka has and we do not serve: its own layout, every row UNSUPPORTED_VERSION
        body = {"max_wait": 10, "min_bytes": 1, "topics": [{"topic_id": "00000000-0000-0000-0000-000000000001",
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}]}]}  # fmt: skip
        s.sendall(frame(1, 13, 3, body))
        resp, _ = entity_reader(load_response_schema(1, 13))(read_frame(s), 5)
        assert int(resp.error_code) == ErrorCode.UNSUPPORTED_VERSION
        assert api_versions_works(broker, s)  # the same connection still serves
    nothing_lost(broker)


def test_a_batch_with_a_wrong_crc_is_refused_and_nothing_appended(broker):
    good = bytearray(batch_fmt.build([[0, 0, b"k", b"evil", None]], 1, 1))
    good[-1] ^= 0xFF  # the CRC no longer matches
    body = {
        "acks": -1,
        "timeout": 5000,
        "topic_data": [{"name": "safe", "partition_data": [{"index": 0, "records": bytes(good)}]}],
    }
    with connect(broker) as s:
        s.sendall(frame(0, 9, 11, body))
        resp = plain(entity_reader(load_response_schema(0, 9))(read_frame(s), 5)[0])
    row = resp["responses"][0]["partition_responses"][0]
    assert row["error_code"] == ErrorCode.CORRUPT_MESSAGE and row["base_offset"] == -1
    nothing_lost(broker)
    with Consumer(broker.bootstrap(), auto_offset_reset="earliest") as c:
        end = c.list_offsets([("safe", 0)], -1)
    assert list(end.values()) == [100]
