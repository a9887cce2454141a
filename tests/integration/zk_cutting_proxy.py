"""A TCP proxy between a ZooKeeper client and its server that can cut the connection at the client's next
multi (transaction) request: before forwarding it, or after forwarding it with the answer dropped. What a
loaded machine's short sessions do at random (a ping late, the connection dropped with a request in flight),
made to happen at the one moment a test is about.

ZooKeeper's client frames are a 4-byte length and the body; after the first (the session's ConnectRequest)
each body starts with the xid and the op code (14: multi)."""

from __future__ import annotations

import socket
import struct
import threading
import time

MULTI = 14


class CuttingProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._arm: str | None = None  # "before" or "after": cut at the next multi
        self.cuts: list[str] = []  # the cuts made, in order
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_at_next_multi(self, when: str) -> None:
        assert when in ("before", "after")
        with self._lock:
            self._arm = when

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            conn = _Conn(client, server)
            threading.Thread(target=self._upstream, args=(conn,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(conn,), daemon=True).start()

    def _upstream(self, conn: _Conn) -> None:
        first = True
        try:
            while True:
                head = _read(conn.client, 4)
                body = _read(conn.client, struct.unpack(">i", head)[0])
                op = None if first or len(body) < 8 else struct.unpack(">ii", body[:8])[1]
                first = False
                with self._lock:
                    arm = self._arm if op == MULTI else None
                    if arm is not None:
                        self._arm = None
                if arm == "before":
                    self.cuts.append("before")
                    conn.close()
                    return
                if arm == "after":
                    conn.drop_answers = True
                conn.server.sendall(head + body)
                if arm == "after":
                    time.sleep(0.5)  # the server applies it; its answer is dropped
                    self.cuts.append("after")
                    conn.close()
                    return
        except OSError:
            conn.close()

    def _downstream(self, conn: _Conn) -> None:
        try:
            while True:
                data = conn.server.recv(65536)
                if not data:
                    break
                if not conn.drop_answers:
                    conn.client.sendall(data)
        except OSError:
            pass
        conn.close()


class _Conn:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.drop_answers = False

    def close(self) -> None:
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("closed")
        buf += chunk
    return buf
