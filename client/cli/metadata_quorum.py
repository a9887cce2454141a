"""kl-metadata-quorum: Kafka's kafka-metadata-quorum.sh `describe`, same flags and output.

    kl-metadata-quorum --bootstrap-server B [--command-config F] describe --status
    kl-metadata-quorum --bootstrap-server B [--command-config F] describe --replication [--human-readable]

The controller quorum of the custom coordination mode (docs/ELECTION.md), as the quorum leader describes it
(DescribeQuorum, forwarded by any broker; DESCRIBE on the cluster). ZooKeeper mode has no such quorum.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import AdminConfig
from client.sync import Admin
from net.schema.describe_quorum import DescribeQuorumResponsePartitionData, ReplicaState
from net.version import version_option


def status_lines(cluster_id: str, q: DescribeQuorumResponsePartitionData) -> list[str]:
    """MetadataQuorumCommand's --status: the lag is the leader's log end less the furthest-behind voter's, its
    time the difference of their last caught-up times (-1 when one is unknown)."""
    leader = next((v for v in q.current_voters if v.replica_id == q.leader_id), None)
    behind = min(q.current_voters, key=lambda v: v.log_end_offset, default=None)
    lag, lag_ms = 0, 0
    if leader is not None and behind is not None and behind is not leader:
        lag = leader.log_end_offset - behind.log_end_offset
        known = leader.last_caught_up_timestamp >= 0 and behind.last_caught_up_timestamp >= 0
        lag_ms = leader.last_caught_up_timestamp - behind.last_caught_up_timestamp if known else -1

    def ids(rs: tuple[ReplicaState, ...]) -> str:
        return "[" + ",".join(str(r.replica_id) for r in rs) + "]"

    return [
        f"ClusterId:              {cluster_id}",
        f"LeaderId:               {q.leader_id}",
        f"LeaderEpoch:            {q.leader_epoch}",
        f"HighWatermark:          {q.high_watermark}",
        f"MaxFollowerLag:         {lag}",
        f"MaxFollowerLagTimeMs:   {lag_ms}",
        f"CurrentVoters:          {ids(q.current_voters)}",
        f"CurrentObservers:       {ids(q.observers)}",
    ]


def replication_rows(q: DescribeQuorumResponsePartitionData, human: bool, now_ms: int) -> list[list[str]]:
    """MetadataQuorumCommand's --replication table: the leader first, then the voters, then the observers."""
    leader_end = next((v.log_end_offset for v in q.current_voters if v.replica_id == q.leader_id), 0)

    def when(ts: int) -> str:
        if ts < 0:
            return "-1"
        return f"{max(now_ms - ts, 0)} ms ago" if human else str(ts)

    def row(r: ReplicaState, status: str) -> list[str]:
        lag = leader_end - r.log_end_offset
        return [str(r.replica_id), str(r.log_end_offset), str(lag), when(r.last_fetch_timestamp),
                when(r.last_caught_up_timestamp), status]  # fmt: skip

    voters = sorted(q.current_voters, key=lambda v: (v.replica_id != q.leader_id, v.replica_id))
    rows = [row(v, "Leader" if v.replica_id == q.leader_id else "Follower") for v in voters]
    rows += [row(o, "Observer") for o in sorted(q.observers, key=lambda o: o.replica_id)]
    return [["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"], *rows]


def table(rows: list[list[str]]) -> list[str]:
    """Kafka's ToolsUtils.prettyPrintTable: columns left-aligned, padded to the widest cell, tab-separated."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["\t".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


@click.group()
@version_option()
@bootstrap_option
@command_config_option
@click.pass_context
def main(ctx: click.Context, bootstrap_server: str, command_config: Path | None) -> None:
    """Describe the metadata (controller) quorum, as kafka-metadata-quorum.sh does."""
    ctx.obj = (bootstrap_server, command_config)


@main.command()
@click.option("--status", is_flag=True, help="The quorum's leader, epoch, high watermark, lag and members.")
@click.option("--replication", is_flag=True, help="Each voter's and observer's log end, lag and fetch times.")
@click.option("--human-readable", is_flag=True, help="With --replication: times as 'N ms ago'.")
@click.pass_obj
@one_line_errors
def describe(obj: tuple[str, Path | None], status: bool, replication: bool, human_readable: bool) -> None:
    """--status or --replication (one of them)."""
    if status == replication:
        raise click.ClickException("One of --status or --replication must be specified with describe sub-command")
    if human_readable and not replication:
        raise click.ClickException("The option --human-readable is only supported along with --replication")
    bootstrap_server, command_config = obj
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        cluster_id, quorum = admin.describe_metadata_quorum()
    lines = (
        status_lines(cluster_id, quorum)
        if status
        else table(replication_rows(quorum, human_readable, int(time.time() * 1000)))
    )
    for line in lines:
        click.echo(line)


if __name__ == "__main__":
    main()
