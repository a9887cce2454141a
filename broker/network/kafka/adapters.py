"""Per Kafka api: the native handler call a request means, and the Kafka response its answer makes.

Each `Adapter` maps a Kafka request (plain data from kio's entity, see entities.py) to one native
request (api key and msgpack-style body, docs/FORMAT.md §6) served by the same handlers as the native
listener, and maps the native answer back to a version-independent response dict (entities.build
keeps what the client's version has). `error` answers a request that failed as a whole, with the
code in every row, as Kafka's `getErrorResponse` does.

Adding an api: subclass Adapter with the versions it serves, list it in its module's list (CORE_ADAPTERS
here, SECURITY_ADAPTERS in security_adapters.py), which codec.py's ADAPTERS gathers, and describe it in
docs/COMPATIBILITY.md.
"""

from __future__ import annotations

from typing import Any

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


# Metadata and Produce are typed (broker/server/kafka_apis.py handle_metadata, handle_produce): no adapter.
CORE_ADAPTERS: list[Adapter] = [Fetch()]
