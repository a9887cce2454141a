"""Broker-to-broker channels: one outgoing connection per peer, reconnected
with backoff. Quorum messages are one-way (the state machines tolerate loss),
so `send` never waits: a message for an unreachable peer is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from net.connection import BrokerConnection
from net.errors import KafkaLiteError
from net.protocol import ApiKey

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


class PeerChannel:
    def __init__(self, self_id: int, peer_id: int, host: str, port: int, backoff_s: float = 0.2) -> None:
        self.self_id = self_id
        self.peer_id = peer_id
        self.host, self.port = host, port
        self.backoff_s = backoff_s
        self._conn: BrokerConnection | None = None
        self._connecting: asyncio.Task | None = None
        self.dropped = 0

    def _ensure(self) -> BrokerConnection | None:
        if self._conn is not None and self._conn.connected:
            return self._conn
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        return None

    async def _connect(self) -> None:
        conn = BrokerConnection(self.host, self.port, client_id=f"broker-{self.self_id}")
        try:
            await conn.connect(timeout=1.0)
        except KafkaLiteError:
            await asyncio.sleep(self.backoff_s)  # a dead peer is retried at most this often
            return
        self._conn = conn

    def send_oneway(self, api: ApiKey, body: dict[str, Any]) -> bool:
        conn = self._ensure()
        if conn is None:
            self.dropped += 1
            return False
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
        if self._connecting is not None:
            self._connecting.cancel()
        if self._conn is not None:
            self._conn.close()
