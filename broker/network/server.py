"""The broker's TCP front end: frames in, handler calls, frames out.

A connection speaks one wire protocol through its codec: the native msgpack frames (`NativeCodec`,
here) or Kafka's binary protocol (broker/network/kafka/), which decodes into the same handler calls.
Requests on one connection start in arrival order, and a request starts only once the earlier ones' effects
are applied (broker/network/request_order.py: Kafka's one request at a time, except that produces overlap
produces and nothing waits for a fetch's long poll); a handler may return an awaitable (a long-poll fetch,
an acks=all produce), whose response is written when it completes: tagged by correlation id in the native
protocol, in request order where the codec says so (Kafka's rule).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import ssl
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol, cast

from broker.network.authenticator import PLAINTEXT, Authenticator, ListenerSecurity, SaslFailed, certificate_principal
from broker.network.connection_quotas import ConnectionQuotas
from broker.network.memory import ConnectionChurn
from broker.network.native_legacy import LEGACY, MAP_FORM_APIS
from broker.network.request_order import RequestOrder, Unordered
from broker.security.listeners import BROKER, NATIVE, RELAY
from net.errors import ErrorCode, KafkaLiteError, MalformedRequest, error_code_of
from net.messages import MessageError, decode
from net.messages import encode as encode_message
from net.protocol import (
    DEFAULT_MAX_FRAME,
    TYPED_SINCE,
    ApiKey,
    FrameDecoder,
    FrameError,
    encode_response,
    parse_request,
)
from net.schema.messages import MESSAGES

log = logging.getLogger("kafkalite.net")

# The listener brokers talk to each other on (inter.broker.listener.name, controller.listener.names), and
# the name of AlterPartition requests relayed through ZooKeeper; every other listener serves clients.
INTER_BROKER_LISTENER = BROKER
RELAY_LISTENER = RELAY
# A handler result: a body, an awaitable of a body, or None for "no response" (acks=0).
Response = dict[str, Any] | Awaitable[dict[str, Any] | None] | None


# Requests a closed connection's peer no longer waits for, cut short when it closes (connection_lost).
_LONG_POLLS = frozenset({ApiKey.FETCH, ApiKey.SHARE_FETCH})


class RequestHandler(Protocol):
    def handle(self, api_key: int, version: int, body: dict[str, Any], ctx: "ConnectionContext") -> Response: ...


class ConnectionContext:
    """What the handlers know of a request's connection: where from, which listener (its name, as in
    `listeners`, and its wire: native or kafka), who (the principal authenticated by
    broker/network/authenticator.py) and its client id."""

    __slots__ = ("peer", "client_id", "listener", "wire", "auth", "throttle", "appending", "kafka_version")

    def __init__(
        self, peer: str, listener: str = NATIVE, auth: Authenticator | None = None, wire: str = "native"
    ) -> None:
        self.peer = peer
        self.client_id: str | None = None
        self.listener = listener
        self.wire = wire
        self.auth = auth or Authenticator(PLAINTEXT)
        # Mute the connection for so many ms (a client quota's throttle); the connection sets it.
        self.throttle: Callable[[int], None] = lambda ms: None
        # Resolved once this connection's latest produce has appended: a produce waiting on its transaction
        # coordinator (broker/transaction/verification.py) holds the later produces' appends, which keeps
        # their order (sequence numbers) while produces overlap (broker/network/request_order.py).
        self.appending: asyncio.Future[None] | None = None
        # The Kafka version the request being dispatched was made in (None: a native request), for the few answers
        # that depend on it past the typed message (KIP-599's strict quota, broker/server/admin_apis.py). The
        # connection sets it before each handler call: read it in the handler's synchronous part.
        self.kafka_version: int | None = None

    @property
    def principal(self) -> str:
        return self.auth.principal

    @property
    def host(self) -> str:
        """The client's address without the port (ACL bindings name hosts)."""
        return self.peer.rsplit(":", 1)[0]

    @property
    def member_host(self) -> str:
        """A group member's host as Kafka's group APIs and tools show it: "/1.2.3.4"."""
        return "/" + self.host


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection bounds (Kafka's names): requests being handled at once, how long a started request may
    take to arrive whole, how long a connection may stay silent."""

    queued_max_requests: int = 500
    partial_request_timeout_s: float = 30.0
    max_idle_s: float = 600.0


class Request:
    """One decoded request, as the handlers see it (the native api key, version and body), and how to
    write its answer on this connection's wire. `immediate` is an answer the codec gives itself
    (ApiVersions, an unsupported version) without calling a handler."""

    __slots__ = ("api_key", "version", "correlation_id", "client_id", "body", "immediate")

    def __init__(
        self,
        api_key: int,
        version: int,
        correlation_id: int,
        client_id: str | None,
        body: dict[str, Any],
        immediate: bytes | None = None,
    ) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body = body
        self.immediate = immediate

    def encode(self, body: dict[str, Any]) -> bytes | None:
        """The response frame for a handler's result body (None: nothing to send)."""
        return encode_response(self.correlation_id, body)


class WireCodec(Protocol):
    in_order: bool  # responses written in request order (Kafka) rather than as they complete

    @property
    def buffered(self) -> int: ...

    def feed(self, data: bytes) -> list[Request]:
        """Whole requests in `data` (with what came before); raises FrameError: close the connection."""
        ...

    def expect_login(self, max_receive: int) -> None:
        """A SASL login comes first: refuse frames above `max_receive` until `login_complete`."""
        ...

    def login_complete(self) -> None:
        """The connection's SASL login completed (or a listener without SASL refused a handshake): frames
        are ordinary requests of the listener's size."""
        ...


class FramedCodec:
    """What both codecs share: size-prefixed frames, bounded by the listener's `socket.request.max.bytes`,
    and before a SASL login by `sasl.server.max.receive.size`, as Kafka bounds every receive of a connection
    that has not logged in (an unauthenticated peer cannot make the broker buffer 100 MB)."""

    def __init__(self, max_frame: int) -> None:
        self._max_frame = max_frame
        self._decoder = FrameDecoder(max_frame)

    @property
    def buffered(self) -> int:
        """Bytes of a request that has started to arrive and is not whole yet."""
        return self._decoder.buffered

    def expect_login(self, max_receive: int) -> None:
        self._decoder.max_frame = min(self._max_frame, max_receive)

    def login_complete(self) -> None:
        self._decoder.max_frame = self._max_frame


class NativeCodec(FramedCodec):
    """Kafka Lite's own protocol: length-prefixed msgpack frames (docs/FORMAT.md §6)."""

    in_order = False

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        super().__init__(max_frame)

    def feed(self, data: bytes) -> list[Request]:
        return [self._request(payload) for payload in self._decoder.feed(data)]

    def _request(self, payload: bytes) -> Request:
        api_key, version, corr, client_id, body = parse_request(payload)
        since = TYPED_SINCE.get(api_key)
        if since is None:
            return Request(api_key, version, corr, client_id, body)
        try:
            if version >= since:
                return TypedNativeRequest(api_key, version, corr, client_id, decode(MESSAGES[api_key][0], body))
            if api_key in MAP_FORM_APIS:  # the old version was another api's map: its own handler serves it
                return Request(api_key, version, corr, client_id, body)
            return LegacyNativeRequest(api_key, version, corr, client_id, LEGACY[api_key][0](body))
        except MessageError as e:  # a field out of its type: refused before any handler, as Kafka's INVALID_REQUEST
            answer = encode_response(corr, error_body(ErrorCode.INVALID_REQUEST, str(e)))
            return Request(api_key, version, corr, client_id, {}, answer)


class TypedNativeRequest(Request):
    """A native request whose body is the api's typed message (net/schema/); so is its answer, unless the request
    failed as a whole (a map with the error code, as every native error)."""

    __slots__ = ()

    def encode(self, body: Any) -> bytes | None:
        return encode_response(self.correlation_id, body if isinstance(body, dict) else encode_message(body))


class LegacyNativeRequest(Request):
    """A native version-0 request of an api that is typed now: the handler got it typed, its answer goes back in
    the old map (broker/network/native_legacy.py)."""

    __slots__ = ()

    def encode(self, body: Any) -> bytes | None:
        return encode_response(self.correlation_id, body if isinstance(body, dict) else LEGACY[self.api_key][1](body))


class BrokerProtocol(asyncio.Protocol):
    # Stop reading a peer that doesn't drain its responses, rather than buffering without bound.
    HIGH_WATER = 16 * 1024 * 1024

    def __init__(
        self,
        handler: RequestHandler,
        codec: WireCodec,
        on_close: Callable[["BrokerProtocol"], None],
        listener: str = NATIVE,
        security: ListenerSecurity = PLAINTEXT,
        limits: ConnectionLimits = ConnectionLimits(),
        quotas: ConnectionQuotas | None = None,
        ordered: bool = True,
        wire: str = "native",
    ) -> None:
        self._handler = handler
        self._codec = codec
        # Requests read and not started yet: each starts once the order allows (broker/network/request_order.py).
        self._waiting: deque[Request] = deque()
        self._order = RequestOrder() if ordered else Unordered()
        self._limits = limits
        self._quotas = quotas
        self._admitted_ip: str | None = None
        self._paused_for: set[str] = set()  # why reading is paused: "write" (peer not draining), "queue", "quota"
        # The factory runs at accept, before a TLS handshake: connections.max.unauthenticated.ms counts from here.
        self.accepted_at = self.last_active = time.monotonic()
        self.partial_since: float | None = None  # a request started arriving and is not whole yet
        self._transport: asyncio.Transport | None = None
        self._security = security
        self._ctx = ConnectionContext("?", listener, wire=wire)
        self._login_deadline: asyncio.TimerHandle | None = None
        self._on_close = on_close
        # Started requests not answered yet, with their api keys (connection_lost cancels only the long polls).
        self._pending: dict[asyncio.Future[Any], int] = {}
        self._closed = False
        self._closing = False  # a failed login: reading no more, answered and closed after the delay
        # In-order codecs: one slot per request awaiting its answer, written from the head as they fill.
        self._slots: deque[list[Any]] | None = deque() if codec.in_order else None

    def connection_made(self, base_transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, base_transport)  # a stream server's connections are Transports
        self._transport = transport
        transport.set_write_buffer_limits(high=self.HIGH_WATER)
        peer = transport.get_extra_info("peername")
        self._ctx.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if self._quotas is not None:
            ip = self._ctx.host
            if not self._quotas.admit(ip):
                self._closed = True
                transport.abort()  # over max.connections(.per.ip): closed before anything is read
                return
            self._admitted_ip = ip
        self._ctx.auth = Authenticator(self._security, certificate_principal(transport.get_extra_info("peercert")))
        self._ctx.throttle = self._throttle
        if not self._ctx.auth.authenticated:
            self._codec.expect_login(self._security.max_token_bytes)
            left = self._security.max_unauthenticated_s - (time.monotonic() - self.accepted_at)
            self._login_deadline = asyncio.get_running_loop().call_later(max(0.0, left), self._login_timed_out)

    def _login_timed_out(self) -> None:
        if not self._ctx.auth.authenticated:
            self._reject(f"no SASL login within {self._security.max_unauthenticated_s:g}s")

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._admitted_ip is not None and self._quotas is not None:
            self._quotas.release(self._admitted_ip)
            self._admitted_ip = None
        if self._login_deadline is not None:
            self._login_deadline.cancel()
        # A request read before the peer closed runs to its end, as in Kafka (whose handler threads finish a request
        # and drop the answer of a closed connection): a member's leave sent just before its consumer closed the
        # socket (librdkafka's close waits for no answer on a busy broker) must still leave the group, a commit
        # still commit. Only the long polls are cut short: a Fetch changes nothing, and a ShareFetch would acquire
        # records for nobody, locked until share.record.lock.duration.ms (those it acquired already are, as before).
        for fut, api_key in self._pending.items():
            if api_key in _LONG_POLLS:
                fut.cancel()
        self._on_close(self)

    def _pause(self, why: str) -> None:
        if not self._paused_for and self._transport is not None and not self._closed:
            self._transport.pause_reading()
        self._paused_for.add(why)

    def _resume(self, why: str) -> None:
        if why not in self._paused_for:
            return
        self._paused_for.discard(why)
        if not self._paused_for and self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        self._pause("write")

    def resume_writing(self) -> None:
        self._resume("write")

    def sweep(self, now: float) -> None:
        """Close a connection silent for connections.max.idle.ms (not one waiting for its own answers), or
        one whose started request has not arrived whole within socket.partial.request.timeout.ms."""
        if self._closed:
            return
        if self.partial_since is not None and now - self.partial_since > self._limits.partial_request_timeout_s:
            self._reject(f"a request did not arrive whole within {self._limits.partial_request_timeout_s:g}s")
        elif not self._pending and not self._waiting and now - self.last_active > self._limits.max_idle_s:
            log.info("closing %s: idle for %.0fs (connections.max.idle.ms)", self._ctx.peer, now - self.last_active)
            self.close()

    def _throttle(self, ms: int) -> None:
        """A client quota's delay: read nothing more from this connection for `ms` (KIP-219)."""
        if "quota" in self._paused_for or self._closed:
            return
        self._pause("quota")
        asyncio.get_running_loop().call_later(ms / 1000, self._resume, "quota")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            requests = self._codec.feed(data)
        except FrameError as e:
            self._reject(str(e))
            return
        except Exception as e:  # a codec bug must cost this connection, never the broker
            log.exception("cannot decode a request from %s", self._ctx.peer)
            self._reject(f"{type(e).__name__} decoding a request")
            return
        self.partial_since = (self.partial_since or self.last_active) if self._codec.buffered else None
        self._waiting.extend(requests)
        self._start_next()

    def _start_next(self) -> None:
        """Start the requests at the head of the queue that the order allows now; the rest wait for the
        answers they depend on (`_complete` calls this again)."""
        while self._waiting and not (self._closed or self._closing):
            req = self._waiting[0]
            if not self._order.may_start(None if req.immediate is not None else req.api_key):
                break
            self._waiting.popleft()
            self._ctx.client_id = req.client_id
            if req.immediate is not None:
                self._answer(req, None, req.immediate)
            else:
                self._dispatch(req)
        self._bound_queue()

    def _bound_queue(self) -> None:
        # A client piling up requests (long polls, acks=all produces, requests behind them): stop reading it.
        if len(self._pending) + len(self._waiting) >= self._limits.queued_max_requests:
            self._pause("queue")
        else:
            self._resume("queue")

    def _reject(self, reason: str) -> None:
        # Without a parseable header there is no correlation id to answer to: close, as Kafka does.
        log.warning("closing connection from %s: %s", self._ctx.peer, reason)
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    def _authenticate(self, req: Request) -> None:
        """SaslHandshake / SaslAuthenticate: connection state, answered here for both codecs."""
        auth = self._ctx.auth
        was_authenticated = auth.authenticated
        try:
            if req.api_key == ApiKey.SASL_HANDSHAKE:
                body = auth.handshake(req.body)
                if body.get("error_code") and self._security.sasl:
                    # Kafka's SaslServerAuthenticator answers a refused handshake, then closes.
                    self._fail_login(req, body, body.get("error_message") or "SaslHandshake refused")
                    return
                if body.get("error_code"):
                    self._codec.login_complete()  # a listener without SASL: no bare tokens follow a v0
            else:
                body = auth.authenticate(req.body)
        except SaslFailed as e:
            self._fail_login(req, error_body(e.code, str(e)), str(e))
            return
        if auth.authenticated and not was_authenticated:
            self._codec.login_complete()
            if self._login_deadline is not None:
                self._login_deadline.cancel()
                self._login_deadline = None
            log.debug("%s logged in as %s", self._ctx.peer, auth.principal)
        self._answer(req, body)

    def _fail_login(self, req: Request, answer: dict[str, Any], reason: str) -> None:
        """Answer a failed login only after connection.failed.authentication.delay.ms, then close (Kafka's
        delayed close): a guesser gets one answer per delay per connection. A timer, never a sleep, so
        the other connections are served meanwhile."""
        log.info("failed login from %s: %s", self._ctx.peer, reason)
        self._closing = True
        self._pause("login failed")  # read nothing more from a guesser while its answer waits
        slot = self._reserve()  # in-order codecs: keep this answer's place behind earlier ones

        def answer_and_close() -> None:
            self._answer(req, answer, slot=slot)
            self.close()

        asyncio.get_running_loop().call_later(self._security.failed_authentication_delay_s, answer_and_close)

    def _dispatch(self, req: Request) -> None:
        if req.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            self._authenticate(req)
            return
        if not self._ctx.auth.allows(req.api_key):
            # Kafka closes a connection that sends anything but the login before logging in. The native
            # protocol says why first, so a client configured for PLAINTEXT prints a useful line.
            if self._codec.in_order:
                self._reject(f"api {req.api_key} before the SASL login")
                return
            msg = f"this listener is {self._security.protocol}: log in first (security.protocol, sasl.*)"
            self._answer(req, error_body(ErrorCode.SASL_AUTHENTICATION_FAILED, msg))
            self._closing = True
            asyncio.get_running_loop().call_soon(self.close)
            return
        self._ctx.kafka_version = getattr(req, "kafka_version", None)  # a typed Kafka request's (codec.py)
        try:
            result = self._handler.handle(req.api_key, req.version, req.body, self._ctx)
        except (MalformedRequest, KafkaLiteError) as e:
            result = error_body(*error_code_of(e))
        except Exception as e:  # a handler bug must cost one request, never the broker
            log.exception("error handling api %s from %s", req.api_key, self._ctx.peer)
            result = error_body(*error_code_of(e))
        if not inspect.isawaitable(result):
            self._answer(req, result)
            return
        slot = self._reserve()
        fut = asyncio.ensure_future(result)
        self._pending[fut] = req.api_key
        self._order.started(req.api_key)
        fut.add_done_callback(lambda f: self._complete(req, f, slot))

    def _complete(self, req: Request, fut: asyncio.Future[Any], slot: list[Any] | None) -> None:
        self._pending.pop(fut, None)
        self._order.finished(req.api_key)
        if fut.cancelled() or self._closed:
            return
        exc = fut.exception()
        if exc is not None:
            if not isinstance(exc, (MalformedRequest, KafkaLiteError)):  # a handler bug
                log.error("error completing request %d from %s: %r", req.correlation_id, self._ctx.peer, exc)
            body: dict[str, Any] | None = error_body(*error_code_of(exc))
        else:
            body = fut.result()
        self._answer(req, body, slot=slot)
        self._start_next()  # after the answer: in-order codecs write it before any later request's

    def _reserve(self) -> list[Any] | None:
        if self._slots is None:
            return None
        slot: list[Any] = [False, None]  # [answered, frame]
        self._slots.append(slot)
        return slot

    def _answer(self, req: Request, body: Any, frame: bytes | None = None, slot: list[Any] | None = None) -> None:
        """Write the answer to `req` (body None: no answer, as for acks=0), in request order if the codec
        asks for it. A codec error in encoding an answer costs this connection, never the broker."""
        if frame is None and body is not None:
            try:
                frame = req.encode(body)
            except Exception as e:
                log.exception("cannot encode the answer to api %s for %s", req.api_key, self._ctx.peer)
                self._reject(f"{type(e).__name__} encoding a response")
                return
        if self._slots is None:
            if frame is not None:
                self._write(frame)
            return
        if slot is None:
            slot = self._reserve()
        assert slot is not None
        slot[0], slot[1] = True, frame
        while self._slots and self._slots[0][0]:
            done = self._slots.popleft()
            if done[1] is not None:
                self._write(done[1])

    def _write(self, frame: bytes) -> None:
        if self._transport is not None and not self._closed:
            self._transport.write(frame)


def error_body(code: ErrorCode, message: str = "") -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message or code.name}


def bind_listener(host: str, port: int) -> socket.socket:
    """Bind a listening socket before the request handlers exist: the broker registers its port (port 0
    picks one) with the coordination, which the handlers need. Connections wait in the backlog until the
    NetServer serving it starts (Kafka's SocketServer likewise binds, then enables request processing)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class NetServer:
    """Serves the connections of one bound listener with one handler, through one wire codec."""

    def __init__(
        self,
        handler: RequestHandler,
        sock: socket.socket,
        max_frame: int,
        codec_factory: Callable[[int], WireCodec] = NativeCodec,
        listener: str = NATIVE,
        security: ListenerSecurity = PLAINTEXT,
        ssl_context: ssl.SSLContext | None = None,
        limits: ConnectionLimits = ConnectionLimits(),
        quotas: ConnectionQuotas | None = None,
        ordered: bool = True,
        wire: str = "native",
    ) -> None:
        self._handler = handler
        self._sock = sock
        self._ordered = ordered
        self.limits = limits
        self.quotas = quotas
        self._sweeper: asyncio.Task[None] | None = None
        self.security = security
        self._ssl = ssl_context
        self.host, self.port = sock.getsockname()[:2]
        self._max_frame = max_frame
        self._codec_factory = codec_factory
        self.listener = listener
        self.wire = wire
        self._server: asyncio.base_events.Server | None = None
        # Weak: a TLS connection cut before its handshake completed never sees connection_made/_lost (asyncio
        # tells its app protocol nothing), and a strong set kept every one of a handshake flood alive.
        self._conns: weakref.WeakSet[BrokerProtocol] = weakref.WeakSet()
        self._churn = ConnectionChurn()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # A TLS handshake is part of authenticating (Kafka's SslAuthenticator): a peer that never finishes it is
        # cut at connections.max.unauthenticated.ms, not asyncio's 60 s default, so a flood cannot pile up.
        handshake_s = self.security.max_unauthenticated_s if self._ssl is not None else None
        self._server = await loop.create_server(
            self._make_protocol, sock=self._sock, ssl=self._ssl, ssl_handshake_timeout=handshake_s
        )
        self._sweeper = asyncio.create_task(self._sweep())

    async def _sweep(self) -> None:
        every = max(0.05, min(1.0, self.limits.partial_request_timeout_s / 4, self.limits.max_idle_s / 4))
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for c in list(self._conns):
                c.sweep(now)
            self._churn.release_if_due(len(self._conns))  # after a flood, RSS goes back down

    def _make_protocol(self) -> BrokerProtocol:
        proto = BrokerProtocol(
            self._handler,
            self._codec_factory(self._max_frame),
            self._conns.discard,
            self.listener,
            self.security,
            self.limits,
            self.quotas,
            ordered=self._ordered,
            wire=self.wire,
        )
        self._conns.add(proto)
        self._churn.accepted()
        return proto

    @property
    def connection_count(self) -> int:
        return len(self._conns)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is None:
            self._sock.close()  # bound but never served (a start that failed part way)
            return
        self._server.close()
        for c in list(self._conns):
            c.close()
        await self._server.wait_closed()


def as_list(value: Any, what: str) -> list[Any]:
    """Body fields must have the expected shape; a wrong one is the client's error, not a crash."""
    if not isinstance(value, list):
        raise BadRequest(f"{what} must be a list")
    return value


class BadRequest(MalformedRequest):
    """A well-framed request whose fields are wrong: answered with INVALID_REQUEST."""
