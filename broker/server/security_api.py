"""SecurityApis: the ACL and SCRAM-credential requests (Kafka's AclApis and AlterUserScramCredentials).

CreateAcls, DeleteAcls and AlterUserScramCredentials change the replicated metadata, so they run on the
active controller (forwarded there, KIP-590) and need ALTER on the cluster; DescribeAcls and
DescribeUserScramCredentials are answered from this broker's image and need DESCRIBE on the cluster
(decided before these run, broker/server/authorization.py). They
answer SECURITY_DISABLED while `authorizer` is off (the ACL ones), as Kafka does. Body layouts are in
docs/FORMAT.md.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any, Awaitable

from broker.network.server import BadRequest, ConnectionContext, as_list, error_body
from broker.quota.client_quota import QUOTA_KEYS
from broker.security.request_authorizer import RequestAuthorizer
from broker.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential
from net.acl import AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType, ResourceType
from net.errors import ErrorCode, KafkaLiteError
from net.protocol import ApiKey
from net.security import SCRAM_MECHANISMS

if TYPE_CHECKING:
    from broker.controller.channel import ControllerChannel
    from broker.controller.service import ControllerService
    from broker.metadata.image import MetadataImage

_HASH = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """Kafka's AlterUserScramCredentials carries SaltedPassword (the client ran Hi(password, salt, i)); the
    broker keeps StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword,
    "Server Key") as RFC 5802 defines them."""
    h = _HASH[mechanism]
    client_key = hmac.new(salted, b"Client Key", h).digest()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return ScramCredential(mechanism, salt, h(client_key).digest(), server_key, iterations)


def _filter(row: Any) -> AclBindingFilter:
    if not isinstance(row, list) or len(row) != 7:
        raise BadRequest("an ACL filter is [resource_type, name, pattern_type, principal, host, operation, permission]")
    rt, name, pt, principal, host, op, perm = row
    try:
        return AclBindingFilter(
            ResourceType(rt), name, PatternType(pt), principal, host, AclOperation(op), AclPermission(perm)
        )
    except ValueError as e:
        raise BadRequest(f"bad ACL filter {row!r}: {e}") from None


class SecurityApis:
    def __init__(
        self,
        image: "MetadataImage",
        controller: "ControllerService",
        channel: "ControllerChannel",
        authz: RequestAuthorizer,
    ) -> None:
        self.image = image
        self.controller = controller
        self.channel = channel
        self.authz = authz
        self.handlers = {
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_scram,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_scram,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.describe_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.alter_quotas,
        }

    def _acls_on(self) -> dict[str, Any] | None:
        """The ACL apis answer SECURITY_DISABLED without an authorizer (their authorization, ALTER or DESCRIBE
        on the cluster, is broker/server/authorization.py's, decided before these run)."""
        if not self.authz.enabled:
            return error_body(ErrorCode.SECURITY_DISABLED, "no authorizer is configured (authorizer=acl)")
        return None

    # --- ACLs ---------------------------------------------------------------------------------

    def create_acls(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        if (off := self._acls_on()) is not None:
            return off
        rows = as_list(body.get("creations"), "creations")
        return self.channel.serve_or_forward(ApiKey.CREATE_ACLS, body, lambda: self._create(rows))

    async def _create(self, rows: list[Any]) -> dict[str, Any]:
        results: list[list[Any]] = []
        valid: list[AclBinding] = []
        for row in rows:
            try:
                b = AclBinding.from_wire(row)
                b.validate()
                valid.append(b)
                results.append([0, None])
            except (ValueError, TypeError) as e:
                results.append([int(ErrorCode.INVALID_REQUEST), f"bad ACL binding {row!r}: {e}"])
        if valid:
            try:
                await self.controller.create_acls(valid)
            except KafkaLiteError as e:
                results = [r if r[0] else [int(e.code), str(e)] for r in results]
        return {"results": results}

    def describe_acls(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        if (off := self._acls_on()) is not None:
            return off
        f = _filter(body.get("filter"))
        return {"error_code": 0, "bindings": [b.to_wire() for b in sorted(self.image.acls) if f.matches(b)]}

    def delete_acls(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        if (off := self._acls_on()) is not None:
            return off
        filters = [_filter(r) for r in as_list(body.get("filters"), "filters")]
        return self.channel.serve_or_forward(ApiKey.DELETE_ACLS, body, lambda: self._delete(filters))

    async def _delete(self, filters: list[AclBindingFilter]) -> dict[str, Any]:
        matched = [[b.to_wire() for b in sorted(self.image.acls) if f.matches(b)] for f in filters]
        try:
            await self.controller.delete_acls(filters)
        except KafkaLiteError as e:
            return {"results": [[int(e.code), str(e), []] for _ in filters]}
        return {"results": [[0, None, m] for m in matched]}

    # --- SCRAM credentials ----------------------------------------------------------------------

    def describe_scram(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        creds: dict[str, list[Any]] = {}
        for (user, mech), c in sorted(self.image.scram_credentials.items()):
            creds.setdefault(user, []).append([mech, c.iterations])
        users = body.get("users")
        # Kafka: no users (null or empty) describes every user
        names = sorted(creds) if not users else as_list(users, "users")
        results = []
        for u in names:
            if u in creds:
                results.append([u, 0, None, creds[u]])
            else:
                results.append([u, int(ErrorCode.RESOURCE_NOT_FOUND), f"user {u!r} has no SCRAM credential", []])
        return {"error_code": 0, "results": results}

    def alter_scram(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        deletions = as_list(body.get("deletions") or [], "deletions")
        upsertions = as_list(body.get("upsertions") or [], "upsertions")
        return self.channel.serve_or_forward(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body, lambda: self._alter_scram(deletions, upsertions)
        )

    async def _alter_scram(self, deletions: list[Any], upsertions: list[Any]) -> dict[str, Any]:
        results: dict[str, list[Any]] = {}
        dels: list[tuple[str, str]] = []
        ups: list[tuple[str, ScramCredential]] = []
        for row in deletions:
            if not isinstance(row, list) or len(row) != 2 or row[1] not in SCRAM_MECHANISMS:
                raise BadRequest("a deletion is [user, mechanism]")
            dels.append((str(row[0]), row[1]))
            results[str(row[0])] = [str(row[0]), 0, None]
        for row in upsertions:
            if not isinstance(row, list) or len(row) != 5:
                raise BadRequest("an upsertion is [user, mechanism, iterations, salt, salted_password]")
            user, mech, iterations, salt, salted = row
            user = str(user)
            if mech not in SCRAM_MECHANISMS:
                results[user] = [user, int(ErrorCode.INVALID_REQUEST), f"unknown mechanism {mech!r}"]
            elif not isinstance(iterations, int) or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
                msg = f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}"
                results[user] = [user, int(ErrorCode.INVALID_REQUEST), msg]
            elif not isinstance(salt, bytes) or not isinstance(salted, bytes) or not salt or not salted:
                results[user] = [user, int(ErrorCode.INVALID_REQUEST), "salt and salted_password must be bytes"]
            else:
                ups.append((user, credential_from_salted_password(mech, salt, salted, iterations)))
                results[user] = [user, 0, None]
        try:
            await self.controller.alter_scram(ups, dels)
        except KafkaLiteError as e:
            return {"results": [[u, int(e.code), str(e)] if r[1] == 0 else r for u, r in results.items()]}
        return {"results": list(results.values())}

    # --- client quotas ------------------------------------------------------------------------------

    def describe_quotas(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any]:
        """{"entity": [[type, name or nil]] or nil (all)} -> {"entries": [[entity, {key: value}]]}."""
        wanted = body.get("entity")
        want = None if wanted is None else tuple((t, n) for t, n in as_list(wanted, "entity"))
        entries = [
            [[list(e) for e in entity], values]
            for entity, values in sorted(self.image.client_quotas.items(), key=repr)
            if want is None or entity == want
        ]
        return {"error_code": 0, "entries": entries}

    def alter_quotas(self, body: dict[str, Any], ctx: ConnectionContext) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """{"entries": [[entity, {key: value or nil}]]}: set or remove an entity's quotas."""
        entries = as_list(body.get("entries"), "entries")
        return self.channel.serve_or_forward(ApiKey.ALTER_CLIENT_QUOTAS, body, lambda: self._alter_quotas(entries))

    async def _alter_quotas(self, entries: list[Any]) -> dict[str, Any]:
        results = []
        for entry in entries:
            if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], dict):
                raise BadRequest("a quota entry is [entity, {key: value or nil}]")
            raw_entity, changes = entry
            try:
                entity = [(str(t), None if n is None else str(n)) for t, n in as_list(raw_entity, "entity")]
                if not entity or any(t not in ("user", "client-id") for t, _ in entity):
                    raise KafkaLiteError("entity types are user and client-id", ErrorCode.INVALID_REQUEST)
                bad = [k for k in changes if k not in QUOTA_KEYS]
                if bad:
                    raise KafkaLiteError(
                        f"unknown quota {bad[0]!r} ({', '.join(QUOTA_KEYS)})", ErrorCode.INVALID_REQUEST
                    )
                values = {k: (None if v is None else float(v)) for k, v in changes.items()}
                if any(v is not None and v <= 0 for v in values.values()):
                    raise KafkaLiteError("a quota must be positive", ErrorCode.INVALID_REQUEST)
                await self.controller.alter_client_quota(entity, values)
                results.append([raw_entity, 0, None])
            except (KafkaLiteError, TypeError, ValueError) as e:
                code = int(e.code) if isinstance(e, KafkaLiteError) else int(ErrorCode.INVALID_REQUEST)
                results.append([raw_entity, code, str(e)])
        return {"results": results}
