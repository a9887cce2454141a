"""Logging in and out of the console: the login page, POST /api/login and /api/logout, GET /api/session.

The session cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it) and
Secure when browsers reach the console over https. A failed login is one line, the same for an unknown user
and a wrong password (the broker's SCRAM answer is the same for both, and so is ours).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from client.dashboard.context import STATIC, Console, LoginRefused, console_of
from client.dashboard.guard import refuse
from client.dashboard.sessions import TooManySessions

STATIC_LOGIN = "login.html"


def set_cookie(console: Console, response: web.StreamResponse, value: str) -> None:
    response.set_cookie(
        console.served.cookie_name,
        value,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=console.served.secure_cookies,
    )


def safe_next(target: str | None) -> str:
    """Where to go after the login: a path of this console only (never //host or a scheme)."""
    if not target or not target.startswith("/") or target.startswith("//") or target.startswith("/\\"):
        return "/cluster"
    return target


def info(request: web.Request, cookie: str | None) -> dict[str, Any]:
    """What the page needs to know of the console: who is logged in, the CSRF token, whether it may write."""
    console = console_of(request)
    session = request.get("session")
    return {
        "mode": console.access.mode,
        "login": console.access.login_required,
        "user": session.user if session is not None else None,
        "writes": console.access.writes,
        "csrf": console.sessions.csrf_for(cookie) if cookie else None,
    }


async def login_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    if not console.access.login_required or request.get("session") is not None:
        raise web.HTTPSeeOther(safe_next(request.query.get("next")))
    page = STATIC / STATIC_LOGIN
    return web.Response(text=page.read_text(), content_type="text/html", headers={"Cache-Control": "no-store"})


async def login(request: web.Request) -> web.Response:
    console = console_of(request)
    if not console.access.login_required:
        return refuse(404, "this console has no login (it needs none in its mode)")
    try:
        body = await request.json()
        user, password = body["user"], body["password"]
        if not (isinstance(user, str) and isinstance(password, str)) or not user or not password:
            raise ValueError("user and password must be non-empty strings")
    except (ValueError, KeyError, TypeError) as e:
        return refuse(400, f"bad request: {str(e).splitlines()[0][:200]}")
    try:
        session = await console.login(user, password)
    except LoginRefused as e:
        return refuse(401, str(e))
    except TooManySessions as e:
        return refuse(503, str(e))
    except ConnectionError as e:
        return refuse(503, str(e))
    response = web.json_response({"user": session.user})
    set_cookie(console, response, session.token)
    return response


async def logout(request: web.Request) -> web.Response:
    console = console_of(request)
    console.sessions.end(request.get("cookie"))
    response = web.json_response({"logged_out": True})
    response.del_cookie(
        console.served.cookie_name,
        path="/",
        secure=console.served.secure_cookies,
        httponly=True,
        samesite="Strict",
    )
    return response


async def whoami(request: web.Request) -> web.Response:
    return web.json_response(info(request, request.get("cookie")))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/login", login_page)
    app.router.add_post("/api/login", login)
    app.router.add_post("/api/logout", logout)
    app.router.add_get("/api/session", whoami)
