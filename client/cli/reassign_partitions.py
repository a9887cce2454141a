"""kl-reassign-partitions: Kafka's kafka-reassign-partitions.sh, same flags, JSON and output lines.

--generate proposes an assignment of the topics in --topics-to-move-json-file over --broker-list; --execute
starts the reassignment of --reassignment-json-file (AlterPartitionReassignments, served by the active
controller); --verify says which of its partitions are done; --list shows those in progress; --cancel reverts
them. --execute --throttle B sets Kafka's replication throttles on what moves and --verify clears them once it is
done (client/cli/reassign_throttles.py); --replica-alter-log-dirs-throttle is not served (one log dir per broker).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.cli.reassign_throttles import clear_throttles, set_throttles
from client.config import AdminConfig
from client.sync import Admin
from client.topic_partition import TopicPartition
from net.errors import KafkaLiteError
from net.version import version_option


def _read_json(path: Path, option: str) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise click.ClickException(f"{option} {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise click.ClickException(f"{option} {path}: not JSON: {e}") from None


def topics_to_move(path: Path) -> list[str]:
    """{"version": 1, "topics": [{"topic": "foo"}, ...]}"""
    data = _read_json(path, "--topics-to-move-json-file")
    rows = data.get("topics") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("topic"), str) for r in rows):
        raise click.ClickException('--topics-to-move-json-file must be {"topics": [{"topic": "name"}, ...]}')
    return [r["topic"] for r in rows]


def reassignment(path: Path) -> dict[TopicPartition, list[int]]:
    """{"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2]}, ...]}"""
    data = _read_json(path, "--reassignment-json-file")
    rows = data.get("partitions") if isinstance(data, dict) else None
    ok = isinstance(rows, list) and all(
        isinstance(r, dict)
        and isinstance(r.get("topic"), str)
        and type(r.get("partition")) is int
        and isinstance(r.get("replicas"), list)
        and all(type(b) is int for b in r["replicas"])
        for r in rows
    )
    if not ok or not rows:
        raise click.ClickException(
            '--reassignment-json-file must be {"partitions": [{"topic": t, "partition": p, "replicas": [ids]}, ...]}'
        )
    out: dict[TopicPartition, list[int]] = {}
    for r in rows:
        tp = TopicPartition(r["topic"], r["partition"])
        if tp in out:
            raise click.ClickException(f"Partition {_name(tp)} is listed twice in the reassignment")
        out[tp] = list(r["replicas"])
    return out


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def assignment_json(assignment: dict[TopicPartition, list[int]]) -> str:
    """Kafka's format (with log_dirs "any", as kafka-reassign-partitions.sh writes it)."""
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "replicas": replicas, "log_dirs": ["any"] * len(replicas)}
        for tp, replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": rows}, separators=(",", ":"))


def current_assignment(admin: Admin, topics: list[str]) -> dict[TopicPartition, list[int]]:
    try:
        described = admin.describe_topics(sorted(set(topics)))
    except KafkaLiteError as e:
        raise click.ClickException(f"{e.code.name}: {e}") from None
    return {TopicPartition(d.name, p.partition): list(p.replicas) for d in described for p in d.partitions}


def propose(current: dict[TopicPartition, list[int]], brokers: list[int]) -> dict[TopicPartition, list[int]]:
    """Each partition keeps its replication factor, its replicas spread round-robin over `brokers` from a start
    that moves with the partition (Kafka's non-rack-aware assignment, without its random start)."""
    out = {}
    for i, (tp, replicas) in enumerate(sorted(current.items())):
        if len(replicas) > len(brokers):
            raise click.ClickException(
                f"Replication factor: {len(replicas)} larger than available brokers: {len(brokers)}."
            )
        out[tp] = [brokers[(i + r) % len(brokers)] for r in range(len(replicas))]
    return out


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option("--topics-to-move-json-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--broker-list", default=None, help='Brokers to place the topics on, "0,1,2" (with --generate).')
@click.option("--reassignment-json-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--generate", is_flag=True, help="Propose an assignment (prints it; changes nothing).")
@click.option("--execute", is_flag=True, help="Start the reassignment in --reassignment-json-file.")
@click.option("--verify", is_flag=True, help="Say which partitions of --reassignment-json-file are done.")
@click.option("--list", "list_", is_flag=True, help="List the reassignments in progress.")
@click.option("--cancel", is_flag=True, help="Cancel the reassignments of --reassignment-json-file.")
@click.option(
    "--throttle",
    type=int,
    default=-1,
    help="With --execute: the replication throttle in bytes/s on the brokers and replicas that move.",
)
@click.option("--timeout", type=int, default=10000, help="ms to wait for the reassignment to start.")
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    topics_to_move_json_file: Path | None,
    broker_list: str | None,
    reassignment_json_file: Path | None,
    generate: bool,
    execute: bool,
    verify: bool,
    list_: bool,
    cancel: bool,
    throttle: int,
    timeout: int,
) -> None:
    """Move partition replicas between brokers (KIP-455 reassignments)."""
    actions = [n for n, on in (("generate", generate), ("execute", execute), ("verify", verify), ("list", list_),
                               ("cancel", cancel)) if on]  # fmt: skip
    if len(actions) != 1:
        raise click.ClickException(
            "Command must include exactly one action: --generate, --execute, --verify, --list or --cancel"
        )
    action = actions[0]
    if action == "generate" and (topics_to_move_json_file is None or broker_list is None):
        raise click.ClickException("--generate needs --topics-to-move-json-file and --broker-list")
    if action in ("execute", "verify", "cancel") and reassignment_json_file is None:
        raise click.ClickException(f"--{action} needs --reassignment-json-file")
    brokers: list[int] = []
    if broker_list is not None:
        try:
            brokers = [int(b) for b in broker_list.split(",") if b.strip()]
        except ValueError:
            raise click.ClickException(
                f"--broker-list must be broker ids separated by commas, got {broker_list!r}"
            ) from None
        if not brokers or len(set(brokers)) != len(brokers):
            raise click.ClickException(f"--broker-list must name distinct broker ids, got {broker_list!r}")
    wanted = reassignment(reassignment_json_file) if reassignment_json_file is not None else {}
    topics = topics_to_move(topics_to_move_json_file) if topics_to_move_json_file is not None else []
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        if action == "generate":
            current = current_assignment(admin, topics)
            click.echo("Current partition replica assignment")
            click.echo(assignment_json(current))
            click.echo("")
            click.echo("Proposed partition reassignment configuration")
            click.echo(assignment_json(propose(current, brokers)))
        elif action == "execute":
            current = current_assignment(admin, [tp.topic for tp in wanted])
            click.echo("Current partition replica assignment")
            click.echo("")
            click.echo(assignment_json({tp: r for tp, r in current.items() if tp in wanted}))
            click.echo("")
            click.echo("Save this to use as the --reassignment-json-file option during rollback")
            if throttle >= 0:
                set_throttles(admin, current, wanted, throttle)
            _finish(admin.alter_partition_reassignments(dict(wanted)), "start", "started")
        elif action == "cancel":
            _finish(admin.alter_partition_reassignments(dict.fromkeys(wanted)), "cancel", "cancelled")
        elif action == "verify":
            ongoing = admin.list_partition_reassignments(list(wanted))
            current = current_assignment(admin, [tp.topic for tp in wanted])
            click.echo("Status of partition reassignment:")
            unfinished = 0
            for tp, target in sorted(wanted.items()):
                if tp in ongoing:
                    state, unfinished = "is still in progress", unfinished + 1
                elif current.get(tp) == target:
                    state = "is completed"
                else:
                    state, unfinished = f"failed: its replicas are {current.get(tp)}, not {target}", unfinished + 1
                click.echo(f"Reassignment of partition {_name(tp)} {state}.")
            if unfinished:
                raise SystemExit(1)
            click.echo("")
            clear_throttles(admin, wanted)
        else:
            ongoing = admin.list_partition_reassignments(None)
            if not ongoing:
                click.echo("No partition reassignments found.")
            else:
                click.echo("Current partition reassignments:")
                for tp, (replicas, adding, removing) in sorted(ongoing.items()):
                    click.echo(
                        f"{_name(tp)}: replicas: {_ids(replicas)}. adding: {_ids(adding)}. removing: {_ids(removing)}."
                    )


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def _finish(outcomes: dict[TopicPartition, KafkaLiteError | None], verb: str, done: str) -> None:
    """Kafka's lines: the partitions done, then an error naming each failure (rc 1)."""
    ok = sorted(tp for tp, e in outcomes.items() if e is None)
    failed = sorted((tp, e) for tp, e in outcomes.items() if e is not None)
    if ok:
        click.echo(f"Successfully {done} partition reassignment{'s' if len(ok) > 1 else ''} for {_ids_tp(ok)}")
    if failed:
        details = "; ".join(f"{_name(tp)}: {e.code.name}: {e}" for tp, e in failed)
        raise click.ClickException(f"Error reassignment{'s' if len(failed) > 1 else ''} failed to {verb}: {details}")


def _ids_tp(tps: list[TopicPartition]) -> str:
    return ",".join(map(_name, tps))


if __name__ == "__main__":
    main()
