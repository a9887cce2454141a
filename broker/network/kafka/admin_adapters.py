"""The admin apis of the Kafka listener: topics, configs and leader elections, onto the native handlers
(broker/server/kafka_apis.py, broker/controller/leader_election_api.py), which forward metadata changes to the
active controller (KIP-590), so an admin client may send them to any broker.

Resources: topics (type 2) and brokers (type 4). A broker's configs are read from its server.properties and
cannot be changed at run time (Kafka's static broker configs): describing them works, altering them is
refused with INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any, Callable

from broker.network.kafka.adapters import Adapter, AdapterError
from net.errors import ErrorCode
from net.protocol import ApiKey

TOPIC, BROKER, GROUP = 2, 4, 32  # Kafka's ConfigResource.Type
# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class CreateTopics(Adapter):
    api_key, versions = 19, (2, 7)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        topics = [
            {
                "name": t["name"],
                "num_partitions": t["num_partitions"],
                "replication_factor": t["replication_factor"],
                "assignments": [[a["partition_index"], list(a["broker_ids"])] for a in t.get("assignments") or []],
                "configs": {c["name"]: c["value"] for c in t.get("configs") or [] if c.get("value") is not None},
            }
            for t in req["topics"]
        ]
        # KIP-599: THROTTLING_QUOTA_EXCEEDED from v6 on; older clients are throttled instead (permissive).
        body = {"topics": topics, "validate_only": req.get("validate_only", False), "strict_quota": version >= 6}
        return ApiKey.CREATE_TOPICS, body

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        asked = {t["name"]: t for t in req["topics"]}
        out = []
        for name, code, message in native["topics"]:
            t = asked.get(name, {})
            out.append(
                {
                    "name": name,
                    "error_code": code,
                    "error_message": message,
                    "num_partitions": t.get("num_partitions", -1) if not code else -1,
                    "replication_factor": t.get("replication_factor", -1) if not code else -1,
                    "configs": None,
                }
            )
        return {"topics": out, "throttle_time": native.get("throttle_time_ms", 0)}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"topics": [{"name": t["name"], "error_code": code, "error_message": message} for t in req["topics"]]}


class DeleteTopics(Adapter):
    api_key, versions = 20, (1, 6)

    @staticmethod
    def _names(req: dict[str, Any]) -> list[Any]:
        if req.get("topics"):
            return [t.get("name") for t in req["topics"]]
        return list(req.get("topic_names") or [])

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.DELETE_TOPICS, {"topics": self._names(req), "strict_quota": version >= 5}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {
            "responses": [
                {"name": name, "error_code": code, "error_message": message} for name, code, message in native["topics"]
            ],
            "throttle_time": native.get("throttle_time_ms", 0),
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"responses": [{"name": n, "error_code": code, "error_message": message} for n in self._names(req)]}


class CreatePartitions(Adapter):
    api_key, versions = 37, (0, 3)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        topics = [
            {"name": t["name"], "count": t["count"], "assignments": [list(a["broker_ids"]) for a in t["assignments"]]}
            if t.get("assignments")
            else {"name": t["name"], "count": t["count"]}
            for t in req["topics"]
        ]
        body = {"topics": topics, "validate_only": req.get("validate_only", False), "strict_quota": version >= 3}
        return ApiKey.CREATE_PARTITIONS, body

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        results = [{"name": n, "error_code": c, "error_message": m} for n, c, m in native["topics"]]
        return {"results": results, "throttle_time": native.get("throttle_time_ms", 0)}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"results": [{"name": t["name"], "error_code": code, "error_message": message} for t in req["topics"]]}


def _resource(kind: int, name: str, code: int, message: str | None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "resource_type": kind, "resource_name": name}


def _resources(req: dict[str, Any], kind: int) -> list[str]:
    return [r["resource_name"] for r in req["resources"] if r["resource_type"] == kind]


class DescribeConfigs(Adapter):
    api_key, versions = 32, (1, 4)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        body = {"topics": _resources(req, TOPIC), "brokers": _resources(req, BROKER)}
        groups = _resources(req, GROUP)
        return ApiKey.DESCRIBE_CONFIGS, {**body, "groups": groups} if groups else body

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        found = {(TOPIC, r[0]): r for r in native.get("results") or []}
        found.update({(BROKER, str(r[0])): r for r in native.get("brokers") or []})
        found.update({(GROUP, str(r[0])): r for r in native.get("groups") or []})
        docs, synonyms = req.get("include_documentation", False), req.get("include_synonyms", False)
        results = []
        for res in req["resources"]:
            kind, name = res["resource_type"], res["resource_name"]
            row = found.get((kind, name))
            if row is None:
                results.append(self._failed(kind, name, int(ErrorCode.INVALID_REQUEST), f"resource type {kind}"))
                continue
            _, code, message, configs = row
            keys = res.get("configuration_keys")
            results.append(
                {
                    "error_code": code,
                    "error_message": message,
                    "resource_type": kind,
                    "resource_name": name,
                    "configs": [
                        _config_entry(k, v, synonyms, docs) for k, v in configs.items() if not keys or k in keys
                    ],
                }
            )
        return {"results": results}

    @staticmethod
    def _failed(kind: int, name: str, code: int, message: str | None) -> dict[str, Any]:
        return dict(_resource(kind, name, code, message), configs=[])

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {
            "results": [self._failed(r["resource_type"], r["resource_name"], code, message) for r in req["resources"]]
        }


def _config_entry(name: str, row: list[Any], synonyms: bool, docs: bool) -> dict[str, Any]:
    """One native row (broker/server/config_describe.py ConfigEntry.to_wire) as Kafka's
    DescribeConfigsResourceResult."""
    value, _, doc, sensitive, kind, source, syns, read_only = row
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": source,
        "is_sensitive": sensitive,
        "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in syns] if synonyms else [],
        "config_type": kind,
        "documentation": doc if docs else None,
    }


class _AlterConfigsBase(Adapter):
    """Topic, broker and group resources go to the native AlterConfigs (a broker's dynamic configs: "brokers", a
    group's configs: "groups"); other resources are answered here."""

    replace = False

    def changes(self, configs: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        topics = [
            [r["resource_name"], self.changes(r["configs"])] for r in req["resources"] if r["resource_type"] == TOPIC
        ]
        brokers = [
            [r["resource_name"], self.changes(r["configs"])] for r in req["resources"] if r["resource_type"] == BROKER
        ]
        groups = [
            [r["resource_name"], self.changes(r["configs"])] for r in req["resources"] if r["resource_type"] == GROUP
        ]
        body = {
            "topics": topics,
            "brokers": brokers,
            "validate_only": req.get("validate_only", False),
            "replace": self.replace,
            **({"groups": groups} if groups else {}),
        }
        return ApiKey.ALTER_CONFIGS, body

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        done = {(TOPIC, name): (code, message) for name, code, message in native.get("topics") or []}
        done.update({(BROKER, str(name)): (code, message) for name, code, message in native.get("brokers") or []})
        done.update({(GROUP, str(name)): (code, message) for name, code, message in native.get("groups") or []})
        out = []
        for r in req["resources"]:
            kind, name = r["resource_type"], r["resource_name"]
            if kind in (TOPIC, BROKER, GROUP):
                code, message = done.get((kind, name), (int(ErrorCode.UNKNOWN_SERVER_ERROR), "no answer"))
            else:
                code, message = int(ErrorCode.INVALID_REQUEST), f"resource type {kind} is not supported"
            out.append(_resource(kind, name, code, message))
        return {"responses": out}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {
            "responses": [_resource(r["resource_type"], r["resource_name"], code, message) for r in req["resources"]]
        }


class AlterConfigs(_AlterConfigsBase):
    """The given keys become the resource's whole set of overrides (the others return to their defaults)."""

    api_key, versions = 33, (0, 2)
    replace = True

    def changes(self, configs: list[dict[str, Any]]) -> dict[str, Any]:
        return {c["name"]: c["value"] for c in configs}


class IncrementalAlterConfigs(_AlterConfigsBase):
    api_key, versions = 44, (0, 1)

    def changes(self, configs: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for c in configs:
            op, value = c["config_operation"], c.get("value")
            if op not in _OPS:
                raise AdapterError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op} for {c['name']}")
            out[c["name"]] = _OPS[op](value)
        return out


# The native AlterConfigs forms of IncrementalAlterConfigs' operations (broker/server/kafka_apis.py _alter_configs).
_OPS: dict[Any, Callable[[Any], Any]] = {
    SET: lambda v: v,
    DELETE: lambda v: None,
    APPEND: lambda v: ["append", v],
    SUBTRACT: lambda v: ["subtract", v],
}


ADMIN_ADAPTERS: list[Adapter] = [
    CreateTopics(),
    DeleteTopics(),
    CreatePartitions(),
    DescribeConfigs(),
    AlterConfigs(),
    IncrementalAlterConfigs(),
]
