"""SaslServer: the broker's side of one SASL login (Kafka's SaslServerAuthenticator), sans-IO.

A connection's SaslHandshake picks the mechanism; each SaslAuthenticate token goes to `step`, which returns
the token to answer with and whether the login is complete, or raises SaslAuthenticationError (the
connection answers SASL_AUTHENTICATION_FAILED and closes). Credentials come from `lookup` (the cluster
metadata's SCRAM credentials); the authenticated principal is `User:<name>`. scramp reads the client-first
message and writes the server-first; the client's proof is checked here, with Kafka's nonce rule.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any, Callable

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
        self._scram: Any = None  # scramp's server side (scramp ships no type information)
        self._steps = 0
        self._credential: ScramCredential | None = None
        self._client_first = ""
        self._server_first = ""

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
        from scramp import (
            ScramException,
            ScramMechanism,
        )  # scramp (and asn1crypto under it) on first login: ~0.1 s off every start

        try:
            if self._steps == 1:
                self._scram = ScramMechanism(self.mechanism).make_server(self._auth_info, s_nonce=self._s_nonce)
                self._client_first = token.decode()
                self._scram.set_client_first(self._client_first)
                self._server_first = self._scram.get_server_first()
                return self._server_first.encode()
            if self._steps == 2 and self._credential is not None:
                answer = self._client_final(token.decode("ascii"), self._credential)
                self.complete = True
                return answer
        except (ScramException, UnicodeDecodeError, KeyError, ValueError, binascii.Error):
            raise self._fail() from None
        raise self._fail()

    def _client_final(self, message: str, cred: ScramCredential) -> bytes:
        """Check the client's proof (RFC 5802 §3); the answer carries the server's signature. As Kafka's
        ScramSaslServer does, the nonce must end with the server-first nonce rather than equal it:
        librdkafka up to 2.0 (Debian's kcat) sends its own nonce again in front of the combined one, and
        signs what it sent, so the proof still covers the server's nonce."""
        without_proof, sep, proof_b64 = message.rpartition(",p=")
        attrs = without_proof.split(",")
        gs2_header = ",".join(self._client_first.split(",", 2)[:2]) + ","
        expected_binding = "c=" + base64.b64encode(gs2_header.encode()).decode()
        nonce = self._server_first.split(",", 1)[0]  # "r=<client nonce><server nonce>"
        if not sep or len(attrs) < 2 or attrs[0] != expected_binding or not attrs[1].startswith("r="):
            raise ValueError("malformed client-final-message")
        if not attrs[1].endswith(nonce[2:]):
            raise ValueError("the client-final nonce does not end with the server's")
        hash_name = "sha512" if self.mechanism == "SCRAM-SHA-512" else "sha256"
        client_first_bare = self._client_first.split(",", 2)[2]
        auth_message = f"{client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(cred.stored_key, auth_message, hash_name)
        proof = base64.b64decode(proof_b64, validate=True)
        if len(proof) != len(signature):
            raise ValueError("the client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), cred.stored_key):
            raise ValueError("invalid client proof")
        server_signature = hmac.digest(cred.server_key, auth_message, hash_name)
        return b"v=" + base64.b64encode(server_signature)

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        cred = self._lookup(username, self.mechanism)
        if cred is None:
            raise KeyError(username)
        self.username, self._credential = username, cred
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
