"""What one running console holds: how it reaches the cluster, its mode (access.py), its sessions, where it is
served, and the watcher(s): one shared by every viewer, or one per session logged in as its user (login mode).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from client.admin import AsyncAdmin
from client.dashboard.access import Access
from client.dashboard.guard import Served
from client.dashboard.sessions import Session, SessionStore
from client.dashboard.watcher import CALL_TIMEOUT_S, ClusterWatcher, client_settings, one_line
from net.errors import SaslAuthenticationError

STATIC = Path(__file__).parent / "static"
LOGIN_TIMEOUT_S = CALL_TIMEOUT_S * 3
# Logins checked at once: each is a broker connection and a SASL exchange, so a flood of POST /api/login
# queues here instead of opening connections without bound.
CONCURRENT_LOGINS = 4
# One answer for a wrong password, an unknown user and a user not on the allow-list alike.
LOGIN_FAILED = "Login failed: wrong user name or password."


class LoginRefused(Exception):
    pass


def console_of(request: web.Request) -> "Console":
    return request.app[CONSOLE]


@dataclass
class Console:
    bootstrap: str
    access: Access
    served: Served
    client_config: dict[str, Any] = field(default_factory=dict)  # from --command-config
    interval_s: float = 1.0
    session_timeout_s: float = 30 * 60
    shared: ClusterWatcher | None = None  # None in login mode: every session has its own
    sessions: SessionStore = field(init=False)
    _logins: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.sessions = SessionStore(self.session_timeout_s)
        self._logins = asyncio.Semaphore(CONCURRENT_LOGINS)
        if not self.access.acts_as_user and self.shared is None:
            self.shared = ClusterWatcher(self.bootstrap, self.interval_s, self.client_config)

    # --- per request ---------------------------------------------------------

    def session_of(self, request: web.Request) -> Session | None:
        """The request's session (an idle one past the timeout has ended); keeps on the request the watcher and
        client settings its handlers use. The event stream does not count as activity: an open tab alone
        does not keep a session alive."""
        cookie = request.cookies.get(self.served.cookie_name)
        session = self.sessions.get(cookie, touch=request.path != "/api/events") if self.access.login_required else None
        request["session"] = session
        request["cookie"] = cookie
        if session is not None:
            request["watcher"], request["client_config"] = session.watcher, session.client_config
        else:
            request["watcher"], request["client_config"] = self.shared, self.client_config
        return session

    def csrf_ok(self, cookie: str | None, token: str | None) -> bool:
        return self.sessions.csrf_ok(cookie, token)

    # --- login ---------------------------------------------------------------

    async def login(self, user: str, password: str) -> Session:
        """Check the password by logging in to a broker as the user (SASL, the command config's mechanism);
        in login mode that client stays, polling for the session. LoginRefused for any wrong credential or a
        user not allowed; OSError-like failures (no broker reachable) pass as ConnectionError."""
        async with self._logins:
            self.sessions.check_room()
            return await self._login(user, password)

    async def _login(self, user: str, password: str) -> Session:
        config = {**self.client_config, "sasl_username": user, "sasl_password": password}
        watcher = ClusterWatcher(self.bootstrap, self.interval_s, config) if self.access.acts_as_user else None
        admin = watcher.admin if watcher is not None else AsyncAdmin(self.bootstrap, **client_settings(config))
        try:
            await asyncio.wait_for(admin.start(), LOGIN_TIMEOUT_S)
        except SaslAuthenticationError:
            await admin.close()
            raise LoginRefused(LOGIN_FAILED) from None
        except Exception as e:  # noqa: BLE001 - the cluster, not the credentials: said so in one line
            await admin.close()
            raise ConnectionError(f"cannot reach the cluster: {one_line(e)}") from None
        if self.access.allow_users and user not in self.access.allow_users:
            await admin.close()
            raise LoginRefused(LOGIN_FAILED)
        if watcher is None:
            await admin.close()  # the service identity acts; the user's own login was only the proof
            assert self.shared is not None
            return self.sessions.add(user, self.shared, self.client_config, owns_watcher=False)
        try:
            session = self.sessions.add(user, watcher, config, owns_watcher=True)
        except Exception:
            await admin.close()
            raise
        await watcher.start()
        return session

    # --- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        self.sessions.start()
        if self.shared is not None:
            await self.shared.start()

    async def stop(self) -> None:
        await self.sessions.close()
        if self.shared is not None:
            await self.shared.stop()


CONSOLE = web.AppKey("console", Console)
