"""SecurityApis: the ACL, SCRAM-credential and client-quota requests (Kafka's AclApis, Describe/Alter-
UserScramCredentials, Describe/AlterClientQuotas), typed end to end (net/schema/): the same handler for both
listeners, whose field ranges were checked when the request was decoded.

CreateAcls, DeleteAcls, AlterUserScramCredentials and AlterClientQuotas change the replicated metadata, so they run
on the active controller (forwarded there in an ENVELOPE, KIP-590) and need ALTER (ALTER_CONFIGS for quotas) on the
cluster; the describing ones are answered from this broker's image and need DESCRIBE (DESCRIBE_CONFIGS) on the
cluster (decided before these run, broker/server/authorization.py). The ACL ones answer SECURITY_DISABLED while
`authorizer` is off, as Kafka does.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any, Awaitable

from broker.network.server import ConnectionContext, error_body
from broker.quota.client_quota import QUOTA_KEYS
from broker.security.request_authorizer import RequestAuthorizer
from broker.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential
from net.acl import BINDING_FIELDS, FILTER_FIELDS, AclBinding, AclBindingFilter, as_fields
from net.errors import ErrorCode, KafkaLiteError
from net.protocol import ApiKey
from net.schema.alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntityData,
    AlterClientQuotasResponseEntryData,
)
from net.schema.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from net.schema.create_acls import AclCreationResult, CreateAclsRequest, CreateAclsResponse
from net.schema.delete_acls import DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsRequest, DeleteAclsResponse
from net.schema.describe_acls import AclDescription, DescribeAclsRequest, DescribeAclsResource, DescribeAclsResponse
from net.schema.describe_client_quotas import (
    ComponentData,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)
from net.schema.describe_user_scram_credentials import (
    CredentialInfo,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)

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


# Kafka's ScramMechanism codes.
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISMS_BY_CODE = {v: k for k, v in MECHANISM_CODES.items()}
# KIP-546's match types of a DescribeClientQuotas filter component.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# A handler's answer: the api's typed response, or a whole-request error body ({"error_code", "error_message"}).
Answer = Any


def acl_filter(f: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter (the same fields) as the filter it asks for; ValueError for
    a code that is no resource type, pattern type, operation or permission."""
    return AclBindingFilter.from_wire([getattr(f, name) for name in FILTER_FIELDS])


def quota_filter_matches(components: tuple[ComponentData, ...], strict: bool, entity: dict[str, str | None]) -> bool:
    """Whether a quota entity ({type: name, None for the default}) passes a DescribeClientQuotas filter: each
    component names a type the entity has, with that exact name, the default, or any name but the default;
    `strict` also excludes entities with other types."""
    for c in components:
        if c.entity_type not in entity:
            return False
        name = entity[c.entity_type]
        if (
            (c.match_type == MATCH_EXACT and name != c.match)
            or (c.match_type == MATCH_DEFAULT and name is not None)
            or (c.match_type == MATCH_SPECIFIED and name is None)
        ):
            return False
    return not strict or set(entity) == {c.entity_type for c in components}


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

    def create_acls(self, req: CreateAclsRequest, ctx: ConnectionContext) -> Answer | Awaitable[Answer]:
        if (off := self._acls_on()) is not None:
            return off
        return self.channel.serve_or_forward_typed(req, ctx, lambda: self._create(req))

    async def _create(self, req: CreateAclsRequest) -> CreateAclsResponse:
        results: list[AclCreationResult] = []
        valid: list[AclBinding] = []
        for c in req.creations:
            try:
                b = AclBinding.from_wire(
                    [c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
                     c.permission_type]
                )  # fmt: skip
                b.validate()
                valid.append(b)
                results.append(AclCreationResult())
            except ValueError as e:
                results.append(AclCreationResult(error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(e)))
        if valid:
            try:
                await self.controller.create_acls(valid)
            except KafkaLiteError as e:
                for r in results:
                    if not r.error_code:
                        r.error_code, r.error_message = int(e.code), str(e)
        return CreateAclsResponse(results=tuple(results))

    def describe_acls(self, req: DescribeAclsRequest, ctx: ConnectionContext) -> Answer:
        if (off := self._acls_on()) is not None:
            return off
        try:
            f = acl_filter(req)
        except ValueError as e:
            return error_body(ErrorCode.INVALID_REQUEST, f"bad ACL filter: {e}")
        by_resource: dict[tuple[int, str, int], list[AclDescription]] = {}
        for b in sorted(self.image.acls):
            if f.matches(b):
                acl = AclDescription(
                    principal=b.principal, host=b.host, operation=int(b.operation), permission_type=int(b.permission)
                )
                by_resource.setdefault((int(b.resource_type), b.resource_name, int(b.pattern_type)), []).append(acl)
        return DescribeAclsResponse(
            resources=tuple(
                DescribeAclsResource(resource_type=rt, resource_name=name, pattern_type=pt, acls=tuple(acls))
                for (rt, name, pt), acls in by_resource.items()
            )
        )

    def delete_acls(self, req: DeleteAclsRequest, ctx: ConnectionContext) -> Answer | Awaitable[Answer]:
        if (off := self._acls_on()) is not None:
            return off
        try:
            filters = [acl_filter(f) for f in req.filters]
        except ValueError as e:
            return error_body(ErrorCode.INVALID_REQUEST, f"bad ACL filter: {e}")
        return self.channel.serve_or_forward_typed(req, ctx, lambda: self._delete(filters))

    async def _delete(self, filters: list[AclBindingFilter]) -> DeleteAclsResponse:
        matched = [[b for b in sorted(self.image.acls) if f.matches(b)] for f in filters]
        try:
            await self.controller.delete_acls(filters)
        except KafkaLiteError as e:
            failed = DeleteAclsFilterResult(error_code=int(e.code), error_message=str(e))
            return DeleteAclsResponse(filter_results=tuple(failed for _ in filters))
        return DeleteAclsResponse(
            filter_results=tuple(
                DeleteAclsFilterResult(
                    matching_acls=tuple(DeleteAclsMatchingAcl(**as_fields(b, BINDING_FIELDS)) for b in bindings)
                )
                for bindings in matched
            )
        )

    # --- SCRAM credentials ----------------------------------------------------------------------

    def describe_scram(
        self, req: DescribeUserScramCredentialsRequest, ctx: ConnectionContext
    ) -> DescribeUserScramCredentialsResponse:
        creds: dict[str, list[CredentialInfo]] = {}
        for (user, mech), c in sorted(self.image.scram_credentials.items()):
            creds.setdefault(user, []).append(CredentialInfo(mechanism=MECHANISM_CODES[mech], iterations=c.iterations))
        # Kafka: no users (null or empty) describes every user
        names = [u.name for u in req.users] if req.users else sorted(creds)
        results = []
        for u in names:
            if u in creds:
                results.append(DescribeUserScramCredentialsResult(user=u, credential_infos=tuple(creds[u])))
            else:
                msg = f"user {u!r} has no SCRAM credential"
                code = int(ErrorCode.RESOURCE_NOT_FOUND)
                results.append(DescribeUserScramCredentialsResult(user=u, error_code=code, error_message=msg))
        return DescribeUserScramCredentialsResponse(results=tuple(results))

    def alter_scram(self, req: AlterUserScramCredentialsRequest, ctx: ConnectionContext) -> Awaitable[Answer]:
        return self.channel.serve_or_forward_typed(req, ctx, lambda: self._alter_scram(req))

    async def _alter_scram(self, req: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
        results: dict[str, AlterUserScramCredentialsResult] = {}
        dels: list[tuple[str, str]] = []
        ups: list[tuple[str, ScramCredential]] = []
        invalid = int(ErrorCode.INVALID_REQUEST)
        for d in req.deletions:
            mech = MECHANISMS_BY_CODE.get(d.mechanism)
            if mech is None:
                unknown = f"unknown SCRAM mechanism {d.mechanism}"
                results[d.name] = AlterUserScramCredentialsResult(
                    user=d.name, error_code=invalid, error_message=unknown
                )
            else:
                dels.append((d.name, mech))
                results[d.name] = AlterUserScramCredentialsResult(user=d.name)
        for u in req.upsertions:
            mech = MECHANISMS_BY_CODE.get(u.mechanism)
            msg: str | None = None
            if mech is None:
                msg = f"unknown SCRAM mechanism {u.mechanism}"
            elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
                msg = f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}"
            elif not u.salt or not u.salted_password:
                msg = "salt and salted_password must not be empty"
            if msg is not None or mech is None:
                results[u.name] = AlterUserScramCredentialsResult(user=u.name, error_code=invalid, error_message=msg)
            else:
                ups.append((u.name, credential_from_salted_password(mech, u.salt, u.salted_password, u.iterations)))
                results[u.name] = AlterUserScramCredentialsResult(user=u.name)
        try:
            await self.controller.alter_scram(ups, dels)
        except KafkaLiteError as e:
            for r in results.values():
                if not r.error_code:
                    r.error_code, r.error_message = int(e.code), str(e)
        return AlterUserScramCredentialsResponse(results=tuple(results.values()))

    # --- client quotas ------------------------------------------------------------------------------

    def describe_quotas(self, req: DescribeClientQuotasRequest, ctx: ConnectionContext) -> DescribeClientQuotasResponse:
        """The quotas of every entity `components` matches (KIP-546's filter; none: every entity)."""
        entries = [
            EntryData(
                entity=tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity),
                values=tuple(ValueData(key=k, value=float(v)) for k, v in sorted(values.items())),
            )
            for entity, values in sorted(self.image.client_quotas.items(), key=repr)
            if quota_filter_matches(req.components, req.strict, dict(entity))
        ]
        return DescribeClientQuotasResponse(entries=tuple(entries))

    def alter_quotas(self, req: AlterClientQuotasRequest, ctx: ConnectionContext) -> Answer | Awaitable[Answer]:
        """Set (`value`) or remove (`remove`) each entry's entity's quotas."""
        if req.validate_only:
            return error_body(ErrorCode.INVALID_REQUEST, "validate_only is not supported for client quotas")
        return self.channel.serve_or_forward_typed(req, ctx, lambda: self._alter_quotas(req))

    async def _alter_quotas(self, req: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
        results = []
        for entry in req.entries:
            entity = [(e.entity_type, e.entity_name) for e in entry.entity]
            row = AlterClientQuotasResponseEntryData(
                entity=tuple(AlterClientQuotasResponseEntityData(entity_type=t, entity_name=n) for t, n in entity)
            )
            try:
                if not entity or any(t not in ("user", "client-id") for t, _ in entity):
                    raise KafkaLiteError("entity types are user and client-id", ErrorCode.INVALID_REQUEST)
                bad = [op.key for op in entry.ops if op.key not in QUOTA_KEYS]
                if bad:
                    raise KafkaLiteError(
                        f"unknown quota {bad[0]!r} ({', '.join(QUOTA_KEYS)})", ErrorCode.INVALID_REQUEST
                    )
                values = {op.key: None if op.remove else op.value for op in entry.ops}
                if any(v is not None and v <= 0 for v in values.values()):
                    raise KafkaLiteError("a quota must be positive", ErrorCode.INVALID_REQUEST)
                await self.controller.alter_client_quota(entity, values)
            except KafkaLiteError as e:
                row.error_code, row.error_message = int(e.code), str(e)
            results.append(row)
        return AlterClientQuotasResponse(entries=tuple(results))
