"""KafkaApis: turns decoded requests into ReplicaManager / AdminManager calls
and their results into response bodies. Field layouts are in docs/FORMAT.md.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any, Awaitable

from net.errors import ErrorCode, KafkaLiteError
from net.protocol import SUPPORTED_VERSIONS, ApiKey
from net.server import BadRequest, ConnectionContext, as_list, error_body

if TYPE_CHECKING:
    from broker.admin import AdminManager
    from broker.config import BrokerConfig
    from broker.replica_manager import ReplicaManager

log = logging.getLogger("kafkalite.api")
MAX_FETCH_WAIT_MS = 60_000


def _int(body: dict, key: str, default: int | None = None) -> int:
    v = body.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise BadRequest(f"field {key!r} must be an integer")
    return v


def _topic_partitions(body: dict) -> list[tuple[str, list]]:
    """[[topic, [[partition, ...], ...]], ...] with shapes checked."""
    out = []
    for entry in as_list(body.get("topics"), "topics"):
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
            raise BadRequest("each topics entry must be [topic, [partition entries]]")
        parts = as_list(entry[1], "partitions")
        for p in parts:
            if not isinstance(p, list) or not p or not isinstance(p[0], int):
                raise BadRequest("each partition entry must be a list starting with the partition number")
        out.append((entry[0], parts))
    return out


def _code(e: Exception) -> tuple[int, str]:
    if isinstance(e, KafkaLiteError):
        return int(e.code), str(e)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR), f"{type(e).__name__}: {e}"


class KafkaApis:
    def __init__(self, config: "BrokerConfig", replica_manager: "ReplicaManager", admin: "AdminManager") -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.admin = admin
        self._handlers = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: self.handle_alter_configs,
            ApiKey.DESCRIBE_TOPICS: self.handle_metadata,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
        }

    def handle(self, api_key: int, version: int, body: dict, ctx: ConnectionContext) -> Any:
        handler = self._handlers.get(api_key)  # type: ignore[call-overload]
        if handler is None:
            return error_body(ErrorCode.UNSUPPORTED_VERSION, f"unknown api key {api_key}")
        lo, hi = SUPPORTED_VERSIONS[api_key]
        if not lo <= version <= hi:
            return error_body(
                ErrorCode.UNSUPPORTED_VERSION,
                f"api {ApiKey(api_key).name} version {version} not in supported range {lo}..{hi}",
            )
        return handler(body)

    # --- data path -----------------------------------------------------------

    def handle_produce(self, body: dict) -> dict | Awaitable | None:
        acks = _int(body, "acks", -1)
        entries: dict[tuple[str, int], bytes] = {}
        for topic, parts in _topic_partitions(body):
            for p in parts:
                if len(p) != 2 or not isinstance(p[1], bytes):
                    raise BadRequest("produce partition entry must be [partition, records bytes]")
                entries[(topic, p[0])] = p[1]
        self._maybe_auto_create(t for t, _ in entries)
        results = self.replica_manager.append_records(acks, entries)
        if acks == 0:
            return None  # Kafka sends no response to acks=0
        return {"topics": _group(results)}

    def handle_fetch(self, body: dict) -> Awaitable[dict]:
        max_wait = min(max(_int(body, "max_wait_ms", 500), 0), MAX_FETCH_WAIT_MS)
        min_bytes = max(_int(body, "min_bytes", 1), 0)
        max_bytes = _int(body, "max_bytes", 52428800)
        if max_bytes <= 0:
            raise BadRequest("max_bytes must be positive")
        reqs = []
        for topic, parts in _topic_partitions(body):
            for p in parts:
                if len(p) < 3 or not all(isinstance(x, int) for x in p[:3]) or p[2] <= 0:
                    raise BadRequest("fetch partition entry must be [partition, fetch_offset, max_bytes>0, ...]")
                reqs.append(((topic, p[0]), p[1], p[2]))
        return self._fetch(reqs, max_wait, min_bytes, max_bytes)

    async def _fetch(self, reqs: list, max_wait: int, min_bytes: int, max_bytes: int) -> dict:
        results = await self.replica_manager.fetch_messages(reqs, max_wait, min_bytes, max_bytes)
        return {"topics": _group(results)}

    def handle_list_offsets(self, body: dict) -> dict:
        out: dict[tuple[str, int], list] = {}
        for topic, parts in _topic_partitions(body):
            for p in parts:
                if len(p) != 2 or not isinstance(p[1], int):
                    raise BadRequest("list offsets partition entry must be [partition, timestamp]")
                err, ts, off = self.replica_manager.list_offset((topic, p[0]), p[1])
                out[(topic, p[0])] = [p[0], err, ts, off]
        return {"topics": _group_lists(out)}

    # --- metadata and admin --------------------------------------------------

    def handle_init_producer_id(self, body: dict) -> dict:
        # Random 62-bit ids need no coordination between brokers; a collision is astronomically unlikely.
        return {"error_code": 0, "producer_id": secrets.randbits(62), "producer_epoch": 0}

    def handle_api_versions(self, body: dict) -> dict:
        return {"error_code": 0, "api_keys": [[k, lo, hi] for k, (lo, hi) in SUPPORTED_VERSIONS.items()]}

    def handle_metadata(self, body: dict) -> dict:
        names = body.get("topics")
        topics_meta = self.admin.metadata.topics
        if names is None:
            names = sorted(topics_meta)
        else:
            names = as_list(names, "topics")
            self._maybe_auto_create(n for n in names if isinstance(n, str))
        topics = []
        for name in names:
            info = topics_meta.get(name) if isinstance(name, str) else None
            if info is None:
                code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                topics.append({"error_code": code, "name": name, "partitions": []})
                continue
            topics.append(
                {
                    "error_code": 0,
                    "name": name,
                    "topic_id": info.topic_id,
                    "is_internal": name.startswith("__"),
                    "partitions": [
                        [0, st.partition, st.leader, st.leader_epoch, st.replicas, st.isr, []]
                        for st in info.partitions.values()
                    ],
                }
            )
        host = self.config.advertised_host or self.config.host
        return {
            "error_code": 0,
            "cluster_id": self.admin.metadata.cluster_id,
            "controller_id": self.config.broker_id,
            "brokers": [[b, host, self.config.port] for b in self.admin.live_brokers],
            "topics": topics,
        }

    def _maybe_auto_create(self, names: Any) -> None:
        if not self.config.auto_create_topics_enable:
            return
        for n in set(names):
            if n not in self.admin.metadata.topics:
                try:
                    self.admin.create_topic(n, None, None, {})
                except KafkaLiteError as e:
                    log.warning("auto-create of topic %r failed: %s", n, e)

    def handle_create_topics(self, body: dict) -> dict:
        validate_only = bool(body.get("validate_only", False))
        results = []
        for t in as_list(body.get("topics"), "topics"):
            if not isinstance(t, dict):
                raise BadRequest("each topic to create must be a map")
            try:
                self.admin.create_topic(
                    t.get("name"), t.get("num_partitions"), t.get("replication_factor"), t.get("configs"), validate_only
                )
                results.append([t.get("name"), 0, None])
            except Exception as e:
                results.append([t.get("name"), *_code(e)])
        return {"topics": results}

    def handle_delete_topics(self, body: dict) -> dict:
        results = []
        for name in as_list(body.get("topics"), "topics"):
            try:
                self.admin.delete_topic(name)
                results.append([name, 0, None])
            except Exception as e:
                results.append([name, *_code(e)])
        return {"topics": results}

    def handle_describe_configs(self, body: dict) -> dict:
        results = []
        for name in as_list(body.get("topics"), "topics"):
            try:
                cfg = self.admin.describe_configs(name)
                results.append([name, 0, None, {k: list(v) for k, v in cfg.items()}])
            except Exception as e:
                results.append([name, *_code(e), {}])
        return {"results": results}

    def handle_alter_configs(self, body: dict) -> dict:
        validate_only = bool(body.get("validate_only", False))
        results = []
        for entry in as_list(body.get("topics"), "topics"):
            if not isinstance(entry, list) or len(entry) != 2:
                raise BadRequest("each alter entry must be [topic, {config: value or nil}]")
            try:
                self.admin.alter_configs(entry[0], entry[1], validate_only)
                results.append([entry[0], 0, None])
            except Exception as e:
                results.append([entry[0], *_code(e)])
        return {"topics": results}


def _group(results: dict[tuple[str, int], Any]) -> list:
    return _group_lists({tp: r.to_wire(tp[1]) for tp, r in results.items()})


def _group_lists(results: dict[tuple[str, int], list]) -> list:
    by_topic: dict[str, list] = {}
    for (topic, _), row in results.items():
        by_topic.setdefault(topic, []).append(row)
    return [[t, rows] for t, rows in by_topic.items()]
