"""The broker's metrics listener (`metrics.port`): Prometheus text on `GET /metrics`, on a port of its own
(Prometheus's usual practice), never on the Kafka protocol port.

A minimal HTTP/1.1 server on asyncio, running on the broker's event loop so the scrape-time gauges read the
broker's structures without locks; one request per connection, a bounded request head, a read timeout.
(prometheus_client's own start_http_server serves from a thread of its own and has TLS but no basic auth.)
It listens on `metrics.host` (loopback by default); `metrics.basic.auth.users` asks scrapers for a user and
password (HTTP basic auth, as Prometheus's exporter web config), `metrics.ssl.keystore.location` serves HTTPS.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import ssl

from broker.metrics.broker_metrics import BrokerMetrics
from net.errors import InvalidConfigError

log = logging.getLogger("kafkalite.metrics")

MAX_HEAD = 8192
READ_TIMEOUT_S = 5.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def http_response(body: bytes, status: str = "200 OK", content_type: str = CONTENT_TYPE) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def parse_users(spec: str) -> dict[str, str]:
    """`user:password,...` (metrics.basic.auth.users) as {user: password}."""
    users = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, sep, password = item.partition(":")
        if not sep or not name or not password:
            raise InvalidConfigError("metrics.basic.auth.users must be user:password,...")
        users[name] = password
    return users


class MetricsServer:
    def __init__(self, metrics: BrokerMetrics, host: str, port: int, users: dict[str, str] | None = None) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self.users = users or {}
        self._server: asyncio.base_events.Server | None = None

    @classmethod
    async def start(
        cls, metrics: BrokerMetrics, host: str, port: int, users: str = "", keystore: str = ""
    ) -> "MetricsServer | None":
        """Listen on host:port (0: any free port, recorded in `.port`); None when port is -1 (disabled)."""
        if port < 0:
            return None
        srv = cls(metrics, host, port, parse_users(users))
        tls = None
        if keystore:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(keystore)
        srv._server = await asyncio.start_server(srv._serve, host, port, reuse_address=True, ssl=tls)
        srv.port = srv._server.sockets[0].getsockname()[1]
        scheme = "https" if tls else "http"
        log.info("metrics on %s://%s:%d/metrics%s", scheme, host, srv.port, " (basic auth)" if srv.users else "")
        return srv

    def authorized(self, head: bytes) -> bool:
        """Whether the request head carries the basic-auth credentials of a configured user (or none are)."""
        if not self.users:
            return True
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() != b"authorization":
                continue
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() != b"basic":
                return False
            try:
                user, _, password = base64.b64decode(token, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            expected = self.users.get(user)
            # compare_digest even for an unknown user, so timing does not tell which names exist
            same = hmac.compare_digest(password.encode(), (expected or "\0" + password).encode())
            return same and expected is not None
        return False

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
            if not self.authorized(head):
                resp = http_response(b"log in to scrape /metrics\n", "401 Unauthorized", "text/plain")
                resp = resp.replace(b"\r\n\r\n", b'\r\nWWW-Authenticate: Basic realm="kafkalite metrics"\r\n\r\n', 1)
            elif method not in (b"GET", b"HEAD"):
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
