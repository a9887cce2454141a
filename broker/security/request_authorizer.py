"""RequestAuthorizer: one question (may this principal do this operation on this resource?) asked of the ACL
authorizer, and Kafka's compound rules. Which question each request asks is broker/server/authorization.py's table
(Kafka's KafkaApis authorization, api by api). With `authorizer` unset every request is allowed, as in Kafka.

The operations are Kafka's: Produce needs WRITE on the topic, Fetch READ (a follower's fetch CLUSTER_ACTION
on the cluster), ListOffsets and Metadata DESCRIBE (unauthorized topics are hidden from a Metadata request
for all topics), CreateTopics CREATE on the cluster or the topic, DeleteTopics DELETE, CreatePartitions
ALTER, DescribeConfigs DESCRIBE_CONFIGS, AlterConfigs ALTER_CONFIGS, InitProducerId IDEMPOTENT_WRITE on
the cluster or WRITE on any topic (KIP-679); the group requests READ on the group (OffsetCommit also READ
on the topic), FindCoordinator and DescribeGroups DESCRIBE, DeleteGroups DELETE; the ACL and credential
apis ALTER / DESCRIBE on the cluster, ElectLeaders ALTER on the cluster; everything brokers send each other
(the election, the metadata log, AlterPartition, BrokerRegistration, forwarded requests) CLUSTER_ACTION.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from broker.security.acl import AclAuthorizer
from net.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from net.errors import ErrorCode

log = logging.getLogger("kafkalite.security")

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
# Kafka's AclEntry.supportedOperations: what `authorized_operations` can name, per resource type.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
}


class ConnectionContext(Protocol):
    """Who asks (broker/network/server.py's ConnectionContext)."""

    @property
    def principal(self) -> str: ...

    @property
    def host(self) -> str: ...


class MetadataView(Protocol):
    """What is authorized against (broker/metadata/image.py's MetadataImage)."""

    acls: set[AclBinding]
    topics: dict[str, Any]


class RequestAuthorizer:
    def __init__(self, authorizer: AclAuthorizer | None, image: MetadataView) -> None:
        self.authorizer = authorizer  # None: authorization is off
        self.image = image

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(self, ctx: ConnectionContext, op: AclOperation, rt: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        ok = self.authorizer.authorize(self.image.acls, ctx.principal, ctx.host, op, rt, name)
        if not ok:
            log.info("denied %s %s on %s:%s to %s from %s", op.name, rt.name, rt.name, name, ctx.principal, ctx.host)
        return ok

    def authorized_operations(self, ctx: ConnectionContext, rt: ResourceType, name: str) -> int:
        """Kafka's `*_authorized_operations`: a bit (1 << operation code) for each operation of the resource type
        this principal may do (all of them without an authorizer). Asked quietly: a describe is not a denial."""
        ops = SUPPORTED_OPERATIONS[rt]
        if self.authorizer is not None:
            acls, authorize = self.image.acls, self.authorizer.authorize
            ops = tuple(op for op in ops if authorize(acls, ctx.principal, ctx.host, op, rt, name))
        return sum(1 << int(op) for op in ops)

    def cluster(self, ctx: ConnectionContext, op: AclOperation) -> bool:
        return self.allowed(ctx, op, CLUSTER, CLUSTER_NAME)

    def topic(self, ctx: ConnectionContext, op: AclOperation, name: Any) -> bool:
        return isinstance(name, str) and self.allowed(ctx, op, TOPIC, name)

    def group(self, ctx: ConnectionContext, op: AclOperation, name: Any) -> bool:
        return isinstance(name, str) and self.allowed(ctx, op, GROUP, name)

    def create_topic(self, ctx: ConnectionContext, name: Any) -> bool:
        """Kafka: CREATE on the cluster, or on the topic."""
        return self.cluster(ctx, Op.CREATE) or self.topic(ctx, Op.CREATE, name)

    def idempotent_write(self, ctx: ConnectionContext) -> bool:
        """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic."""
        if self.authorizer is None or self.cluster(ctx, Op.IDEMPOTENT_WRITE):
            return True
        return any(
            self.authorizer.authorize(self.image.acls, ctx.principal, ctx.host, Op.WRITE, TOPIC, t)
            for t in self.image.topics
        )


def denied_message(op: AclOperation, what: str, ctx: ConnectionContext) -> str:
    return f"{ctx.principal} is not authorized to {op.name} {what}"
