"""kl-leader-election: Kafka's kafka-leader-election.sh, same flags and output.

Moves leadership to each partition's preferred replica (PREFERRED) or gives partitions without a leader one
(UNCLEAN), through the ElectLeaders api, which the active controller serves.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import AdminConfig
from client.sync import Admin
from client.topic_partition import TopicPartition
from net.errors import ClusterAuthorizationError, ErrorCode, KafkaLiteError
from net.protocol import ElectionType
from net.version import version_option


def partitions_from_json(path: Path) -> list[TopicPartition]:
    """Kafka's election file: {"partitions": [{"topic": "foo", "partition": 1}, ...]}; duplicates refused."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise click.ClickException(f"--path-to-json-file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise click.ClickException(f"--path-to-json-file {path}: not JSON: {e}") from None
    if not isinstance(data, dict) or "partitions" not in data:
        raise click.ClickException('Replica election data is missing "partitions" field')
    rows = data["partitions"]
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and isinstance(r.get("topic"), str) and type(r.get("partition")) is int for r in rows
    ):
        raise click.ClickException('"partitions" must be a list of {"topic": string, "partition": integer}')
    partitions = [TopicPartition(r["topic"], r["partition"]) for r in rows]
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise click.ClickException(
            "Replica election data contains duplicate partitions: " + ", ".join(_name(tp) for tp in duplicates)
        )
    return partitions


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"  # Kafka's TopicPartition.toString


def report(election_type: ElectionType, outcomes: dict[TopicPartition, KafkaLiteError | None]) -> list[str]:
    """Kafka's output lines: the elected partitions, those already led as asked, then one line per failure."""
    done = sorted(tp for tp, e in outcomes.items() if e is None)
    noop = sorted(tp for tp, e in outcomes.items() if e is not None and e.code == ErrorCode.ELECTION_NOT_NEEDED)
    failed = sorted((tp, e) for tp, e in outcomes.items() if e is not None and e.code != ErrorCode.ELECTION_NOT_NEEDED)
    lines = []
    if done:
        lines.append(
            f"Successfully completed leader election ({election_type.name}) for partitions "
            + ", ".join(map(_name, done))
        )
    if noop:
        lines.append("Valid replica already elected for partitions " + ", ".join(map(_name, noop)))
    lines += [
        f"Error completing leader election ({election_type.name}) for partition: {_name(tp)}: {e.code.name}: {e}"
        for tp, e in failed
    ]
    return lines


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option(
    "--admin.config",
    "admin_config",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="(Deprecated in Kafka) the same as --command-config.",
)
@click.option(
    "--election-type",
    default=None,
    metavar="PREFERRED|UNCLEAN",
    help="PREFERRED: each partition's first replica leads, if it is alive and in the ISR. UNCLEAN: a partition "
    "without a leader gets one from any live replica (records only the ISR had may be lost). REQUIRED.",
)
@click.option("--topic", default=None, help="Topic of the partition to elect (with --partition).")
@click.option("--partition", type=int, default=None, help="Partition id to elect; REQUIRED with --topic.")
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of the cluster that needs the election.")
@click.option(
    "--path-to-json-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='Partitions to elect: {"partitions": [{"topic": "foo", "partition": 1}, ...]}.',
)
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    admin_config: Path | None,
    election_type: str | None,
    topic: str | None,
    partition: int | None,
    all_topic_partitions: bool,
    path_to_json_file: Path | None,
) -> None:
    """Elect partition leaders: preferred replicas, or unclean leaders for partitions without one."""
    # Wrong combinations are one line each (ClickException), not click's usage block.
    if election_type is None:
        raise click.ClickException("Missing required option(s): election-type")
    chosen = [o for o, on in (("topic", topic), ("all-topic-partitions", all_topic_partitions),
                              ("path-to-json-file", path_to_json_file)) if on]  # fmt: skip
    if len(chosen) != 1:
        raise click.ClickException(
            "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"
        )
    if topic is not None and partition is None:
        raise click.ClickException("Missing required option(s): partition")
    if topic is None and partition is not None:
        raise click.ClickException("Option partition is only allowed if topic is used")
    if command_config is not None and admin_config is not None:
        raise click.ClickException("--admin.config and --command-config cannot be used together")
    kind = ElectionType.__members__.get(election_type.upper())
    if kind is None:
        raise click.ClickException(f"Invalid value for --election-type: {election_type!r} (PREFERRED or UNCLEAN)")
    partitions: list[TopicPartition] | None = None
    if topic is not None:
        partitions = [TopicPartition(topic, partition)]  # type: ignore[arg-type]
    elif path_to_json_file is not None:
        partitions = partitions_from_json(path_to_json_file)
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config or admin_config)) as admin:
        try:
            outcomes = admin.elect_leaders(kind, partitions)
        except ClusterAuthorizationError as e:
            raise click.ClickException(
                f"Not authorized to perform leader election: CLUSTER_AUTHORIZATION_FAILED: {e}"
            ) from None
    lines = report(kind, outcomes)
    for line in lines:
        click.echo(line)
    failed = sum(1 for e in outcomes.values() if e is not None and e.code != ErrorCode.ELECTION_NOT_NEEDED)
    if failed:
        raise click.ClickException(f"{failed} replica(s) could not be elected")


if __name__ == "__main__":
    main()
