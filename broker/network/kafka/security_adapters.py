"""Kafka's SASL apis onto the native ones of the same numbers, which the connection's Authenticator answers
(broker/network/authenticator.py): SaslHandshake v1 (the mechanism) and SaslAuthenticate v0-2 (the tokens)."""

from __future__ import annotations

from broker.network.kafka.adapters import Adapter
from net.protocol import ApiKey


class SaslHandshake(Adapter):
    # v0 would be followed by raw, unframed SASL tokens; every current client uses v1 and SaslAuthenticate.
    api_key, versions = 17, (1, 1)

    def request(self, req: dict, version: int) -> tuple[int, dict]:
        return ApiKey.SASL_HANDSHAKE, {"mechanism": req["mechanism"]}

    def response(self, native: dict, req: dict, version: int) -> dict:
        return {"error_code": native.get("error_code", 0), "mechanisms": list(native.get("mechanisms") or [])}

    def error(self, req: dict, version: int, code: int, message: str | None) -> dict:
        return {"error_code": code, "mechanisms": []}


class SaslAuthenticate(Adapter):
    api_key, versions = 36, (0, 2)

    def request(self, req: dict, version: int) -> tuple[int, dict]:
        return ApiKey.SASL_AUTHENTICATE, {"auth_bytes": bytes(req["auth_bytes"])}

    def response(self, native: dict, req: dict, version: int) -> dict:
        return {
            "error_code": native.get("error_code", 0),
            "error_message": native.get("error_message"),
            "auth_bytes": native.get("auth_bytes") or b"",
            "session_lifetime": native.get("session_lifetime_ms", 0),
        }

    def error(self, req: dict, version: int, code: int, message: str | None) -> dict:
        return {"error_code": code, "error_message": message, "auth_bytes": b"", "session_lifetime": 0}


SECURITY_ADAPTERS: list[Adapter] = [SaslHandshake(), SaslAuthenticate()]
