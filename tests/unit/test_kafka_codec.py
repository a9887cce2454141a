"""The Kafka-protocol codec, sans-IO: frames in, requests out, answers in request order as bytes."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.network.kafka.codec import KafkaCodec, KafkaRequest, TypedKafkaRequest
from broker.network.kafka.entities import build, plain
from broker.network.kafka.security_adapters import SaslTokenFrame
from net.errors import ErrorCode
from net.protocol import TYPED_SINCE, ApiKey, FrameError
from net.schema.produce import PartitionProduceResponse, ProduceRequest, ProduceResponse, TopicProduceResponse


def frame(api_key: int, version: int, corr: int, body: dict, client_id: str = "test") -> bytes:
    req_cls = load_request_schema(api_key, version)
    out = io.BytesIO()
    header_cls = HeaderV2 if req_cls.__flexible__ else HeaderV1
    entity_writer(header_cls)(
        out, header_cls(request_api_key=api_key, request_api_version=version, correlation_id=corr, client_id=client_id)
    )
    entity_writer(req_cls)(out, build(req_cls, body))
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def answer(raw: bytes, api_key: int, version: int, flexible_header: bool) -> tuple[int, dict]:
    (size,) = struct.unpack_from(">i", raw)
    assert size == len(raw) - 4
    (corr,) = struct.unpack_from(">i", raw, 4)
    pos = 8 + (1 if flexible_header else 0)
    entity, _ = entity_reader(load_response_schema(api_key, version))(raw, pos)
    return corr, plain(entity)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_is_answered_by_the_codec_in_a_v0_header(version):
    (req,) = KafkaCodec(1 << 20).feed(
        frame(18, version, 7, {"client_software_name": "t", "client_software_version": "1"})
    )
    assert req.immediate is not None
    corr, body = answer(req.immediate, 18, version, False)
    assert corr == 7 and body["error_code"] == 0
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert ranges[0] == (3, 12) and ranges[1] == (4, 12) and ranges[18] == (0, 4) and ranges[3] == (0, 12)


def test_sasl_ranges_are_what_librdkafka_checks():
    """librdkafka enables its SaslHandshake feature only if SaslHandshake's range overlaps v0, and logs in with
    SaslAuthenticate (SaslAuthReq) if SaslHandshake overlaps v1 and SaslAuthenticate v0..1: Kafka's 0-1 and 0-2."""
    (req,) = KafkaCodec(1 << 20).feed(frame(18, 3, 7, {"client_software_name": "t", "client_software_version": "1"}))
    _, body = answer(req.immediate, 18, 3, False)
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert ranges[17] == (0, 1) and ranges[36] == (0, 2)


def test_after_a_sasl_handshake_v0_frames_are_bare_tokens_until_the_login_completes():
    codec = KafkaCodec(1 << 20)
    token = b"n,,n=admin,r=abc"
    handshake, first = codec.feed(
        frame(17, 0, 1, {"mechanism": "SCRAM-SHA-256"}) + struct.pack(">i", len(token)) + token
    )
    assert handshake.api_key == ApiKey.SASL_HANDSHAKE and handshake.body == {"mechanism": "SCRAM-SHA-256"}
    assert isinstance(first, SaslTokenFrame) and first.api_key == ApiKey.SASL_AUTHENTICATE
    assert first.body == {"auth_bytes": token}
    # answered by a bare frame; a failed login by nothing (the connection is closed)
    assert first.encode({"error_code": 0, "auth_bytes": b"r=abcdef"}) == b"\0\0\0\x08r=abcdef"
    assert first.encode({"error_code": 0, "auth_bytes": b""}) == b"\0\0\0\0"
    assert first.encode({"error_code": int(ErrorCode.SASL_AUTHENTICATION_FAILED), "error_message": "no"}) is None
    # even a well-formed Kafka request is a token while the login is under way ...
    metadata = frame(3, 1, 2, {"topics": None})
    (still,) = codec.feed(metadata)
    assert isinstance(still, SaslTokenFrame) and still.body["auth_bytes"] == metadata[4:]
    # ... and an ordinary request once it completed
    codec.login_complete()
    (after,) = codec.feed(metadata)
    assert isinstance(after, TypedKafkaRequest) and after.api_key == ApiKey.METADATA


def test_metadata_v0s_empty_topic_list_asks_for_every_topic_and_later_versions_for_none():
    """Metadata is typed (no adapter): the handler gets MetadataRequest, where nil is every topic. Version 0 has no
    nil, its empty list meant every topic (Kafka's MetadataRequest.isAllTopics); from v1 an empty list is none."""
    codec = KafkaCodec(1 << 20)
    every = load_request_schema(3, 12)(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )  # kio's own entity: build() makes a null list an empty one
    out = io.BytesIO()
    entity_writer(HeaderV2)(out, HeaderV2(request_api_key=3, request_api_version=12, correlation_id=3, client_id="t"))
    entity_writer(type(every))(out, every)
    v12_frame = struct.pack(">i", len(out.getvalue())) + out.getvalue()
    v0, v1, v12 = codec.feed(frame(3, 0, 1, {"topics": []}) + frame(3, 1, 2, {"topics": []}) + v12_frame)
    assert all(isinstance(r, TypedKafkaRequest) and r.version == TYPED_SINCE[ApiKey.METADATA] for r in (v0, v1, v12))
    assert (v0.body.topics, v1.body.topics, v12.body.topics) == (None, (), None)
    assert v0.body.allow_auto_topic_creation  # before v4 every Metadata may create (Kafka's rule)


def test_before_a_login_frames_are_bounded_by_the_sasl_receive_size():
    codec = KafkaCodec(1 << 20)
    codec.expect_login(1000)
    with pytest.raises(FrameError, match="limit of 1000"):
        codec.feed(struct.pack(">i", 1001))
    codec = KafkaCodec(1 << 20)
    codec.expect_login(1000)
    codec.login_complete()
    assert codec.feed(struct.pack(">i", 1001)) == []  # the listener's own bound again: waits for the rest


def test_api_versions_newer_than_ours_gets_v0_unsupported_version_with_our_ranges():
    raw = struct.pack(">hhih", 18, 99, 5, -1)
    (req,) = KafkaCodec(1 << 20).feed(struct.pack(">i", len(raw)) + raw)
    corr, body = answer(req.immediate, 18, 0, False)
    assert corr == 5 and body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert any(k["api_key"] == 0 for k in body["api_keys"])


def test_produce_is_handed_to_the_handler_typed_and_its_typed_answer_written_in_the_clients_version():
    records = b"\x00" * 70  # opaque here: the handler checks batches
    body = {
        "acks": -1,
        "timeout": 1500,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 2, "records": records}]}],
    }
    (req,) = KafkaCodec(1 << 20).feed(frame(0, 9, 11, body))
    assert isinstance(req, TypedKafkaRequest) and req.immediate is None
    assert (req.api_key, req.client_id) == (ApiKey.PRODUCE, "test")
    assert isinstance(req.body, ProduceRequest) and (req.body.acks, req.body.transactional_id) == (-1, None)
    assert req.body.timeout == datetime.timedelta(milliseconds=1500)
    [t] = req.body.topic_data
    assert (t.name, [(p.index, p.records) for p in t.partition_data]) == ("orders", [(2, records)])
    stamped = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)  # a LogAppendTime topic's stamp
    rows = (
        PartitionProduceResponse(index=2, base_offset=41, log_start_offset=0),
        PartitionProduceResponse(index=3, base_offset=7, log_append_time=stamped, log_start_offset=0),
    )
    typed = ProduceResponse(responses=(TopicProduceResponse(name="orders", partition_responses=rows),))
    corr, resp = answer(req.encode(typed), 0, 9, True)
    (t,) = resp["responses"]
    assert corr == 11 and t["name"] == "orders"
    p, q = t["partition_responses"]
    assert (p["index"], p["error_code"], p["base_offset"], p["log_start_offset"]) == (2, 0, 41, 0)
    assert p["log_append_time"] is None and q["log_append_time"] == stamped  # -1 on the wire: CreateTime
    # a whole-request failure (the native error body) puts the code in every row, base offset -1 (none)
    corr, resp = answer(req.encode({"error_code": 42, "error_message": "bad"}), 0, 9, True)
    [p] = resp["responses"][0]["partition_responses"]
    assert (p["index"], p["error_code"], p["base_offset"]) == (2, ErrorCode.INVALID_REQUEST, -1)


def test_fetch_is_handed_to_the_handler_typed_and_its_typed_answer_written_in_the_clients_version():
    """Fetch is typed on the Kafka listener (no adapter): the request is the client's, session fields and all (the
    handler declines a consumer's session); the answer's records are the log's bytes, v12's diverging epoch a tagged
    field, and an older version's answer drops what it lacks. A whole-request failure puts the code in every row."""
    from net.schema.fetch import EpochEndOffset, FetchableTopicResponse, FetchRequest, FetchResponse, PartitionData

    body = {
        "replica_id": -1,
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": 1000,
        "isolation_level": 1,
        "session_id": 0,
        "session_epoch": 0,
        "topics": [{"topic": "orders", "partitions": [{"partition": 2, "fetch_offset": 40, "partition_max_bytes": 9}]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    records = b"\x01" * 61  # opaque: the consumer parses batches
    for version in (4, 12):
        (req,) = KafkaCodec(1 << 20).feed(frame(1, version, 5, body))
        assert isinstance(req, TypedKafkaRequest) and req.immediate is None and req.api_key == ApiKey.FETCH
        assert isinstance(req.body, FetchRequest) and req.body.max_wait == datetime.timedelta(milliseconds=500)
        assert (req.body.replica_id, req.body.isolation_level, req.body.max_bytes) == (-1, 1, 1000)
        [t] = req.body.topics
        [p] = t.partitions
        assert (t.topic, p.partition, p.fetch_offset, p.partition_max_bytes) == ("orders", 2, 40, 9)
        row = PartitionData(
            partition_index=2,
            high_watermark=50,
            last_stable_offset=45,
            log_start_offset=3,
            diverging_epoch=EpochEndOffset(epoch=4, end_offset=44),
            aborted_transactions=(),
            records=records,
        )
        typed = FetchResponse(responses=(FetchableTopicResponse(topic="orders", partitions=(row,)),))
        corr, resp = answer(req.encode(typed), 1, version, version >= 12)
        [topic] = resp["responses"]
        [q] = topic["partitions"]
        assert corr == 5 and topic["topic"] == "orders"
        assert (q["partition_index"], q["error_code"], q["high_watermark"], q["last_stable_offset"]) == (2, 0, 50, 45)
        assert q["records"] == records and q["aborted_transactions"] == []
        if version >= 12:
            assert (resp["session_id"], q["diverging_epoch"]["epoch"], q["diverging_epoch"]["end_offset"]) == (0, 4, 44)
        corr, resp = answer(req.encode({"error_code": 42, "error_message": "bad"}), 1, version, version >= 12)
        [q] = resp["responses"][0]["partitions"]
        assert (q["partition_index"], q["error_code"]) == (2, ErrorCode.INVALID_REQUEST)


def test_a_transactional_produce_carries_its_transactional_id_to_the_handler():
    """Kafka's Produce names the transactional id (the table's ACL check is WRITE on it): it reaches the typed
    request; a plain produce has none."""
    body = {
        "transactional_id": "tx",
        "acks": -1,
        "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}],
    }
    (req,) = KafkaCodec(1 << 20).feed(frame(0, 9, 3, body))
    assert req.immediate is None and req.body.transactional_id == "tx"
    (plain,) = KafkaCodec(1 << 20).feed(frame(0, 9, 4, dict(body, transactional_id=None)))
    assert plain.body.transactional_id is None


def test_unknown_api_and_unsupported_versions_are_answered_not_dropped():
    codec = KafkaCodec(1 << 20)
    raw = struct.pack(">hhih", 999, 0, 21, -1)
    (req,) = codec.feed(struct.pack(">i", len(raw)) + raw)
    assert struct.unpack(">iih", req.immediate) == (6, 21, ErrorCode.UNSUPPORTED_VERSION)
    # Fetch v13 exists in Kafka (topic ids): answered in its own layout, every row UNSUPPORTED_VERSION
    body = {
        "max_wait": 100,
        "min_bytes": 1,
        "topics": [
            {
                "topic_id": "00000000-0000-0000-0000-000000000001",
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}],
            }
        ],
    }
    (req,) = codec.feed(frame(1, 13, 22, body))
    corr, resp = answer(req.immediate, 1, 13, True)
    assert corr == 22 and resp["error_code"] == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack(">i", 3) + b"\x00\x00\x00",  # shorter than a header
        struct.pack(">i", 12) + struct.pack(">hhi", 0, 9, 1) + b"\xff\xff\xff\xff",  # a body that is not there
    ],
)
def test_unparseable_requests_close_the_connection(raw):
    with pytest.raises(FrameError):
        KafkaCodec(1 << 20).feed(raw)


def test_a_two_gigabyte_size_prefix_is_refused_before_buffering():
    with pytest.raises(FrameError):
        KafkaCodec(100 << 20).feed(struct.pack(">I", 0x7FFFFFFF) + b"\x00" * 10)


# --- fuzz: whatever arrives, the codec answers, asks to close, or waits for more; it never raises anything
# else, never buffers past the frame limit, and never loops -------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from broker.network.server import Request  # noqa: E402

VALID = [
    frame(18, 3, 1, {"client_software_name": "f", "client_software_version": "1"}),
    frame(3, 12, 2, {"topics": [{"name": "t"}], "allow_auto_topic_creation": False}),
    frame(
        0,
        9,
        3,
        {"acks": 1, "timeout": 100, "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x"}]}]},
    ),
    frame(
        1,
        12,
        4,
        {
            "max_wait": 1,
            "min_bytes": 1,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 9}]}],
        },
    ),
    frame(
        11,
        9,
        5,
        {
            "group_id": "g",
            "session_timeout": 1000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00"}],
        },
    ),
]


def feed_all(chunks: list[bytes]) -> None:
    codec = KafkaCodec(1 << 16)
    for chunk in chunks:
        try:
            out = codec.feed(chunk)
        except FrameError:
            return  # the connection is closed: nothing more is read
        assert all(isinstance(r, Request) for r in out)
        for r in out:
            if isinstance(r, KafkaRequest):
                assert isinstance(r.body, dict) and isinstance(r.api_key, int)
        assert codec._decoder.buffered <= (1 << 16) + 4


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=200), max_size=8))
def test_random_bytes(chunks):
    feed_all(chunks)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6),
    st.integers(1, 64),
)
def test_mutated_valid_frames_split_anywhere(raw, flips, step):
    data = bytearray(raw)
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    feed_all([bytes(data[i : i + step]) for i in range(0, len(data), step)])


def test_compatibility_doc_lists_exactly_the_advertised_apis_and_versions():
    """docs/COMPATIBILITY.md's table of apis is what ApiVersions advertises, key by key and range by range."""
    from pathlib import Path

    from broker.network.kafka.adapters import api_versions_response
    from broker.network.kafka.codec import SERVED

    doc = (Path(__file__).resolve().parents[2] / "docs/COMPATIBILITY.md").read_text()
    section = doc.split("## APIs and versions", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            lo, _, hi = cells[2].partition("–")
            documented[int(cells[0])] = (cells[1], int(lo), int(hi or lo))
    advertised = {
        k["api_key"]: (k["min_version"], k["max_version"]) for k in api_versions_response(0, SERVED)["api_keys"]
    }
    assert {k: v[1:] for k, v in documented.items()} == advertised
    assert documented[17][0] == "SaslHandshake" and documented[51][0] == "AlterUserScramCredentials"
