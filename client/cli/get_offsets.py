"""kl-get-offsets: Kafka's kafka-get-offsets.sh (GetOffsetShell), same flags and output.

    kl-get-offsets --bootstrap-server B [--topic REGEX] [--partitions 0,1] [--time -1|-2|-3|MS] [--command-config F]
    kl-get-offsets --bootstrap-server B --topic-partitions 'orders:0-2,audit.*' [--time ...]

One line per partition, `topic:partition:offset`, sorted by topic and partition: the offset the time
names (-1 or latest: the high watermark; -2 or earliest: the log start; -3 or max-timestamp: the record with
the largest timestamp; -4 or earliest-local, -5 or latest-tiered: KIP-1005's, for tiered storage; a timestamp
in ms: the first record at or after it); a partition with none (a time past its last record) gets no line.
A partition whose offset cannot be had (no leader within request.timeout.ms, ...) is named on stderr,
"Skip getting offsets for topic-partition T-P due to error: ...", and the others are printed, exit status 0,
as Kafka's tool does.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.config import AdminConfig
from client.sync import Admin
from net.errors import KafkaLiteError
from net.version import version_option

TIME_NAMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
PartitionFilter = tuple[re.Pattern[str], set[int] | tuple[int, int | None] | None]


def parse_time(value: str) -> int:
    if value in TIME_NAMES:
        return TIME_NAMES[value]
    try:
        t = int(value)
    except ValueError:
        raise click.ClickException(
            f"Malformed time argument {value}. Please use -1 or latest / -2 or earliest / -3 or max-timestamp / "
            "-4 or earliest-local / -5 or latest-tiered, or a specified long format timestamp"
        ) from None
    if t < -5:
        raise click.ClickException(f"Malformed time argument {value}: a special time is -1 to -5")
    return t


def _pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as e:
        raise click.ClickException(f"{text!r} is not a regular expression: {e}") from None


def include_list(topic: str | None) -> str:
    """Kafka's IncludeList: a regular expression in which a comma means "or"."""
    return ",".join(x.strip() for x in topic.split(",")).replace(",", "|") if topic and topic.strip() else ".*"


def parse_partitions(value: str) -> set[int]:
    try:
        ids = {int(x) for x in value.split(",") if x.strip()}
    except ValueError:
        raise click.ClickException(f"--partitions takes comma-separated partition ids, got {value!r}") from None
    if not ids or min(ids) < 0:
        raise click.ClickException(f"--partitions takes comma-separated partition ids, got {value!r}")
    return ids


def parse_topic_partitions(value: str) -> list[PartitionFilter]:
    """GetOffsetShell's --topic-partitions: comma-separated `topic-regex[:p | :p-q | :p- | :-q]` (q exclusive)."""
    out: list[PartitionFilter] = []
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        topic, colon, spec = item.partition(":")
        parts: set[int] | tuple[int, int | None] | None = None
        if colon and spec:  # `topic:` names every partition, as Kafka's filter reads it
            m = re.fullmatch(r"(\d*)-(\d*)|(\d+)", spec)
            if m is None or (m.group(3) is None and not (m.group(1) or m.group(2))):
                raise click.ClickException(f"Invalid topic-partition filter: {item}")
            if m.group(3) is not None:
                parts = {int(m.group(3))}
            else:
                parts = (int(m.group(1) or 0), int(m.group(2)) if m.group(2) else None)
        out.append((_pattern(topic or ".*"), parts))
    if not out:
        raise click.ClickException("--topic-partitions names no topic")
    return out


def _selected(p: int, parts: set[int] | tuple[int, int | None] | None) -> bool:
    if parts is None:
        return True
    if isinstance(parts, set):
        return p in parts
    low, high = parts
    return p >= low and (high is None or p < high)


@click.command()
@version_option()
@bootstrap_option
@command_config_option
@click.option("--topic", default=None, metavar="REGEX", help="The topics (a regular expression; default: all).")
@click.option("--partitions", default=None, metavar="0,1", help="The partitions (default: all).")
@click.option("--topic-partitions", default=None, metavar="T:P-Q,...", help="topic-regex[:partition range], ...")
@click.option("--time", "time_", default="-1", show_default=True, help="-1/latest, -2/earliest, -3/max-timestamp, ms.")
@click.option("--exclude-internal-topics", is_flag=True, help="Leave out internal topics (__consumer_offsets...).")
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    topic: str | None,
    partitions: str | None,
    topic_partitions: str | None,
    time_: str,
    exclude_internal_topics: bool,
) -> None:
    """Print the offsets of partitions at a time, as kafka-get-offsets.sh does."""
    if topic_partitions is not None and (topic is not None or partitions is not None):
        raise click.ClickException("--topic-partitions cannot be used with --topic or --partitions")
    timestamp = parse_time(time_)
    filters = (
        parse_topic_partitions(topic_partitions)
        if topic_partitions is not None
        else [(_pattern(include_list(topic)), parse_partitions(partitions) if partitions else None)]
    )
    with Admin(bootstrap_server, **client_kwargs(AdminConfig, command_config)) as admin:
        topics = admin.topic_partitions(include_internal=not exclude_internal_topics)
        wanted = sorted(
            (name, p)
            for name, ps in topics.items()
            for p in ps
            if any(rx.fullmatch(name) and _selected(p, parts) for rx, parts in filters)
        )
        if not wanted:
            raise click.ClickException("Could not match any topic-partitions with the specified filters")
        results = admin.list_offsets_each(wanted, timestamp)
    for t, p in wanted:
        r = results[(t, p)]
        if isinstance(r, KafkaLiteError):
            # Kafka's GetOffsetShell: the partitions that answered are printed, one that failed (no leader after
            # the retries, not authorized...) is named on stderr, and the exit status stays 0.
            why = str(r) if r.code.name in str(r) else f"{r.code.name}: {r}"
            click.echo(f"Skip getting offsets for topic-partition {t}-{p} due to error: {why}", err=True)
        elif r >= 0:  # none (a time past the last record): no line, as Kafka's tool prints it
            click.echo(f"{t}:{p}:{r}")


if __name__ == "__main__":
    main()
