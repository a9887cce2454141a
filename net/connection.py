"""Client side of one TCP connection: many requests in flight, matched by correlation id."""

from __future__ import annotations

import asyncio
import errno
import itertools
import ssl
from typing import Any, Callable

from net.errors import ErrorCode, NetworkError, SaslAuthenticationError, error_for
from net.messages import MessageError
from net.messages import decode as decode_message
from net.messages import encode as encode_message
from net.protocol import (
    DEFAULT_MAX_FRAME,
    TYPED_SINCE,
    ApiKey,
    FrameDecoder,
    FrameError,
    encode_request,
    parse_response,
)
from net.schema.messages import MESSAGES
from net.security import ClientSecurity, SaslClient


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, conn: "BrokerConnection") -> None:
        self._conn = conn
        self._decoder = FrameDecoder(DEFAULT_MAX_FRAME * 2)
        self.transport: asyncio.Transport | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            for payload in self._decoder.feed(data):
                corr, body = parse_response(payload)
                self._conn._resolve(corr, body)
        except FrameError as e:
            self._conn._fail(NetworkError(f"bad response from {self._conn.address}: {e}"))
            if self.transport is not None:
                self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn._fail(NetworkError(f"connection to {self._conn.address} lost" + (f": {exc}" if exc else "")))
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        if self._conn.on_lost is not None:
            self._conn.on_lost()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    async def drain(self) -> None:
        if not self.paused:
            return
        # One waiter shared by every task writing to this connection: a waiter per call, replacing the
        # previous one, left the earlier writers waiting forever (a producer with three partitions in flight
        # stalled for good). Shielded, so one caller's timeout does not cancel the others' wait.
        if self._drain_waiter is None or self._drain_waiter.done():
            self._drain_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drain_waiter)


class ConnectRefusedError(NetworkError):
    """Nothing listens at the address (ECONNREFUSED): on a reachable host, the process is gone. A paused
    process still completes connections (the kernel answers for its listening socket), and a cut link
    times out instead, so this tells a dead broker from a silent one."""


class BrokerConnection:
    """One connection to one broker. `request` returns the response body."""

    def __init__(
        self, host: str, port: int, client_id: str = "kafkalite", security: ClientSecurity | None = None
    ) -> None:
        self.host, self.port = host, port
        self.security = security or ClientSecurity()
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self._corr = itertools.count(1)
        self._waiters: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._proto: _ClientProtocol | None = None
        self._error: Exception | None = None
        # Called (no arguments) once the connection is gone, whoever closed it; the broker's peer channels
        # use it to reconnect at once (broker/network/peers.py).
        self.on_lost: Callable[[], None] | None = None

    async def connect(self, timeout: float = 5.0) -> None:
        """Connect, with TLS and the SASL login when the security protocol says so. A refused login raises
        SaslAuthenticationError (not retriable: the same credentials will not work on another broker)."""
        loop = asyncio.get_running_loop()
        ctx = self.security.ssl_context()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _ClientProtocol(self),
                    self.host,
                    self.port,
                    ssl=ctx,
                    server_hostname=self.host if ctx is not None else None,
                ),
                timeout,
            )
        except ssl.SSLError as e:
            raise NetworkError(f"TLS handshake with {self.address} failed: {e.reason or e}") from None
        except (TimeoutError, OSError) as e:
            cls = ConnectRefusedError if getattr(e, "errno", None) == errno.ECONNREFUSED else NetworkError
            raise cls(f"cannot connect to {self.address}: {e or 'timed out'}") from None
        self._proto = proto
        sasl = self.security.sasl_client()
        if sasl is not None:
            try:
                await asyncio.wait_for(self._login(sasl), timeout)
            except BaseException:
                self.close()
                raise

    async def _login(self, sasl: SaslClient) -> None:
        """Kafka's SaslHandshake, then SaslAuthenticate tokens until the mechanism is done."""
        body = await self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": sasl.mechanism}, timeout=None)
        if body.get("error_code"):
            raise error_for(body["error_code"], f"{self.address}: {body.get('error_message') or ''}")
        token: bytes | None = sasl.first()
        while token is not None:
            body = await self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}, timeout=None)
            if body.get("error_code"):
                code = body["error_code"]
                msg = f"login to {self.address} as {sasl.username!r} refused: {body.get('error_message') or ''}"
                raise (
                    SaslAuthenticationError(msg)
                    if code == ErrorCode.SASL_AUTHENTICATION_FAILED
                    else error_for(code, msg)
                )
            token = sasl.step(body.get("auth_bytes") or b"")

    @property
    def connected(self) -> bool:
        proto = self._proto
        return (
            proto is not None
            and self._error is None
            and proto.transport is not None
            and not proto.transport.is_closing()
        )

    def send(
        self, api_key: int, body: dict[str, Any] | list[Any], version: int = 0, expect_response: bool = True
    ) -> asyncio.Future[Any] | None:
        """Write a request now; return a future of its response body (None when no response is expected)."""
        if not self.connected:
            raise self._error or NetworkError(f"not connected to {self.address}")
        assert self._proto is not None and self._proto.transport is not None  # `connected` checked both
        corr = next(self._corr)
        fut = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._waiters[corr] = fut
        self._proto.transport.write(encode_request(api_key, version, corr, self.client_id, body))
        return fut

    async def request(
        self, api_key: int, body: dict[str, Any] | list[Any], version: int = 0, timeout: float | None = 30.0
    ) -> Any:
        fut = self.send(api_key, body, version)
        proto = self._proto
        assert fut is not None and proto is not None  # a response is expected; send() checked the connection
        try:
            # The timeout covers the wait for the socket buffer too: a peer that stops reading must not
            # hold the request past it.
            async with asyncio.timeout(timeout):
                await proto.drain()
                return await fut
        except TimeoutError:
            # As Kafka does: a broker that does not answer in time is treated as gone, so the next request
            # (a metadata refresh, say) goes to another broker instead of queueing behind this one.
            err = NetworkError(f"request to {self.address} timed out after {timeout}s")
            fut.cancel()  # nobody will await it now (the timeout may have hit while draining)
            if self._proto is not None and self._proto.transport is not None:
                self._proto.transport.abort()
            self._fail(err)
            raise err from None

    async def call(self, request: Any, timeout: float | None = 30.0) -> Any:
        """A typed request (net/schema/) in its typed native version, and its typed answer. A request that failed
        as a whole (a map with its error code, as every native error) is raised as that error."""
        api_key = type(request).API_KEY
        body: Any = await self.request(api_key, encode_message(request), TYPED_SINCE[api_key], timeout)
        if isinstance(body, dict):
            raise error_for(body.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR), body.get("error_message", ""))
        try:
            return decode_message(MESSAGES[api_key][1], body)
        except MessageError as e:
            raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"malformed answer to api {api_key}: {e}") from None

    async def drain(self) -> None:
        if self._proto is not None:
            await self._proto.drain()

    def _resolve(self, corr: int, body: dict[str, Any]) -> None:
        fut = self._waiters.pop(corr, None)
        if fut is not None and not fut.done():
            fut.set_result(body)

    def _fail(self, exc: Exception) -> None:
        self._error = exc
        waiters, self._waiters = self._waiters, {}
        for fut in waiters.values():
            if not fut.done():
                fut.set_exception(exc)

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._fail(NetworkError(f"connection to {self.address} closed"))

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address})"


def raise_for_error(body: dict[str, Any]) -> None:
    from net.errors import error_for

    code = body.get("error_code", 0)
    if code:
        raise error_for(code, body.get("error_message") or "")
