"""Null arrays and strings in Kafka requests (issue 25 §5): every array field of every request of every served api
and version, sent null (-1 length), is either refused as malformed (the schema does not allow null there, as
Kafka's parser refuses it) or handled (by the adapter, or read into the api's typed class), never a traceback.
And before a SASL login, requests other than ApiVersions and the login's own are not read past their header."""

from __future__ import annotations

import dataclasses
import io
import struct
import typing
import uuid
from typing import Any, Iterator

import pytest
from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_writer

from broker.network.kafka.codec import SERVED, KafkaCodec, KafkaRequest, TypedKafkaRequest
from broker.network.kafka.entities import build
from broker.network.server import error_body
from net.errors import ErrorCode
from net.messages import unwrap_optional
from net.protocol import FrameError


def _sample_item(tp: Any) -> Any:
    """One plain value of an array's item type (a struct filled in the same way)."""
    tp, _ = unwrap_optional(tp)
    if dataclasses.is_dataclass(tp):
        return _sample(tp)
    if tp is uuid.UUID:
        return uuid.UUID(int=1)
    if isinstance(tp, type) and issubclass(tp, str):
        return "x"
    if isinstance(tp, type) and issubclass(tp, bytes):
        return b"x"
    return 1


def _sample(cls: type) -> dict:
    """A request body whose every array holds one element, so that nested arrays exist to be nulled."""
    hints = typing.get_type_hints(cls)
    out: dict = {}
    for f in dataclasses.fields(cls):
        tp, _ = unwrap_optional(hints[f.name])
        if typing.get_origin(tp) is tuple:
            out[f.name] = [_sample_item(typing.get_args(tp)[0])]
        elif dataclasses.is_dataclass(tp):
            out[f.name] = _sample(tp)
        elif isinstance(tp, type) and issubclass(tp, float):
            out[f.name] = 1.0  # entities.build has no zero for floats
    return out


def _array_paths(cls: type, prefix: tuple = ()) -> Iterator[tuple[tuple, bool]]:
    """(path, nullable) of every array field, nested ones through the first element of their parent."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, nullable = unwrap_optional(hints[f.name])
        if typing.get_origin(tp) is tuple:
            yield (*prefix, f.name), nullable
            item = typing.get_args(tp)[0]
            if dataclasses.is_dataclass(item):
                yield from _array_paths(item, (*prefix, f.name, 0))


def _with_null(entity: Any, path: tuple) -> Any:
    name, rest = path[0], path[1:]
    if not rest:
        return dataclasses.replace(entity, **{name: None})
    items = list(getattr(entity, name))
    items[0] = _with_null(items[0], rest[1:])
    return dataclasses.replace(entity, **{name: tuple(items)})


def _frame(api_key: int, version: int, entity: Any) -> bytes:
    req_cls = type(entity)
    header_cls = HeaderV2 if req_cls.__flexible__ else HeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(
        out, header_cls(request_api_key=api_key, request_api_version=version, correlation_id=5, client_id="fuzz")
    )
    entity_writer(req_cls)(out, entity)
    return struct.pack(">i", out.tell()) + out.getvalue()


def _cases() -> Iterator[tuple[int, int, tuple, bool]]:
    for api_key, (lo, hi) in sorted(SERVED.items()):
        for version in range(lo, hi + 1):
            for path, nullable in _array_paths(load_request_schema(api_key, version)):
                yield api_key, version, path, nullable


CASES = list(_cases())


def test_the_walk_covers_every_served_api():
    # Every adapted api with an array in its request (Heartbeat, DescribeAcls, InitProducerId and
    # DescribeCluster have none), and the typed ones (their classes of net/schema/).
    with_arrays = {0, 1, 2, 3, 8, 9, 10, 11, 13, 14, 15, 16, 19, 20, 30, 31, 32, 33, 37, 42, 43, 44, 47, 48, 49, 50, 51}
    walked = {k for k, *_ in CASES}
    assert with_arrays & set(SERVED) <= walked and walked <= set(SERVED)
    assert len(CASES) > 300


@pytest.mark.parametrize(("api_key", "version", "path", "nullable"), CASES, ids=lambda v: str(v))
def test_a_null_array_is_refused_or_handled(api_key, version, path, nullable):
    req_cls = load_request_schema(api_key, version)
    entity = _with_null(build(req_cls, _sample(req_cls)), path)
    data = _frame(api_key, version, entity)
    codec = KafkaCodec(1 << 20)
    if not nullable:
        with pytest.raises(FrameError, match="non-nullable field .* was null"):
            codec.feed(data)
        return
    (req,) = codec.feed(data)  # read as the schema means it (e.g. "all topics")
    assert isinstance(req, (KafkaRequest, TypedKafkaRequest)) or req.immediate is not None
    if isinstance(req, (KafkaRequest, TypedKafkaRequest)):
        frame = req.encode(error_body(ErrorCode.NOT_CONTROLLER, "a whole-request error answers per null array"))
        assert frame is not None and len(frame) > 8


@pytest.mark.parametrize("api_key", sorted(k for k in SERVED if k not in (17, 18, 36)))
def test_before_a_login_only_the_header_is_read(api_key):
    """A request that is not the login's, sent before it, is handed on with an empty body (the connection
    refuses it and closes) even when its body is garbage that would not parse."""
    codec = KafkaCodec(1 << 20)
    codec.expect_login(524288)
    lo, hi = SERVED[api_key]
    payload = struct.pack(">hhih", api_key, hi, 9, 4) + b"fuzz" + b"\xff" * 7
    (req,) = codec.feed(struct.pack(">i", len(payload)) + payload)
    assert not isinstance(req, KafkaRequest) and req.body == {} and req.immediate is None
    assert (req.api_key, req.correlation_id) == (api_key, 9)
    codec.login_complete()
    with pytest.raises(FrameError):  # once logged in, the same garbage body is read, and refused
        codec.feed(struct.pack(">i", len(payload)) + payload)
