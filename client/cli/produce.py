"""kl-produce: Kafka's kafka-console-producer.sh: one message per stdin line."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import click

from client.cli.common import bootstrap_option, client_config_option, client_kwargs, one_line_errors, parse_kv
from client.config import ProducerConfig
from client.sync import Producer
from net.version import version_option


def _flag(props: dict[str, str], key: str) -> bool:
    raw = props.get(key, "false").strip().lower()
    if raw not in ("true", "false"):
        raise ValueError(f"--property {key}={props[key]}: expected true or false")
    return raw == "true"


@dataclass
class LineReader:
    """Kafka's LineMessageReader: a line is [headers<headers.delimiter>][key<key.separator>]value, with its
    properties' names and defaults; a key, value or header value equal to null.marker is null."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_marker: str | None = None
    ignore_error: bool = False

    KEYS = (
        "parse.key",
        "key.separator",
        "parse.headers",
        "headers.delimiter",
        "headers.separator",
        "headers.key.separator",
        "null.marker",
        "ignore.error",
    )

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineReader:
        unknown = sorted(set(props) - set(cls.KEYS))
        if unknown:
            raise ValueError(f"unknown --property {unknown[0]!r} (the line reader takes: {', '.join(cls.KEYS)})")
        return cls(
            parse_key=_flag(props, "parse.key"),
            key_separator=props.get("key.separator", "\t"),
            parse_headers=_flag(props, "parse.headers"),
            headers_delimiter=props.get("headers.delimiter", "\t"),
            headers_separator=props.get("headers.separator", ","),
            headers_key_separator=props.get("headers.key.separator", ":"),
            null_marker=props.get("null.marker"),
            ignore_error=_flag(props, "ignore.error"),
        )

    def _bytes(self, text: str) -> bytes | None:
        return None if text == self.null_marker else text.encode()

    def read(self, n: int, line: str) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) of line number `n`; a line without a separator it needs is an error naming the
        line, unless ignore.error (then the whole line is the value, as in Kafka)."""
        headers: list[tuple[str, bytes | None]] = []
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delimiter)
            if sep:
                line = rest
                for h in head.split(self.headers_separator) if head else []:
                    k, _, v = h.partition(self.headers_key_separator)
                    headers.append((k, self._bytes(v)))
            elif not self.ignore_error:
                raise ValueError(f"No headers delimiter {self.headers_delimiter!r} found on line number {n}: {line!r}")
        key = None
        if self.parse_key:
            k, sep, rest = line.partition(self.key_separator)
            if sep:
                key, line = self._bytes(k), rest
            elif not self.ignore_error:
                raise ValueError(f"No key separator {self.key_separator!r} found on line number {n}: {line!r}")
        return key, self._bytes(line), headers


@click.command()
@version_option()
@bootstrap_option
@client_config_option("--producer.config")
@click.option("--topic", required=True)
@click.option("--acks", "--request-required-acks", default=None, type=click.Choice(["all", "-1", "0", "1"]))
@click.option("--parse-key", is_flag=True, help="Same as --property parse.key=true.")
@click.option("--key-separator", default=None, help="Same as --property key.separator=SEP (implies --parse-key).")
@click.option("--partition", type=int, default=None, help="Send every message to this partition.")
@click.option(
    "--compression-codec",
    default=None,
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    help="Default: none.",
)
@click.option(
    "--producer-property",
    "props",
    multiple=True,
    metavar="KEY=VALUE",
    help="Producer configs: linger.ms, batch.size, delivery.timeout.ms, ... (they win over --producer.config).",
)
@click.option(
    "--property",
    "--reader-property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="The line reader's: parse.key, key.separator, parse.headers, headers.delimiter, headers.separator, "
    "headers.key.separator, null.marker, ignore.error.",
)
@click.option(
    "--transactional-id",
    default=None,
    help="Write every line of the input in one transaction with this transactional.id, committed at the end "
    "(aborted if a record fails).",
)
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    topic: str,
    acks: str | None,
    parse_key: bool,
    key_separator: str | None,
    partition: int | None,
    compression_codec: str | None,
    props: tuple[str, ...],
    properties: tuple[str, ...],
    transactional_id: str | None,
) -> None:
    """Read lines from stdin and produce each one as a message."""
    reader_props = {"parse.key": "true"} if parse_key or key_separator is not None else {}
    if key_separator is not None:
        reader_props["key.separator"] = key_separator
    reader_props.update(parse_kv(properties, "--property", strip_values=False))
    reader = LineReader.from_properties(reader_props)
    # --producer.config, then --producer-property, then the dedicated flags: later ones win.
    config = client_kwargs(ProducerConfig, command_config, parse_kv(props, "--producer-property"))
    if acks is not None:
        config["acks"] = acks
    if compression_codec is not None:
        config["compression_type"] = compression_codec
    if transactional_id is not None:
        config["transactional_id"] = transactional_id
    with Producer(bootstrap_server, **config) as producer:
        producer.partitions_for(topic)  # an unknown topic fails now, with its name, not after max.block.ms
        transactional = producer.transactional_id is not None
        if transactional:
            producer.init_transactions()
            producer.begin_transaction()
        try:
            for n, line in enumerate(sys.stdin, 1):
                key, value, headers = reader.read(n, line.rstrip("\n"))
                producer.send(topic, value, key=key, partition=partition, headers=headers or None)
            if transactional:
                producer.commit_transaction()
            else:
                producer.flush()
        except BaseException:
            if transactional:
                producer.abort_transaction()  # nothing of this input becomes visible to read_committed readers
            raise


if __name__ == "__main__":
    main()
