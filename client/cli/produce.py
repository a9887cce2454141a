"""kl-produce: Kafka's kafka-console-producer.sh: one message per stdin line."""

from __future__ import annotations

import sys

import click

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors, parse_kv
from client.config import ProducerConfig
from client.sync import Producer


@click.command()
@bootstrap_option
@command_config_option
@click.option("--topic", required=True)
@click.option("--acks", default=None, type=click.Choice(["all", "-1", "0", "1"]), help="Default: all.")
@click.option("--parse-key", is_flag=True, help="Split each line into key and value at --key-separator.")
@click.option("--key-separator", default=None, help="Implies --parse-key. Kafka's default separator is a tab.")
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
    help="linger.ms, batch.size, delivery.timeout.ms, ...",
)
@one_line_errors
def main(
    bootstrap_server, command_config, topic, acks, parse_key, key_separator, partition, compression_codec, props
) -> None:
    """Read lines from stdin and produce each one as a message."""
    sep = key_separator if key_separator is not None else ("\t" if parse_key else None)
    # --command-config, then --producer-property, then the dedicated flags: later ones win.
    config = client_kwargs(ProducerConfig, command_config, parse_kv(props, "--producer-property"))
    if acks is not None:
        config["acks"] = acks
    if compression_codec is not None:
        config["compression_type"] = compression_codec
    with Producer(bootstrap_server, **config) as producer:
        producer.partitions_for(topic)  # an unknown topic fails now, with its name, not after max.block.ms
        for n, line in enumerate(sys.stdin, 1):
            line = line.rstrip("\n")
            key = None
            if sep is not None:
                if sep not in line:
                    raise click.ClickException(f"line {n}: no key separator {sep!r} found")
                key, line = line.split(sep, 1)
            producer.send(topic, line.encode(), key=key.encode() if key is not None else None, partition=partition)
        producer.flush()


if __name__ == "__main__":
    main()
