"""The console's sessions: a random token in an HttpOnly cookie names a logged-in user; a session idle for
longer than the timeout ends, and with it the user's own cluster client (login mode).

The CSRF token of a cookie is an HMAC of it under a key made at start (a signed double-submit token): a page
gets it embedded, sends it back in a header, and another origin, which can neither read the page nor the
cookie, cannot make one. Consoles that need no login give each browser a random cookie of the same kind, so
their changes (an open cluster with --allow-writes) carry a token too.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from client.dashboard.watcher import ClusterWatcher

DEFAULT_TIMEOUT_S = 30 * 60
MAX_SESSIONS = 64  # each login-mode session polls the cluster with its own client: a bound on that work


@dataclass
class Session:
    token: str
    user: str
    watcher: ClusterWatcher
    client_config: dict[str, Any]  # the clients' keyword arguments this session reads with (messages)
    owns_watcher: bool  # its own client (login mode), else the console's shared one
    last_seen: float = field(default_factory=time.monotonic)
    closed: bool = False


class TooManySessions(Exception):
    pass


class SessionStore:
    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, max_sessions: int = MAX_SESSIONS) -> None:
        self.timeout_s = timeout_s
        self.max_sessions = max_sessions
        self._key = secrets.token_bytes(32)
        self._sessions: dict[str, Session] = {}
        self._reaper: asyncio.Task[None] | None = None

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(32)

    def csrf_for(self, cookie: str) -> str:
        return hmac.new(self._key, cookie.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, cookie: str | None, token: str | None) -> bool:
        return bool(cookie and token) and hmac.compare_digest(self.csrf_for(cookie or ""), token or "")

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, token: str | None, touch: bool = True) -> Session | None:
        """The live session of a cookie; an idle one past the timeout is ended here."""
        s = self._sessions.get(token or "")
        if s is None:
            return None
        now = time.monotonic()
        if now - s.last_seen > self.timeout_s:
            self._end(s)
            return None
        if touch:
            s.last_seen = now
        return s

    def check_room(self) -> None:
        """TooManySessions when no session can be added now (checked before a login costs anything too)."""
        self.expire()
        if len(self._sessions) >= self.max_sessions:
            raise TooManySessions(f"{self.max_sessions} sessions are open: try again when one ends")

    def add(self, user: str, watcher: ClusterWatcher, client_config: dict[str, Any], owns_watcher: bool) -> Session:
        self.check_room()
        s = Session(self.new_token(), user, watcher, client_config, owns_watcher)
        self._sessions[s.token] = s
        return s

    def end(self, token: str | None) -> None:
        s = self._sessions.get(token or "")
        if s is not None:
            self._end(s)

    def expire(self) -> None:
        now = time.monotonic()
        for s in [s for s in self._sessions.values() if now - s.last_seen > self.timeout_s]:
            self._end(s)

    def _end(self, s: Session) -> None:
        self._sessions.pop(s.token, None)
        s.closed = True
        if s.owns_watcher:
            asyncio.ensure_future(s.watcher.stop())  # its poll task and its client, logged in as the user

    # --- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        async def reap() -> None:
            # Idle sessions end even when nobody asks for them again: their clients stop polling.
            while True:
                await asyncio.sleep(min(30.0, max(0.5, self.timeout_s / 4)))
                self.expire()

        self._reaper = asyncio.create_task(reap())

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        owned = [s.watcher for s in self._sessions.values() if s.owns_watcher]
        self._sessions.clear()
        await asyncio.gather(*(w.stop() for w in owned), return_exceptions=True)
