"""kl-log-dirs: Kafka's kafka-log-dirs.sh, same flags and output.

    kl-log-dirs --bootstrap-server B --describe [--broker-list 1,2] [--topic-list a,b] [--command-config F]

Prints Kafka's two progress lines and then one line of JSON: per broker, its data directories (log.dirs), each
with its error (null, or the Java exception's class name Kafka gives) and the replicas it holds: `topic-partition`,
size in bytes, offset lag (how far the log end is below the high watermark) and whether it is a future replica.
DescribeLogDirs needs DESCRIBE on the cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import AdminConfig
from client.sync import Admin
from net.errors import ErrorCode
from net.schema.describe_log_dirs import DescribeLogDirsResult
from net.version import version_option


def exception_name(code: int) -> str | None:
    """The class name Kafka's tool prints for a log directory's error (Errors.exception's class)."""
    if not code:
        return None
    try:
        name = ErrorCode(code).name
    except ValueError:
        return f"org.apache.kafka.common.errors.UnknownServerException (error {code})"
    camel = "".join(w.capitalize() for w in name.split("_"))
    camel = camel.removesuffix("Error")
    return f"org.apache.kafka.common.errors.{camel}Exception"


def as_json(by_broker: dict[int, tuple[DescribeLogDirsResult, ...]], topics: set[str]) -> dict[str, Any]:
    """Kafka's LogDirsCommand JSON (version 1)."""
    return {
        "brokers": [
            {
                "broker": broker,
                "logDirs": [
                    {
                        "partitions": [
                            {
                                "partition": f"{t.name}-{p.partition_index}",
                                "size": p.partition_size,
                                "offsetLag": p.offset_lag,
                                "isFuture": p.is_future_key,
                            }
                            for t in d.topics
                            if not topics or t.name in topics
                            for p in t.partitions
                        ],
                        "error": exception_name(d.error_code),
                        "logDir": d.log_dir,
                    }
                    for d in dirs
                ],
            }
            for broker, dirs in sorted(by_broker.items())
        ],
        "version": 1,
    }


def _ids(value: str | None, what: str) -> list[int] | None:
    if value is None or not value.strip():
        return None  # empty: every broker, as Kafka's tool reads it
    try:
        ids = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.ClickException(f"{what} takes comma-separated broker ids, got {value!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise click.ClickException(f"{what} takes comma-separated broker ids, got {value!r}")
    return ids


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option("--describe", is_flag=True, help="Describe the log directories of the brokers (required).")
@click.option("--broker-list", default=None, metavar="1,2", help="The brokers to query (default: every live broker).")
@click.option("--topic-list", default=None, metavar="a,b", help="The topics to list (default: every topic).")
@one_line_errors
def main(
    bootstrap_server: str, command_config: Path | None, describe: bool, broker_list: str | None, topic_list: str | None
) -> None:
    """Describe the brokers' data directories and the replicas in them, as kafka-log-dirs.sh does."""
    if not describe:
        raise click.ClickException("Must specify --describe")
    brokers = _ids(broker_list, "--broker-list")
    topics = [t.strip() for t in topic_list.split(",") if t.strip()] if topic_list else []
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        live = admin.broker_ids()
        if brokers is not None:
            missing = sorted(set(brokers) - set(live))
            if missing:
                raise click.ClickException(
                    "The given brokers do not exist from --broker-list: "
                    f"{','.join(map(str, missing))}. Current existent brokers: {','.join(map(str, live))}"
                )
        click.echo("Querying brokers for log directories information")
        by_broker = admin.describe_log_dirs(brokers if brokers is not None else live, topics or None)
    click.echo(f"Received log directory information from brokers {','.join(map(str, sorted(by_broker)))}")
    click.echo(json.dumps(as_json(by_broker, set(topics)), separators=(",", ":")))


if __name__ == "__main__":
    main()
