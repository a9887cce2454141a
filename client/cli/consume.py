"""kl-consume: Kafka's kafka-console-consumer.sh, its flags, properties and formatters."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click

from client.cli.common import bootstrap_option, client_config_option, client_kwargs, one_line_errors, parse_kv
from client.cli.formatters import formatter_for
from client.config import ConsumerConfig
from client.consumer import TopicPartition
from client.sync import Consumer
from net.errors import UnknownTopicOrPartitionError
from net.version import version_option

# How long one poll may block: a stop signal is acted on within this.
POLL_MS = 500
# How often a topic that does not exist yet is looked for.
TOPIC_WAIT_S = 0.5


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM ask the loop to stop instead of killing it, so the records in hand are
    printed, the group's offsets committed and the group left, as Kafka's console consumer does in its
    shutdown hook. A second signal stops at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True


def wait_for_topic(consumer: Consumer, topic: str, stop: StopSignals, expired: Any) -> list[int] | None:
    """The topic's partitions, once it exists (Kafka's console consumer waits for a topic too); None when
    stopped or when --timeout-ms passed first. Says once, on stderr, that it waits."""
    said = False
    while True:
        try:
            return consumer.partitions_for(topic)
        except UnknownTopicOrPartitionError:
            if stop.requested or expired():
                return None
            if not said:
                click.echo(f"Topic '{topic}' does not exist yet; waiting for it to be created.", err=True)
                said = True
            time.sleep(TOPIC_WAIT_S)


def legacy_print_flags(**flags: bool) -> dict[str, str]:
    """--print-key etc.: Kafka Lite's earlier shorthands for --property print.key=true etc."""
    return {name.replace("_", "."): "true" for name, on in flags.items() if on}


@click.command()
@version_option()
@bootstrap_option
@client_config_option("--consumer.config")
@click.option("--topic", required=True)
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset instead of the latest.")
@click.option("--group", default=None, help="Join this consumer group (offsets are committed as it goes).")
@click.option("--partition", type=int, default=None, help="Consume only this partition.")
@click.option("--offset", default=None, help="With --partition: an offset, 'earliest' or 'latest'.")
@click.option("--max-messages", type=int, default=None, help="Exit after this many messages.")
@click.option(
    "--timeout-ms", type=int, default=None, help="Exit when no message arrives for this long (or no topic yet)."
)
@click.option(
    "--formatter",
    default="kafka.tools.DefaultMessageFormatter",
    show_default=True,
    help="Kafka's formatter names: DefaultMessageFormatter, LoggingMessageFormatter, NoOpMessageFormatter.",
)
@click.option(
    "--property",
    "--formatter-property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="The formatter's: print.key, print.timestamp, print.partition, print.offset, print.headers, print.value, "
    "key.separator, line.separator, headers.separator, null.literal, key.deserializer, value.deserializer.",
)
@click.option(
    "--consumer-property",
    "consumer_props",
    multiple=True,
    metavar="KEY=VALUE",
    help="Consumer configs (Kafka's names: fetch.max.wait.ms, isolation.level, ...); they win over --consumer.config.",
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default=None,
    help="read_committed: only records of committed transactions (Kafka's default for this tool is read_uncommitted).",
)
@click.option("--print-key", is_flag=True, help="Same as --property print.key=true.")
@click.option("--print-offset", is_flag=True, help="Same as --property print.offset=true.")
@click.option("--print-partition", is_flag=True, help="Same as --property print.partition=true.")
@click.option("--print-timestamp", is_flag=True, help="Same as --property print.timestamp=true.")
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    topic: str,
    group: str | None,
    from_beginning: bool,
    partition: int | None,
    offset: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    formatter: str,
    properties: tuple[str, ...],
    consumer_props: tuple[str, ...],
    isolation_level: str | None,
    print_key: bool,
    print_offset: bool,
    print_partition: bool,
    print_timestamp: bool,
) -> None:
    """Print messages of a topic to stdout, one per line."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset requires --partition")
    if offset is not None and from_beginning:
        raise click.UsageError("--from-beginning and --offset cannot be used together")
    if offset not in (None, "earliest", "latest") and not offset.isdigit():
        raise click.UsageError(f"--offset must be a number, 'earliest' or 'latest', got {offset!r}")
    fmt_props = legacy_print_flags(
        print_key=print_key, print_offset=print_offset, print_partition=print_partition, print_timestamp=print_timestamp
    )
    fmt_props.update(parse_kv(properties, "--property", strip_values=False))
    writer = formatter_for(formatter, fmt_props)
    # This process is ours: decoding may pause the GC (see AsyncConsumer).
    config: dict[str, Any] = {
        "pause_gc_while_decoding": True,
        **client_kwargs(ConsumerConfig, command_config, parse_kv(consumer_props, "--consumer-property")),
    }
    if group:
        config["group_id"] = group  # as in Kafka, --group wins over a group.id in the properties
    if isolation_level is not None:
        config["isolation_level"] = isolation_level
    if config.get("group_id") is not None and partition is not None:
        raise click.UsageError("--group cannot be combined with --partition (the group assigns partitions)")
    if from_beginning and config.get("auto_offset_reset") not in (None, "earliest"):
        raise click.UsageError(f"--from-beginning contradicts auto.offset.reset={config['auto_offset_reset']}")
    if from_beginning or offset == "earliest":
        config["auto_offset_reset"] = "earliest"
    config.setdefault("auto_offset_reset", "latest")
    with StopSignals() as stop:
        consumer = Consumer(bootstrap_server, **config)
        in_group = config.get("group_id") is not None
        count = consume(consumer, topic, in_group, partition, offset, max_messages, timeout_ms, writer, stop)
    click.echo(f"Processed a total of {count} messages", err=True)


def consume(
    consumer: Consumer,
    topic: str,
    in_group: bool,
    partition: int | None,
    offset: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    writer: Any,
    stop: StopSignals,
) -> int:
    """Print records until --max-messages, --timeout-ms or a stop signal; the consumer is closed (offsets
    committed, the group left) before this returns. Returns how many records were printed."""
    count = 0
    last = time.monotonic()

    def expired() -> bool:
        return timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms

    with consumer:
        parts = wait_for_topic(consumer, topic, stop, expired)
        if parts is None:
            return 0
        if in_group:
            consumer.subscribe([topic])
        else:
            if partition is not None:
                if partition not in parts:
                    raise UnknownTopicOrPartitionError(
                        f"topic '{topic}' has no partition {partition} (it has {len(parts)})"
                    )
                parts = [partition]
            consumer.assign([TopicPartition(topic, p) for p in parts])
            if offset not in (None, "earliest", "latest"):
                assert partition is not None  # main() refuses --offset without --partition
                consumer.seek(TopicPartition(topic, partition), int(offset))
            elif offset == "latest":
                assert partition is not None
                consumer.seek_to_end(TopicPartition(topic, partition))
        out = sys.stdout
        while not stop.requested and (max_messages is None or count < max_messages):
            wait = POLL_MS if timeout_ms is None else max(1, min(POLL_MS, timeout_ms))
            records = consumer.poll(wait, None if max_messages is None else max_messages - count)
            if not records:
                if expired():
                    break
                continue
            last = time.monotonic()
            try:
                writer.write(records, out)
                out.flush()
            except BrokenPipeError:  # `kl-consume ... | head`: the reader is gone, which is a normal end
                sys.stdout = None  # nothing more to flush at exit
                break
            count += len(records)
    return count


if __name__ == "__main__":
    main()
