"""kl-topics: Kafka's kafka-topics.sh, same flags and output."""

from __future__ import annotations

import click

from client.admin import NewTopic
from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors, parse_kv
from client.config import AdminConfig
from client.sync import Admin
from net.version import version_option


def _ids(xs: list[int]) -> str:
    return ",".join(str(x) for x in xs)


def format_description(d) -> list[str]:  # type: ignore[no-untyped-def]
    overrides = ",".join(f"{k}={v}" for k, (v, is_default) in sorted(d.configs.items()) if not is_default)
    lines = [
        f"Topic: {d.name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
        f"ReplicationFactor: {d.replication_factor}\tConfigs: {overrides}"
    ]
    for p in d.partitions:
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
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE")
@click.option("--delete-config", "delete_configs", multiple=True, metavar="KEY")
@click.option("--if-not-exists", is_flag=True)
@click.option("--if-exists", is_flag=True)
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics (__consumer_offsets).")
@one_line_errors
def main(
    bootstrap_server,
    command_config,
    create,
    describe,
    alter,
    delete,
    list_,
    topic,
    partitions,
    replication_factor,
    configs,
    delete_configs,
    if_not_exists,
    if_exists,
    exclude_internal,
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
    if (create or alter or delete) and not topic:
        raise click.UsageError(f"{actions[0]} requires --topic")
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        if list_:
            # As kafka-topics.sh: internal topics are listed and described unless --exclude-internal.
            for name in admin.list_topics(include_internal=not exclude_internal):
                click.echo(name)
        elif create:
            from net.errors import TopicAlreadyExistsError

            try:
                admin.create_topics(
                    [NewTopic(topic, partitions or -1, replication_factor or -1, parse_kv(configs, "--config"))]
                )
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
                admin.create_partitions(topic, partitions)  # as kafka-topics.sh --alter --partitions
            if changes:
                admin.alter_configs(topic, changes)
                click.echo(f"Completed updating config for topic {topic}.")
        else:
            names = [topic] if topic else admin.list_topics(include_internal=not exclude_internal)
            for d in admin.describe_topics(names):
                for line in format_description(d):
                    click.echo(line)


if __name__ == "__main__":
    main()
