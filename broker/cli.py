"""kl-broker: run a broker process."""

# ruff: noqa: E402  (the collector is paused before the imports below)
from __future__ import annotations

import gc

# No cyclic garbage collection while the broker's modules are imported and, in `start`, until the broker has
# started: the imports build hundreds of thousands of objects that live as long as the process, and each
# young-generation collection walks them again, ~15% of the imports' CPU on a restart (issue 29 §3). Resumed at
# the end of this module and after the start (which ends with one collection and gc.freeze(): long_lived.py).
_GC_WAS_ENABLED = gc.isenabled()
gc.disable()

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypeVar

import click

from broker.server.config import TOPIC_DEFAULT_KEYS, BrokerConfig
from net.config_def import read_properties
from net.errors import KafkaLiteError
from net.version import version_option


def _setup_logging(broker_id: int, level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s [broker {broker_id}] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


async def _run(cfg: BrokerConfig) -> None:
    enabled = gc.isenabled()
    gc.disable()  # until started: see the top of this module
    try:
        from broker.server.broker_server import BrokerServer

        server = BrokerServer(cfg)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await server.start()
    finally:
        if enabled:
            gc.enable()
    await stop.wait()
    await server.stop()


@click.group()
@version_option()
def main() -> None:
    """Kafka Lite broker."""


FC = TypeVar("FC", bound=Callable[..., object])  # a click command function, as click.option takes it

OVERRIDE_OPTION = click.option(
    "--override", "overrides", multiple=True, metavar="KEY=VALUE", help="Any config key, repeatable."
)


def add_scram_option(help_text: str) -> Callable[[FC], FC]:
    return click.option(
        "--add-scram", "add_scram", multiple=True, metavar="'SCRAM-SHA-256=[name=admin,password=...]'", help=help_text
    )


@main.command()
@click.option("--id", "broker_id", type=int, default=None, help="broker.id")
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to listen on (default 9092).")
@click.option(
    "--kafka-port", type=int, default=None, help="kafka.port: a listener for Kafka clients (Kafka's protocol)."
)
@click.option("--kafka-host", default=None, help="kafka.advertised.host: the host Kafka clients are told to use.")
@click.option("--data-dir", "data_dir", default=None, help="log.dirs: where partitions are stored.")
@click.option(
    "--peers",
    default=None,
    metavar="ID@HOST:PORT,...",
    help="Every broker of the cluster, this one included (default: a cluster of one).",
)
@click.option(
    "--coordination",
    type=click.Choice(["custom", "zookeeper"]),
    default=None,
    help="coordination: the brokers' own controller quorum (custom, the default) or ZooKeeper.",
)
@click.option(
    "--zookeeper",
    default=None,
    metavar="HOST:PORT[,HOST:PORT][/CHROOT]",
    help="zookeeper.connect, for --coordination zookeeper (chroot default /kafkalite).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    default=None,
    help="A server.properties file; command-line options override it.",
)
@OVERRIDE_OPTION
@add_scram_option("On an empty data dir: a first SCRAM user of the new cluster (kafka-storage.sh format --add-scram).")
@click.option("--log-level", default="INFO", show_default=True)
def start(
    broker_id: int | None,
    host: str | None,
    port: int | None,
    kafka_port: int | None,
    kafka_host: str | None,
    data_dir: str | None,
    peers: str | None,
    coordination: str | None,
    zookeeper: str | None,
    config_file: Path | None,
    overrides: tuple[str, ...],
    add_scram: tuple[str, ...],
    log_level: str,
) -> None:
    """Start a broker in the foreground. SIGTERM shuts it down cleanly."""
    flags: dict[str, object] = {
        "broker.id": broker_id,
        "host": host,
        "port": port,
        "kafka.port": kafka_port,
        "kafka.advertised.host": kafka_host,
        "log.dirs": data_dir,
        "peers": peers,
        "coordination": coordination,
        "zookeeper.connect": zookeeper,
    }
    try:
        cfg = BrokerConfig.from_props(_props(config_file, overrides, flags))
    except KafkaLiteError as e:
        raise click.ClickException(str(e)) from None
    _setup_logging(cfg.broker_id, log_level)
    _owner_only(cfg)
    if add_scram:
        from broker.security.bootstrap import format_bootstrap

        try:
            if not format_bootstrap(Path(cfg.log_dirs[0]), list(add_scram)):
                logging.getLogger("kafkalite.security").warning(
                    "%s is already formatted: --add-scram ignored (manage users with kl-configs)", cfg.log_dirs[0]
                )
        except (ValueError, KafkaLiteError) as e:
            raise click.ClickException(f"--add-scram: {e}") from None
    try:
        import uvloop

        uvloop.run(_run(cfg))
    except KafkaLiteError as e:
        logging.getLogger("kafkalite.broker").error("fatal: %s", e)
        raise click.ClickException(str(e)) from None
    except OSError as e:
        logging.getLogger("kafkalite.broker").error("fatal: %s", e)
        raise click.ClickException(
            f"{e.strerror or e} ({getattr(e, 'filename', '') or cfg.host + ':' + str(cfg.port)})"
        ) from None


def _owner_only(cfg: BrokerConfig) -> None:
    """Everything this process creates is the broker's alone (or its group's), whatever umask it was started
    with; a data dir others can read that holds credentials stops it here (broker/security/file_modes.py)."""
    from broker.security.file_modes import DataDirExposed, process_umask, secure_log_dirs

    os.umask(process_umask(cfg.log_dirs_group_readable))
    try:
        for d in secure_log_dirs([Path(d) for d in cfg.log_dirs], cfg.log_dirs_group_readable):
            logging.getLogger("kafkalite.security").info("%s was open to other users: tightened", d)
    except DataDirExposed as e:
        raise click.ClickException(str(e)) from None


@main.command()
@click.option(
    "--config", "config_file", type=click.Path(path_type=Path), required=True, help="The broker's server.properties."
)
@OVERRIDE_OPTION
@add_scram_option("A first SCRAM user of the new cluster, repeatable.")
@click.option(
    "--add-scram-file",
    "scram_file",
    type=click.File("r"),
    default=None,
    help="--add-scram specs, one per line, from a file ('-': stdin), so that no password is on a command line.",
)
@click.option("--ignore-formatted", is_flag=True, help="A data dir already in use is left as it is, not an error.")
def format(  # noqa: A001 - kafka-storage.sh's verb
    config_file: Path,
    overrides: tuple[str, ...],
    add_scram: tuple[str, ...],
    scram_file: TextIO | None,
    ignore_formatted: bool,
) -> None:
    """Prepare an empty data dir with the new cluster's first users (kafka-storage.sh format)."""
    from broker.security.bootstrap import format_bootstrap

    specs = list(add_scram)
    if scram_file is not None:
        specs += [line.strip() for line in scram_file if line.strip() and not line.lstrip().startswith("#")]
    try:
        cfg = BrokerConfig.from_props(_props(config_file, overrides, {}))
        _owner_only(cfg)
        log_dir = Path(cfg.log_dirs[0])
        formatted = format_bootstrap(log_dir, specs)
    except (ValueError, KafkaLiteError, OSError) as e:
        raise click.ClickException(f"format: {e}") from None
    if not formatted:
        if not ignore_formatted:
            raise click.ClickException(f"{log_dir} is already formatted (use --ignore-formatted to leave it so)")
        click.echo(f"{log_dir} is already formatted: left as it is")
        return
    click.echo(f"Formatted {log_dir} with {len(specs)} SCRAM credential(s)")


def _props(config_file: Path | None, overrides: tuple[str, ...], flags: dict[str, object]) -> dict[str, str]:
    """server.properties, then --override KEY=VALUE, then the dedicated flags: later ones win."""
    props: dict[str, str] = read_properties(config_file) if config_file else {}
    for o in overrides:
        if "=" not in o:
            raise click.UsageError(f"--override expects KEY=VALUE, got {o!r}")
        k, v = o.split("=", 1)
        props[k.strip()] = v.strip()
    props.update({k: str(v) for k, v in flags.items() if v is not None})
    return props


@main.command()
@click.option(
    "--config", "config_file", type=click.Path(path_type=Path), default=None, help="A server.properties file."
)
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE", help="Any config key, repeatable.")
@click.option("--keys", is_flag=True, help="List every key with its type, default, valid values and meaning.")
def configs(config_file: Path | None, overrides: tuple[str, ...], keys: bool) -> None:
    """Print the configuration a broker would start with, as kafka-configs.sh --describe --all does."""
    if keys:
        for row in BrokerConfig.describe_keys():
            click.echo(f"{row.name}\t{row.type}\t{row.default}\t{row.valid}\t{row.doc}")
        return
    try:
        given = _props(config_file, overrides, {})
        cfg = BrokerConfig.from_props(given)
    except KafkaLiteError as e:
        raise click.ClickException(str(e)) from None
    effective = cfg.to_props() | {b: cfg.topic_config_defaults().to_props()[t] for b, t in TOPIC_DEFAULT_KEYS.items()}
    click.echo(f"All configs for broker {cfg.broker_id} are:")
    secret = cfg.sensitive_keys()
    for name, value in sorted(effective.items()):
        source = "STATIC_BROKER_CONFIG" if name in given else "DEFAULT_CONFIG"
        if name in secret:  # as kafka-configs.sh prints a password: never its value
            value = "null"
        click.echo(f"  {name}={value} sensitive={str(name in secret).lower()} synonyms={{{source}:{name}={value}}}")


if _GC_WAS_ENABLED:
    gc.enable()  # the module's imports are done (see the top)

if __name__ == "__main__":
    main()
