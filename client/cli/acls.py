"""kl-acls: Kafka's kafka-acls.sh, same flags and output (--add, --remove, --list; --producer/--consumer)."""

from __future__ import annotations

from pathlib import Path

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import AdminConfig
from client.sync import Admin
from net.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from net.version import version_option

# kafka-acls.sh's operation names (Read, Write, ..., ClusterAction, IdempotentWrite) -> ours.
OPERATIONS = {
    "".join(w.capitalize() for w in op.name.split("_")).lower(): op
    for op in AclOperation
    if op not in (AclOperation.UNKNOWN, AclOperation.ANY)
}


def _op(name: str) -> AclOperation:
    op = OPERATIONS.get(name.replace("-", "").replace("_", "").lower())
    if op is None:
        raise click.UsageError(f"unknown --operation {name!r}: one of {', '.join(sorted(OPERATIONS))}")
    return op


def _kafka_name(e: AclOperation | AclPermission | ResourceType | PatternType) -> str:
    return e.name


def pattern_text(rt: ResourceType, name: str, pt: PatternType) -> str:
    return f"ResourcePattern(resourceType={_kafka_name(rt)}, name={name}, patternType={_kafka_name(pt)})"


def entry_text(b: AclBinding) -> str:
    return (
        f"(principal={b.principal}, host={b.host}, operation={_kafka_name(b.operation)}, "
        f"permissionType={_kafka_name(b.permission)})"
    )


def print_grouped(header: str, bindings: list[AclBinding]) -> None:
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for b in sorted(bindings):
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    for (rt, name, pt), rows in by_resource.items():
        click.echo(f"{header} `{pattern_text(rt, name, pt)}`: ")
        for b in rows:
            click.echo(f" \t{entry_text(b)} ")
        click.echo("")


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option("--add", is_flag=True, help="Add ACLs.")
@click.option("--remove", is_flag=True, help="Remove ACLs.")
@click.option("--list", "list_", is_flag=True, help="List ACLs (all, or of the resources given).")
@click.option("--allow-principal", multiple=True, metavar="User:NAME")
@click.option("--deny-principal", multiple=True, metavar="User:NAME")
@click.option("--allow-host", multiple=True, metavar="HOST", help="Default: * (any host).")
@click.option("--deny-host", multiple=True, metavar="HOST", help="Default: * (any host).")
@click.option("--principal", default=None, metavar="User:NAME", help="With --list: only this principal's ACLs.")
@click.option("--operation", "operations", multiple=True, help="Read, Write, Create, Delete, Alter, Describe, ...")
@click.option("--topic", "topics", multiple=True)
@click.option("--group", "groups", multiple=True)
@click.option("--transactional-id", "transactional_ids", multiple=True)
@click.option("--cluster", is_flag=True, help="The cluster resource.")
@click.option(
    "--resource-pattern-type",
    type=click.Choice(["literal", "prefixed", "any", "match"], case_sensitive=False),
    default=None,
    help="literal (default for --add) or prefixed; --list/--remove also any and match.",
)
@click.option("--producer", is_flag=True, help="Write, Describe and Create on the topics.")
@click.option("--consumer", is_flag=True, help="Read and Describe on the topics, Read on the groups.")
@click.option("--idempotent", is_flag=True, help="With --producer: IdempotentWrite on the cluster.")
@click.option("--force", is_flag=True, help="Remove without asking (always: there is no prompt).")
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    add: bool,
    remove: bool,
    list_: bool,
    allow_principal: tuple[str, ...],
    deny_principal: tuple[str, ...],
    allow_host: tuple[str, ...],
    deny_host: tuple[str, ...],
    principal: str | None,
    operations: tuple[str, ...],
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
    resource_pattern_type: str | None,
    producer: bool,
    consumer: bool,
    idempotent: bool,
    force: bool,
) -> None:
    """Manage ACLs, as kafka-acls.sh does."""
    if sum((add, remove, list_)) != 1:
        raise click.UsageError("give exactly one of --add, --remove, --list")
    resources = [(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
    resources += [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids]
    if cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    default_pattern = "literal" if add else ("any" if list_ else "literal")
    pattern = PatternType[(resource_pattern_type or default_pattern).upper()]
    kwargs = client_kwargs(AdminConfig, command_config)
    with Admin(bootstrap_server, **kwargs) as admin:
        if list_:
            filters = [AclBindingFilter(rt, name, pattern, principal) for rt, name in resources] or [
                AclBindingFilter(principal=principal)
            ]
            found = sorted({b for f in filters for b in admin.describe_acls(f)})
            print_grouped("Current ACLs for resource", found)
            return
        wanted = _bindings(
            resources,
            pattern,
            allow_principal,
            deny_principal,
            allow_host or ("*",),
            deny_host or ("*",),
            operations,
            producer,
            consumer,
            idempotent,
        )
        if add:
            if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
                raise click.UsageError("--add takes --resource-pattern-type literal or prefixed")
            for b in wanted:
                b.validate()
            print_grouped("Adding ACLs for resource", wanted)
            admin.create_acls(wanted)
        else:
            filters = [
                AclBindingFilter(
                    b.resource_type, b.resource_name, pattern, b.principal, b.host, b.operation, b.permission
                )
                for b in wanted
            ]
            if not filters:  # --remove with resources only: every ACL of them
                filters = [AclBindingFilter(rt, name, pattern) for rt, name in resources]
            removed = admin.delete_acls(filters)
            print_grouped("Removing ACLs for resource", removed)
        shown = sorted({(b.resource_type, b.resource_name) for b in wanted} or set(resources))
        current = sorted(
            {b for rt, name in shown for b in admin.describe_acls(AclBindingFilter(rt, name, PatternType.ANY))}
        )
        print_grouped("Current ACLs for resource", current)


def _bindings(
    resources: list[tuple[ResourceType, str]],
    pattern: PatternType,
    allow_principals: tuple[str, ...],
    deny_principals: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: tuple[str, ...],
    producer: bool,
    consumer: bool,
    idempotent: bool,
) -> list[AclBinding]:
    """The bindings the flags mean, as kafka-acls.sh builds them."""
    per_resource: list[tuple[ResourceType, str, list[AclOperation]]] = []
    ops = [_op(o) for o in operations]
    if producer or consumer:
        for rt, name in resources:
            if rt == ResourceType.TOPIC:
                if producer:
                    per_resource.append((rt, name, [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]))
                if consumer:
                    per_resource.append((rt, name, [AclOperation.READ, AclOperation.DESCRIBE]))
            elif rt == ResourceType.GROUP and consumer:
                per_resource.append((rt, name, [AclOperation.READ]))
        if producer and idempotent:
            per_resource.append((ResourceType.CLUSTER, CLUSTER_NAME, [AclOperation.IDEMPOTENT_WRITE]))
    elif ops:
        per_resource = [(rt, name, ops) for rt, name in resources]
    out = []
    for rt, name, rops in per_resource:
        p = PatternType.LITERAL if rt == ResourceType.CLUSTER else pattern
        for op in rops:
            out += [
                AclBinding(rt, name, p, pr, h, op, AclPermission.ALLOW) for pr in allow_principals for h in allow_hosts
            ]
            out += [
                AclBinding(rt, name, p, pr, h, op, AclPermission.DENY) for pr in deny_principals for h in deny_hosts
            ]
    return out


if __name__ == "__main__":
    main()
