"""Kafka's ACL model, shared by clients and brokers: resource, pattern, operation and permission types
(Kafka's numeric codes, as CreateAcls/DescribeAcls/DeleteAcls carry them), `AclBinding` and
`AclBindingFilter`. The broker's authorizer (broker/security/acl.py) decides with them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # Kafka's name of the one Cluster resource
WILDCARD = "*"
ANONYMOUS = "User:ANONYMOUS"


# A binding's (or filter's) seven fields in order, as Kafka's ACL messages name them: a binding as DeleteAcls'
# matching_acls name it, a creation (CreateAcls), a filter (DescribeAcls, DeleteAcls' filters).
BINDING_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
CREATION_FIELDS = ("resource_type", "resource_name", "resource_pattern_type", *BINDING_FIELDS[3:])
FILTER_FIELDS = (
    "resource_type_filter",
    "resource_name_filter",
    "pattern_type_filter",
    "principal_filter",
    "host_filter",
    "operation",
    "permission_type",
)


def as_fields(acl: "AclBinding | AclBindingFilter", names: tuple[str, ...]) -> dict[str, Any]:
    """A binding or filter as the keyword arguments of an ACL message (`names`: one of the tuples above)."""
    return dict(zip(names, _row(acl)))


def _row(acl: "AclBinding | AclBindingFilter") -> list[Any]:
    """A binding or filter as its native row: the seven fields in order, the enums as Kafka's codes."""
    return [int(v) if isinstance(v, IntEnum) else v for v in (getattr(acl, f.name) for f in fields(acl))]


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def to_wire(self) -> list[Any]:
        return _row(self)

    @classmethod
    def from_wire(cls, row: list[Any]) -> "AclBinding":
        rt, name, pt, principal, host, op, perm = row
        return cls(
            ResourceType(rt),
            str(name),
            PatternType(pt),
            str(principal),
            str(host),
            AclOperation(op),
            AclPermission(perm),
        )

    def validate(self) -> None:
        """A binding that can be stored: concrete types and a principal of the form Type:name."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError("a binding needs a concrete resource type")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError("a binding's pattern type is LITERAL or PREFIXED")
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError("a binding needs a concrete operation")
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            raise ValueError("a binding's permission is ALLOW or DENY")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {self.principal!r} is not of the form User:name")
        if not self.resource_name:
            raise ValueError("a binding needs a resource name")
        if self.pattern_type == PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise ValueError("a prefixed pattern cannot be the wildcard '*'")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise ValueError(f"the cluster resource is named {CLUSTER_NAME!r}")

    def names(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern covers the resource."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


@dataclass(frozen=True)
class AclBindingFilter:
    """DescribeAcls / DeleteAcls: None or the ANY values match everything; MATCH matches what applies to a
    resource of that name (literal, wildcard and prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def to_wire(self) -> list[Any]:
        """The native DescribeAcls / DeleteAcls filter row."""
        return _row(self)

    @classmethod
    def from_wire(cls, row: list[Any]) -> "AclBindingFilter":
        """A filter row (Kafka's codes; a name, principal or host None matches any); ValueError for a code that is
        no resource type, pattern type, operation or permission."""
        rt, name, pt, principal, host, op, perm = row
        return cls(ResourceType(rt), name, PatternType(pt), principal, host, AclOperation(op), AclPermission(perm))

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not b.names(b.resource_type, self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and self.pattern_type != b.pattern_type:
                return False
            if self.resource_name is not None and self.resource_name != b.resource_name:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation not in (AclOperation.ANY, b.operation):
            return False
        return self.permission in (AclPermission.ANY, b.permission)
