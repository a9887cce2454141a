"""The console's front door, one aiohttp middleware in front of every handler (docs/SECURITY.md, "Console"):

1. Host: only the names the console serves (loopback ones, --http-host, --public-url's), else 421, so a
   DNS-rebound name (evil.example resolving to 127.0.0.1) reaches nothing.
2. Session: where a login is required, no valid session cookie is a 401 (the API) or the login page.
3. For every request that changes something (POST, PUT, PATCH, DELETE): the Origin header must be the
   console's own (403), the body JSON (`Content-Type: application/json`, else 415: a cross-site form or a
   "simple" text/plain fetch cannot send it without a CORS preflight, which is never granted), and the
   `X-CSRF-Token` header the session cookie's token (403).
4. On every response: Content-Security-Policy (scripts and styles from the console only, no inline script;
   the page's snapshot is inert JSON), X-Frame-Options DENY, nosniff, Referrer-Policy, Cross-Origin-*.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import quote, urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CSRF_HEADER = "X-CSRF-Token"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
# What no login is needed for: the login page and its assets.
PUBLIC_PATHS = frozenset({"/login", "/api/login"})
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(host: str) -> tuple[str, int | None] | None:
    """'Name:port' of a Host header (or an origin's netloc) as (lowercase name, port), None if malformed."""
    try:
        parts = urlsplit("//" + host)
        name, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not name or parts.username is not None or parts.path or parts.query:
        return None
    return name.lower(), port


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Served:
    """Where the console is: the names browsers may call it by, and whether it is served over TLS."""

    hosts: frozenset[str]
    tls: bool
    public_url: str | None = None

    @classmethod
    def of(cls, http_host: str, tls: bool, public_url: str | None) -> "Served":
        names = set(LOOPBACK_NAMES)
        if http_host not in WILDCARDS:
            names.add(http_host.lower().strip("[]"))
        if public_url:
            parts = urlsplit(public_url)
            if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
                raise ValueError(f"--public-url {public_url!r}: expected http(s)://HOST[:PORT]")
            names.add(parts.hostname.lower())
        return cls(frozenset(names), tls, public_url.rstrip("/") if public_url else None)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def secure_cookies(self) -> bool:
        """Secure cookies where browsers reach the console over https (its own TLS or a TLS proxy's)."""
        return self.tls or bool(self.public_url and self.public_url.startswith("https:"))

    @property
    def cookie_name(self) -> str:
        # The __Host- prefix makes browsers refuse the cookie unless Secure, Path=/ and without Domain.
        return "__Host-kl_session" if self.secure_cookies else "kl_session"

    def host_ok(self, host: str | None) -> bool:
        parsed = split_host(host or "")
        return parsed is not None and parsed[0] in self.hosts

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        """The request's Origin is this console: its scheme and the (already checked) Host it was sent to, or
        the public URL's origin (behind a proxy)."""
        if not origin or origin == "null":
            return False
        want = [f"{self.scheme}://{host}"] + ([self.public_url] if self.public_url else [])
        return any(_same_origin(origin, w) for w in want)


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    try:
        ports = (pa.port or DEFAULT_PORTS.get(pa.scheme), pb.port or DEFAULT_PORTS.get(pb.scheme))
    except ValueError:
        return False
    return bool(pa.hostname) and (pa.scheme, pa.hostname) == (pb.scheme, pb.hostname) and ports[0] == ports[1]


def refuse(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_guard(
    served: Served,
    login_required: Callable[[], bool],
    session_of: Callable[[web.Request], object],
    csrf_ok: Callable[[str | None, str | None], bool],
) -> Middleware:
    """The middleware. `session_of(request)` finds (and touches) the request's session and stores what the
    handlers need on the request; `csrf_ok(cookie, token)` checks a token."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if not served.host_ok(host):
            return refuse(421, f"this console does not serve the host {host!r}")
        path = request.path
        public = path in PUBLIC_PATHS or path.startswith("/static/")
        session = session_of(request)
        unsafe = request.method in UNSAFE_METHODS
        if login_required() and session is None and not public:
            if path.startswith("/api/") or unsafe:
                return refuse(401, "log in first")
            raise web.HTTPSeeOther("/login?next=" + quote(request.path_qs, safe="/"))
        if unsafe:
            if not served.origin_ok(request.headers.get("Origin"), host):
                return refuse(403, "cross-origin request refused: the Origin header must be this console's")
            if request.content_type != "application/json":
                return refuse(415, "the body must be JSON (Content-Type: application/json)")
            cookie = request.cookies.get(served.cookie_name)
            if path != "/api/login" and not csrf_ok(cookie, request.headers.get(CSRF_HEADER)):
                return refuse(403, f"missing or wrong CSRF token (the {CSRF_HEADER} header)")
        return await handler(request)

    return guard


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every response, errors and the event stream included."""
    for k, v in SECURITY_HEADERS.items():
        response.headers.setdefault(k, v)
    if request.path.startswith("/api/"):
        response.headers.setdefault("Cache-Control", "no-store")
