"""The one mapping from a handler's exception to the error code a request is answered with (net/errors.py)."""

from __future__ import annotations

import pytest

from broker.network.server import BadRequest
from net.errors import ErrorCode, NotLeaderOrFollowerError, error_code_of, error_for
from net.wire_types import INT32, WireRangeError


def test_a_kafka_error_keeps_its_code_and_message():
    assert error_code_of(NotLeaderOrFollowerError("moved to 2")) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved to 2")
    code, message = error_code_of(error_for(ErrorCode.THROTTLING_QUOTA_EXCEEDED))
    assert code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and message == "THROTTLING_QUOTA_EXCEEDED"


def test_a_malformed_request_is_invalid_request_wherever_it_is_found():
    assert error_code_of(BadRequest("topics must be a list")) == (ErrorCode.INVALID_REQUEST, "topics must be a list")
    with pytest.raises(WireRangeError) as raised:
        INT32.check(2**31, "leader_epoch")
    code, message = error_code_of(raised.value)
    assert code == ErrorCode.INVALID_REQUEST and "leader_epoch" in message


def test_anything_else_is_an_unknown_server_error_that_names_itself():
    code, message = error_code_of(KeyError("replicas"))
    assert code == ErrorCode.UNKNOWN_SERVER_ERROR and message == "KeyError: 'replicas'"
