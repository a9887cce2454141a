"""SaslServer: the broker's side of one SASL login (Kafka's SaslServerAuthenticator), sans-IO.

A connection's SaslHandshake picks the mechanism; each SaslAuthenticate token goes to `step`, which returns
the token to answer with and whether the login is complete, or raises SaslAuthenticationError (the
connection answers SASL_AUTHENTICATION_FAILED and closes). Credentials come from `lookup` (the cluster
metadata's SCRAM credentials); the authenticated principal is `User:<name>`.
"""

from __future__ import annotations

from typing import Callable

from scramp import ScramException, ScramMechanism

from broker.security.scram import ScramCredential
from net.errors import SaslAuthenticationError

# (user, mechanism) -> the stored credential, or None
CredentialLookup = Callable[[str, str], ScramCredential | None]

FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


class SaslServer:
    def __init__(self, mechanism: str, lookup: CredentialLookup, s_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._s_nonce = s_nonce  # fixed only by tests (RFC 7677's example exchange)
        self._lookup = lookup
        self.username: str | None = None
        self.complete = False
        self._scram = None
        self._steps = 0

    @property
    def principal(self) -> str:
        assert self.complete and self.username is not None
        return f"User:{self.username}"

    def _fail(self) -> SaslAuthenticationError:
        # One message whatever went wrong (unknown user, wrong password), as Kafka: no user enumeration.
        return SaslAuthenticationError(FAILED.format(self.mechanism))

    def step(self, token: bytes) -> bytes:
        """The answer to the client's `token`; `complete` is set once the client is authenticated."""
        if self.complete:
            raise SaslAuthenticationError("the login is already complete")
        self._steps += 1
        if self.mechanism == "PLAIN":
            return self._plain(token)
        try:
            if self._steps == 1:
                self._scram = ScramMechanism(self.mechanism).make_server(self._auth_info, s_nonce=self._s_nonce)
                self._scram.set_client_first(token.decode())
                return self._scram.get_server_first().encode()
            if self._steps == 2 and self._scram is not None:
                self._scram.set_client_final(token.decode())
                self.complete = True
                return self._scram.get_server_final().encode()
        except (ScramException, UnicodeDecodeError, KeyError):
            raise self._fail() from None
        raise self._fail()

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        cred = self._lookup(username, self.mechanism)
        if cred is None:
            raise KeyError(username)
        self.username = username
        return cred.auth_info()

    def _plain(self, token: bytes) -> bytes:
        try:
            authzid, user, password = token.decode().split("\0")
        except (UnicodeDecodeError, ValueError):
            raise self._fail() from None
        if authzid and authzid != user:
            raise self._fail()  # acting as another user is not supported
        # PLAIN checks the password against the user's SCRAM credential (either mechanism): one user store.
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            cred = self._lookup(user, mech)
            if cred is not None and cred.check_password(password):
                self.username, self.complete = user, True
                return b""
        raise self._fail()
