"""kl-transactions: Kafka's kafka-transactions.sh, same subcommands, flags and columns.

    kl-transactions --bootstrap-server B list
    kl-transactions --bootstrap-server B describe --transactional-id ID
    kl-transactions --bootstrap-server B describe-producers --topic T --partition P
    kl-transactions --bootstrap-server B find-hanging --broker-id N [--max-transaction-timeout MIN]
    kl-transactions --bootstrap-server B abort --topic T --partition P --start-offset O
    kl-transactions --bootstrap-server B abort --topic T --partition P --producer-id I --producer-epoch E
        --coordinator-epoch C

`list` asks every broker for the transactional ids it coordinates (ListTransactions), `describe` the id's
coordinator (DescribeTransactions), `describe-producers` the partition's leader (DescribeProducers), and
`find-hanging` every partition the broker leads for an open transaction older than the largest transaction
timeout (default 15 minutes, Kafka's transaction.max.timeout.ms). `abort` ends a hanging transaction as Kafka's
Admin.abortTransaction does: an abort marker written by the partition's leader (WriteTxnMarkers, which needs
ClusterAction on the cluster), for the producer whose open transaction starts at the offset (DescribeProducers)
or the one named.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.cluster import KafkaLiteClient
from client.config import AdminConfig
from client.sync import with_client
from client.transactions import KEY_TYPE_TRANSACTION, find_coordinator
from net.errors import ErrorCode, error_for
from net.schema.describe_producers import DescribeProducersRequest, TopicRequest
from net.schema.describe_transactions import DescribeTransactionsRequest
from net.schema.list_transactions import ListTransactionsRequest
from net.schema.write_txn_markers import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from net.version import version_option

TIMEOUT_S = 30.0


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """Kafka's layout: columns separated by tabs, each padded to its widest cell."""
    cells = [headers, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("\t".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


async def _list(client: KafkaLiteClient) -> list[list[Any]]:
    await client.refresh_metadata([])
    rows = []
    for broker in sorted(client.metadata.brokers):
        answer = await (await client.connection(broker)).call(ListTransactionsRequest(), TIMEOUT_S)
        if answer.error_code:
            raise error_for(answer.error_code, f"ListTransactions on broker {broker}")
        rows += [[s.transactional_id, broker, s.producer_id, s.transaction_state] for s in answer.transaction_states]
    return rows


async def _describe(client: KafkaLiteClient, tid: str) -> list[Any]:
    node = await find_coordinator(client, tid, KEY_TYPE_TRANSACTION)
    answer = await (await client.connection(node)).call(
        DescribeTransactionsRequest(transactional_ids=(tid,)), TIMEOUT_S
    )
    (st,) = answer.transaction_states
    if st.error_code:
        raise error_for(st.error_code, f"transactional id {tid!r}: {ErrorCode(st.error_code).name}")
    start = int(st.transaction_start_time.timestamp() * 1000) if st.transaction_state == "Ongoing" else -1
    duration = int(time.time() * 1000) - start if start >= 0 else -1
    parts = ",".join(f"{t.topic}-{p}" for t in st.topics for p in t.partitions)
    timeout_ms = int(st.transaction_timeout.total_seconds() * 1000)
    return [node, tid, st.producer_id, st.producer_epoch, st.transaction_state, timeout_ms, start, duration, parts]


async def _active_producers(client: KafkaLiteClient, topic: str, partition: int) -> Any:
    """The partition leader's DescribeProducers rows."""
    leader = await client.leader_for(topic, partition)
    request = DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(partition,)),))
    answer = await (await client.connection(leader)).call(request, TIMEOUT_S)
    (row,) = answer.topics[0].partitions
    if row.error_code:
        raise error_for(row.error_code, f"{topic}-{partition}: {row.error_message or ErrorCode(row.error_code).name}")
    return row.active_producers


async def _producers(client: KafkaLiteClient, topic: str, partition: int) -> list[list[Any]]:
    return [
        [p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
         p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None"]
        for p in await _active_producers(client, topic, partition)
    ]  # fmt: skip


async def _hanging(client: KafkaLiteClient, broker: int, max_minutes: int) -> list[list[Any]]:
    await client.refresh_metadata(None)
    led = [
        (t, p)
        for t, tm in sorted(client.metadata.topics.items())
        for p, pm in sorted(tm.partitions.items())
        if pm.leader == broker
    ]
    if not led:
        return []
    by_topic: dict[str, list[int]] = {}
    for t, p in led:
        by_topic.setdefault(t, []).append(p)
    request = DescribeProducersRequest(
        topics=tuple(TopicRequest(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
    )
    answer = await (await client.connection(broker)).call(request, TIMEOUT_S)
    now = int(time.time() * 1000)
    rows = []
    for t in answer.topics:
        for row in t.partitions:
            for p in row.active_producers:
                age_min = (now - p.last_timestamp) // 60_000
                if p.current_txn_start_offset >= 0 and age_min >= max_minutes:
                    rows.append([t.name, row.partition_index, p.producer_id, p.producer_epoch, p.coordinator_epoch,
                                 p.current_txn_start_offset, p.last_timestamp, age_min])  # fmt: skip
    return rows


async def _open_at(client: KafkaLiteClient, topic: str, partition: int, start_offset: int) -> tuple[int, int, int]:
    """(producer id, epoch, coordinator epoch) of the producer whose open transaction on the partition starts at
    `start_offset` (Kafka's TransactionsCommand: an unknown coordinator epoch is 0)."""
    for p in await _active_producers(client, topic, partition):
        if p.current_txn_start_offset == start_offset:
            return p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0)
    raise ValueError(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")


async def _abort(client: KafkaLiteClient, topic: str, partition: int, producer: tuple[int, int, int]) -> None:
    """An abort marker for `producer` (id, epoch, coordinator epoch) on the partition, by its leader."""
    pid, epoch, coordinator_epoch = producer
    leader = await client.leader_for(topic, partition)
    marker = WritableTxnMarker(
        producer_id=pid,
        producer_epoch=epoch,
        transaction_result=False,
        topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(partition,)),),
        coordinator_epoch=coordinator_epoch,
    )
    answer = await (await client.connection(leader)).call(WriteTxnMarkersRequest(markers=(marker,)), TIMEOUT_S)
    code = answer.markers[0].topics[0].partitions[0].error_code
    if code:
        raise error_for(code, f"aborting producer {pid}'s transaction on {topic}-{partition}: {ErrorCode(code).name}")


@click.group()
@version_option()
@bootstrap_option
@command_config_option
@click.pass_context
@one_line_errors
def main(ctx: click.Context, bootstrap_server: str, command_config: Path | None) -> None:
    """Transactions: list and describe transactional ids, a partition's producers, hanging transactions."""
    ctx.obj = (bootstrap_server, client_kwargs(AdminConfig, command_config, {}))


def _run(ctx: click.Context, fn: Any) -> Any:
    bootstrap, config = ctx.obj
    return with_client(bootstrap, config, "kl-transactions", fn, TIMEOUT_S * 2)


@main.command("list")
@click.pass_context
@one_line_errors
def list_(ctx: click.Context) -> None:
    """Every transactional id, with its coordinator (kafka-transactions.sh list)."""
    rows = _run(ctx, _list)
    click.echo(_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows))


@main.command()
@click.option("--transactional-id", required=True)
@click.pass_context
@one_line_errors
def describe(ctx: click.Context, transactional_id: str) -> None:
    """One transactional id's state at its coordinator."""
    row = _run(ctx, lambda c: _describe(c, transactional_id))
    headers = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState"]
    headers += ["TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"]
    click.echo(_table(headers, [row]))


@main.command("describe-producers")
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.pass_context
@one_line_errors
def describe_producers(ctx: click.Context, topic: str, partition: int) -> None:
    """The producers the partition's leader knows, with their open transaction's start offset."""
    rows = _run(ctx, lambda c: _producers(c, topic, partition))
    headers = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
               "CurrentTransactionStartOffset"]  # fmt: skip
    click.echo(_table(headers, rows))


@main.command("find-hanging")
@click.option("--broker-id", type=int, required=True)
@click.option("--max-transaction-timeout", type=int, default=15, show_default=True, help="Minutes.")
@click.pass_context
@one_line_errors
def find_hanging(ctx: click.Context, broker_id: int, max_transaction_timeout: int) -> None:
    """Open transactions older than the largest transaction timeout on the partitions the broker leads."""
    rows = _run(ctx, lambda c: _hanging(c, broker_id, max_transaction_timeout))
    headers = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
               "LastTimestamp", "Duration(min)"]  # fmt: skip
    click.echo(_table(headers, rows))


@main.command()
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--start-offset", type=int, help="The first offset of the open transaction to abort.")
@click.option(
    "--producer-id", type=int, help="With --producer-epoch and --coordinator-epoch, instead of --start-offset."
)
@click.option("--producer-epoch", type=int)
@click.option("--coordinator-epoch", type=int)
@click.pass_context
@one_line_errors
def abort(
    ctx: click.Context,
    topic: str,
    partition: int,
    start_offset: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int | None,
) -> None:
    """Abort a hanging transaction on a partition (needs ClusterAction on the cluster)."""
    explicit = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is None and None in explicit:
        raise click.UsageError("give --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch")
    if start_offset is not None and explicit != (None, None, None):
        raise click.UsageError(
            "--start-offset and --producer-id/--producer-epoch/--coordinator-epoch exclude each other"
        )

    async def run(client: KafkaLiteClient) -> tuple[int, int, int]:
        if start_offset is not None:
            producer = await _open_at(client, topic, partition, start_offset)
        else:
            producer = (producer_id, producer_epoch, coordinator_epoch)  # type: ignore[assignment]
        await _abort(client, topic, partition, producer)
        return producer

    pid, epoch, _ = _run(ctx, run)
    click.echo(f"Aborted the transaction of producer {pid} (epoch {epoch}) on {topic}-{partition}")


if __name__ == "__main__":
    main()
