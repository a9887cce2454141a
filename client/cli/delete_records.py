"""kl-delete-records: Kafka's kafka-delete-records.sh, same flags, JSON file and output.

    kl-delete-records --bootstrap-server B --offset-json-file offsets.json [--command-config admin.properties]

offsets.json: {"partitions": [{"topic": "foo", "partition": 0, "offset": 42}], "version": 1}; offset -1 deletes up
to the high watermark. Each partition's log start offset moves there (the DeleteRecords api, on its leader).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import AdminConfig
from client.sync import Admin
from net.errors import KafkaLiteError
from net.version import version_option


def offsets_from_json(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's offset JSON file (DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup), duplicates refused."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise click.ClickException(f"--offset-json-file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise click.ClickException(f"--offset-json-file {path}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise click.ClickException("The offset JSON file must hold an object with a partitions field")
    version = data.get("version", 1)
    if version != 1:
        raise click.ClickException(f"Not supported version field value {version}")
    rows = data.get("partitions")
    if not isinstance(rows, list):
        raise click.ClickException("Missing partitions field")
    if not all(
        isinstance(r, dict)
        and isinstance(r.get("topic"), str)
        and type(r.get("partition")) is int
        and type(r.get("offset")) is int
        for r in rows
    ):
        raise click.ClickException('"partitions" must be a list of {"topic": string, "partition": int, "offset": int}')
    keys = [(r["topic"], r["partition"]) for r in rows]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise click.ClickException(
            "Offset json file contains duplicate topic partitions: " + ",".join(f"{t}-{p}" for t, p in duplicates)
        )
    return {(r["topic"], r["partition"]): r["offset"] for r in rows}


def report(results: dict[tuple[str, int], int | KafkaLiteError]) -> list[str]:
    """Kafka's lines, one per partition: its low watermark, or the error."""
    lines = []
    for (topic, partition), r in results.items():
        if isinstance(r, KafkaLiteError):
            lines.append(f"partition: {topic}-{partition}\terror: {r.code.name}: {r}")
        else:
            lines.append(f"partition: {topic}-{partition}\tlow_watermark: {r}")
    return lines


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option(
    "--offset-json-file",
    "offset_json_file",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    metavar="FILE",
    help='{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}',
)
@one_line_errors
def main(bootstrap_server: str, command_config: Path | None, offset_json_file: Path) -> None:
    """Delete records of partitions up to the given offsets, as kafka-delete-records.sh does. Exits 1 if any
    partition failed (each is reported on its own line, as Kafka's tool prints them)."""
    offsets = offsets_from_json(offset_json_file)
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        click.echo("Executing records delete operation")
        results = admin.delete_records(offsets)
    click.echo("Records delete operation completed:")
    ordered = {tp: results[tp] for tp in offsets}
    for line in report(ordered):
        click.echo(line)
    if any(isinstance(r, KafkaLiteError) for r in ordered.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
