"""Kafka's SASL apis onto the native ones of the same numbers, which the connection's Authenticator answers
(broker/network/authenticator.py): SaslHandshake v0-1 (the mechanism) and SaslAuthenticate v0-2 (the tokens),
and the bare token frames that follow a SaslHandshake v0; then the ACL, SCRAM-credential and client-quota apis
onto the native ones SecurityApis serves (broker/server/security_api.py)."""

from __future__ import annotations

import struct
from typing import Any

from broker.network.kafka.adapters import Adapter, AdapterError
from broker.network.server import Request
from net.errors import ErrorCode
from net.protocol import ApiKey


class SaslHandshake(Adapter):
    # v0 is followed by bare size-prefixed SASL tokens (SaslTokenFrame), v1 by SaslAuthenticate requests.
    # Both are advertised, as Kafka does: librdkafka enables SASL mechanisms other than GSSAPI only if the
    # broker's SaslHandshake range includes v0 (its SaslHandshake feature), then logs in with v1 and
    # SaslAuthenticate when those are advertised too.
    api_key, versions = 17, (0, 1)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.SASL_HANDSHAKE, {"mechanism": req["mechanism"]}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {"error_code": native.get("error_code", 0), "mechanisms": list(native.get("mechanisms") or [])}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"error_code": code, "mechanisms": []}


class SaslTokenFrame(Request):
    """One SASL token after a SaslHandshake v0: a bare frame with no request header, answered by the server's
    token in a bare frame. A failed login is not answered (there is no field for an error): the connection
    is closed after connection.failed.authentication.delay.ms, as Kafka does."""

    __slots__ = ()

    def __init__(self, token: bytes) -> None:
        super().__init__(ApiKey.SASL_AUTHENTICATE, 0, -1, None, {"auth_bytes": token})

    def encode(self, body: dict[str, Any]) -> bytes | None:
        if body.get("error_code"):
            return None
        token = body.get("auth_bytes") or b""
        return struct.pack(">i", len(token)) + token


class SaslAuthenticate(Adapter):
    api_key, versions = 36, (0, 2)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.SASL_AUTHENTICATE, {"auth_bytes": bytes(req["auth_bytes"])}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        return {
            "error_code": native.get("error_code", 0),
            "error_message": native.get("error_message"),
            "auth_bytes": native.get("auth_bytes") or b"",
            "session_lifetime": native.get("session_lifetime_ms", 0),
        }

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"error_code": code, "error_message": message, "auth_bytes": b"", "session_lifetime": 0}


SECURITY_ADAPTERS: list[Adapter] = [SaslHandshake(), SaslAuthenticate()]


def _filter_row(f: dict[str, Any], name_key: str = "resource_name_filter") -> list[Any]:
    return [
        f["resource_type_filter"],
        f.get(name_key),
        f.get("pattern_type_filter", 3),  # v0 had no pattern type: LITERAL
        f.get("principal_filter"),
        f.get("host_filter"),
        f["operation"],
        f["permission_type"],
    ]


class DescribeAcls(Adapter):
    api_key, versions = 29, (1, 3)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.DESCRIBE_ACLS, {"filter": _filter_row(req)}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        by_resource: dict[tuple[Any, ...], list[Any]] = {}
        for rt, name, pt, principal, host, op, perm in native.get("bindings") or []:
            acl = {"principal": principal, "host": host, "operation": op, "permission_type": perm}
            by_resource.setdefault((rt, name, pt), []).append(acl)
        resources = [
            {"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
            for (rt, name, pt), acls in by_resource.items()
        ]
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": resources}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}


class CreateAcls(Adapter):
    api_key, versions = 30, (1, 3)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        rows = [
            [
                c["resource_type"],
                c["resource_name"],
                c.get("resource_pattern_type", 3),
                c["principal"],
                c["host"],
                c["operation"],
                c["permission_type"],
            ]
            for c in req["creations"]
        ]
        return ApiKey.CREATE_ACLS, {"creations": rows}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        results = [{"error_code": code, "error_message": msg} for code, msg in native.get("results") or []]
        return {"throttle_time": 0, "results": results}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {
            "throttle_time": 0,
            "results": [{"error_code": code, "error_message": message} for _ in req["creations"]],
        }


class DeleteAcls(Adapter):
    api_key, versions = 31, (1, 3)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.DELETE_ACLS, {"filters": [_filter_row(f) for f in req["filters"]]}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        results = []
        for code, msg, rows in native.get("results") or []:
            matching = [
                {
                    "error_code": 0,
                    "error_message": None,
                    "resource_type": rt,
                    "resource_name": name,
                    "pattern_type": pt,
                    "principal": principal,
                    "host": host,
                    "operation": op,
                    "permission_type": perm,
                }
                for rt, name, pt, principal, host, op, perm in rows
            ]
            results.append({"error_code": code, "error_message": msg, "matching_acls": matching})
        return {"throttle_time": 0, "filter_results": results}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        rows: list[dict[str, Any]] = [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in req["filters"]
        ]
        return {"throttle_time": 0, "filter_results": rows}


# Kafka's ScramMechanism codes.
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISMS_BY_CODE = {v: k for k, v in MECHANISM_CODES.items()}


class DescribeUserScramCredentials(Adapter):
    api_key, versions = 50, (0, 0)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        users = req.get("users")
        return ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None if users is None else [u["name"] for u in users]}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        results = [
            {
                "user": user,
                "error_code": code,
                "error_message": msg,
                "credential_infos": [{"mechanism": MECHANISM_CODES[m], "iterations": i} for m, i in creds],
            }
            for user, code, msg, creds in native.get("results") or []
        ]
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "results": []}


class AlterUserScramCredentials(Adapter):
    api_key, versions = 51, (0, 0)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        def mech(code: int) -> str:
            return MECHANISMS_BY_CODE.get(code, f"unknown mechanism {code}")

        dels = [[d["name"], mech(d["mechanism"])] for d in req.get("deletions") or []]
        ups = [
            [u["name"], mech(u["mechanism"]), u["iterations"], bytes(u["salt"]), bytes(u["salted_password"])]
            for u in req.get("upsertions") or []
        ]
        return ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": dels, "upsertions": ups}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        results = [{"user": u, "error_code": c, "error_message": m} for u, c, m in native.get("results") or []]
        return {"throttle_time": 0, "results": results}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        users = {r["name"] for r in (req.get("deletions") or []) + (req.get("upsertions") or [])}
        return {
            "throttle_time": 0,
            "results": [{"user": u, "error_code": code, "error_message": message} for u in users],
        }


# KIP-546's match types of a DescribeClientQuotas filter component.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def quota_filter_matches(components: list[dict[str, Any]], strict: bool, entity: dict[str, str | None]) -> bool:
    """Whether a quota entity ({type: name, None for the default}) passes a DescribeClientQuotas filter: each
    component names a type the entity has, with that exact name, the default, or any name but the default;
    `strict` also excludes entities with other types."""
    for c in components:
        if c["entity_type"] not in entity:
            return False
        name = entity[c["entity_type"]]
        kind = c["match_type"]
        if (
            (kind == MATCH_EXACT and name != c.get("match"))
            or (kind == MATCH_DEFAULT and name is not None)
            or (kind == MATCH_SPECIFIED and name is None)
        ):
            return False
    return not strict or set(entity) == {c["entity_type"] for c in components}


def _entity(pairs: list[Any]) -> list[dict[str, Any]]:
    return [{"entity_type": t, "entity_name": n} for t, n in pairs]


class DescribeClientQuotas(Adapter):
    api_key, versions = 48, (0, 1)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        return ApiKey.DESCRIBE_CLIENT_QUOTAS, {"entity": None}  # every entity; the filter is applied below

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        entries = [
            {"entity": _entity(entity), "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())]}
            for entity, values in native.get("entries") or []
            if quota_filter_matches(list(req["components"]), bool(req.get("strict")), dict(map(tuple, entity)))
        ]
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None}


class AlterClientQuotas(Adapter):
    api_key, versions = 49, (0, 1)

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        if req.get("validate_only"):
            raise AdapterError(ErrorCode.INVALID_REQUEST, "validate_only is not supported for client quotas")
        entries = [
            [
                [[e["entity_type"], e["entity_name"]] for e in entry["entity"]],
                {op["key"]: None if op["remove"] else op["value"] for op in entry["ops"]},
            ]
            for entry in req["entries"]
        ]
        return ApiKey.ALTER_CLIENT_QUOTAS, {"entries": entries}

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any]:
        rows = native.get("results") or []
        entries = [{"error_code": c, "error_message": m, "entity": _entity(entity)} for entity, c, m in rows]
        return {"throttle_time": 0, "entries": entries}

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        rows = [{"error_code": code, "error_message": message, "entity": e["entity"]} for e in req["entries"]]
        return {"throttle_time": 0, "entries": rows}


SECURITY_ADAPTERS += [
    DescribeAcls(),
    CreateAcls(),
    DeleteAcls(),
    DescribeUserScramCredentials(),
    AlterUserScramCredentials(),
    DescribeClientQuotas(),
    AlterClientQuotas(),
]
