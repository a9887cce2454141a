"""Kafka's SASL apis onto the native ones of the same numbers, which the connection's Authenticator answers
(broker/network/authenticator.py): SaslHandshake v0-1 (the mechanism) and SaslAuthenticate v0-2 (the tokens),
and the bare token frames that follow a SaslHandshake v0. These stay adapters (docs/COMPATIBILITY.md): the login
is the connection's, answered before any handler, and SaslHandshake v0 changes the framing of what follows. The
ACL, SCRAM-credential and client-quota apis are typed (broker/server/security_api.py)."""

from __future__ import annotations

import struct
from typing import Any

from broker.network.kafka.adapters import Adapter
from broker.network.server import Request
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
