"""kl-share-groups: Kafka's kafka-share-groups.sh for share groups (KIP-932): list, describe, reset offsets, delete.

    kl-share-groups --bootstrap-server B --list [--state [STATES]]
    kl-share-groups --bootstrap-server B --describe --group G            # start offset and lag per partition
    kl-share-groups --bootstrap-server B --describe --group G --members
    kl-share-groups --bootstrap-server B --describe --group G --state
    kl-share-groups --bootstrap-server B --reset-offsets --group G (--topic T[:P,P] ... | --all-topics)
                    (--to-earliest | --to-latest | --to-datetime YYYY-MM-DDTHH:mm:SS.sss) [--dry-run | --execute]
    kl-share-groups --bootstrap-server B --delete-offsets --group G --topic T [--topic T2 ...]
    kl-share-groups --bootstrap-server B --delete (--group G ... | --all-groups)

`--list` asks every broker for the share groups it coordinates (ListGroups, group type share); `--describe` asks
the group's coordinator (ShareGroupDescribe; DescribeShareGroupOffsets for the share-partitions' start offsets,
the lag being each partition's end offset minus its start offset, from the leaders' ListOffsets). The group
must be empty to reset (AlterShareGroupOffsets: the plan is only shown without --execute, as Kafka's --dry-run)
or delete offsets (DeleteShareGroupOffsets) or be deleted (DeleteGroups); Kafka's output lines.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.cli.groups import parse_states, table
from client.cluster import KafkaLiteClient
from client.config import AdminConfig
from client.sync import Admin, with_client
from client.transactions import KEY_TYPE_GROUP, find_coordinator
from net.errors import ErrorCode, error_for
from net.schema.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from net.schema.list_groups import ListGroupsRequest
from net.schema.share_group_describe import DescribedGroup, ShareGroupDescribeRequest
from net.version import version_option

TIMEOUT_S = 30.0
STATES = ("Empty", "Stable", "Dead")  # Kafka's ShareGroupState names
OFFSETS_COLUMNS = (("GROUP", 15), ("TOPIC", 15), ("PARTITION", 10), ("START-OFFSET", 15), ("LAG", 0))
MEMBERS_COLUMNS = (
    ("GROUP", 15),
    ("CONSUMER-ID", 24),
    ("HOST", 15),
    ("CLIENT-ID", 15),
    ("#PARTITIONS", 12),
    ("ASSIGNMENT", 0),
)
STATE_COLUMNS = (("GROUP", 15), ("COORDINATOR (ID)", 25), ("STATE", 10), ("#MEMBERS", 0))
LIST_STATE_COLUMNS = (("GROUP", 15), ("STATE", 0))
RESET_COLUMNS = (("GROUP", 15), ("TOPIC", 15), ("PARTITION", 10), ("NEW-OFFSET", 0))  # Kafka's OffsetsUtils
DELETE_OFFSETS_COLUMNS = (("TOPIC", 15), ("STATUS", 0))
EARLIEST, LATEST = -2, -1
# Kafka's Utils.getDateTime: yyyy-MM-dd'T'HH:mm:ss.SSS, then a zone (Z, +hh, +hhmm, +hh:mm); without one, UTC.
DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime(text: str) -> int:
    """--to-datetime's value as epoch milliseconds, as Kafka's Utils.getDateTime reads it (strictly)."""
    m = DATETIME.fullmatch(text.strip())
    if m is None:
        raise click.UsageError(f"--to-datetime: {text!r} is not of the form YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]")
    y, mo, d, h, mi, sec, ms, zone = m.groups()
    tz = datetime.UTC
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = datetime.timezone(sign * datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0)))
    try:
        when = datetime.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), int(ms) * 1000, tzinfo=tz)
    except ValueError as e:  # a 31st of February, an hour 25...
        raise click.UsageError(f"--to-datetime: {text!r}: {e}") from None
    return int(when.timestamp() * 1000)


async def _list(client: KafkaLiteClient) -> list[tuple[str, str]]:
    """(group, state) of every share group: each broker lists the groups it coordinates."""
    await client.refresh_metadata([])
    found: dict[str, str] = {}
    for broker in sorted(client.metadata.brokers):
        answer = await client.call(broker, ListGroupsRequest(types_filter=("share",)))
        if answer.error_code:
            raise error_for(answer.error_code, f"ListGroups on broker {broker}")
        for g in answer.groups:
            found[g.group_id] = g.group_state
    return sorted(found.items())


async def _describe(client: KafkaLiteClient, group: str) -> tuple[int, DescribedGroup]:
    node = await find_coordinator(client, group, KEY_TYPE_GROUP)
    answer = await (await client.connection(node)).call(ShareGroupDescribeRequest(group_ids=(group,)), TIMEOUT_S)
    (described,) = answer.groups
    if described.error_code:
        if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise click.ClickException(f"Share group '{group}' does not exist.")
        raise error_for(described.error_code, f"share group {group!r}: {described.error_message or ''}")
    return node, described


async def _offsets(client: KafkaLiteClient, group: str) -> list[list[Any]]:
    node, _ = await _describe(client, group)
    request = DescribeShareGroupOffsetsRequest(groups=(DescribeShareGroupOffsetsRequestGroup(group_id=group),))
    answer = await (await client.connection(node)).call(request, TIMEOUT_S)
    (g,) = answer.groups
    if g.error_code:
        raise error_for(g.error_code, f"share group {group!r}: {g.error_message or ''}")
    tps = [(t.topic_name, p.partition_index) for t in g.topics for p in t.partitions]
    ends = await client.list_offsets(tps, -1) if tps else {}
    rows = []
    for t in g.topics:
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            if p.error_code:
                raise error_for(p.error_code, f"{t.topic_name}-{p.partition_index}: {p.error_message or ''}")
            start = p.start_offset
            end = ends.get((t.topic_name, p.partition_index), -1)
            lag = max(0, end - start) if start >= 0 and end >= 0 else "-"
            rows.append([group, t.topic_name, p.partition_index, start if start >= 0 else "-", lag])
    return rows


def _count(m: Any) -> int:
    return sum(len(t.partitions) for t in m.assignment.topic_partitions)


def _assignment(m: Any) -> str:
    return ";".join(f"{t.topic_name}:{','.join(map(str, sorted(t.partitions)))}" for t in m.assignment.topic_partitions)


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option("--list", "list_", is_flag=True, help="List all share groups.")
@click.option("--describe", is_flag=True, help="Describe a share group: offsets (default), --members or --state.")
@click.option("--reset-offsets", is_flag=True, help="Reset the start offsets of an inactive share group.")
@click.option("--delete-offsets", is_flag=True, help="Delete a share group's offsets of the --topic(s).")
@click.option("--delete", is_flag=True, help="Delete share groups (they must be empty).")
@click.option("--group", "groups", multiple=True, help="The share group (--delete takes several).")
@click.option("--all-groups", is_flag=True, help="With --delete: every share group.")
@click.option(
    "--topic", "topics", multiple=True, help="TOPIC or TOPIC:P1,P2 (--reset-offsets); a topic (--delete-offsets)."
)
@click.option("--all-topics", is_flag=True, help="With --reset-offsets: every topic the group has offsets for.")
@click.option("--to-earliest", is_flag=True, help="Reset to each partition's earliest offset.")
@click.option("--to-latest", is_flag=True, help="Reset to each partition's latest offset.")
@click.option("--to-datetime", default=None, help="Reset to the first offset at or after YYYY-MM-DDTHH:mm:SS.sss.")
@click.option("--dry-run", is_flag=True, help="Only show the reset plan (the default).")
@click.option("--execute", is_flag=True, help="Apply the reset.")
@click.option("--offsets", is_flag=True, help="With --describe: start offset and lag per partition (the default).")
@click.option("--members", is_flag=True, help="With --describe: the members and their partitions.")
@click.option(
    "--state",
    "state",
    is_flag=False,
    flag_value="",
    default=None,
    help="With --describe: the group's state. With --list: only groups in these states (comma-separated).",
)
@click.option("--verbose", is_flag=True, help="With --describe --members: each member's epoch too.")
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    list_: bool,
    describe: bool,
    reset_offsets: bool,
    delete_offsets: bool,
    delete: bool,
    groups: tuple[str, ...],
    all_groups: bool,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    dry_run: bool,
    execute: bool,
    offsets: bool,
    members: bool,
    state: str | None,
    verbose: bool,
) -> None:
    """Share groups (KIP-932): list, describe, reset offsets, delete offsets, delete (kafka-share-groups.sh)."""
    actions = [list_, describe, reset_offsets, delete_offsets, delete]
    if sum(actions) != 1:
        raise click.UsageError(
            "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets."
        )
    if (topics or all_topics) and not (reset_offsets or delete_offsets):
        raise click.UsageError("--topic and --all-topics go with --reset-offsets or --delete-offsets")
    if all_groups and not delete:
        raise click.UsageError("--all-groups goes with --delete")
    if len(groups) > 1 and not delete:
        raise click.UsageError("only --delete takes more than one --group")
    config = client_kwargs(AdminConfig, command_config, {})
    if reset_offsets or delete_offsets or delete:
        with Admin(bootstrap_server, **config) as admin:
            if delete:
                _delete(admin, list(groups), all_groups)
            elif delete_offsets:
                if not groups or not topics:
                    raise click.UsageError("Option --delete-offsets takes the following options: --group, --topic")
                _delete_offsets(admin, groups[0], list(topics))
            else:
                _reset(
                    admin,
                    groups[0] if groups else None,
                    topics,
                    all_topics,
                    to_earliest,
                    to_latest,
                    to_datetime,
                    execute,
                    dry_run,
                )
        return
    group = groups[0] if groups else None
    if describe and group is None:
        raise click.UsageError("--describe needs --group")
    if describe and state and state.strip():
        raise click.UsageError("--describe --state takes no state names (they filter --list)")
    if sum([offsets, members, state is not None]) > 1 and describe:
        raise click.UsageError("--offsets, --members and --state are exclusive")

    def run(fn: Any) -> Any:
        return with_client(bootstrap_server, config, "kl-share-groups", fn, TIMEOUT_S * 2)

    if list_:
        listed = run(_list)
        if state is None:
            for gid, _ in listed:
                click.echo(gid)
            return
        wanted = parse_states(state, STATES)
        click.echo(table(LIST_STATE_COLUMNS, [[g, s] for g, s in listed if wanted is None or s in wanted]))
        return
    assert group is not None
    if state is not None:
        node, g = run(lambda c: _describe(c, group))
        coordinator = run(lambda c: _address(c, node))
        click.echo("\n" + table(STATE_COLUMNS, [[group, coordinator, g.group_state, len(g.members)]]))
    elif members:
        _, g = run(lambda c: _describe(c, group))
        columns = MEMBERS_COLUMNS + ((("MEMBER-EPOCH", 0),) if verbose else ())
        rows = [
            [group, m.member_id, m.client_host, m.client_id, _count(m), _assignment(m) or "-"]
            + ([m.member_epoch] if verbose else [])
            for m in sorted(g.members, key=lambda m: m.member_id)
        ]
        click.echo("\n" + table(columns, rows))
    else:
        click.echo("\n" + table(OFFSETS_COLUMNS, run(lambda c: _offsets(c, group))))


def _reset(
    admin: Admin,
    group: str | None,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    execute: bool,
    dry_run: bool,
) -> None:
    """Kafka's ShareGroupService.resetOffsets: the group must be empty (or unknown), the plan printed, applied
    with --execute (AlterShareGroupOffsets)."""
    if execute and dry_run:
        raise click.UsageError("Option --reset-offsets only accepts one of --execute and --dry-run")
    if group is None:
        raise click.UsageError("Option --reset-offsets takes the option: --group")
    if bool(topics) == all_topics:
        raise click.UsageError("Option --reset-offsets takes one of these options: --all-topics, --topic")
    if sum([to_earliest, to_latest, to_datetime is not None]) != 1:
        raise click.UsageError(
            "Option --reset-offsets takes one of these options: --to-datetime, --to-earliest, --to-latest"
        )
    timestamp = parse_datetime(to_datetime) if to_datetime is not None else None
    described = admin.describe_share_group(group)
    if described.group_state not in ("Empty", "Dead"):
        raise click.ClickException(f"Share group '{group}' is not empty.")
    if all_topics:
        tps = sorted(admin.list_share_group_offsets(group))
    else:
        tps = _partitions(admin, topics)
    if timestamp is not None:
        plan = admin.list_offsets(tps, timestamp) if tps else {}
        empty = [tp for tp, off in plan.items() if off < 0]
        for t, p in empty:
            click.echo(f"\nWarn: Partition {p} from topic {t} is empty. Falling back to latest known offset.")
        plan.update(admin.list_offsets(empty, LATEST) if empty else {})
    else:
        plan = admin.list_offsets(tps, EARLIEST if to_earliest else LATEST) if tps else {}
    if execute:
        failed = {tp: e for tp, e in admin.alter_share_group_offsets(group, plan).items() if e is not None}
        if failed:
            (t, p), e = sorted(failed.items())[0]
            raise click.ClickException(f"{e.code.name}: {t}-{p}: {e}")
    if plan:
        click.echo("\n" + table(RESET_COLUMNS, [[group, t, p, off] for (t, p), off in sorted(plan.items())]))


def _partitions(admin: Admin, topics: tuple[str, ...]) -> list[tuple[str, int]]:
    """--topic T (every partition) or T:P1,P2; Kafka's "do not exist" error for a partition that does not."""
    names = sorted({t.partition(":")[0] for t in topics})
    described = {d.name: [p.partition for p in d.partitions] for d in admin.describe_topics(names)}
    tps: list[tuple[str, int]] = []
    for spec in topics:
        name, _, parts = spec.partition(":")
        try:
            wanted = [int(p) for p in parts.split(",")] if parts else described.get(name, [])
        except ValueError:
            raise click.UsageError(f"--topic {spec!r}: partitions are numbers (TOPIC:0,1,2)") from None
        tps += [(name, p) for p in wanted]
    missing = [f"{t}-{p}" for t, p in tps if p not in described.get(t, [])]
    if missing:
        raise click.ClickException(f'UNKNOWN_TOPIC_OR_PARTITION: The partitions "{",".join(missing)}" do not exist')
    return sorted(set(tps))


def _delete_offsets(admin: Admin, group: str, topics: list[str]) -> None:
    """Kafka's deleteOffsets: a group-level error in one line; else each topic's status (Successful or its error),
    non-zero exit if any failed."""
    results = admin.delete_share_group_offsets(group, topics)
    rows = [[t, "Successful" if results.get(t) is None else f"Error: {results[t]}"] for t in sorted(set(topics))]
    click.echo("\n" + table(DELETE_OFFSETS_COLUMNS, rows))
    if any(results.get(t) is not None for t in topics):
        raise click.ClickException(f"the offsets of some topics of share group '{group}' were not deleted")


def _delete(admin: Admin, groups: list[str], all_groups: bool) -> None:
    """Kafka's deleteShareGroups: only empty share groups (checked by listing them first), then DeleteGroups."""
    if bool(groups) == all_groups:
        raise click.UsageError("Option --delete takes either --group or --all-groups, not both (and one of them).")
    # ListGroups' protocol type of a share group is "share" (its group type too).
    listed = {gid: st for gid, ptype, st in admin.list_groups() if ptype == "share"}
    wanted = sorted(listed) if all_groups else list(dict.fromkeys(groups))
    failed: dict[str, str] = {}
    for g in wanted:
        if g not in listed:
            failed[g] = f"Group '{g}' is not a share group."
        elif listed[g] != "Empty":
            failed[g] = f"GroupNotEmptyException: Share group '{g}' is not EMPTY."
    todo = [g for g in wanted if g not in failed]
    for g, err in (admin.delete_share_groups(todo) if todo else {}).items():
        if err is not None:
            failed[g] = f"{err.code.name}: {err}"
    done = [g for g in wanted if g not in failed]
    if not failed:
        click.echo(f"Deletion of requested share groups ({', '.join(repr(g) for g in done)}) was successful.")
        return
    # Kafka's lines, as one ("* Group ..." each, then the ones deleted): an error is one line here
    reasons = "; ".join(f"Group '{g}' could not be deleted due to: {e}" for g, e in failed.items())
    deleted = f"; these share groups were deleted successfully: {', '.join(repr(g) for g in done)}" if done else ""
    raise click.ClickException(f"Deletion of some share groups failed: {reasons}{deleted}")


async def _address(client: KafkaLiteClient, node: int) -> str:
    host, port = client.metadata.brokers.get(node, ("?", -1))
    return f"{host}:{port}  ({node})"


if __name__ == "__main__":
    main()
