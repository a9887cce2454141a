"""The broker's TCP front end: frames in, handler calls, frames out.

Requests on one connection are dispatched in arrival order (so produce order is
kept); a handler may return an awaitable (a long-poll fetch, an acks=all
produce), whose response is written when it completes, tagged by correlation id.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Protocol

from net.errors import ErrorCode, KafkaLiteError
from net.protocol import FrameDecoder, FrameError, encode_response, parse_request

log = logging.getLogger("kafkalite.net")

# A handler result: a body, an awaitable of a body, or None for "no response" (acks=0).
Response = dict | Awaitable[dict | None] | None


class RequestHandler(Protocol):
    def handle(self, api_key: int, version: int, body: dict, ctx: "ConnectionContext") -> Response: ...


class ConnectionContext:
    __slots__ = ("peer", "client_id")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.client_id: str | None = None


class BrokerProtocol(asyncio.Protocol):
    # Stop reading a peer that doesn't drain its responses, rather than buffering without bound.
    HIGH_WATER = 16 * 1024 * 1024

    def __init__(
        self,
        handler: RequestHandler,
        max_frame: int,
        on_close: Callable[["BrokerProtocol"], None],
    ) -> None:
        self._handler = handler
        self._decoder = FrameDecoder(max_frame)
        self._transport: asyncio.Transport | None = None
        self._ctx = ConnectionContext("?")
        self._on_close = on_close
        self._pending: set[asyncio.Future] = set()
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        transport.set_write_buffer_limits(high=self.HIGH_WATER)
        peer = transport.get_extra_info("peername")
        self._ctx.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        for fut in self._pending:
            fut.cancel()
        self._pending.clear()
        self._on_close(self)

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameError as e:
            self._reject(str(e))
            return
        for payload in frames:
            if self._closed:
                return
            try:
                api_key, version, corr, client_id, body = parse_request(payload)
            except FrameError as e:
                self._reject(str(e))
                return
            self._ctx.client_id = client_id
            self._dispatch(api_key, version, corr, body)

    def _reject(self, reason: str) -> None:
        # Without a parseable header there is no correlation id to answer to: close, as Kafka does.
        log.warning("closing connection from %s: %s", self._ctx.peer, reason)
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    def _dispatch(self, api_key: int, version: int, corr: int, body: dict) -> None:
        try:
            result = self._handler.handle(api_key, version, body, self._ctx)
        except BadRequest as e:
            result = error_body(ErrorCode.INVALID_REQUEST, str(e))
        except KafkaLiteError as e:
            result = error_body(e.code, str(e))
        except Exception as e:  # a handler bug must cost one request, never the broker
            log.exception("error handling api %s from %s", api_key, self._ctx.peer)
            result = error_body(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}")
        if result is None:
            return
        if isinstance(result, dict):
            self._write(corr, result)
            return
        fut = asyncio.ensure_future(result)
        self._pending.add(fut)
        fut.add_done_callback(lambda f: self._complete(corr, f))

    def _complete(self, corr: int, fut: asyncio.Future) -> None:
        self._pending.discard(fut)
        if fut.cancelled() or self._closed:
            return
        exc = fut.exception()
        if isinstance(exc, BadRequest):
            self._write(corr, error_body(ErrorCode.INVALID_REQUEST, str(exc)))
            return
        if exc is not None:
            log.error("error completing request %d from %s: %r", corr, self._ctx.peer, exc)
            self._write(corr, error_body(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))
            return
        body = fut.result()
        if body is not None:
            self._write(corr, body)

    def _write(self, corr: int, body: dict) -> None:
        if self._transport is not None and not self._closed:
            self._transport.write(encode_response(corr, body))


def error_body(code: ErrorCode, message: str = "") -> dict:
    return {"error_code": int(code), "error_message": message or code.name}


class NetServer:
    """Listens on host:port and feeds every connection to one handler."""

    def __init__(
        self,
        handler: RequestHandler,
        host: str,
        port: int,
        max_frame: int,
    ) -> None:
        self._handler = handler
        self.host = host
        self.port = port
        self._max_frame = max_frame
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[BrokerProtocol] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._make_protocol, self.host, self.port, reuse_address=True)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    def _make_protocol(self) -> BrokerProtocol:
        proto = BrokerProtocol(self._handler, self._max_frame, self._conns.discard)
        self._conns.add(proto)
        return proto

    @property
    def connection_count(self) -> int:
        return len(self._conns)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in list(self._conns):
                c.close()
            await self._server.wait_closed()


def as_list(value: Any, what: str) -> list:
    """Body fields must have the expected shape; a wrong one is the client's error, not a crash."""
    if not isinstance(value, list):
        raise BadRequest(f"{what} must be a list")
    return value


class BadRequest(ValueError):
    """A well-framed request whose fields are wrong: answered with INVALID_REQUEST."""
