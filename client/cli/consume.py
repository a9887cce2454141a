"""kl-consume: Kafka's kafka-console-consumer.sh."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import ConsumerConfig
from client.consumer import TopicPartition
from client.sync import Consumer


def format_record(r, print_key: bool, print_offset: bool, print_partition: bool, print_timestamp: bool) -> str:  # type: ignore[no-untyped-def]
    parts = []
    if print_timestamp:
        parts.append(f"CreateTime:{r.timestamp}")
    if print_partition:
        parts.append(f"Partition:{r.partition}")
    if print_offset:
        parts.append(f"Offset:{r.offset}")
    if print_key:
        parts.append("null" if r.key is None else r.key.decode(errors="replace"))
    parts.append("null" if r.value is None else r.value.decode(errors="replace"))
    return "\t".join(parts)


@click.command()
@bootstrap_option
@command_config_option
@click.option("--topic", required=True)
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset instead of the latest.")
@click.option("--group", default=None, help="Join this consumer group (offsets are committed as it goes).")
@click.option("--partition", type=int, default=None, help="Consume only this partition.")
@click.option("--offset", default=None, help="With --partition: an offset, 'earliest' or 'latest'.")
@click.option("--max-messages", type=int, default=None, help="Exit after this many messages.")
@click.option("--timeout-ms", type=int, default=None, help="Exit when no message arrives for this long.")
@click.option("--print-key", is_flag=True)
@click.option("--print-offset", is_flag=True)
@click.option("--print-partition", is_flag=True)
@click.option("--print-timestamp", is_flag=True)
@one_line_errors
def main(
    bootstrap_server,
    command_config,
    topic,
    group,
    from_beginning,
    partition,
    offset,
    max_messages,
    timeout_ms,
    print_key,
    print_offset,
    print_partition,
    print_timestamp,
) -> None:
    """Print messages of a topic to stdout, one per line."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset requires --partition")
    if group is not None and partition is not None:
        raise click.UsageError("--group cannot be combined with --partition (the group assigns partitions)")
    reset = "earliest" if from_beginning or offset == "earliest" else "latest"
    count = 0
    out = sys.stdout
    # This process is ours: decoding may pause the GC (see AsyncConsumer).
    config: dict[str, Any] = {"pause_gc_while_decoding": True, **client_kwargs(ConsumerConfig, command_config)}
    if group:
        config["group_id"] = group
    config.setdefault("auto_offset_reset", reset)
    with Consumer(bootstrap_server, **config) as consumer:
        parts = consumer.partitions_for(topic)
        if group is not None:
            consumer.subscribe([topic])
        elif partition is not None:
            if partition not in parts:
                raise click.ClickException(
                    f"UNKNOWN_TOPIC_OR_PARTITION: {topic} has no partition {partition} (it has {len(parts)})"
                )
            parts = [partition]
        if group is None:
            consumer.assign([TopicPartition(topic, p) for p in parts])
        if offset not in (None, "earliest", "latest"):
            if not offset.isdigit():
                raise click.UsageError(f"--offset must be a number, 'earliest' or 'latest', got {offset!r}")
            consumer.seek(TopicPartition(topic, partition), int(offset))
        last = time.monotonic()
        try:
            while max_messages is None or count < max_messages:
                wait = 1000 if timeout_ms is None else max(1, min(1000, timeout_ms))
                records = consumer.poll(wait, None if max_messages is None else max_messages - count)
                if not records:
                    if timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms:
                        break
                    continue
                last = time.monotonic()
                out.write(
                    "".join(
                        format_record(r, print_key, print_offset, print_partition, print_timestamp) + "\n"
                        for r in records
                    )
                )
                out.flush()
                count += len(records)
        except KeyboardInterrupt:
            pass
    click.echo(f"Processed a total of {count} messages", err=True)


if __name__ == "__main__":
    main()
