"""Every typed api's whole-request error answer can be written at every version the Kafka listener serves.

An answer built from defaults (Kafka's getErrorResponse: the request refused, the group not found) must not hold a
null where that version has no null: kio cannot write it, and the listener then closes the connection instead of
answering. aiokafka's own suite found one (JoinGroup v0-6: protocol_name, nullable only from v7) through
test_consumer_invalid_session_timeout and test_sasl_deny_group_read, both left waiting for an error that never came.
"""

from __future__ import annotations

import io

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.network.kafka.codec import SERVED, TYPED, KafkaCodec, TypedKafkaRequest
from net.errors import ErrorCode
from net.schema.convert import error_response, to_kio
from tests.unit.test_kafka_codec import answer, frame


@pytest.mark.parametrize("api_key", sorted(TYPED))
def test_a_whole_request_error_answer_is_written_at_every_served_version(api_key: int) -> None:
    request_cls, response_cls = TYPED[api_key]
    lo, hi = SERVED[api_key]
    code = int(ErrorCode.INVALID_REQUEST)
    for version in range(lo, hi + 1):
        kio_cls = load_response_schema(api_key, version)
        answer = error_response(request_cls(), response_cls, code, "refused")
        out = io.BytesIO()
        entity_writer(kio_cls)(out, to_kio(answer, kio_cls))  # raises on a null the version cannot carry
        back, _ = entity_reader(kio_cls)(out.getvalue(), 0)
        if hasattr(back, "error_code"):
            assert int(back.error_code) == code, (api_key, version)


@pytest.mark.parametrize("version", range(0, 10))
def test_join_group_refusals_reach_clients_of_every_version(version: int) -> None:
    """The coordinator's refusals (INVALID_SESSION_TIMEOUT for a 200 ms session, GROUP_AUTHORIZATION_FAILED) as the
    Kafka listener writes them to a JoinGroup of each version: a frame that reads back with the code, and
    protocol_name "" where the version has no null (Kafka's JoinGroupResponse does the same below v7)."""
    body = {
        "group_id": "g",
        "session_timeout_ms": 200,
        "rebalance_timeout_ms": 200,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
        "reason": None,
    }
    (req,) = KafkaCodec(1 << 20).feed(frame(11, version, 7, body))
    assert isinstance(req, TypedKafkaRequest)
    for code in (ErrorCode.INVALID_SESSION_TIMEOUT, ErrorCode.GROUP_AUTHORIZATION_FAILED):
        raw = req.encode({"error_code": int(code)})
        assert raw is not None
        corr, back = answer(raw, 11, version, version >= 6)
        assert corr == 7 and back["error_code"] == int(code)
        assert back["protocol_name"] in ("", None) if version >= 7 else back["protocol_name"] == ""
