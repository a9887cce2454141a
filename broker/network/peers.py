"""Broker-to-broker channels: one outgoing connection per peer, reconnected
with backoff. Quorum messages are one-way (the state machines tolerate loss),
so `send` never waits: a message for an unreachable peer is dropped, one sent
while a connection is being made waits for it (a first election's messages
would otherwise all be lost to connections that do not exist yet).

With `on_closed`, the channel also watches its peer's process: a connection
the peer closed is re-made at once, and a refusal (nothing listens at the
address) is reported as the process being gone. A paused process or a cut
link is never reported: connections to it time out instead of being refused.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from net.connection import BrokerConnection, ConnectRefusedError
from net.errors import ErrorCode, KafkaLiteError
from net.protocol import ApiKey
from net.retry import Backoff
from net.security import ClientSecurity

log = logging.getLogger("kafkalite.peers")


def parse_peers(spec: str) -> dict[int, tuple[str, int]]:
    """`1@host:port,2@host:port` -> {1: (host, port), ...}"""
    peers: dict[int, tuple[str, int]] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        bid, sep, addr = item.partition("@")
        host, sep2, port = addr.rpartition(":")
        if not sep or not sep2 or not bid.isdigit() or not port.isdigit() or not host:
            raise ValueError(f"peer {item!r} is not ID@HOST:PORT")
        if int(bid) in peers:
            raise ValueError(f"broker id {bid} appears twice in the peer list")
        peers[int(bid)] = (host, int(port))
    return peers


# One-way messages kept while a connection is being made; beyond this they are dropped like any loss.
PENDING_MAX = 64


async def listener_ports(
    host: str, port: int, client_id: str, security: ClientSecurity | None, timeout: float
) -> dict[str, Any]:
    """Ask a broker's native listener where its broker-only listeners are: its ApiVersions answer names
    `inter_broker_port` and `heartbeat_port` (port numbers only; whoever connects there must still log in
    as a broker). Peers are configured by their native address (`peers`, the coordination's registrations)."""
    conn = BrokerConnection(host, port, client_id, security)
    try:
        await conn.connect(timeout=timeout)
        answer: dict[str, Any] = await conn.request(ApiKey.API_VERSIONS, {}, timeout=timeout)
    finally:
        conn.close()
    return answer


def inter_broker_port(answer: dict[str, Any], host: str, port: int) -> int:
    ib = answer.get("inter_broker_port")
    if not isinstance(ib, int) or isinstance(ib, bool) or not 0 < ib <= 65535:
        raise KafkaLiteError(f"broker at {host}:{port} names no inter-broker listener", ErrorCode.BROKER_NOT_AVAILABLE)
    return ib


CONNECT_TIMEOUT_S = 1.0  # one connection attempt to a peer (port discovery, TCP, login), at first
CONNECT_TIMEOUT_MAX_S = 16.0


class PeerChannel:
    def __init__(
        self,
        self_id: int,
        peer_id: int,
        host: str,
        port: int,
        backoff_s: float = 0.2,
        on_closed: Callable[[int], None] | None = None,
        security: ClientSecurity | None = None,
        discovery: ClientSecurity | None = None,
    ) -> None:
        self.self_id = self_id
        # The inter-broker listener's protocol and this broker's login / certificate (BrokerConfig).
        self.security = security
        # How to ask the peer's native listener (host, port) for its inter-broker port; None: (host, port)
        # is the peer's inter-broker listener itself.
        self.discovery = discovery
        self.peer_id = peer_id
        self.host, self.port = host, port
        self._ib_port: int | None = None if discovery is not None else port
        # A dead peer is tried again at most every backoff_s: a constant wait (net/retry.py at base = maximum),
        # spread ±20% so that brokers do not all reconnect in lock step; a connection resets it.
        self._reconnect = Backoff(backoff_s * 1000, backoff_s * 1000)
        # Called with peer_id each time a connection attempt is refused (see the module docstring).
        self.on_closed = on_closed
        self._conn: BrokerConnection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._attempting = False  # a connect is in flight (not the backoff after a failed one)
        self._pending: list[tuple[ApiKey, dict[str, Any]]] = []
        self._closing = False
        self.dropped = 0
        # How long one attempt may take to learn the peer's port, connect and log in: 1 s, doubled after each
        # failed attempt up to CONNECT_TIMEOUT_MAX_S and back to 1 s once one succeeds. On a machine so busy that
        # a login takes seconds (brokers at a low priority beside CPU hogs), a fixed 1 s failed every attempt, for
        # good, and the peer looked unreachable though it was only slow (tests/integration/test_busy_machine.py).
        self._connect_timeout = CONNECT_TIMEOUT_S

    def connect(self) -> None:
        """Start connecting now rather than on the first send."""
        self._ensure()

    def _ensure(self) -> BrokerConnection | None:
        if self._conn is not None and self._conn.connected:
            return self._conn
        if not self._closing and (self._connecting is None or self._connecting.done()):
            self._connecting = asyncio.ensure_future(self._connect())
        return None

    async def _open(self) -> BrokerConnection:
        """A connection to the peer's inter-broker listener, its port learned from the native listener first
        (again when a port learned earlier refuses: the peer may have restarted on another one). A refusal
        of the native listener itself means the process is gone."""
        client_id = f"broker-{self.self_id}"
        while True:
            fresh = self._ib_port is None
            if fresh:
                answer = await listener_ports(self.host, self.port, client_id, self.discovery, self._connect_timeout)
                self._ib_port = inter_broker_port(answer, self.host, self.port)
            ib_port = self._ib_port
            assert ib_port is not None  # known, or found just above
            conn = BrokerConnection(self.host, ib_port, client_id, self.security)
            try:
                await conn.connect(timeout=self._connect_timeout)
                return conn
            except ConnectRefusedError:
                if fresh or self.discovery is None:
                    raise
                self._ib_port = None

    async def _connect(self) -> None:
        self._attempting = True
        try:
            conn = await self._open()
        except (KafkaLiteError, TimeoutError, OSError) as e:
            self._attempting = False
            self._connect_timeout = min(self._connect_timeout * 2, CONNECT_TIMEOUT_MAX_S)
            self.dropped += len(self._pending)
            self._pending.clear()
            if isinstance(e, ConnectRefusedError) and self.on_closed is not None and not self._closing:
                self.on_closed(self.peer_id)
            await asyncio.sleep(self._reconnect.next())  # a dead peer is retried at most this often
            return
        self._attempting = False
        self._reconnect.reset()
        self._connect_timeout = CONNECT_TIMEOUT_S
        if self._closing:
            conn.close()
            return
        if self.on_closed is not None:
            conn.on_lost = self._on_lost
        self._conn = conn
        pending, self._pending = self._pending, []
        for api, body in pending:
            self._write(conn, api, body)

    def wake(self) -> None:
        """The peer showed life (it sent us something): if we are backing off after a refusal, retry now."""
        if self._conn is not None and self._conn.connected:
            return
        if self._connecting is not None and not self._connecting.done() and not self._attempting:
            self._connecting.cancel()
            self._connecting = None
        self._ensure()

    def _on_lost(self) -> None:
        # The peer closed the connection (or it broke): find out now whether its process is still there,
        # rather than at the next send.
        if not self._closing:
            asyncio.get_running_loop().call_soon(self._ensure)

    def send_oneway(self, api: ApiKey, body: dict[str, Any]) -> bool:
        conn = self._ensure()
        if conn is None:
            if self._attempting and len(self._pending) < PENDING_MAX:
                self._pending.append((api, body))
                return True
            self.dropped += 1
            return False
        return self._write(conn, api, body)

    def _write(self, conn: BrokerConnection, api: ApiKey, body: dict[str, Any]) -> bool:
        try:
            conn.send(api, body, expect_response=False)
            return True
        except KafkaLiteError:
            self.dropped += 1
            return False

    async def _connected(self, timeout: float) -> BrokerConnection:
        conn = self._ensure()
        if conn is None:
            if self._connecting is not None:
                await asyncio.wait([self._connecting], timeout=timeout)
            conn = self._ensure()
            if conn is None:
                raise KafkaLiteError(f"broker {self.peer_id} at {self.host}:{self.port} is unreachable")
        return conn

    async def request(self, api: ApiKey, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        conn = await self._connected(timeout)
        answer: dict[str, Any] = await conn.request(api, body, timeout=timeout)
        return answer

    async def call(self, request: Any, timeout: float) -> Any:
        """A typed request (net/schema/) and its typed answer."""
        return await (await self._connected(timeout)).call(request, timeout)

    def close(self) -> None:
        self._closing = True
        self._pending.clear()
        if self._connecting is not None:
            self._connecting.cancel()
        if self._conn is not None:
            self._conn.close()


class BrokerPeers:
    """The request channels to the other brokers (replica fetches, forwarded requests, AlterPartition and
    BrokerRegistration), one per broker, made on first use at the address `address_of` names for it."""

    def __init__(
        self,
        self_id: int,
        address_of: Callable[[int], tuple[str, int] | None],
        security: ClientSecurity | None = None,
        discovery: ClientSecurity | None = None,
    ) -> None:
        self.self_id = self_id
        self.security = security
        self.discovery = discovery  # see PeerChannel: `address_of` names native listeners
        self._address_of = address_of
        self._channels: dict[int, PeerChannel] = {}

    def channel(self, broker_id: int) -> PeerChannel:
        ch = self._channels.get(broker_id)
        if ch is None:
            addr = self._address_of(broker_id)
            if addr is None:
                raise KafkaLiteError(f"no address known for broker {broker_id}", ErrorCode.BROKER_NOT_AVAILABLE)
            ch = self._channels[broker_id] = PeerChannel(
                self.self_id, broker_id, *addr, security=self.security, discovery=self.discovery
            )
        return ch

    async def request(self, broker_id: int, api: ApiKey, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        return await self.channel(broker_id).request(api, body, timeout)

    async def call(self, broker_id: int, request: Any, timeout: float) -> Any:
        return await self.channel(broker_id).call(request, timeout)

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
