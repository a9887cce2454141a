"""Kafka's wire protocol, sans-IO: bytes in, handler calls out; handler answers in, bytes out.

A frame is an int32 size and that many bytes: a request header (v1, or v2 with tagged fields for a
flexible version) and the request body; a response is the correlation id (response header v0, or v1
for flexible versions; ApiVersions always v0, KIP-511) and the body. Requests and bodies are decoded
and encoded by kio's generated types. Answers go out in request order (`in_order`), as Kafka
clients expect. A request whose frame cannot be parsed closes the connection, as Kafka does; an
unknown api key or an unsupported version is answered with UNSUPPORTED_VERSION (in that version's
response layout where one exists), so a client learns what went wrong.
"""

from __future__ import annotations

import datetime
import io
import logging
import struct
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from broker.network.kafka.adapters import Adapter, AdapterError, api_versions_response
from broker.network.kafka.entities import build, null_field, plain
from broker.network.kafka.security_adapters import SECURITY_ADAPTERS, SaslTokenFrame
from broker.network.server import FramedCodec, Request
from net.errors import ErrorCode
from net.protocol import TYPED_SINCE, ApiKey, FrameError
from net.schema.convert import error_response, from_kio, to_kio
from net.schema.messages import MESSAGES

log = logging.getLogger("kafkalite.kafka")

_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id: the start of every request header
_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">i")
_API_VERSIONS = 18
_SASL_HANDSHAKE = 17
_SASL_AUTHENTICATE = 36
_LOGIN_APIS = (_SASL_HANDSHAKE, _SASL_AUTHENTICATE)
# Every Kafka api this listener serves, by api key.
ADAPTERS: dict[int, Adapter] = {a.api_key: a for a in SECURITY_ADAPTERS}  # the SASL pair: every other api is typed
# Every Kafka api whose handler takes and answers the typed classes of net/schema/ (no adapter): the request is
# read with kio's class for the client's version and converted, the answer converted back (net/schema/convert.py).
TYPED: dict[int, tuple[type, type]] = {k: MESSAGES[k] for k in TYPED_SINCE}
# api key -> the versions this listener serves, for ApiVersions.
SERVED: dict[int, tuple[int, int]] = {
    **{k: a.versions for k, a in ADAPTERS.items()},
    **{k: req.VERSIONS for k, (req, _) in TYPED.items()},  # type: ignore[attr-defined]
}
_read_header_v1 = entity_reader(RequestHeaderV1)
_read_header_v2 = entity_reader(RequestHeaderV2)


def _frame(correlation_id: int, flexible_header: bool, cls: type, body: Any) -> bytes:
    """A response frame: `body` is kio's entity of `cls`, or plain data that `build` makes one of."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(_CORR.pack(correlation_id))
    if flexible_header:
        out.write(b"\0")  # the response header's tagged fields: none
    entity = body if isinstance(body, cls) else build(cls, body)
    entity_writer(cls)(out, entity)  # type: ignore[arg-type]  # kio types its writers per entity class
    buf = out.getbuffer()
    _SIZE.pack_into(buf, 0, len(buf) - 4)
    del buf
    return out.getvalue()


class KafkaRequest(Request):
    """A Kafka request on its way to a handler: the native call it means, and how to answer it in the
    client's version."""

    __slots__ = ("adapter", "kafka_version", "kafka_body", "flexible")

    def __init__(
        self,
        adapter: Adapter,
        kafka_version: int,
        correlation_id: int,
        client_id: str | None,
        kafka_body: dict[str, Any],
        flexible: bool,
    ) -> None:
        native_key, native_body = adapter.request(kafka_body, kafka_version)
        super().__init__(native_key, 0, correlation_id, client_id, native_body)
        self.adapter = adapter
        self.kafka_version = kafka_version
        self.kafka_body = kafka_body
        self.flexible = flexible

    def encode(self, body: dict[str, Any]) -> bytes | None:
        a, v = self.adapter, self.kafka_version
        # The whole request failed (native error_body), throttled or not: answered in the error layout, so a
        # refused DescribeAcls says CLUSTER_AUTHORIZATION_FAILED rather than listing nothing.
        out: dict[str, Any] | None
        if set(body) - {"throttle_time_ms"} <= {"error_code", "error_message"}:
            out = a.error(self.kafka_body, v, body.get("error_code", 0), body.get("error_message"))
        else:
            out = a.response(body, self.kafka_body, v)
        if out is None:
            return None
        return _frame(self.correlation_id, self.flexible, load_response_schema(a.api_key, v), out)


class TypedKafkaRequest(Request):
    """A Kafka request whose handler takes the api's typed class: read in the client's version, converted."""

    __slots__ = ("kafka_version", "flexible")

    def __init__(self, api_key: int, kafka_version: int, correlation_id: int, client_id: str | None, entity: Any,
                 flexible: bool) -> None:  # fmt: skip
        request_cls, _ = TYPED[api_key]
        body: Any = from_kio(entity, request_cls)
        if api_key == ApiKey.METADATA and kafka_version == 0 and not body.topics:
            body.topics = None  # Metadata v0 has no null: its empty list asks for every topic (isAllTopics)
        super().__init__(api_key, TYPED_SINCE[api_key], correlation_id, client_id, body)
        self.kafka_version = kafka_version
        self.flexible = flexible

    def encode(self, body: Any) -> bytes | None:
        _, response_cls = TYPED[self.api_key]
        if isinstance(body, dict):  # the request failed as a whole (refused, INVALID_REQUEST): Kafka's error response
            answer: Any = error_response(self.body, response_cls, body.get("error_code", 0), body.get("error_message"))
            if body.get("throttle_time_ms") and hasattr(answer, "throttle_time"):
                answer.throttle_time = datetime.timedelta(milliseconds=body["throttle_time_ms"])
            body = answer
        older = self.kafka_version < _FENCED_SINCE.get(self.api_key, 0)
        if older or self.api_key in _OWN_CODES_APIS:
            _kafka_codes(body, older)
        kio_cls = load_response_schema(self.api_key, self.kafka_version)
        return _frame(self.correlation_id, self.flexible, kio_cls, to_kio(body, kio_cls))


# KIP-588: PRODUCER_FENCED (90) only from these versions on; an older client is told INVALID_PRODUCER_EPOCH (47),
# as Kafka's KafkaApis does (InitProducerId < 4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn / TxnOffsetCommit < 2).
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 2}


# Kafka Lite's own codes a Kafka client does not know, as Kafka's clients should read them: PARTITION_NOT_ASSIGNED
# (a commit of a partition the member does not hold now) is ILLEGAL_GENERATION, which they answer by rejoining.
_KAFKA_CODE = {int(ErrorCode.PARTITION_NOT_ASSIGNED): int(ErrorCode.ILLEGAL_GENERATION)}
_OWN_CODES_APIS = frozenset({ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT})  # the apis that may answer one
_OLDER_FENCING = {**_KAFKA_CODE, int(ErrorCode.PRODUCER_FENCED): int(ErrorCode.INVALID_PRODUCER_EPOCH)}


def _kafka_codes(message: Any, older_fencing: bool) -> None:
    """Every error code in a typed answer (nested rows included) as a Kafka client reads it; with `older_fencing`,
    PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH too."""
    if isinstance(message, (tuple, list)):
        for m in message:
            _kafka_codes(m, older_fencing)
        return
    if not hasattr(message, "__dataclass_fields__"):
        return
    codes = _OLDER_FENCING if older_fencing else _KAFKA_CODE
    for name in message.__dataclass_fields__:
        value = getattr(message, name)
        if name.endswith("error_code"):
            if value in codes:
                setattr(message, name, codes[value])
        elif isinstance(value, (tuple, list)) or hasattr(value, "__dataclass_fields__"):
            _kafka_codes(value, older_fencing)


class KafkaCodec(FramedCodec):
    in_order = True

    def __init__(self, max_frame: int) -> None:
        super().__init__(max_frame)
        # After a SaslHandshake v0, frames are the login's bare SASL tokens until it completes (Kafka's
        # pre-KIP-152 framing): set when the handshake is read, so a token right behind it is read as one.
        self._sasl_tokens = False
        self._login_pending = False

    def expect_login(self, max_receive: int) -> None:
        super().expect_login(max_receive)
        self._login_pending = True

    def feed(self, data: bytes) -> list[Request]:
        return [self._request(payload) for payload in self._decoder.feed(data)]

    def login_complete(self) -> None:
        super().login_complete()
        self._sasl_tokens = False
        self._login_pending = False

    def _request(self, payload: bytes) -> Request:
        if self._sasl_tokens:
            return SaslTokenFrame(payload)
        if len(payload) < _PREFIX.size:
            raise FrameError(f"request of {len(payload)} bytes is shorter than a request header")
        api_key, version, corr = _PREFIX.unpack_from(payload)
        adapter = ADAPTERS.get(api_key)
        if api_key == _API_VERSIONS:
            return self._api_versions(payload, version, corr)
        if self._login_pending and api_key not in _LOGIN_APIS:
            # Before a SASL login only the login's own requests are read past the header (Kafka's
            # SaslServerAuthenticator): the connection refuses and closes this one unparsed.
            return Request(api_key, version, corr, None, {})
        if api_key not in SERVED:
            log.info("unsupported api key %d (version %d): answered UNSUPPORTED_VERSION", api_key, version)
            return Request(api_key, version, corr, None, {}, _bare_error(corr, ErrorCode.UNSUPPORTED_VERSION))
        lo, hi = SERVED[api_key]
        if not lo <= version <= hi:
            return Request(api_key, version, corr, None, {}, self._unsupported(api_key, payload, version, corr))
        req_cls = load_request_schema(api_key, version)
        flexible = bool(req_cls.__flexible__)
        try:
            header, pos = (_read_header_v2 if flexible else _read_header_v1)(payload, 0)
            entity, end = entity_reader(req_cls)(payload, pos)
        except Exception as e:  # kio raises several types on truncated or malformed input
            raise FrameError(f"malformed {req_cls.__name__} v{version}: {type(e).__name__}: {e}") from None
        if (null := null_field(entity)) is not None:
            raise FrameError(f"malformed {req_cls.__name__} v{version}: non-nullable field {null} was null")
        if adapter is None:
            return TypedKafkaRequest(api_key, version, corr, header.client_id, entity, flexible)
        body = plain(entity)
        if api_key == _SASL_HANDSHAKE and version == 0:
            self._sasl_tokens = True
        try:
            return KafkaRequest(adapter, version, corr, header.client_id, body, flexible)
        except AdapterError as e:
            answer = adapter.error(body, version, int(e.code), str(e))
            frame = _frame(corr, flexible, load_response_schema(api_key, version), answer)
            return Request(api_key, version, corr, header.client_id, {}, frame)

    def _api_versions(self, payload: bytes, version: int, corr: int) -> Request:
        # KIP-511: a version we don't know is answered in v0 with UNSUPPORTED_VERSION and our ranges,
        # so the client can retry with one we do; the response header is always v0.
        lo, hi = 0, 4
        if not lo <= version <= hi:
            body, answer_version = api_versions_response(int(ErrorCode.UNSUPPORTED_VERSION), SERVED), 0
        else:
            body, answer_version = api_versions_response(0, SERVED), version
        frame = _frame(corr, False, load_response_schema(_API_VERSIONS, answer_version), body)
        client_id = None
        if lo <= version <= hi:
            try:
                req_cls = load_request_schema(_API_VERSIONS, version)
                header, _ = (_read_header_v2 if req_cls.__flexible__ else _read_header_v1)(payload, 0)
                client_id = header.client_id
            except Exception as e:
                raise FrameError(f"malformed ApiVersions header: {e}") from None
        return Request(_API_VERSIONS, version, corr, client_id, {}, frame)

    def _unsupported(self, api_key: int, payload: bytes, version: int, corr: int) -> bytes:
        log.info("unsupported version %d of api %d: answered UNSUPPORTED_VERSION", version, api_key)
        try:
            req_cls = load_request_schema(api_key, version)
            resp_cls = load_response_schema(api_key, version)
            flexible = bool(req_cls.__flexible__)
            header, pos = (_read_header_v2 if flexible else _read_header_v1)(payload, 0)
            entity, _ = entity_reader(req_cls)(payload, pos)
            code = int(ErrorCode.UNSUPPORTED_VERSION)
            if api_key in TYPED:  # this version's own classes, mirrored by field name as for any version
                return _frame(corr, flexible, resp_cls, error_response(entity, resp_cls, code))
            body = ADAPTERS[api_key].error(plain(entity), version, code, None)
            return _frame(corr, flexible, resp_cls, body)
        except (UnknownAPIKey, UnknownEntity, Exception):
            # No schema for this version at all: the error code alone, where most responses start.
            return _bare_error(corr, ErrorCode.UNSUPPORTED_VERSION)


def _bare_error(corr: int, code: ErrorCode) -> bytes:
    return struct.pack(">iih", 6, corr, int(code))
