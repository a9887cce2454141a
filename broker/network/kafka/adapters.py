"""Per Kafka api: the native handler call a request means, and the Kafka response its answer makes.

Each `Adapter` maps a Kafka request (plain data from kio's entity, see entities.py) to one native
request (api key and msgpack-style body, docs/FORMAT.md §6) served by the same handlers as the native
listener, and maps the native answer back to a version-independent response dict (entities.build
keeps what the client's version has). `error` answers a request that failed as a whole, with the
code in every row, as Kafka's `getErrorResponse` does.

Adding an api: subclass Adapter with the versions it serves, list it in its module's list (CORE_ADAPTERS
here, ADMIN_ADAPTERS in admin_adapters.py, ...), which codec.py's ADAPTERS gathers, and describe it in
docs/COMPATIBILITY.md.
"""

from __future__ import annotations

from typing import Any

from broker.security.listeners import reachable_controller
from net.errors import ErrorCode
from net.protocol import ApiKey

# Transactions are not supported (docs/COMPATIBILITY.md): a transactional producer gets a fatal error
# with a message, rather than retrying forever.


class AdapterError(Exception):
    """A request this listener answers itself with an error in every row (no handler call)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Adapter:
    api_key: int
    versions: tuple[int, int]

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        """(native api key, native body) for this Kafka request."""
        raise NotImplementedError

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any] | None:
        """The Kafka response (plain data) for the native answer; None: send nothing."""
        raise NotImplementedError

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        """The response to a request that failed as a whole."""
        raise NotImplementedError


def topics_error(req: dict[str, Any], code: int) -> dict[str, Any]:
    """The answer of a request keyed by "topics" -> "name" -> "partitions" -> "partition_index" (OffsetCommit)
    that failed as a whole: `code` in every partition row."""
    return {
        "topics": [
            {
                "name": t["name"],
                "partitions": [{"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]],
            }
            for t in req["topics"]
        ]
    }


def _rows(native: dict[str, Any], key: str = "topics") -> list[Any]:
    return native.get(key) or []


# --- ApiVersions (answered by the codec itself) ------------------------------------------------------


def api_versions_response(error_code: int, served: dict[int, tuple[int, int]]) -> dict[str, Any]:
    keys = [{"api_key": 18, "min_version": 0, "max_version": 4}]
    keys += [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in served.items()]
    keys.sort(key=lambda r: r["api_key"])
    return {"error_code": error_code, "api_keys": keys, "throttle_time": 0}


# --- the data path -----------------------------------------------------------------------------------


class Fetch(Adapter):
    # v13+ name topics by id only; fetch sessions (KIP-227) are declined with session id 0.
    api_key, versions = 1, (4, 12)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        topics = [
            [
                t["topic"],
                [
                    [
                        p["partition"],
                        p["fetch_offset"],
                        max(p["partition_max_bytes"], 1),
                        p.get("current_leader_epoch", -1),
                    ]
                    for p in t["partitions"]
                ],
            ]
            for t in req["topics"]
        ]
        return ApiKey.FETCH, {
            "replica_id": -1,  # a Kafka listener serves consumers; followers use the native protocol
            "isolation_level": req.get("isolation_level", 0),
            "max_wait_ms": req["max_wait"],
            "min_bytes": req["min_bytes"],
            "max_bytes": max(req.get("max_bytes", 0x7FFFFFFF), 1),
            "topics": topics,
        }

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic": name,
                    "partitions": [
                        {
                            "partition_index": r[0],
                            "error_code": r[1],
                            "high_watermark": r[2],
                            "last_stable_offset": r[3],
                            "log_start_offset": r[4],
                            "aborted_transactions": [
                                {"producer_id": a[0], "first_offset": a[1]} for a in (r[10] if len(r) > 10 else ())
                            ],
                            "preferred_read_replica": -1,
                            "records": r[5],
                        }
                        for r in rows
                    ],
                }
                for name, rows in _rows(native)
            ],
            "throttle_time": native.get("throttle_time_ms", 0),
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {
            "error_code": code,
            "session_id": 0,
            "responses": [
                {
                    "topic": t.get("topic"),
                    "topic_id": t.get("topic_id"),  # the versions this listener declines (v13+) name topics by id
                    "partitions": [
                        {"partition_index": p["partition"], "error_code": code, "high_watermark": -1, "records": b""}
                        for p in t["partitions"]
                    ],
                }
                for t in req["topics"]
            ],
        }


# --- metadata ----------------------------------------------------------------------------------------


def _brokers(native: dict[str, Any], id_key: str) -> list[dict[str, Any]]:
    return [{id_key: b[0], "host": b[1], "port": b[2], "rack": b[3] if len(b) > 3 else None} for b in native["brokers"]]


# Kafka's "authorized operations not asked for" (Integer.MIN_VALUE in *_authorized_operations fields).
NOT_GIVEN = -(2**31)


class Metadata(Adapter):
    api_key, versions = 3, (0, 12)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        topics = req.get("topics")
        names = None if topics is None or (version == 0 and not topics) else [t["name"] for t in topics]
        # v10+ may name a topic by id alone (a KIP-848 consumer resolving its assignment's topic ids): the ids
        # are resolved to names before authorization (broker/server/authorization.py), unknown ones UNKNOWN_TOPIC_ID.
        ids = [_hex(t.get("topic_id")) for t in topics or () if t.get("name") is None and t.get("topic_id")]
        if names is not None and ids:
            names = [n for n in names if n is not None]
        return ApiKey.METADATA, {
            "topics": names,
            **({"topic_ids": [i for i in ids if i]} if ids and names is not None else {}),
            "listener": "kafka",
            "allow_auto_topic_creation": req.get("allow_auto_topic_creation", version < 4),
            # v8+: the operations the principal may do (broker/server/authorization.py fills them in, when asked)
            "include_topic_authorized_operations": req.get("include_topic_authorized_operations", False),
            "include_cluster_authorized_operations": req.get("include_cluster_authorized_operations", False),
        }

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        topics = []
        for t in native["topics"]:
            topic_id = t.get("topic_id")
            topics.append(
                {
                    "error_code": t["error_code"],
                    "name": t["name"],
                    "topic_id": _uuid(topic_id) if topic_id else None,
                    "is_internal": t.get("is_internal", False),
                    "topic_authorized_operations": t.get("topic_authorized_operations", NOT_GIVEN),
                    "partitions": [
                        {
                            "error_code": p[0],
                            "partition_index": p[1],
                            "leader_id": p[2],
                            "leader_epoch": p[3],
                            "replica_nodes": p[4],
                            "isr_nodes": p[5],
                            "offline_replicas": p[6] if len(p) > 6 else [],
                        }
                        for p in t["partitions"]
                    ],
                }
            )
        found = {t["topic_id"].replace("-", "") for t in native["topics"] if t.get("topic_id")}
        for t in req.get("topics") or ():
            tid = t.get("topic_id")
            if not t.get("name") and tid and tid.int and tid.hex not in found:
                topics.append({"error_code": int(ErrorCode.UNKNOWN_TOPIC_ID), "name": None, "topic_id": str(tid)})
        return {
            "brokers": _brokers(native, "node_id"),
            "cluster_id": native.get("cluster_id"),
            "controller_id": _kafka_controller(native),
            "topics": topics,
            "cluster_authorized_operations": native.get("cluster_authorized_operations", NOT_GIVEN),
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        topics = req.get("topics") or []
        return {
            "brokers": [],
            "controller_id": -1,
            "topics": [{"error_code": code, "name": t["name"], "partitions": []} for t in topics],
        }


def _kafka_controller(native: dict[str, Any]) -> int:
    """The controller a Kafka client can reach (broker/security/listeners.py reachable_controller)."""
    listed = {row[0] for row in native.get("brokers") or []}
    return reachable_controller(
        native.get("controller_id", -1), listed, (native.get("broker_info") or {}).get("broker_id", -1)
    )


def _hex(topic_id: Any) -> str:
    """A Kafka topic id (a UUID, or its text) as the metadata image keeps it: 32 hex digits; "" for the zero id."""
    h = str(topic_id).replace("-", "").lower()
    return "" if len(h) != 32 or not h.strip("0") else h


def _uuid(topic_id: str) -> str:
    h = topic_id.replace("-", "")
    return (
        f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        if len(h) == 32
        else "00000000-0000-0000-0000-000000000000"
    )


CORE_ADAPTERS: list[Adapter] = [Fetch(), Metadata()]
