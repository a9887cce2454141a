"""kl-topics: Kafka's kafka-topics.sh, same flags and output."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from client.admin import NewTopic
from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors, parse_kv
from client.config import AdminConfig
from client.sync import Admin
from net.version import version_option


def parse_replica_assignment(spec: str) -> list[list[int]]:
    """kafka-topics.sh's --replica-assignment: `1:2,2:3` is partition 0 on brokers 1 and 2, partition 1 on 2 and 3."""
    try:
        lists = [[int(b) for b in part.split(":")] for part in spec.split(",")]
    except ValueError:
        raise click.BadParameter(
            f"{spec!r}: broker ids joined by ':', partitions by ','", param_hint="--replica-assignment"
        ) from None
    return lists


def _ids(xs: list[int]) -> str:
    return ",".join(str(x) for x in xs)


def _min_isr(d) -> int:  # type: ignore[no-untyped-def]
    value, _default = d.configs.get("min.insync.replicas", ("1", True))
    return int(value)


# kafka-topics.sh --describe's partition filters: which partitions each one reports.
PARTITION_FILTERS: dict[str, Callable[[Any, int], bool]] = {
    "under_replicated": lambda p, _min_isr: len(p.isr) < len(p.replicas),
    "unavailable": lambda p, _min_isr: p.leader < 0,
    "under_min_isr": lambda p, min_isr: p.leader < 0 or len(p.isr) < min_isr,  # Kafka counts leaderless ones
    "at_min_isr": lambda p, min_isr: len(p.isr) == min_isr,
}


def format_description(d, only: Callable[[Any, int], bool] | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    """Kafka's describe lines; with a partition filter, only the matching partitions' lines and no topic line
    (as kafka-topics.sh prints --under-replicated-partitions and the other reports)."""
    overrides = ",".join(f"{k}={v}" for k, (v, is_default) in sorted(d.configs.items()) if not is_default)
    lines = []
    if only is None:
        lines.append(
            f"Topic: {d.name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
            f"ReplicationFactor: {d.replication_factor}\tConfigs: {overrides}"
        )
    min_isr = _min_isr(d)
    for p in d.partitions:
        if only is not None and not only(p, min_isr):
            continue
        leader = p.leader if p.leader >= 0 else "none"
        lines.append(
            f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
        )
    return lines


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option("--create", is_flag=True, help="Create a topic.")
@click.option("--describe", is_flag=True, help="Describe topics (all, or --topic).")
@click.option(
    "--alter", is_flag=True, help="Change a topic's configs (--config k=v, --delete-config k) or --partitions (more)."
)
@click.option("--delete", is_flag=True, help="Delete a topic.")
@click.option("--list", "list_", is_flag=True, help="List topics.")
@click.option("--topic", default=None)
@click.option("--partitions", type=int, default=None)
@click.option("--replication-factor", type=int, default=None)
@click.option(
    "--replica-assignment",
    default=None,
    metavar="B:B,B:B,...",
    help="With --create or --alter: each partition's replicas (broker ids joined by ':', partitions by ','; the "
    "first leads), as kafka-topics.sh takes them; with --alter, the existing partitions' lists are skipped.",
)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE")
@click.option("--delete-config", "delete_configs", multiple=True, metavar="KEY")
@click.option("--if-not-exists", is_flag=True)
@click.option("--if-exists", is_flag=True)
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics (__consumer_offsets).")
@click.option(
    "--under-replicated-partitions",
    "under_replicated",
    is_flag=True,
    help="With --describe: only partitions with fewer in-sync replicas than replicas.",
)
@click.option(
    "--unavailable-partitions", "unavailable", is_flag=True, help="With --describe: partitions with no leader."
)
@click.option(
    "--under-min-isr-partitions",
    "under_min_isr",
    is_flag=True,
    help="With --describe: partitions whose ISR is smaller than min.insync.replicas.",
)
@click.option(
    "--at-min-isr-partitions",
    "at_min_isr",
    is_flag=True,
    help="With --describe: partitions whose ISR is exactly min.insync.replicas.",
)
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    create: bool,
    describe: bool,
    alter: bool,
    delete: bool,
    list_: bool,
    topic: str | None,
    partitions: int | None,
    replication_factor: int | None,
    replica_assignment: str | None,
    configs: tuple[str, ...],
    delete_configs: tuple[str, ...],
    if_not_exists: bool,
    if_exists: bool,
    exclude_internal: bool,
    under_replicated: bool,
    unavailable: bool,
    under_min_isr: bool,
    at_min_isr: bool,
) -> None:
    """Create, delete, describe, alter or list topics."""
    actions = [
        a
        for a, on in (
            ("--create", create),
            ("--describe", describe),
            ("--alter", alter),
            ("--delete", delete),
            ("--list", list_),
        )
        if on
    ]
    if len(actions) != 1:
        raise click.UsageError("exactly one of --create, --describe, --alter, --delete, --list is required")
    reports = [
        name
        for name, on in (
            ("under_replicated", under_replicated),
            ("unavailable", unavailable),
            ("under_min_isr", under_min_isr),
            ("at_min_isr", at_min_isr),
        )
        if on
    ]
    if reports and not describe:
        raise click.UsageError("the partition reports (--under-replicated-partitions, ...) go with --describe")
    if len(reports) > 1:
        raise click.UsageError("give at most one of the partition reports (--under-replicated-partitions, ...)")
    if (create or alter or delete) and not topic:
        raise click.UsageError(f"{actions[0]} requires --topic")
    assignment = parse_replica_assignment(replica_assignment) if replica_assignment is not None else None
    if assignment is not None and not (create or alter):
        raise click.UsageError("--replica-assignment goes with --create or --alter")
    if assignment is not None and create and (partitions is not None or replication_factor is not None):
        raise click.UsageError("--replica-assignment replaces --partitions and --replication-factor")
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        if list_:
            # As kafka-topics.sh: internal topics are listed and described unless --exclude-internal.
            for name in admin.list_topics(include_internal=not exclude_internal):
                click.echo(name)
        elif create:
            from net.errors import TopicAlreadyExistsError

            assert topic is not None  # refused above without --topic

            try:
                new = NewTopic(topic, partitions or -1, replication_factor or -1, parse_kv(configs, "--config"))
                if assignment is not None:
                    new.replica_assignments = dict(enumerate(assignment))
                admin.create_topics([new])
            except TopicAlreadyExistsError:
                if if_not_exists:
                    return
                raise
            click.echo(f"Created topic {topic}.")
        elif delete:
            from net.errors import UnknownTopicOrPartitionError

            try:
                admin.delete_topics([topic])
            except UnknownTopicOrPartitionError:
                if if_exists:
                    return
                raise
            click.echo(f"Deleted topic {topic}.")
        elif alter:
            changes: dict[str, str | None] = dict(parse_kv(configs, "--config"))
            changes.update({k: None for k in delete_configs})
            if partitions is None and not changes:
                raise click.UsageError("--alter needs --partitions N, --config k=v or --delete-config k")
            if partitions is not None:
                # As kafka-topics.sh --alter --partitions: an assignment lists every partition; the new ones count.
                new_lists = None
                if assignment is not None:
                    new_lists = assignment[len(admin.describe_topics([topic])[0].partitions) :]
                admin.create_partitions(topic, partitions, assignments=new_lists)
            if changes:
                admin.alter_configs(topic, changes)
                click.echo(f"Completed updating config for topic {topic}.")
        else:
            names = [topic] if topic else admin.list_topics(include_internal=not exclude_internal)
            only = PARTITION_FILTERS[reports[0]] if reports else None
            for d in admin.describe_topics(names):
                for line in format_description(d, only):
                    click.echo(line)


if __name__ == "__main__":
    main()
