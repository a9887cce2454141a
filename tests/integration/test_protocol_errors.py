"""Bad input against a real broker: typed errors or a closed connection, never a crash or a stall."""

from __future__ import annotations

import datetime
import socket
import struct
import time

import msgpack
import pytest

from client.admin import NewTopic
from client.sync import Admin, Consumer, Producer
from net import batch as batch_fmt
from net.errors import ErrorCode
from net.messages import decode, encode
from net.protocol import ApiKey
from net.schema.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from net.schema.metadata import MetadataRequest

pytestmark = pytest.mark.timeout(60)


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.corr = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, api: int, body: object, version: int = 0) -> dict:
        self.corr += 1
        payload = msgpack.packb([api, version, self.corr, "raw", body], use_bin_type=True)
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)
        return self.read_response()

    def read_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def read_response(self) -> dict:
        (n,) = struct.unpack(">I", self.read_exact(4))
        corr, body = msgpack.unpackb(self.read_exact(n), raw=False, strict_map_key=False)
        assert corr == self.corr
        return body

    def is_closed(self) -> bool:
        try:
            self.sock.settimeout(5)
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def make_topic(bootstrap: str, name: str = "t", partitions: int = 1, **configs: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 1, configs or None)])


def assert_alive(port: int) -> None:
    c = RawClient(port)
    assert c.request(ApiKey.API_VERSIONS, {})["error_code"] == 0
    c.close()


def test_garbage_frame_closes_connection_only(broker):
    c = RawClient(broker.port)
    c.send_raw(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")  # 0xc1 is never valid msgpack
    assert c.is_closed()
    assert_alive(broker.port)
    assert "closing connection" in broker.logs()


def test_wrong_shape_frame_closes_connection(broker):
    c = RawClient(broker.port)
    payload = msgpack.packb({"not": "a request"})
    c.send_raw(struct.pack(">I", len(payload)) + payload)
    assert c.is_closed()
    assert_alive(broker.port)


def test_oversized_frame_is_refused_without_reading_it(broker_factory):
    b = broker_factory(extra=["--override", "socket.request.max.bytes=1024"])
    c = RawClient(b.port)
    c.send_raw(struct.pack(">I", 10_000_000))
    assert c.is_closed()
    assert_alive(b.port)


def test_unknown_api_and_version(broker):
    c = RawClient(broker.port)
    assert c.request(999, {})["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    # Metadata is typed from native v1 (its body the message's array): a version past the served ones is refused
    assert (
        c.request(ApiKey.METADATA, encode(MetadataRequest()), version=7)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    )
    # the connection stays usable after a typed error
    assert c.request(ApiKey.API_VERSIONS, {})["error_code"] == 0


def test_wrong_field_types_get_invalid_request(broker):
    c = RawClient(broker.port)
    assert c.request(ApiKey.PRODUCE, {"acks": 1, "topics": "nope"})["error_code"] == ErrorCode.INVALID_REQUEST
    assert c.request(ApiKey.FETCH, {"topics": [["t", [["x", 0, 100]]]]})["error_code"] == ErrorCode.INVALID_REQUEST
    assert (
        c.request(ApiKey.PRODUCE, {"acks": 1, "topics": [["t", [[0, "str"]]]]})["error_code"]
        == ErrorCode.INVALID_REQUEST
    )
    assert c.request(ApiKey.PRODUCE, {"acks": 7, "topics": []})["error_code"] == ErrorCode.INVALID_REQUIRED_ACKS


def test_unknown_topic_and_partition(broker):
    make_topic(broker.bootstrap, "known", 2)
    c = RawClient(broker.port)
    md = c.request(ApiKey.METADATA, {"topics": ["nope"]})
    assert md["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    b = batch_fmt.build([[0, 0, None, b"v", None]], 1, 1)
    resp = c.request(ApiKey.PRODUCE, {"acks": 1, "topics": [["nope", [[0, b]]], ["known", [[5, b]]]]})
    codes = {t: rows[0][1] for t, rows in resp["topics"]}
    assert codes == {"nope": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "known": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    resp = c.request(ApiKey.FETCH, {"max_wait_ms": 0, "topics": [["nope", [[0, 0, 1000]]]]})  # native v0's rows
    assert resp["topics"][0][1][0][1] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    typed = decode(FetchResponse, c.request(ApiKey.FETCH, encode(typed_fetch("nope", 0)), 1))  # native v1
    assert typed.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_offset_out_of_range(broker):
    make_topic(broker.bootstrap)
    c = RawClient(broker.port)
    resp = c.request(ApiKey.FETCH, {"max_wait_ms": 0, "topics": [["t", [[0, 12345, 1000]]]]})
    row = resp["topics"][0][1][0]
    assert row[1] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert row[2] == 0  # the high watermark comes back so the client can reset
    [typed] = decode(FetchResponse, c.request(ApiKey.FETCH, encode(typed_fetch("t", 12345)), 1)).responses[0].partitions
    assert (typed.error_code, typed.high_watermark, typed.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, 0, 0)


def typed_fetch(topic: str, offset: int) -> FetchRequest:
    """A consumer's typed Fetch (native v1) of partition 0 that does not wait."""
    part = FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1000)
    return FetchRequest(max_wait=datetime.timedelta(0), topics=(FetchTopic(topic=topic, partitions=(part,)),))


def test_bad_crc_is_rejected_and_log_unchanged(broker):
    make_topic(broker.bootstrap)
    c = RawClient(broker.port)
    good = batch_fmt.build([[0, 0, None, b"good", None]], 1, 1)
    assert c.request(ApiKey.PRODUCE, {"acks": 1, "topics": [["t", [[0, good]]]]})["topics"][0][1][0][1] == 0
    bad = bytearray(batch_fmt.build([[0, 0, None, b"evil", None]], 1, 1))
    bad[-1] ^= 0xFF
    truncated = good[:-3]
    for blob in (bytes(bad), truncated, good + b"\x00\x01"):
        row = c.request(ApiKey.PRODUCE, {"acks": 1, "topics": [["t", [[0, blob]]]]})["topics"][0][1][0]
        assert row[1] == ErrorCode.CORRUPT_MESSAGE, row
    with Consumer(broker.bootstrap, auto_offset_reset="earliest") as cons:
        cons.assign([("t", 0)])
        recs = cons.poll(2000)
    assert [r.value for r in recs] == [b"good"]


def test_invalid_configs(broker):
    c = RawClient(broker.port)
    bad = [
        {"name": "a", "num_partitions": 1, "configs": {"retention.ms": "soon"}},
        {"name": "b", "num_partitions": 1, "configs": {"no.such.config": "1"}},
        {"name": "c", "num_partitions": 0},
        {"name": "bad/name", "num_partitions": 1},
        {"name": "d", "num_partitions": 1, "replication_factor": 3},
    ]
    rows = c.request(ApiKey.CREATE_TOPICS, {"topics": bad})["topics"]
    assert [r[1] for r in rows] == [
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.INVALID_REPLICATION_FACTOR,
    ]
    assert "retention.ms" in rows[0][2]
    make_topic(broker.bootstrap, "ok")
    rows = c.request(ApiKey.ALTER_CONFIGS, {"topics": [["ok", {"segment.bytes": "-5"}]]})["topics"]
    assert rows[0][1] == ErrorCode.INVALID_CONFIG


def test_partial_frame_does_not_stall_other_clients(broker):
    slow = RawClient(broker.port)
    slow.send_raw(struct.pack(">I", 1000) + b"\x93")  # promise 1000 bytes, send 1
    t0 = time.monotonic()
    assert_alive(broker.port)
    assert time.monotonic() - t0 < 2
    slow.close()


def test_message_too_large(broker):
    make_topic(broker.bootstrap, "small", 1, **{"max.message.bytes": "2000"})
    c = RawClient(broker.port)
    big = batch_fmt.build([[0, 0, None, b"x" * 5000, None]], 1, 1)
    row = c.request(ApiKey.PRODUCE, {"acks": 1, "topics": [["small", [[0, big]]]]})["topics"][0][1][0]
    assert row[1] == ErrorCode.MESSAGE_TOO_LARGE


def test_alter_configs_at_runtime(broker):
    make_topic(broker.bootstrap)
    with Admin(broker.bootstrap) as admin:
        admin.alter_configs("t", {"retention.ms": "1000", "min.insync.replicas": "1"})
        cfg = admin.describe_configs("t")
        assert cfg["retention.ms"] == ("1000", False)
        assert cfg["segment.bytes"][1] is True
        admin.alter_configs("t", {"retention.ms": None})
        assert admin.describe_configs("t")["retention.ms"] == ("604800000", True)


def test_delete_topic(broker):
    make_topic(broker.bootstrap, "gone", 2)
    with Producer(broker.bootstrap) as p:
        p.send("gone", b"x")
        p.flush()
    with Admin(broker.bootstrap) as admin:
        admin.delete_topics(["gone"])
        assert "gone" not in admin.list_topics()
    assert not list(broker.data_dir.glob("gone-*"))


def test_negative_batch_length_is_corrupt_not_a_hang(broker):
    make_topic(broker.bootstrap)
    c = RawClient(broker.port)
    good = bytearray(batch_fmt.build([[0, 0, None, b"v", None]], 1, 1))
    for length in (-12, -1, 0, 10):
        bad = bytearray(good)
        struct.pack_into(">i", bad, 8, length)
        row = c.request(ApiKey.PRODUCE, {"acks": 1, "topics": [["t", [[0, bytes(bad)]]]]})["topics"][0][1][0]
        assert row[1] == ErrorCode.CORRUPT_MESSAGE, (length, row)
    assert_alive(broker.port)
