"""Who is on a connection: the listener's security protocol, the SASL login, the principal.

Kafka's model: on a SASL listener a connection may send only ApiVersions, SaslHandshake and SaslAuthenticate
until its login completes (anything else closes it, as Kafka's SaslServerAuthenticator does); a failed login
is answered SASL_AUTHENTICATION_FAILED and the connection closed after
`connection.failed.authentication.delay.ms`; one that has not logged in within
`connections.max.unauthenticated.ms` is closed. The principal is `User:<name>` after a SASL login,
`User:<certificate DN>` on an SSL listener whose client presented a certificate (mutual TLS), else
`User:ANONYMOUS`. Both codecs reach here: the Kafka listener's SaslHandshake/SaslAuthenticate become the
native api calls of the same numbers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from broker.security.sasl_server import CredentialLookup, SaslServer
from net.acl import ANONYMOUS
from net.errors import ErrorCode, KafkaLiteError
from net.protocol import ApiKey
from net.security import uses_sasl

log = logging.getLogger("kafkalite.security")

PRE_AUTH_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# RFC 4514 short names of the subject attributes a certificate DN is written with (Kafka's X500 form).
_DN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "domainComponent": "DC",
    "emailAddress": "EMAILADDRESS",
}


@dataclass(frozen=True)
class ListenerSecurity:
    """What one listener requires: its protocol, the SASL mechanisms it accepts, where credentials are."""

    protocol: str = "PLAINTEXT"
    mechanisms: tuple[str, ...] = ()
    lookup: CredentialLookup | None = None
    failed_authentication_delay_s: float = 0.1
    max_unauthenticated_s: float = 10.0
    max_token_bytes: int = 524288

    @property
    def sasl(self) -> bool:
        return uses_sasl(self.protocol)


PLAINTEXT = ListenerSecurity()


def certificate_principal(cert: dict[str, Any] | None) -> str | None:
    """`User:CN=...,O=...` from a verified peer certificate (most specific attribute first), or None."""
    if not cert or not cert.get("subject"):
        return None
    rdns = []
    for rdn in reversed(cert["subject"]):
        rdns.append("+".join(f"{_DN_NAMES.get(k, k)}={v}" for k, v in rdn))
    return "User:" + ",".join(rdns)


class SaslFailed(KafkaLiteError):
    """A login failed: answer with this, then close the connection (after the failure delay)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class Authenticator:
    """One connection's authentication state."""

    def __init__(self, security: ListenerSecurity, cert_principal: str | None = None) -> None:
        self.security = security
        self.principal = cert_principal or ANONYMOUS
        self.authenticated = not security.sasl
        self._server: SaslServer | None = None

    def allows(self, api_key: int) -> bool:
        """Whether a request of `api_key` may be served now (before a SASL login only the login's own)."""
        return self.authenticated or api_key in PRE_AUTH_APIS

    def handshake(self, body: dict[str, Any]) -> dict[str, Any]:
        """SaslHandshake: choose a mechanism among the enabled ones."""
        mechs = list(self.security.mechanisms)
        if not self.security.sasl:
            return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "error_message": "not a SASL listener"}
        if self.authenticated or self._server is not None:
            return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": mechs}
        mech = body.get("mechanism")
        if mech not in mechs or self.security.lookup is None:
            return {
                "error_code": int(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                "error_message": f"{mech!r} is not enabled here ({', '.join(mechs)})",
                "mechanisms": mechs,
            }
        self._server = SaslServer(str(mech), self.security.lookup)
        return {"error_code": 0, "mechanisms": mechs}

    def authenticate(self, body: dict[str, Any]) -> dict[str, Any]:
        """SaslAuthenticate: one token of the login. Raises SaslFailed (answer it, then close)."""
        if self._server is None or self.authenticated:
            raise SaslFailed("SaslAuthenticate without a SaslHandshake (or after the login completed)")
        token = body.get("auth_bytes")
        if not isinstance(token, bytes) or len(token) > self.security.max_token_bytes:
            raise SaslFailed("the SASL token is missing or larger than sasl.server.max.receive.size")
        try:
            answer = self._server.step(token)
        except KafkaLiteError as e:
            raise SaslFailed(str(e)) from None
        if self._server.complete:
            self.authenticated = True
            self.principal = self._server.principal
        return {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": 0}
