"""SCRAM credentials (RFC 5802 / RFC 7677), as Kafka keeps them: per user and mechanism a random salt, the
iteration count, StoredKey and ServerKey; never the password. They live in the replicated cluster metadata
(`user_scram_credential` records, docs/FORMAT.md), so every broker authenticates the same users.

The key derivation and message checks are scramp's; PLAIN logins are checked against the same credential
(the password is derived with the stored salt and compared with StoredKey), so there is one user store.
"""

from __future__ import annotations

import base64
import hmac
from dataclasses import dataclass
from typing import Any

from net.errors import InvalidRequestError
from net.security import SCRAM_MECHANISMS

# Kafka's bounds: at least 4096 iterations (RFC 7677's minimum), at most 16384.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """The tuple scramp's server asks for."""
        return self.salt, self.stored_key, self.server_key, self.iterations

    def check_password(self, password: str) -> bool:
        """True when `password` derives this credential's StoredKey (PLAIN logins)."""
        # scramp (and asn1crypto under it) on the first SCRAM login only: ~0.1 s less at every start
        from scramp import ScramMechanism

        _, stored, _, _ = ScramMechanism(self.mechanism).make_auth_info(
            password, iteration_count=self.iterations, salt=self.salt
        )
        return hmac.compare_digest(stored, self.stored_key)

    def to_record(self, user: str) -> dict[str, Any]:
        b64 = base64.b64encode
        return {
            "type": "user_scram_credential",
            "name": user,
            "mechanism": self.mechanism,
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> "ScramCredential":
        d = base64.b64decode
        return cls(r["mechanism"], d(r["salt"]), d(r["stored_key"]), d(r["server_key"]), int(r["iterations"]))


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A fresh credential (random salt unless given) for `password`; bad mechanisms or counts are refused."""
    if mechanism not in SCRAM_MECHANISMS:
        raise InvalidRequestError(f"unknown SCRAM mechanism {mechanism!r} (one of {', '.join(SCRAM_MECHANISMS)})")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidRequestError(f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {iterations}")
    if not password:
        raise InvalidRequestError("the password must not be empty")
    # scramp (and asn1crypto under it) on the first SCRAM login only: ~0.1 s less at every start
    from scramp import ScramMechanism

    salt_, stored, server, n = ScramMechanism(mechanism).make_auth_info(password, iteration_count=iterations, salt=salt)
    return ScramCredential(mechanism, salt_, stored, server, n)


def parse_scram_config(spec: str, need_name: bool) -> tuple[str, str | None, str, int]:
    """kafka-configs.sh's and kafka-storage.sh's form, `SCRAM-SHA-256=[name=admin,password=secret]` (name only
    with --add-scram; `iterations=8192` optional) -> (mechanism, name, password, iterations)."""
    mech, sep, rest = spec.strip().partition("=")
    if not sep or not rest.startswith("[") or not rest.endswith("]"):
        raise ValueError(f"{spec!r} is not MECHANISM=[key=value,...]")
    fields: dict[str, str] = {}
    for item in rest[1:-1].split(","):
        k, eq, v = item.partition("=")
        if not eq:
            raise ValueError(f"{item!r} in {spec!r} is not key=value")
        fields[k.strip()] = v.strip()
    unknown = set(fields) - {"name", "password", "iterations", "salt"}
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))} in {spec!r}")
    if mech not in SCRAM_MECHANISMS:
        raise ValueError(f"{mech!r} is not one of {', '.join(SCRAM_MECHANISMS)}")
    if "password" not in fields:
        raise ValueError(f"{spec!r} has no password")
    if need_name and not fields.get("name"):
        raise ValueError(f"{spec!r} has no name")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ValueError(f"iterations in {spec!r} is not a number") from None
    return mech, fields.get("name"), fields["password"], iterations
