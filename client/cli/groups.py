"""kl-groups: Kafka's kafka-consumer-groups.sh (list, describe, reset offsets, delete)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from client.admin import GroupDescription
from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import AdminConfig
from client.sync import Admin
from net.version import version_option

EARLIEST, LATEST = -2, -1
# Kafka's columns and their minimum widths (kafka-consumer-groups.sh); a column widens for longer values.
OFFSETS_COLUMNS = (
    ("GROUP", 15),
    ("TOPIC", 15),
    ("PARTITION", 10),
    ("CURRENT-OFFSET", 15),
    ("LOG-END-OFFSET", 15),
    ("LAG", 15),
    ("CONSUMER-ID", 47),
    ("HOST", 15),
    ("CLIENT-ID", 0),
)
MEMBERS_COLUMNS = (("GROUP", 15), ("CONSUMER-ID", 15), ("HOST", 15), ("CLIENT-ID", 15), ("#PARTITIONS", 15))
STATE_COLUMNS = (("GROUP", 15), ("COORDINATOR (ID)", 25), ("ASSIGNMENT-STRATEGY", 20), ("STATE", 20), ("#MEMBERS", 0))
# Kafka 4's --verbose columns: a consumer-protocol group's (KIP-848) epochs ("-" for a classic group's state).
STATE_VERBOSE_COLUMNS = (*STATE_COLUMNS[:4], ("GROUP-EPOCH", 15), ("TARGET-ASSIGNMENT-EPOCH", 25), ("#MEMBERS", 0))
CONSUMER_MEMBERS_VERBOSE_COLUMNS = (
    *MEMBERS_COLUMNS,
    ("CURRENT-EPOCH", 15),
    ("CURRENT-ASSIGNMENT", 20),
    ("TARGET-EPOCH", 15),
    ("TARGET-ASSIGNMENT", 0),
)
LIST_STATE_COLUMNS = (("GROUP", 15), ("STATE", 0))
RESET_COLUMNS = (("GROUP", 30), ("TOPIC", 30), ("PARTITION", 10), ("NEW-OFFSET", 0))
# The groups' states (ListGroups' and DescribeGroups' names: the classic protocol's, then the consumer
# protocol's, KIP-848); --state takes them in any case.
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")


def table(columns: tuple[tuple[str, int], ...], rows: Sequence[Sequence[object]]) -> str:
    """Kafka's left-aligned columns: each at least its minimum width, widened for long values."""
    widths = [max([w, len(name)] + [len(str(r[i])) for r in rows]) for i, (name, w) in enumerate(columns)]
    lines = [[name for name, _ in columns]] + [[str(x) for x in r] for r in rows]
    return "\n".join(" ".join(v.ljust(widths[i]) for i, v in enumerate(line)).rstrip() for line in lines)


def parse_states(raw: str | None, states: Sequence[str] = STATES) -> set[str] | None:
    """--state's filter: comma-separated names of `states`, any case; '' (the flag alone) means every state."""
    if not raw or not raw.strip():
        return None
    by_lower = {s.lower(): s for s in states}
    wanted = set()
    for name in raw.split(","):
        if name.strip().lower() not in by_lower:
            raise click.UsageError(f"--state: unknown state {name.strip()!r} (states: {', '.join(states)})")
        wanted.add(by_lower[name.strip().lower()])
    return wanted


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option("--list", "list_", is_flag=True, help="List all consumer groups.")
@click.option("--describe", is_flag=True, help="Describe a group: offsets and lag (default), --members or --state.")
@click.option("--reset-offsets", is_flag=True, help="Reset a group's offsets (the group must be inactive).")
@click.option("--delete", is_flag=True, help="Delete a group and its offsets (the group must be empty).")
@click.option("--group", "group", default=None)
@click.option("--all-groups", is_flag=True, help="With --describe: every group.")
@click.option("--offsets", is_flag=True, help="With --describe: offsets and lag per partition (the default).")
@click.option("--members", is_flag=True, help="With --describe: the members and how many partitions each has.")
@click.option(
    "--verbose",
    is_flag=True,
    help="With --describe --members: each member's partitions too (and a consumer-protocol member's epochs and "
    "target assignment); with --describe --state: a consumer-protocol group's epochs.",
)
@click.option(
    "--state",
    "state",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[STATE,...]",
    help="With --describe: coordinator, strategy, state and member count. With --list: each group's state, "
    "or only the groups in these states.",
)
@click.option("--topic", default=None, help="With --reset-offsets: the topic, or TOPIC:P1,P2 for some partitions.")
@click.option("--all-topics", is_flag=True, help="With --reset-offsets: every topic the group has offsets for.")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=int, default=None)
@click.option("--execute", is_flag=True, help="Apply the reset (without it, --reset-offsets only shows the plan).")
@click.option("--dry-run", is_flag=True, help="Only show the reset plan (the default).")
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    list_: bool,
    describe: bool,
    reset_offsets: bool,
    delete: bool,
    group: str | None,
    all_groups: bool,
    offsets: bool,
    members: bool,
    verbose: bool,
    state: str | None,
    topic: str | None,
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    execute: bool,
    dry_run: bool,
) -> None:
    """List, describe, reset and delete consumer groups."""
    actions = [
        a for a, on in (("list", list_), ("describe", describe), ("reset", reset_offsets), ("delete", delete)) if on
    ]
    if len(actions) != 1:
        raise click.UsageError("give exactly one of --list, --describe, --reset-offsets, --delete")
    views = [v for v, on in (("--offsets", offsets), ("--members", members), ("--state", state is not None)) if on]
    if describe and len(views) > 1:
        raise click.UsageError(f"--describe takes one of --offsets, --members, --state, not {' and '.join(views)}")
    if not describe and (offsets or members or all_groups or (state is not None and not list_)):
        raise click.UsageError("--offsets, --members, --all-groups and --state go with --describe (--state: --list)")
    if verbose and not members and state is None:
        raise click.UsageError("--verbose goes with --describe --members or --describe --state")
    if describe and bool(group) == all_groups:
        raise click.UsageError("--describe needs --group G or --all-groups")
    if actions[0] in ("reset", "delete") and not group:
        raise click.UsageError(f"--{actions[0].replace('reset', 'reset-offsets')} needs --group")
    if describe and state:
        raise click.UsageError("--describe --state takes no state names (they filter --list)")
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        if list_:
            _list(admin, state)
        elif describe:
            groups = [group] if group else [gid for gid, _ptype, _state in admin.list_groups()]
            for gid in groups:
                if members:
                    _describe_members(admin, gid, verbose)
                elif state is not None:
                    _describe_state(admin, gid, verbose)
                else:
                    _describe_offsets(admin, gid)
        elif delete:
            assert group is not None  # refused above without --group
            _delete(admin, group)
        else:
            assert group is not None
            _reset(admin, group, topic, all_topics, to_earliest, to_latest, to_offset, execute and not dry_run)


def _list(admin: Admin, state: str | None) -> None:
    listed = admin.list_groups()
    if state is None:
        for gid, _ptype, _state in listed:
            click.echo(gid)
        return
    wanted = parse_states(state)
    rows = [[gid, st] for gid, _ptype, st in listed if wanted is None or st in wanted]
    click.echo(table(LIST_STATE_COLUMNS, rows))


def _describe_group(admin: Admin, group: str) -> GroupDescription:
    desc = admin.describe_group(group)
    if desc.state == "Dead":
        raise click.ClickException(f"Consumer group '{group}' does not exist.")
    return desc


def _warn_state(desc: GroupDescription) -> None:
    """Kafka's notes on stderr before a group's table."""
    if not desc.members:
        click.echo(f"\nConsumer group '{desc.group_id}' has no active members.", err=True)
    elif desc.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        click.echo(f"\nWarning: Consumer group '{desc.group_id}' is rebalancing.", err=True)


def _describe_offsets(admin: Admin, group: str) -> None:
    desc = _describe_group(admin, group)
    committed = admin.list_group_offsets(group)
    owner = {tp: m for m in desc.members for tp in m.assignment}
    tps = sorted(set(committed) | set(owner))
    ends = admin.list_offsets(tps, LATEST) if tps else {}
    rows = []
    for tp in tps:
        cur = committed.get(tp)
        end = ends.get(tp)
        m = owner.get(tp)
        rows.append(
            [
                group,
                tp[0],
                tp[1],
                "-" if cur is None else cur,
                "-" if end is None else end,
                "-" if cur is None or end is None else max(0, end - cur),
                m.member_id if m else "-",
                m.host if m else "-",
                m.client_id if m else "-",
            ]
        )
    _warn_state(desc)
    if rows:
        click.echo("\n" + table(OFFSETS_COLUMNS, rows))


def _assignment(tps: frozenset[tuple[str, int]]) -> str:
    """Kafka's ASSIGNMENT column: topic(p,p),topic(p), or '-'."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items())) or "-"


def _describe_members(admin: Admin, group: str, verbose: bool) -> None:
    desc = _describe_group(admin, group)
    consumer = desc.group_type == "consumer"
    columns: tuple[tuple[str, int], ...] = MEMBERS_COLUMNS
    if verbose:
        columns = CONSUMER_MEMBERS_VERBOSE_COLUMNS if consumer else MEMBERS_COLUMNS + (("ASSIGNMENT", 0),)
    # Kafka's column of static members' group.instance.id (KIP-345), shown when a member has one
    static = any(m.group_instance_id for m in desc.members)
    if static:
        columns = (*columns[:2], ("GROUP-INSTANCE-ID", 17), *columns[2:])
    rows = []
    for m in sorted(desc.members, key=lambda m: m.member_id):
        row: list[object] = [group, m.member_id, m.host, m.client_id, len(m.assignment)]
        if static:
            row.insert(2, m.group_instance_id or "")
        if verbose and consumer:
            target = m.target_assignment or frozenset()
            row += [m.member_epoch, _assignment(m.assignment), desc.target_assignment_epoch, _assignment(target)]
        elif verbose:
            row.append(_assignment(m.assignment))
        rows.append(row)
    _warn_state(desc)
    if rows:
        click.echo("\n" + table(columns, rows))


def _describe_state(admin: Admin, group: str, verbose: bool) -> None:
    desc = _describe_group(admin, group)
    coordinator = f"{desc.coordinator[1]}:{desc.coordinator[2]}  ({desc.coordinator[0]})" if desc.coordinator else "-"
    row: list[object] = [group, coordinator, desc.protocol or "", desc.state]
    if verbose:
        row += ["-" if desc.group_epoch is None else desc.group_epoch]
        row += ["-" if desc.target_assignment_epoch is None else desc.target_assignment_epoch]
    click.echo("\n" + table(STATE_VERBOSE_COLUMNS if verbose else STATE_COLUMNS, [[*row, len(desc.members)]]))


def _delete(admin: Admin, group: str) -> None:
    result = admin.delete_groups([group])
    err = result[group]
    if err is not None:
        raise click.ClickException(
            f"Deletion of some consumer groups failed:\n* Group '{group}' could not be deleted due to: "
            f"{err.code.name}: {err}"
        )
    click.echo(f"Deletion of requested consumer groups ('{group}') was successful.")


def _reset(
    admin: Admin,
    group: str,
    topic: str | None,
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    execute: bool,
) -> None:
    if sum([to_earliest, to_latest, to_offset is not None]) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset N")
    if bool(topic) == all_topics:
        raise click.UsageError("give either --topic or --all-topics")
    desc = admin.describe_group(group)
    if desc.members:
        raise click.ClickException(
            f"Assignments can only be reset if the group '{group}' is inactive, but the current state is {desc.state}."
        )
    if all_topics:
        tps = sorted(admin.list_group_offsets(group))
    else:
        assert topic is not None
        name, _, parts = topic.partition(":")
        desc_topics = admin.describe_topics([name])
        all_parts = [p.partition for p in desc_topics[0].partitions]
        wanted = [int(p) for p in parts.split(",")] if parts else all_parts
        missing = [p for p in wanted if p not in all_parts]
        if missing:
            raise click.ClickException(f"UNKNOWN_TOPIC_OR_PARTITION: {name} has no partition(s) {missing}")
        tps = [(name, p) for p in wanted]
    if to_offset is not None:
        if to_offset < 0:
            raise click.UsageError("--to-offset must be >= 0")
        low, high = admin.list_offsets(tps, EARLIEST), admin.list_offsets(tps, LATEST)
        # Kafka clamps a target outside the log to its nearest end.
        plan = {tp: min(max(to_offset, low[tp]), high[tp]) for tp in tps}
    else:
        plan = admin.list_offsets(tps, EARLIEST if to_earliest else LATEST)
    if execute:
        admin.alter_group_offsets(group, plan)
    click.echo("\n" + table(RESET_COLUMNS, [[group, t, p, off] for (t, p), off in sorted(plan.items())]))
    if not execute:
        click.echo("\nWARN: No action was taken (dry run). Use --execute to reset the offsets.", err=True)


if __name__ == "__main__":
    main()
