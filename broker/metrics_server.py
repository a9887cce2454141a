"""The broker's metrics listener (`metrics.port`): Prometheus text on `GET /metrics`, on a port of its own
(Prometheus's usual practice), never on the Kafka protocol port.

A minimal HTTP/1.1 server on asyncio, running on the broker's event loop so the scrape-time gauges read the
broker's structures without locks; one request per connection, a bounded request head, a read timeout.
"""

from __future__ import annotations

import asyncio
import logging

from broker.metrics import BrokerMetrics

log = logging.getLogger("kafkalite.metrics")

MAX_HEAD = 8192
READ_TIMEOUT_S = 5.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def http_response(body: bytes, status: str = "200 OK", content_type: str = CONTENT_TYPE) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class MetricsServer:
    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None

    @classmethod
    async def start(cls, metrics: BrokerMetrics, host: str, port: int) -> "MetricsServer | None":
        """Listen on host:port (0: any free port, recorded in `.port`); None when port is -1 (disabled)."""
        if port < 0:
            return None
        srv = cls(metrics, host, port)
        srv._server = await asyncio.start_server(srv._serve, host, port, reuse_address=True)
        srv.port = srv._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", host, srv.port)
        return srv

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            if len(head) > MAX_HEAD:
                return
            parts = head.split(b" ", 2)
            method = parts[0]
            path = parts[1].decode("latin-1", "replace").split("?")[0] if len(parts) > 1 else ""
            if method not in (b"GET", b"HEAD"):
                resp = http_response(b"only GET\n", "405 Method Not Allowed", "text/plain")
            elif path == "/metrics":
                resp = http_response(self.metrics.render())
            else:
                resp = http_response(b"not found: try /metrics\n", "404 Not Found", "text/plain")
            writer.write(resp)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        except Exception:  # noqa: BLE001 - a scrape must never take the broker down
            log.exception("error serving a metrics request")
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
