"""The console's web server (aiohttp): the pages, a JSON API, and the live snapshot as server-sent events.

Pages are one HTML shell whose JavaScript renders the page named by the URL path (/cluster, /topics,
/topics/NAME, /messages, /groups, /groups/ID, /throughput). The script, styles and the vendored chart
library (uPlot) are served from the package: nothing comes from a CDN.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Awaitable

from aiohttp import web

from client.admin import NewTopic
from client.dashboard.messages import read_messages
from client.dashboard.watcher import CALL_TIMEOUT_S, ClusterWatcher, one_line

STATIC = Path(__file__).parent / "static"
PAGES = ("/cluster", "/topics", "/topics/{name}", "/messages", "/groups", "/groups/{group}", "/throughput")
WATCHER = web.AppKey("watcher", ClusterWatcher)
SSE_KEEPALIVE_S = 10.0


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


FIRST_SNAPSHOT_WAIT_S = CALL_TIMEOUT_S * 2
SNAPSHOT_SLOT = "<!-- snapshot -->"


async def page(request: web.Request) -> web.Response:
    """The page with the current snapshot in it, so the first paint has the cluster's data before the event
    stream sends anything (just after the console starts, the first poll is awaited for a moment)."""
    w = request.app[WATCHER]
    deadline = asyncio.get_running_loop().time() + FIRST_SNAPSHOT_WAIT_S
    while not w.snapshot.get("ready") and (left := deadline - asyncio.get_running_loop().time()) > 0:
        await w.wait_change(w.version, left)
    # JSON in a <script> element: "<" escaped so no value (a topic name, an error) can close the element.
    data = w.snapshot_json.replace("<", "\\u003c")
    embedded = f'<script id="kl-snapshot" type="application/json">{data}</script>'
    html = (STATIC / "index.html").read_text().replace(SNAPSHOT_SLOT, embedded)
    return web.Response(text=html, content_type="text/html", headers={"Cache-Control": "no-store"})


async def root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/cluster")


async def snapshot(request: web.Request) -> web.Response:
    return web.Response(text=request.app[WATCHER].snapshot_json, content_type="application/json")


async def history(request: web.Request) -> web.Response:
    return web.json_response(list(request.app[WATCHER].series))


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the snapshot each time the watcher publishes one (about once a second)."""
    w = request.app[WATCHER]
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )
    await resp.prepare(request)
    seen = -1
    try:
        while True:
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


async def create_topic(request: web.Request) -> web.Response:
    w = request.app[WATCHER]
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
    name = request.match_info["name"]
    await admin_call(request.app[WATCHER].admin.delete_topics([name]), f"delete {name}")
    return web.json_response({"deleted": name})


async def topic_configs(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    configs = await admin_call(request.app[WATCHER].admin.describe_configs(name), f"topic {name}", True, CALL_TIMEOUT_S)
    return web.json_response({k: {"value": v, "default": d} for k, (v, d) in sorted(configs.items())})


async def messages(request: web.Request) -> web.Response:
    w = request.app[WATCHER]
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
            client_config=w.client_config,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001
        return error(400, f"{topic}{'' if partition is None else f'-{partition}'}: {one_line(e)}")
    return web.json_response(out)


def make_app(watcher: ClusterWatcher) -> web.Application:
    app = web.Application()
    app[WATCHER] = watcher
    app.router.add_get("/", root)
    for path in PAGES:
        app.router.add_get(path, page)
    app.router.add_get("/api/snapshot", snapshot)
    app.router.add_get("/api/history", history)
    app.router.add_get("/api/events", events)
    app.router.add_post("/api/topics", create_topic)
    app.router.add_delete("/api/topics/{name}", delete_topic)
    app.router.add_get("/api/topics/{name}/configs", topic_configs)
    app.router.add_get("/api/messages", messages)
    app.router.add_static("/static", STATIC)

    async def lifecycle(app: web.Application):  # type: ignore[no-untyped-def]
        await watcher.start()
        yield
        await watcher.stop()

    app.cleanup_ctx.append(lifecycle)
    return app
