"""ACLs with Kafka's model and its authorizer's rules (Kafka's AclAuthorizer / StandardAuthorizer).

A binding allows or denies one principal (`User:alice`, `User:*`), from one host (`*` for any), one
operation on resources of one type named literally (`orders`, `*` for all) or by prefix. The rules:

- super users (`super.users`) may do everything;
- a matching DENY wins over any ALLOW;
- a resource no ACL names at all follows `allow.everyone.if.no.acl.found`;
- an ALLOW for READ, WRITE, DELETE or ALTER implies DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
  ALL is every operation (for DENY too).

The model (bindings, filters, Kafka's numeric codes) is net/acl.py, shared with the clients. The
bindings live in the replicated cluster metadata (`acl` / `remove_acl` records), so every broker decides
the same way and the ACLs survive restarts and controller failover. Pure: no I/O.
"""

from __future__ import annotations

from typing import Iterable

from net.acl import WILDCARD, AclBinding, AclOperation, AclPermission, ResourceType

# What an ALLOW of the key also allows (Kafka's implication rules).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


def parse_super_users(spec: str) -> frozenset[str]:
    """Kafka's super.users: `User:admin;User:broker` (semicolon separated)."""
    return frozenset(p.strip() for p in spec.split(";") if p.strip())


class AclAuthorizer:
    """Decides one (principal, host, operation, resource) against the bindings it is given."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    def authorize(
        self,
        acls: Iterable[AclBinding],
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        relevant = [b for b in acls if b.names(resource_type, resource_name)]
        if not relevant:
            return self.allow_everyone_if_no_acl_found
        mine = [b for b in relevant if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)]
        if any(b.permission == AclPermission.DENY and b.operation in (operation, AclOperation.ALL) for b in mine):
            return False
        allowed_by = _IMPLIED_BY.get(operation, frozenset({operation})) | {AclOperation.ALL}
        return any(b.permission == AclPermission.ALLOW and b.operation in allowed_by for b in mine)
