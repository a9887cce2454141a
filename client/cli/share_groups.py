"""kl-share-groups: Kafka's kafka-share-groups.sh for share groups (KIP-932): list and describe.

    kl-share-groups --bootstrap-server B --list [--state [STATES]]
    kl-share-groups --bootstrap-server B --describe --group G            # start offset and lag per partition
    kl-share-groups --bootstrap-server B --describe --group G --members
    kl-share-groups --bootstrap-server B --describe --group G --state

`--list` asks every broker for the share groups it coordinates (ListGroups, group type share); `--describe` asks
the group's coordinator (ShareGroupDescribe; DescribeShareGroupOffsets for the share-partitions' start offsets,
the lag being each partition's end offset minus its start offset, from the leaders' ListOffsets).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.cli.groups import parse_states, table
from client.cluster import KafkaLiteClient
from client.config import AdminConfig
from client.sync import with_client
from client.transactions import KEY_TYPE_GROUP, find_coordinator
from net.errors import ErrorCode, error_for
from net.protocol import ApiKey
from net.schema.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
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


async def _list(client: KafkaLiteClient) -> list[tuple[str, str]]:
    """(group, state) of every share group: each broker lists the groups it coordinates."""
    await client.refresh_metadata([])
    found: dict[str, str] = {}
    for broker in sorted(client.metadata.brokers):
        answer = await client.request(broker, ApiKey.LIST_GROUPS, {})
        if answer.get("error_code"):
            raise error_for(answer["error_code"], answer.get("error_message") or f"ListGroups on broker {broker}")
        # Each row's group type is in `group_types`, beside the rows (none: a broker of only classic groups).
        rows = answer.get("groups") or []
        for row, group_type in zip(rows, answer.get("group_types") or ["classic"] * len(rows)):
            if group_type == "share":
                found[row[0]] = row[2]
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
@click.option("--group", default=None)
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
    group: str | None,
    offsets: bool,
    members: bool,
    state: str | None,
    verbose: bool,
) -> None:
    """Share groups (KIP-932): list them and describe one (kafka-share-groups.sh)."""
    if list_ == describe:
        raise click.UsageError("exactly one of --list and --describe")
    if describe and group is None:
        raise click.UsageError("--describe needs --group")
    if describe and state and state.strip():
        raise click.UsageError("--describe --state takes no state names (they filter --list)")
    if sum([offsets, members, state is not None]) > 1 and describe:
        raise click.UsageError("--offsets, --members and --state are exclusive")
    config = client_kwargs(AdminConfig, command_config, {})

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


async def _address(client: KafkaLiteClient, node: int) -> str:
    host, port = client.metadata.brokers.get(node, ("?", -1))
    return f"{host}:{port}  ({node})"


if __name__ == "__main__":
    main()
