"""ClusterWatcher: polls the cluster once a second as an ordinary client and keeps what the console shows.

Every poll: Metadata (brokers, controller, partitions, leaders, ISRs) from any broker; a small Metadata
request to every broker ever seen (up/down, version, coordination mode, controller epoch, metrics port);
each live broker's Prometheus `/metrics` (sizes, log end offsets, per-topic counters: as Kafka consoles read
JMX); ListOffsets earliest/latest per partition; every other poll the consumer groups. Every call has a
timeout, so a dead broker costs one timeout, never a stalled stream. The snapshot is serialized once per poll
and shared by every event stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from client.admin import AsyncAdmin
from client.cluster import metadata_request
from client.config import AdminConfig
from client.dashboard.rates import RATE_WINDOW_S, CounterRates
from client.dashboard.timeline import ClusterView, diff
from net.connection import BrokerConnection
from net.errors import KafkaLiteError
from net.protocol import ApiKey
from net.schema.metadata import MetadataResponse

log = logging.getLogger("kafkalite.dashboard")

HISTORY_S = 15 * 60
CALL_TIMEOUT_S = 2.0
EARLIEST, LATEST = -2, -1
# Kafka's BrokerTopicMetrics (MessagesInPerSec, BytesInPerSec, BytesOutPerSec) as the brokers count them.
RATE_COUNTERS = (
    ("kafkalite_topic_messages_in_total", "msgs_in"),
    ("kafkalite_topic_bytes_in_total", "bytes_in"),
    ("kafkalite_topic_bytes_out_total", "bytes_out"),
)
RATE_KINDS = tuple(kind for _, kind in RATE_COUNTERS)


def one_line(e: BaseException) -> str:
    """An error as the one line the page shows (never a traceback)."""
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:300]


def client_settings(client_config: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of a console client: its name and short timeouts, then the command config's (and a
    session's credentials)."""
    return {"client_id": "kl-dashboard", "request_timeout_ms": int(CALL_TIMEOUT_S * 1000), **client_config}


async def timed(aw: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
    return await asyncio.wait_for(aw, timeout)


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """name -> [(labels, value)], counters under their sample name (`..._total`)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def counts(topics: list[dict[str, Any]]) -> dict[str, int]:
    """The Cluster page's figures for these topics."""
    parts = [p for t in topics for p in t["partitions"]]
    return {
        "topics": len(topics),
        "partitions": len(parts),
        "under_replicated": sum(1 for p in parts if p["under_replicated"]),
        "offline": sum(1 for p in parts if p["leader"] < 0),
    }


def merge_offsets(
    topics: list[dict[str, Any]], earliest: dict[tuple[str, int], int], latest: dict[tuple[str, int], int]
) -> None:
    """Log start and record counts from ListOffsets; the high watermark too where no scrape gave the leader's
    log end and high watermark together (metrics off): then no log end is shown beside it."""
    for t in topics:
        records = 0
        for p in t["partitions"]:
            tp = (t["name"], p["partition"])
            if tp in latest:
                p["log_start"] = earliest.get(tp)
                if p["high_watermark"] is None or p["log_end"] is None:
                    p["high_watermark"], p["log_end"] = latest[tp], None
                records += latest[tp] - (earliest.get(tp) or 0)
        t["records"] = records


class ClusterWatcher:
    def __init__(
        self,
        bootstrap: str,
        interval_s: float = 1.0,
        client_config: dict[str, Any] | None = None,
        rate_window_s: float = RATE_WINDOW_S,
    ) -> None:
        """`client_config`: client keyword arguments from --command-config (client.id, timeouts, security;
        in login mode with the session's user and password), used by every client this watcher makes."""
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.client_config = dict(client_config or {})
        settings = client_settings(self.client_config)
        self.admin = AsyncAdmin(bootstrap, **settings)
        # The per-broker probes log in as the admin client does (a SASL listener answers nothing before).
        self.security = AdminConfig.from_kwargs(settings).security()
        self.known: dict[int, tuple[str, int]] = {}
        self.info: dict[int, dict[str, Any]] = {}
        self.up: dict[int, bool] = {}
        self._probes: dict[int, BrokerConnection] = {}
        self._http: aiohttp.ClientSession | None = None
        self.rates = CounterRates(rate_window_s)
        self._scraped_at: dict[int, float] = {}  # monotonic time of each broker's last scrape
        self.series: deque[dict[str, Any]] = deque(maxlen=int(HISTORY_S / interval_s) + 1)
        self.timeline: deque[dict[str, Any]] = deque(maxlen=500)
        self._view: ClusterView | None = None
        self.groups: dict[str, dict[str, Any]] = {}
        self._polls = 0
        self.snapshot: dict[str, Any] = {"ready": False, "errors": []}
        self.snapshot_json = json.dumps(self.snapshot)
        self.version = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.5))
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for c in self._probes.values():
            c.close()
        if self._http is not None:
            await self._http.close()
        await self.admin.close()

    async def wait_change(self, seen: int, timeout: float) -> int:
        """Wait for a snapshot newer than `seen`; the version now."""
        async with self._changed:
            if self.version == seen:
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout)
                except TimeoutError:
                    pass
        return self.version

    async def _run(self) -> None:
        while True:
            t0 = time.monotonic()
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the console outlives any one bad poll
                log.exception("poll failed")
                self._publish({**self.snapshot, "errors": [f"poll failed: {one_line(e)}"]})
            await asyncio.sleep(max(0.05, self.interval_s - (time.monotonic() - t0)))

    def _publish(self, snap: dict[str, Any]) -> None:
        self.snapshot = snap
        self.snapshot_json = json.dumps(snap, separators=(",", ":"))
        self.version += 1

        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.ensure_future(notify())

    # --- one poll ------------------------------------------------------------

    async def poll(self) -> None:
        now = time.time()
        errors: list[str] = []
        client = self.admin.client
        md: MetadataResponse | None = None
        try:
            md = await timed(client.call(None, metadata_request(None), timeout=CALL_TIMEOUT_S))
            client.metadata.update(md, None)
        except Exception as e:  # noqa: BLE001
            errors.append(f"cluster metadata: {one_line(e)}")
        if md is not None:
            for b in md.brokers:
                self.known[b.node_id] = (b.host, b.port)
        await asyncio.gather(*(self._probe(bid) for bid in list(self.known)))
        for bid in sorted(self.known):
            if not self.up.get(bid):
                errors.append(f"broker {bid} ({self.known[bid][0]}:{self.known[bid][1]}) is down")
        scraped = dict(
            zip(
                sorted(self.known),
                await asyncio.gather(*(self._scrape(bid) for bid in sorted(self.known))),
            )
        )
        topics = self._topics(md, scraped)
        await self._offsets(topics, errors)
        self._polls += 1
        if self._polls % 2 == 1:
            await self._poll_groups(topics, errors)
        else:
            self._refresh_group_lag(topics)
        controller = md.controller_id if md is not None else -1
        epochs = [self.info[b].get("controller_epoch", -1) for b in self.info if self.up.get(b)]
        controller_epoch = max(epochs) if epochs else -1
        view = ClusterView(
            frozenset(b for b, u in self.up.items() if u),
            controller,
            controller_epoch,
            {
                (t["name"], p["partition"]): (p["leader"], p["leader_epoch"], tuple(p["isr"]))
                for t in topics
                for p in t["partitions"]
            },
        )
        for kind, text in reversed(diff(self._view, view)):  # newest first, a poll's events in causal order
            self.timeline.appendleft({"t": now, "kind": kind, "text": text})
        self._view = view
        point = self._rates(now, scraped, {t["name"] for t in topics})
        point["group_lag"] = {g: d["total_lag"] for g, d in self.groups.items() if d.get("total_lag") is not None}
        self.series.append(point)
        visible = [t for t in topics if not t["internal"]]
        snap = {
            "ready": True,
            "time": now,
            "cluster_id": (md.cluster_id or "") if md is not None else "",
            "controller": controller,
            "controller_epoch": controller_epoch,
            "coordination": next((i.get("coordination") for i in self.info.values() if i), "?"),
            "brokers": [
                {
                    "id": bid,
                    "address": f"{self.known[bid][0]}:{self.known[bid][1]}",
                    "up": bool(self.up.get(bid)),
                    "rack": (self.info.get(bid) or {}).get("rack") or "-",
                    "version": (self.info.get(bid) or {}).get("version", "?"),
                    "leaders": sum(1 for t in topics for p in t["partitions"] if p["leader"] == bid),
                }
                for bid in sorted(self.known)
            ],
            # The user's topics, and the internal ones (50 partitions of __consumer_offsets) apart, so a page
            # listing 6 partitions never says 56.
            "counts": {**counts(visible), "internal": counts([t for t in topics if t["internal"]])},
            "topics": topics,
            "groups": sorted(self.groups.values(), key=lambda g: g["group_id"]),
            "timeline": list(self.timeline)[:200],
            "point": point,  # the page keeps the history; /api/history gives the last 15 minutes at load
            "errors": errors,
        }
        self._publish(snap)

    async def _probe(self, bid: int) -> None:
        host, port = self.known[bid]
        conn = self._probes.get(bid)
        try:
            if conn is None or not conn.connected:
                if conn is not None:
                    conn.close()
                conn = BrokerConnection(host, port, "kl-dashboard", self.security)
                await conn.connect(timeout=1.0)
                self._probes[bid] = conn
            body = await conn.request(ApiKey.METADATA, {"topics": []}, timeout=1.0)
            self.info[bid] = body.get("broker_info") or {}
            self.up[bid] = True
        except (KafkaLiteError, OSError, TimeoutError):
            self.up[bid] = False
            if conn is not None:
                conn.close()
            self._probes.pop(bid, None)

    async def _scrape(self, bid: int) -> dict[str, list[Any]]:
        port = (self.info.get(bid) or {}).get("metrics_port", -1)
        if not self.up.get(bid) or port is None or port < 0 or self._http is None:
            return {}
        try:
            async with self._http.get(f"http://{self.known[bid][0]}:{port}/metrics") as r:
                text = await r.text()
            # The rates divide by the time between scrapes as they happened, not as they were scheduled.
            self._scraped_at[bid] = time.monotonic()
            return parse_metrics(text)
        except Exception:  # noqa: BLE001 - a scrape that fails is a gap in the charts, not an error
            return {}

    def _topics(self, md: MetadataResponse | None, scraped: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
        if md is None:
            last: list[dict[str, Any]] = self.snapshot.get("topics", [])
            return last
        per_part: dict[tuple[str, int, int], dict[str, float]] = {}
        for bid, m in scraped.items():
            for name in ("kafkalite_log_size_bytes", "kafkalite_log_end_offset", "kafkalite_high_watermark"):
                for labels, v in m.get(name, []):
                    if "topic" not in labels:  # a broker's sum (metrics.topic.labels=false): no partition's own
                        continue
                    per_part.setdefault((labels["topic"], int(labels["partition"]), bid), {})[name] = v
        out = []
        for t in md.topics:
            if t.error_code or t.name is None:
                continue
            parts: list[dict[str, Any]] = []
            for pa in t.partitions:
                p, leader, epoch = pa.partition_index, pa.leader_id, pa.leader_epoch
                replicas, isr = list(pa.replica_nodes), list(pa.isr_nodes)
                src = per_part.get((t.name, p, leader), {})
                # The log end and the high watermark shown side by side come from one replica at one moment:
                # the leader's one scrape (the broker computes both in one pass on its loop, HW <= log end).
                # Mixing the scrape's log end with a later ListOffsets showed a HW above the log end.
                scraped_pair = "kafkalite_log_end_offset" in src and "kafkalite_high_watermark" in src
                parts.append(
                    {
                        "partition": p,
                        "leader": leader,
                        "leader_epoch": epoch,
                        "replicas": replicas,
                        "isr": isr,
                        "under_replicated": len(isr) < len(replicas),
                        "log_end": int(src["kafkalite_log_end_offset"]) if scraped_pair else None,
                        "size": int(src["kafkalite_log_size_bytes"]) if "kafkalite_log_size_bytes" in src else None,
                        "log_start": None,
                        "high_watermark": int(src["kafkalite_high_watermark"]) if scraped_pair else None,
                    }
                )
            out.append(
                {
                    "name": t.name,
                    "internal": t.is_internal,
                    "partitions": parts,
                    "replication_factor": len(t.partitions[0].replica_nodes) if t.partitions else 0,
                    "size": sum(p["size"] or 0 for p in parts),
                }
            )
        return sorted(out, key=lambda t: t["name"])

    async def _offsets(self, topics: list[dict[str, Any]], errors: list[str]) -> None:
        """Log start and high watermark of every partition with a leader (ListOffsets to the leaders)."""
        tps = [
            (t["name"], p["partition"])
            for t in topics
            if not t["internal"]
            for p in t["partitions"]
            if p["leader"] >= 0
        ]
        if not tps:
            return
        client = self.admin.client
        try:
            earliest, latest = await timed(
                asyncio.gather(client.list_offsets(tps, EARLIEST), client.list_offsets(tps, LATEST))
            )
        except Exception as e:  # noqa: BLE001
            errors.append(f"list offsets: {one_line(e)}")
            return
        merge_offsets(topics, earliest, latest)

    async def _poll_groups(self, topics: list[dict[str, Any]], errors: list[str]) -> None:
        client = self.admin.client
        ids: dict[str, tuple[str, str]] = {}
        for bid in sorted(self.known):
            if not self.up.get(bid) or bid not in client.metadata.brokers:
                continue
            try:
                for g in await timed(self.admin.listed_groups([bid], timeout=CALL_TIMEOUT_S)):
                    ids[g.group_id] = (g.protocol_type, g.group_state)
            except Exception:  # noqa: BLE001 - a broker failing over: its groups show at the next poll
                continue

        async def one(gid: str) -> dict[str, Any] | None:
            try:
                desc = await timed(self.admin.describe_group(gid))
                committed = await timed(self.admin.list_group_offsets(gid))
            except Exception as e:  # noqa: BLE001
                errors.append(f"group {gid}: {one_line(e)}")
                return self.groups.get(gid)
            owner = {tp: m.member_id for m in desc.members for tp in m.assignment}
            return {
                "group_id": gid,
                "state": desc.state,
                "protocol_type": desc.protocol_type,
                "protocol": desc.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "host": m.host,
                        "assignment": sorted(f"{t}-{p}" for t, p in m.assignment),
                    }
                    for m in desc.members
                ],
                "committed": {f"{t}\u0000{p}": off for (t, p), off in committed.items()},
                "owner": {f"{t}\u0000{p}": mid for (t, p), mid in owner.items()},
            }

        results = await asyncio.gather(*(one(g) for g in sorted(ids)))
        self.groups = {g["group_id"]: g for g in results if g is not None}
        self._refresh_group_lag(topics)

    def _refresh_group_lag(self, topics: list[dict[str, Any]]) -> None:
        hw = {(t["name"], p["partition"]): p["high_watermark"] for t in topics for p in t["partitions"]}
        for g in self.groups.values():
            rows = []
            keys = set(g["committed"]) | set(g["owner"])
            for key in sorted(keys, key=lambda k: (k.split("\u0000")[0], int(k.split("\u0000")[1]))):
                topic, p = key.split("\u0000")
                end = hw.get((topic, int(p)))
                off = g["committed"].get(key)
                rows.append(
                    {
                        "topic": topic,
                        "partition": int(p),
                        "committed": off,
                        "log_end": end,
                        "lag": max(0, end - off) if end is not None and off is not None else None,
                        "member": g["owner"].get(key, "-"),
                    }
                )
            g["partitions"] = rows
            lags = [r["lag"] for r in rows if r["lag"] is not None]
            g["total_lag"] = sum(lags) if lags else None

    def _rates(self, now: float, scraped: dict[int, dict[str, Any]], visible: set[str]) -> dict[str, Any]:
        """Per-second rates, per broker and per topic, over the last `rates.window_s` seconds of each live
        broker's counters (client/dashboard/rates.py: steady under jittery scrapes, a restart is no spike).
        Only of the `visible` topics (the ones Metadata shows this watcher's user): a broker's /metrics names
        every topic, and a user the ACLs keep from a topic must not learn of it, nor of its traffic, here."""
        point: dict[str, Any] = {"t": now, "window_s": self.rates.window_s, "brokers": {}, "topics": {}}
        for bid, m in scraped.items():
            if not m:
                continue  # down or not scraped: no sample, and no rate shown for it
            t = self._scraped_at[bid]
            cur: dict[str, float] = {}
            for name, kind in RATE_COUNTERS:
                for labels, v in m.get(name, []):
                    if labels["topic"] in visible:
                        cur[f"{kind}\u0000{labels['topic']}"] = v
            self.rates.add(bid, t, cur)
            rates = self.rates.rates(bid)
            if rates is None:
                continue
            b = point["brokers"].setdefault(str(bid), dict.fromkeys(RATE_KINDS, 0.0))
            for k, rate in rates.items():
                kind, topic = k.split("\u0000")
                b[kind] += rate
                tt = point["topics"].setdefault(topic, dict.fromkeys(RATE_KINDS, 0.0))
                tt[kind] += rate
        return point
