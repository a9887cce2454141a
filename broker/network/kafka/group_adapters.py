"""The consumer-group apis of the Kafka listener, onto the one GroupCoordinator (broker/group/api.py).

A Kafka consumer group and a native one are the same kind of group: the same coordinator, the same
__consumer_offsets, and the same embedded "consumer" protocol bytes (Kafka's ConsumerProtocol format,
net/consumer_protocol.py), so members of both may share a group.

Where Kafka Lite's coordinator says more than Kafka's would, the Kafka answer keeps to what Kafka clients
know: its own PARTITION_NOT_ASSIGNED commit refusal is answered ILLEGAL_GENERATION (a commit from an
assignment the member does not hold now, which Kafka clients answer by rejoining). Static membership
(group.instance.id) is accepted and the member treated as dynamic.
"""

from __future__ import annotations

from typing import Any

from broker.network.kafka.adapters import NOT_GIVEN, Adapter, topics_error
from net.errors import ErrorCode
from net.protocol import ApiKey

_PARTITION_NOT_ASSIGNED = int(ErrorCode.PARTITION_NOT_ASSIGNED)
_KAFKA_CODE = {_PARTITION_NOT_ASSIGNED: int(ErrorCode.ILLEGAL_GENERATION)}


def kafka_code(code: int) -> int:
    """A native error code as a Kafka client should see it."""
    return _KAFKA_CODE.get(code, code)


class FindCoordinator(Adapter):
    api_key, versions = 10, (0, 4)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        if version >= 4:
            return ApiKey.FIND_COORDINATOR, {
                "keys": list(req["coordinator_keys"]),
                "key_type": req.get("key_type", 0),
                "listener": "kafka",
            }
        return ApiKey.FIND_COORDINATOR, {"key": req["key"], "key_type": req.get("key_type", 0), "listener": "kafka"}

    @staticmethod
    def _one(a: dict[str, Any]) -> dict[str, Any]:
        return {
            "error_code": a.get("error_code", 0),
            "error_message": a.get("error_message"),
            "node_id": a.get("node_id", -1),
            "host": a.get("host", ""),
            "port": a.get("port", -1),
        }

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        if version >= 4:
            return {"coordinators": [dict(self._one(a), key=a["key"]) for a in native["coordinators"]]}
        return self._one(native)

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        one = {"error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
        if version >= 4:
            return {"coordinators": [dict(one, key=k) for k in req.get("coordinator_keys", ())]}
        return one


class JoinGroup(Adapter):
    api_key, versions = 11, (0, 9)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        session = req["session_timeout"]
        return ApiKey.JOIN_GROUP, {
            "group_id": req["group_id"],
            "session_timeout_ms": session,
            "rebalance_timeout_ms": req.get("rebalance_timeout", session) if version >= 1 else session,
            "member_id": req["member_id"],
            "protocol_type": req["protocol_type"],
            "protocols": [[p["name"], p["metadata"]] for p in req["protocols"]],
        }

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {
            "error_code": native.get("error_code", 0),
            "generation_id": native.get("generation_id", -1),
            "protocol_type": native.get("protocol_type"),
            "protocol_name": native.get("protocol_name"),
            "leader": native.get("leader", ""),
            "member_id": native.get("member_id", ""),
            "members": [{"member_id": m, "metadata": meta} for m, meta in native.get("members") or []],
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {
            "error_code": code,
            "generation_id": -1,
            "protocol_name": None,
            "leader": "",
            "member_id": req.get("member_id", ""),
            "members": [],
        }


class SyncGroup(Adapter):
    api_key, versions = 14, (0, 5)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.SYNC_GROUP, {
            "group_id": req["group_id"],
            "generation_id": req["generation_id"],
            "member_id": req["member_id"],
            "assignments": [[a["member_id"], a["assignment"]] for a in req.get("assignments") or []],
        }

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {
            "error_code": native.get("error_code", 0),
            "protocol_type": req.get("protocol_type"),
            "protocol_name": req.get("protocol_name"),
            "assignment": native.get("assignment") or b"",
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"error_code": code, "assignment": b""}


class Heartbeat(Adapter):
    api_key, versions = 12, (0, 4)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        body = {k: req[k] for k in ("group_id", "generation_id", "member_id")}
        return ApiKey.HEARTBEAT, body

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {"error_code": native.get("error_code", 0)}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"error_code": code}


class LeaveGroup(Adapter):
    api_key, versions = 13, (0, 5)

    @staticmethod
    def _members(req: dict[str, Any]) -> list[str]:
        if req.get("members"):
            return [m["member_id"] for m in req["members"]]
        return [req["member_id"]] if req.get("member_id") else []

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.LEAVE_GROUP, {"group_id": req["group_id"], "members": self._members(req)}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        members = [{"member_id": m, "group_instance_id": None, "error_code": c} for m, c in native.get("members") or []]
        code = native.get("error_code", 0)
        if version < 3 and not code and members:
            code = members[0]["error_code"]  # one member, one code (no members array before v3)
        return {"error_code": code, "members": members}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"error_code": code, "members": []}


class OffsetCommit(Adapter):
    # v9+ carry KIP-848 member epochs (generation_id_or_member_epoch): a consumer-protocol member's commit is
    # checked against its epoch (STALE_MEMBER_EPOCH), a classic member's against its generation, as before.
    api_key, versions = 8, (2, 9)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        topics = [
            [t["name"], [[p["partition_index"], p["committed_offset"], _meta(p)] for p in t["partitions"]]]
            for t in req["topics"]
        ]
        return ApiKey.OFFSET_COMMIT, {
            "group_id": req["group_id"],
            "generation_id": req.get("generation_id_or_member_epoch", -1),
            "member_id": req.get("member_id", ""),
            "topics": topics,
        }

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {
            "topics": [
                {"name": t, "partitions": [{"partition_index": r[0], "error_code": kafka_code(r[1])} for r in rows]}
                for t, rows in native.get("topics") or []
            ]
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return topics_error(req, code)


def _meta(p: dict[str, Any]) -> str:
    return p.get("committed_metadata") or ""


def _fetched_topics(native: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": t,
            "partitions": [
                {"partition_index": r[0], "committed_offset": r[1], "metadata": r[2], "error_code": r[3]} for r in rows
            ],
        }
        for t, rows in native.get("topics") or []
    ]


def _asked(topics: list[Any] | None) -> list[Any] | None:
    return None if topics is None else [[t["name"], list(t["partition_indexes"])] for t in topics]


class OffsetFetch(Adapter):
    # v9: a consumer-protocol member fetches with its member id and epoch (KIP-848), checked as for a commit.
    api_key, versions = 9, (1, 9)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        stable = bool(req.get("require_stable"))  # v7+ (KIP-447)
        if version >= 8:
            groups = [
                {
                    "group_id": g["group_id"],
                    "topics": _asked(g.get("topics")),
                    "member_id": g.get("member_id") or "",
                    "member_epoch": g.get("member_epoch", -1),
                }
                for g in req["groups"]
            ]
            return ApiKey.OFFSET_FETCH, {"groups": groups, "require_stable": stable}
        return ApiKey.OFFSET_FETCH, {
            "group_id": req["group_id"],
            "topics": _asked(req.get("topics")),
            "require_stable": stable,
        }

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        if version >= 8:
            return {
                "groups": [
                    {"group_id": g["group_id"], "error_code": g.get("error_code", 0), "topics": _fetched_topics(g)}
                    for g in native["groups"]
                ]
            }
        return {"error_code": native.get("error_code", 0), "topics": _fetched_topics(native)}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        if version >= 8:
            return {"groups": [{"group_id": g["group_id"], "error_code": code, "topics": []} for g in req["groups"]]}
        return {"error_code": code, "topics": []}


class ListGroups(Adapter):
    api_key, versions = 16, (0, 5)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        # Every group type, filtered below: a client before v5 sees share groups too, as Kafka lists them.
        return ApiKey.LIST_GROUPS, {"group_types": True}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        states = set(req.get("states_filter") or ())
        types = {t.lower() for t in req.get("types_filter") or ()}
        # States and types compare case-insensitively, as Kafka 4's do (KIP-848's group types "classic", "consumer").
        states = {s.lower() for s in states}
        groups = [
            {"group_id": g, "protocol_type": ptype, "group_state": state, "group_type": gtype}
            for (g, ptype, state), gtype in _with_types(native)
            if (not states or state.lower() in states) and (not types or gtype in types)
        ]
        return {"error_code": native.get("error_code", 0), "groups": groups}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"error_code": code, "groups": []}


def _with_types(native: dict[str, Any]) -> list[tuple[list[Any], str]]:
    """Each native ListGroups row with its group type (a list beside the rows; none: all classic)."""
    rows = native.get("groups") or []
    types = native.get("group_types") or ["classic"] * len(rows)
    return list(zip(rows, types))


class DescribeGroups(Adapter):
    api_key, versions = 15, (0, 5)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.DESCRIBE_GROUPS, {
            "groups": list(req["groups"]),
            # v3+ (broker/server/authorization.py fills the operations in, when asked)
            "include_authorized_operations": req.get("include_authorized_operations", False),
        }

    @staticmethod
    def _not_classic(g: dict[str, Any], version: int) -> dict[str, Any]:
        """Kafka 4 describes a consumer-protocol group through ConsumerGroupDescribe only; the DescribeGroups
        versions served here (before v6's GROUP_ID_NOT_FOUND) answer it as a Dead group, as Kafka's do."""
        return {
            "group_id": g["group_id"],
            "error_code": 0,
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
        }

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {
            "groups": [
                self._not_classic(g, version)
                if g.get("group_type") == "consumer"
                else {
                    "error_code": g.get("error_code", 0),
                    "group_id": g["group_id"],
                    "group_state": g.get("state", "Dead"),
                    "protocol_type": g.get("protocol_type") or "",
                    "protocol_data": g.get("protocol") or "",
                    "members": [
                        {
                            "member_id": m[0],
                            "client_id": m[1],
                            "client_host": m[2],
                            "member_metadata": m[3] or b"",
                            "member_assignment": m[4] or b"",
                        }
                        for m in g.get("members") or []
                    ],
                    "authorized_operations": g.get("authorized_operations", NOT_GIVEN),
                }
                for g in native["groups"]
            ]
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {
            "groups": [
                {"error_code": code, "group_id": g, "group_state": "", "protocol_type": "", "protocol_data": ""}
                for g in req["groups"]
            ]
        }


class DeleteGroups(Adapter):
    api_key, versions = 42, (0, 2)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.DELETE_GROUPS, {"groups": list(req["groups_names"])}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {"results": [{"group_id": g, "error_code": code} for g, code, _ in native["results"]]}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"results": [{"group_id": g, "error_code": code} for g in req["groups_names"]]}


class OffsetDelete(Adapter):
    api_key, versions = 47, (0, 0)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        topics = [[t["name"], [p["partition_index"] for p in t["partitions"]]] for t in req["topics"]]
        return ApiKey.OFFSET_DELETE, {"group_id": req["group_id"], "topics": topics}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {
            "error_code": native.get("error_code", 0),
            "topics": [
                {"name": t, "partitions": [{"partition_index": r[0], "error_code": r[1]} for r in rows]}
                for t, rows in native.get("topics") or []
            ],
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"error_code": code, "topics": []}


GROUP_ADAPTERS: list[Adapter] = [
    FindCoordinator(),
    JoinGroup(),
    SyncGroup(),
    Heartbeat(),
    LeaveGroup(),
    OffsetCommit(),
    OffsetFetch(),
    ListGroups(),
    DescribeGroups(),
    DeleteGroups(),
    OffsetDelete(),
]
