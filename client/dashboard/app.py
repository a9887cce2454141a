"""The console's web server (aiohttp): the pages, a JSON API, and the live snapshot as server-sent events.

Pages are one HTML shell whose JavaScript renders the page named by the URL path (/cluster, /topics,
/topics/NAME, /messages, /groups, /groups/ID, /throughput). The script, styles and the vendored chart
library (uPlot) are served from the package: nothing comes from a CDN. Every request passes guard.py first
(Host, session, Origin, JSON body, CSRF token, security headers); a handler reads the cluster through the
request's watcher: the session's own (login mode, as its user) or the console's shared one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable

from aiohttp import web

from client.admin import NewTopic
from client.dashboard import login
from client.dashboard.context import CONSOLE, STATIC, Console, console_of
from client.dashboard.guard import make_guard, security_headers
from client.dashboard.guard import refuse as error
from client.dashboard.messages import read_messages
from client.dashboard.watcher import CALL_TIMEOUT_S, ClusterWatcher, one_line

PAGES = ("/cluster", "/topics", "/topics/{name}", "/messages", "/groups", "/groups/{group}", "/throughput")
SSE_KEEPALIVE_S = 10.0
CONSOLE_SLOT = "<!-- console -->"


def watcher_of(request: web.Request) -> ClusterWatcher:
    watcher: ClusterWatcher = request["watcher"]
    return watcher


def json_script(element_id: str, value: Any) -> str:
    """JSON in a <script> element the browser never runs (type application/json; the CSP allows no inline
    script anyway): "<" escaped so no value (a topic name, an error) can close the element."""
    data = (value if isinstance(value, str) else json.dumps(value)).replace("<", "\\u003c")
    return f'<script id="{element_id}" type="application/json">{data}</script>'


FIRST_SNAPSHOT_WAIT_S = CALL_TIMEOUT_S * 2
SNAPSHOT_SLOT = "<!-- snapshot -->"


async def page(request: web.Request) -> web.Response:
    """The page with the current snapshot in it, so the first paint has the cluster's data before the event
    stream sends anything (just after the console starts, the first poll is awaited for a moment)."""
    w = watcher_of(request)
    deadline = asyncio.get_running_loop().time() + FIRST_SNAPSHOT_WAIT_S
    while not w.snapshot.get("ready") and (left := deadline - asyncio.get_running_loop().time()) > 0:
        await w.wait_change(w.version, left)
    console = console_of(request)
    cookie = request["cookie"]
    fresh = None
    if not console.access.login_required and not cookie:
        # No login in this mode: the browser still gets a random cookie, so its changes carry a CSRF token.
        fresh = cookie = console.sessions.new_token()
    html = (
        (STATIC / "index.html")
        .read_text()
        .replace(SNAPSHOT_SLOT, json_script("kl-snapshot", w.snapshot_json))
        .replace(CONSOLE_SLOT, json_script("kl-console", login.info(request, cookie)))
    )
    response = web.Response(text=html, content_type="text/html", headers={"Cache-Control": "no-store"})
    if fresh is not None:
        login.set_cookie(console, response, fresh)
    return response


async def root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/cluster")


async def snapshot(request: web.Request) -> web.Response:
    return web.Response(text=watcher_of(request).snapshot_json, content_type="application/json")


async def history(request: web.Request) -> web.Response:
    return web.json_response(list(watcher_of(request).series))


async def list_topics(request: web.Request) -> web.Response:
    """The topics this console's user may describe, as the last poll saw them."""
    topics = watcher_of(request).snapshot.get("topics", [])
    return web.json_response(
        [{"name": t["name"], "partitions": len(t["partitions"]), "internal": t["internal"]} for t in topics]
    )


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the snapshot each time the watcher publishes one (about once a second), until the
    session ends (the page then finds its way to the login)."""
    w = watcher_of(request)
    session = request["session"]
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )
    await resp.prepare(request)
    seen = -1
    try:
        while session is None or not session.closed:
            version = await w.wait_change(seen, SSE_KEEPALIVE_S)
            if version == seen:
                await resp.write(b": keepalive\n\n")
                continue
            seen = version
            await resp.write(b"data: " + w.snapshot_json.encode() + b"\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return resp


async def admin_call(
    aw: Awaitable[Any], what: str, not_found: bool = False, timeout: float = CALL_TIMEOUT_S * 3
) -> Any:
    """Run an admin call with a timeout; a failure becomes the one-line JSON error the page shows."""
    try:
        return await asyncio.wait_for(aw, timeout)
    except Exception as e:  # noqa: BLE001 - shown on the page in one line
        cls = web.HTTPNotFound if not_found else web.HTTPBadRequest
        raise cls(text=json.dumps({"error": f"{what}: {one_line(e)}"}), content_type="application/json") from None


def require_writes(request: web.Request) -> None:
    access = console_of(request).access
    if not access.writes:
        raise web.HTTPForbidden(text=json.dumps({"error": access.why_read_only}), content_type="application/json")


async def create_topic(request: web.Request) -> web.Response:
    require_writes(request)
    w = watcher_of(request)
    try:
        body = await request.json()
        name = str(body["name"]).strip()
        configs = {str(k): str(v) for k, v in (body.get("configs") or {}).items()}
        topic = NewTopic(name, int(body.get("partitions") or -1), int(body.get("replication_factor") or -1), configs)
    except (ValueError, KeyError, TypeError) as e:
        return error(400, f"bad request: {one_line(e)}")
    await admin_call(w.admin.create_topics([topic]), f"create {name}")
    return web.json_response({"created": name})


async def delete_topic(request: web.Request) -> web.Response:
    require_writes(request)
    name = request.match_info["name"]
    await admin_call(watcher_of(request).admin.delete_topics([name]), f"delete {name}")
    return web.json_response({"deleted": name})


async def topic_configs(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    configs = await admin_call(watcher_of(request).admin.describe_configs(name), f"topic {name}", True, CALL_TIMEOUT_S)
    return web.json_response({k: {"value": v, "default": d} for k, (v, d) in sorted(configs.items())})


async def messages(request: web.Request) -> web.Response:
    w = watcher_of(request)
    q = request.query
    try:
        topic = q["topic"]
        # No partition (or "all"): every partition of the topic, merged by timestamp.
        partition = None if q.get("partition", "all") in ("", "all") else int(q["partition"])
        mode = q.get("mode", "newest")
        if mode not in ("newest", "beginning", "offset", "timestamp"):
            raise ValueError(f"unknown mode {mode!r}")
        offset = int(q["offset"]) if q.get("offset") else None
        ts = int(q["timestamp"]) if q.get("timestamp") else None
        limit = int(q.get("limit", "50"))
    except (KeyError, ValueError) as e:
        return error(400, f"bad request: {one_line(e)}")
    try:
        out = await read_messages(
            w.bootstrap, topic, partition, mode=mode, offset=offset, timestamp_ms=ts, limit=limit,
            client_config=request["client_config"],
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001
        return error(400, f"{topic}{'' if partition is None else f'-{partition}'}: {one_line(e)}")
    return web.json_response(out)


def make_app(console: Console) -> web.Application:
    guard = make_guard(console.served, lambda: console.access.login_required, console.session_of, console.csrf_ok)
    app = web.Application(middlewares=[guard], client_max_size=64 * 1024)
    app[CONSOLE] = console
    app.on_response_prepare.append(security_headers)
    app.router.add_get("/", root)
    login.add_routes(app)
    for path in PAGES:
        app.router.add_get(path, page)
    app.router.add_get("/api/snapshot", snapshot)
    app.router.add_get("/api/history", history)
    app.router.add_get("/api/events", events)
    app.router.add_get("/api/topics", list_topics)
    app.router.add_post("/api/topics", create_topic)
    app.router.add_delete("/api/topics/{name}", delete_topic)
    app.router.add_get("/api/topics/{name}/configs", topic_configs)
    app.router.add_get("/api/messages", messages)
    app.router.add_static("/static", STATIC)

    async def lifecycle(app: web.Application):  # type: ignore[no-untyped-def]
        await console.start()
        yield
        await console.stop()

    app.cleanup_ctx.append(lifecycle)
    return app
