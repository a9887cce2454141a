"""The client side of a secured connection, shared by our clients and by brokers talking to each other.

Kafka's four security protocols (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) and SASL mechanisms (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), configured with librdkafka's key names (client/config.py). TLS is Python's
`ssl`; SCRAM's message handling is scramp's (RFC 5802 / RFC 7677), never hand-written crypto.

`SaslClient` is sans-IO: the connection (net/connection.py) sends `first()` in a SaslAuthenticate request
and feeds each server answer to `step`, until `step` returns None (done) or raises (authentication failed).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from net.errors import SaslAuthenticationError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)


def uses_ssl(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


def uses_sasl(protocol: str) -> bool:
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ClientSecurity:
    """How a client secures its connections: librdkafka's security.protocol, sasl.* and ssl.* keys."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = None
    # librdkafka's ssl.endpoint.identification.algorithm: "https" (check the broker's host name, the
    # default) or "none".
    ssl_endpoint_identification_algorithm: str = "https"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for SSL and SASL_SSL (None otherwise): the CA file verifies the broker, and a
        client certificate (mutual TLS) is presented when one is configured."""
        if not uses_ssl(self.protocol):
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_ca_location)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = self.ssl_endpoint_identification_algorithm.lower() == "https"
        if self.ssl_certificate_location:
            ctx.load_cert_chain(self.ssl_certificate_location, self.ssl_key_location, self.ssl_key_password)
        return ctx

    def sasl_client(self) -> "SaslClient | None":
        if not uses_sasl(self.protocol):
            return None
        if self.sasl_username is None or self.sasl_password is None:
            raise SaslAuthenticationError(f"security.protocol={self.protocol} needs sasl.username and sasl.password")
        return SaslClient(self.sasl_mechanism, self.sasl_username, self.sasl_password)


class SaslClient:
    """One login, as the exchange of SaslAuthenticate tokens Kafka's clients make."""

    def __init__(self, mechanism: str, username: str, password: str, c_nonce: str | None = None) -> None:
        if mechanism not in SASL_MECHANISMS:
            raise SaslAuthenticationError(f"sasl.mechanism {mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}")
        self.mechanism = mechanism
        self.username = username
        self._password = password
        # scramp (and asn1crypto under it) on the first SCRAM login only: ~0.1 s less at every start
        from scramp import ScramClient

        self._scram = ScramClient([mechanism], username, password, c_nonce=c_nonce) if mechanism != "PLAIN" else None
        self._steps = 0

    def first(self) -> bytes:
        if self._scram is None:
            # RFC 4616: authzid NUL authcid NUL passwd (no authorization identity: act as ourselves)
            return b"\0" + self.username.encode() + b"\0" + self._password.encode()
        client_first: str = self._scram.get_client_first()
        return client_first.encode()

    def step(self, server_token: bytes) -> bytes | None:
        """The next token to send for the server's `server_token`, or None once the login is complete.
        Raises SaslAuthenticationError when the server's answer does not check out."""
        self._steps += 1
        if self._scram is None:
            return None  # PLAIN: the server's (empty) answer means accepted
        from scramp import ScramException

        try:
            if self._steps == 1:
                self._scram.set_server_first(server_token.decode())
                client_final: str = self._scram.get_client_final()
                return client_final.encode()
            self._scram.set_server_final(server_token.decode())  # checks the server's signature
            return None
        except (ScramException, UnicodeDecodeError) as e:
            raise SaslAuthenticationError(f"{self.mechanism} login as {self.username!r} failed: {e}") from None
