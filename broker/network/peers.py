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
    ) -> None:
        self.self_id = self_id
        # The inter-broker listener's protocol and this broker's login / certificate (BrokerConfig).
        self.security = security
        self.peer_id = peer_id
        self.host, self.port = host, port
        self.backoff_s = backoff_s
        # Called with peer_id each time a connection attempt is refused (see the module docstring).
        self.on_closed = on_closed
        self._conn: BrokerConnection | None = None
        self._connecting: asyncio.Task | None = None
        self._attempting = False  # a connect is in flight (not the backoff after a failed one)
        self._pending: list[tuple[ApiKey, dict[str, Any]]] = []
        self._closing = False
        self.dropped = 0

    def connect(self) -> None:
        """Start connecting now rather than on the first send."""
        self._ensure()

    def _ensure(self) -> BrokerConnection | None:
        if self._conn is not None and self._conn.connected:
            return self._conn
        if not self._closing and (self._connecting is None or self._connecting.done()):
            self._connecting = asyncio.ensure_future(self._connect())
        return None

    async def _connect(self) -> None:
        conn = BrokerConnection(self.host, self.port, f"broker-{self.self_id}", self.security)
        self._attempting = True
        try:
            await conn.connect(timeout=1.0)
        except KafkaLiteError as e:
            self._attempting = False
            self.dropped += len(self._pending)
            self._pending.clear()
            if isinstance(e, ConnectRefusedError) and self.on_closed is not None and not self._closing:
                self.on_closed(self.peer_id)
            await asyncio.sleep(self.backoff_s)  # a dead peer is retried at most this often
            return
        self._attempting = False
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

    async def request(self, api: ApiKey, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        conn = self._ensure()
        if conn is None:
            if self._connecting is not None:
                await asyncio.wait([self._connecting], timeout=timeout)
            conn = self._ensure()
            if conn is None:
                raise KafkaLiteError(f"broker {self.peer_id} at {self.host}:{self.port} is unreachable")
        return await conn.request(api, body, timeout=timeout)

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
    ) -> None:
        self.self_id = self_id
        self.security = security
        self._address_of = address_of
        self._channels: dict[int, PeerChannel] = {}

    def channel(self, broker_id: int) -> PeerChannel:
        ch = self._channels.get(broker_id)
        if ch is None:
            addr = self._address_of(broker_id)
            if addr is None:
                raise KafkaLiteError(f"no address known for broker {broker_id}", ErrorCode.BROKER_NOT_AVAILABLE)
            ch = self._channels[broker_id] = PeerChannel(self.self_id, broker_id, *addr, security=self.security)
        return ch

    async def request(self, broker_id: int, api: ApiKey, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        return await self.channel(broker_id).request(api, body, timeout)

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
