"""kl-transactions: Kafka's kafka-transactions.sh, same subcommands, flags and columns.

    kl-transactions --bootstrap-server B list
    kl-transactions --bootstrap-server B describe --transactional-id ID
    kl-transactions --bootstrap-server B describe-producers --topic T --partition P
    kl-transactions --bootstrap-server B find-hanging --broker-id N [--max-transaction-timeout MIN]

`list` asks every broker for the transactional ids it coordinates (ListTransactions), `describe` the id's
coordinator (DescribeTransactions), `describe-producers` the partition's leader (DescribeProducers), and
`find-hanging` every partition the broker leads for an open transaction older than the largest transaction
timeout (default 15 minutes, Kafka's transaction.max.timeout.ms).
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


async def _producers(client: KafkaLiteClient, topic: str, partition: int) -> list[list[Any]]:
    leader = await client.leader_for(topic, partition)
    request = DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(partition,)),))
    answer = await (await client.connection(leader)).call(request, TIMEOUT_S)
    (row,) = answer.topics[0].partitions
    if row.error_code:
        raise error_for(row.error_code, f"{topic}-{partition}: {row.error_message or ErrorCode(row.error_code).name}")
    return [
        [p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
         p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None"]
        for p in row.active_producers
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


if __name__ == "__main__":
    main()
