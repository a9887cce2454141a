"""kl-configs: Kafka's kafka-configs.sh for users (SCRAM credentials, quotas), clients (quotas), topics and brokers
(dynamic configs: the replication throttle rates), same flags and output.

    kl-configs --bootstrap-server B --command-config admin.properties --alter --entity-type users \\
        --entity-name alice --add-config 'SCRAM-SHA-256=[password=alice-secret]'
"""

from __future__ import annotations

from pathlib import Path

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import AdminConfig
from client.sync import Admin
from net.security import SCRAM_MECHANISMS
from net.version import version_option

DEFAULT_ITERATIONS = 4096


def split_configs(spec: str) -> list[str]:
    """kafka-configs.sh's --add-config: comma separated, commas inside [...] belong to the value."""
    items, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    items.append(cur)
    return [i.strip() for i in items if i.strip()]


def _scram_value(mech: str, value: str) -> tuple[str, int]:
    """`[password=...,iterations=...]` or `password` -> (password, iterations)."""
    if not (value.startswith("[") and value.endswith("]")):
        return value, DEFAULT_ITERATIONS
    fields = dict(f.split("=", 1) for f in value[1:-1].split(",") if "=" in f)
    if "password" not in fields:
        raise click.UsageError(f"{mech}=[...] needs password=...")
    try:
        return fields["password"], int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise click.UsageError(f"iterations of {mech} is not a number") from None


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option("--alter", is_flag=True, help="Add or delete configs of the entity.")
@click.option("--describe", is_flag=True, help="Describe the entity's configs.")
@click.option(
    "--entity-type",
    type=click.Choice(["users", "clients", "topics", "brokers", "broker-loggers", "groups"]),
    required=True,
)
@click.option("--entity-name", default=None)
@click.option(
    "--entity-default",
    is_flag=True,
    help="users/clients: the default entity (<default>); brokers: the cluster default.",
)
@click.option("--add-config", "add_config", default=None, metavar="K=V,K2=[a=b,c=d]")
@click.option("--delete-config", "delete_config", default=None, metavar="K,K2")
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    alter: bool,
    describe: bool,
    entity_type: str,
    entity_name: str | None,
    entity_default: bool,
    add_config: str | None,
    delete_config: str | None,
) -> None:
    """Describe or change users' SCRAM credentials, users' and clients' quotas, topics' configs, brokers' dynamic
    configs, broker loggers' levels and groups' configs, as kafka-configs.sh does."""
    if alter == describe:
        raise click.UsageError("give exactly one of --alter, --describe")
    if alter and not entity_name and not entity_default:
        raise click.UsageError("--alter needs --entity-name (or --entity-default for users, clients and brokers)")
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        if entity_type == "topics":
            _topics(admin, alter, entity_name, add_config, delete_config)
            return
        if entity_type == "groups":
            if entity_default:
                raise click.UsageError("--entity-default does not apply to groups")
            _groups(admin, alter, entity_name, add_config, delete_config)
            return
        if entity_type == "broker-loggers":
            if entity_default:
                raise click.UsageError("--entity-default does not apply to broker-loggers")
            for broker in [entity_name] if entity_name else [str(b) for b in admin.broker_ids()]:
                _broker_loggers(admin, alter, broker, add_config, delete_config)
            return
        if entity_type == "brokers":
            if not alter and not entity_name and not entity_default:  # every broker, then the cluster default
                for broker in admin.broker_ids():
                    _brokers(admin, False, str(broker), None, None)
            _brokers(admin, alter, None if entity_default or not entity_name else entity_name, add_config,
                     delete_config)  # fmt: skip
            return
        adds = split_configs(add_config or "")
        dels = split_configs(delete_config or "")
        scram = [a for a in adds if a.partition("=")[0] in SCRAM_MECHANISMS] + [
            d for d in dels if d in SCRAM_MECHANISMS
        ]
        if entity_type == "users" and (scram or not alter):
            _users(admin, alter, entity_name, ",".join(a for a in adds if a.partition("=")[0] in SCRAM_MECHANISMS),
                   ",".join(d for d in dels if d in SCRAM_MECHANISMS))  # fmt: skip
        quota_adds = [a for a in adds if a.partition("=")[0] not in SCRAM_MECHANISMS]
        quota_dels = [d for d in dels if d not in SCRAM_MECHANISMS]
        if alter and (quota_adds or quota_dels):
            _quotas(admin, entity_type, None if entity_default else entity_name, quota_adds, quota_dels)
        elif not alter:
            _describe_quotas(admin, entity_type, None if entity_default else entity_name)


def _users(admin: Admin, alter: bool, name: str | None, add: str | None, delete: str | None) -> None:
    if not alter:
        creds = admin.describe_user_scram_credentials([name] if name else None)
        for user, mechs in sorted(creds.items()):
            text = ",".join(f"{m}=iterations={i}" for m, i in mechs)
            click.echo(f"SCRAM credential configs for user-principal '{user}' are {text}")
        return
    if name is None:  # --entity-default: a credential belongs to one user (it was stored for a user "None")
        raise click.UsageError("SCRAM credentials need --entity-name; --entity-default does not take them")
    ups: list[tuple[str, str, str, int]] = []
    dels: list[tuple[str, str]] = []
    for item in split_configs(add or ""):
        key, sep, value = item.partition("=")
        if key not in SCRAM_MECHANISMS or not sep:
            raise click.UsageError(f"--add-config {item!r}: users take {', '.join(SCRAM_MECHANISMS)}=[password=...]")
        password, iterations = _scram_value(key, value)
        ups.append((name, key, password, iterations))
    for key in split_configs(delete or ""):
        if key not in SCRAM_MECHANISMS:
            raise click.UsageError(f"--delete-config {key!r}: users take {', '.join(SCRAM_MECHANISMS)}")
        dels.append((name, key))
    if not ups and not dels:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    admin.alter_user_scram_credentials(ups, dels)
    click.echo(f"Completed updating config for user {name}.")


QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")


def _quotas(admin: Admin, entity_type: str, name: str | None, adds: list[str], dels: list[str]) -> None:
    kind = "user" if entity_type == "users" else "client-id"
    changes: dict[str, float | None] = {}
    for item in adds:
        k, sep, v = item.partition("=")
        if not sep or k not in QUOTA_KEYS:
            raise click.UsageError(f"--add-config {item!r}: {entity_type} take {', '.join(QUOTA_KEYS)}")
        try:
            changes[k] = float(v)
        except ValueError:
            raise click.UsageError(f"--add-config {item!r}: not a number") from None
    for k in dels:
        if k not in QUOTA_KEYS:
            raise click.UsageError(f"--delete-config {k!r}: {entity_type} take {', '.join(QUOTA_KEYS)}")
        changes[k] = None
    admin.alter_client_quotas([(kind, name)], changes)
    shown = "<default>" if name is None else name
    click.echo(f"Completed updating config for {'user' if kind == 'user' else 'client'} {shown}.")


def _describe_quotas(admin: Admin, entity_type: str, name: str | None) -> None:
    kind = "user" if entity_type == "users" else "client-id"
    for entity, values in sorted(admin.describe_client_quotas().items(), key=repr):
        if len(entity) != 1 or entity[0][0] != kind or (name is not None and entity[0][1] != name):
            continue
        who = "<default>" if entity[0][1] is None else entity[0][1]
        text = ", ".join(f"{k}={v:g}" for k, v in sorted(values.items()))
        click.echo(f"Quota configs for {'user-principal' if kind == 'user' else 'client-id'} '{who}' are {text}")


def _changes(add: str | None, delete: str | None) -> dict[str, str | None]:
    """--add-config k=v,... and --delete-config k,... as one change set (None: delete)."""
    changes: dict[str, str | None] = {}
    for item in split_configs(add or ""):
        k, sep, v = item.partition("=")
        if not sep:
            raise click.UsageError(f"--add-config expects key=value, got {item!r}")
        changes[k.strip()] = v.strip()
    for k in split_configs(delete or ""):
        changes[k] = None
    if not changes:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    return changes


_SOURCES = {2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG"}


def _brokers(admin: Admin, alter: bool, name: str | None, add: str | None, delete: str | None) -> None:
    """A broker's dynamic configs (`name` None: the cluster default), Kafka's lines."""
    if name is not None and not name.isdigit():
        raise click.UsageError(f"--entity-name of a broker is its id, got {name!r}")
    broker = None if name is None else int(name)
    if alter:
        admin.alter_broker_configs(broker, _changes(add, delete))
        click.echo("Completed updating default config for brokers in the cluster." if broker is None
                   else f"Completed updating config for broker {broker}.")  # fmt: skip
        return
    configs = admin.describe_broker_configs(broker)
    click.echo("Default configs for brokers in the cluster are:" if broker is None
               else f"Dynamic configs for broker {broker} are:")  # fmt: skip
    for k, (v, source) in sorted(configs.items()):
        if source in _SOURCES:
            click.echo(f"  {k}={v} sensitive=false synonyms={{{_SOURCES[source]}:{k}={v}}}")


def _groups(admin: Admin, alter: bool, name: str | None, add: str | None, delete: str | None) -> None:
    """A group's own configs (Kafka 4's GroupConfig: consumer.*, share.*), Kafka's lines; without --entity-name,
    every group's."""
    if alter:
        admin.alter_group_configs(str(name), _changes(add, delete))
        click.echo(f"Completed updating config for group {name}.")
        return
    for group in [name] if name else sorted({g for g, _, _ in admin.list_groups()}):
        click.echo(f"Dynamic configs for group {group} are:")
        for k, (v, source) in sorted(admin.describe_group_configs(group).items()):
            if source == _GROUP_CONFIG:
                click.echo(f"  {k}={v} sensitive=false synonyms={{DYNAMIC_GROUP_CONFIG:{k}={v}}}")


_GROUP_CONFIG = 8  # Kafka's ConfigSource.GROUP_CONFIG: the group's own value


def _broker_loggers(admin: Admin, alter: bool, name: str, add: str | None, delete: str | None) -> None:
    """A broker's log levels (Kafka's BROKER_LOGGER resource), Kafka's lines."""
    if not name.isdigit():
        raise click.UsageError(f"The entity name for broker-loggers must be a valid integer broker id, found: {name}")
    broker = int(name)
    levels = admin.describe_broker_loggers(broker)
    if alter:
        changes = _changes(add, delete)
        unknown = [k for k in changes if k not in levels]
        if unknown:  # as kafka-configs: checked against the broker's loggers before anything is sent
            raise click.UsageError(f"Invalid broker logger(s): {','.join(unknown)}")
        admin.alter_broker_loggers(broker, changes)
        click.echo(f"Completed updating config for broker-logger {broker}.")
        return
    click.echo(f"Dynamic configs for broker-logger {broker} are:")
    for logger, level in sorted(levels.items()):
        click.echo(f"  {logger}={level} sensitive=false synonyms={{}}")


def _topics(admin: Admin, alter: bool, name: str | None, add: str | None, delete: str | None) -> None:
    if not alter:
        names = [name] if name else admin.list_topics()
        for topic in names:
            overrides = {k: v for k, (v, is_default) in admin.describe_configs(topic).items() if not is_default}
            click.echo(f"Dynamic configs for topic {topic} are:")
            for k, v in sorted(overrides.items()):
                click.echo(f"  {k}={v} sensitive=false synonyms={{DYNAMIC_TOPIC_CONFIG:{k}={v}}}")
        return
    admin.alter_configs(str(name), _changes(add, delete))
    click.echo(f"Completed updating config for topic {name}.")


if __name__ == "__main__":
    main()
