"""kl-dashboard --bootstrap-server B [--http-port 8080] [--command-config FILE]: the web console, a client of
the cluster (the command config's client settings apply to every client it makes)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from pathlib import Path

import click
from aiohttp import web

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.cluster import parse_bootstrap
from client.config import AdminConfig
from client.dashboard.app import make_app
from client.dashboard.watcher import ClusterWatcher
from net.version import version_option


def console_url(host: str, port: int) -> str:
    """The URL to open: a wildcard listen address is reached through the loopback one."""
    shown = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://{f'[{shown}]' if ':' in shown else shown}:{port}/cluster"


async def serve(
    bootstrap: str, host: str, port: int, interval_s: float = 1.0, client_config: dict | None = None
) -> None:
    watcher = ClusterWatcher(bootstrap, interval_s, client_config)
    runner = web.AppRunner(make_app(watcher), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    click.echo(f"Kafka Lite console: {console_url(host, port)}")  # once listening: the URL works when printed
    sys.stdout.flush()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option()
@bootstrap_option
@command_config_option
@click.option("--http-host", default="127.0.0.1", show_default=True, help="Address the console listens on.")
@click.option("--http-port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="Console port.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(0.2, 60), help="Seconds per poll.")
@one_line_errors
def main(bootstrap_server: str, command_config: Path | None, http_host: str, http_port: int, interval: float) -> None:
    """A web console for the cluster: brokers, topics, messages, groups and throughput, updated live."""
    parse_bootstrap(bootstrap_server)  # a malformed list is a one-line error before anything starts
    client_config = client_kwargs(AdminConfig, command_config)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((http_host, http_port))
        except OSError as e:
            raise click.ClickException(f"cannot listen on {http_host}:{http_port}: {e.strerror}") from None
    logging.getLogger("kafkalite").setLevel(logging.CRITICAL)  # errors go to the page, not the terminal
    try:
        asyncio.run(serve(bootstrap_server, http_host, http_port, interval, client_config))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
