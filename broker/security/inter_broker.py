"""The cluster secret's login on the inter-broker listener (open mode, issue 25 §3).

A cluster whose listeners have no SASL of their own still makes its brokers prove to each other that they
belong to it: each knows the cluster's secret (inter.broker.secret.file, made per cluster by kl-cluster up
and deploy/node/install.sh) and logs in to a peer's inter-broker listener with SCRAM-SHA-256 over it. SCRAM
is a challenge-response: the secret never crosses the wire, a recorded exchange does not replay (the server
nonce changes), and the server's final message proves the peer knows the secret too. The credential is
derived from the secret alone (salt included), so every broker computes the same one without storing it.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from broker.security.config import SECRET_MECHANISM, SECRET_USER
from broker.security.sasl_server import CredentialLookup
from broker.security.scram import ScramCredential, make_credential

ITERATIONS = 8192


@lru_cache(maxsize=4)
def secret_credential(secret: str) -> ScramCredential:
    """The SCRAM credential of the cluster secret (the salt derived from it: the same on every broker)."""
    salt = hashlib.sha256(b"kafkalite inter-broker salt\0" + secret.encode()).digest()[:16]
    return make_credential(SECRET_MECHANISM, secret, ITERATIONS, salt)


def secret_lookup(secret: str) -> CredentialLookup:
    """The inter-broker listener's only credential: the secret's, for SECRET_USER."""
    credential = secret_credential(secret)

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        return credential if user == SECRET_USER and mechanism == SECRET_MECHANISM else None

    return lookup
