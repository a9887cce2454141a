"""kl-dashboard --bootstrap-server B [--http-port 8080] [--command-config FILE] [mode flags]: the web console,
a client of the cluster (the command config's client settings apply to every client it makes). Its modes
(client/dashboard/access.py, docs/SECURITY.md "Console") decide who logs in and whose powers it uses."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import sys
from pathlib import Path

import click
from aiohttp import web

from client.cli.common import bootstrap_option, client_kwargs, command_config_option, one_line_errors
from client.cluster import parse_bootstrap
from client.config import AdminConfig
from client.dashboard.access import AccessError, decide
from client.dashboard.app import make_app
from client.dashboard.context import Console
from client.dashboard.guard import Served, is_loopback
from client.dashboard.sessions import DEFAULT_TIMEOUT_S
from net.version import version_option

MODES_HELP = """A web console for the cluster: brokers, topics, messages, groups and throughput, updated live.

\b
Modes (docs/SECURITY.md, "Console"):
  login    --command-config for a SASL cluster without sasl.username: every user
           logs in with their own cluster user and password and the console acts
           as that user (the broker's ACLs decide what each sees and changes).
  service  --command-config with sasl.username (or an SSL client certificate):
           the console acts as that identity, only with --allow-user NAME (those
           users log in with their cluster password, then the identity acts for
           them) and/or --read-only (without --allow-user: no login, and anyone
           who reaches the console sees what the identity may describe and read,
           records included; never changes anything).
  open     no SASL: no login; anyone who reaches the console sees the cluster,
           read-only unless --allow-writes.
"""


def console_url(host: str, port: int, scheme: str = "http") -> str:
    """The URL to open: a wildcard listen address is reached through the loopback one."""
    shown = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"{scheme}://{f'[{shown}]' if ':' in shown else shown}:{port}/cluster"


def tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None:
        raise click.UsageError("--http-key needs --http-cert")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert), str(key) if key else None)
    except (OSError, ssl.SSLError) as e:
        raise click.ClickException(f"--http-cert {cert}: {getattr(e, 'strerror', None) or e}") from None
    return ctx


async def serve(console: Console, host: str, port: int, url: str, tls: ssl.SSLContext | None = None) -> None:
    runner = web.AppRunner(make_app(console), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=tls)
    await site.start()
    click.echo(f"Kafka Lite console: {url}")  # once listening: the URL works when printed
    sys.stdout.flush()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@click.command(help=MODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@version_option()
@bootstrap_option
@command_config_option
@click.option("--http-host", default="127.0.0.1", show_default=True, help="Address the console listens on.")
@click.option("--http-port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="Console port.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(0.2, 60), help="Seconds per poll.")
@click.option("--read-only", is_flag=True, help="Refuse every change (create, delete) whatever the user may do.")
@click.option(
    "--allow-user",
    "allow_users",
    multiple=True,
    metavar="NAME",
    help="Only this cluster user may log in (repeat for more). With a service identity: these users log in "
    "with their own password, then the identity acts for them.",
)
@click.option("--allow-writes", is_flag=True, help="Open cluster only: anyone who reaches the console may change it.")
@click.option(
    "--session-timeout",
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(1, 7 * 24 * 3600),
    metavar="SECONDS",
    help="A session idle this long ends (its user logs in again).",
)
@click.option(
    "--public-url",
    default=None,
    metavar="URL",
    help="The URL browsers use (e.g. behind a proxy): its host name is served too (the Host check) and its "
    "origin accepted; https makes the session cookie Secure.",
)
@click.option("--http-cert", type=click.Path(dir_okay=False, path_type=Path), help="PEM certificate (chain): https.")
@click.option("--http-key", type=click.Path(dir_okay=False, path_type=Path), help="PEM private key of --http-cert.")
@one_line_errors
def main(
    bootstrap_server: str,
    command_config: Path | None,
    http_host: str,
    http_port: int,
    interval: float,
    read_only: bool,
    allow_users: tuple[str, ...],
    allow_writes: bool,
    session_timeout: float,
    public_url: str | None,
    http_cert: Path | None,
    http_key: Path | None,
) -> None:
    parse_bootstrap(bootstrap_server)  # a malformed list is a one-line error before anything starts
    client_config = client_kwargs(AdminConfig, command_config)
    try:
        access = decide(client_config, read_only, allow_users, allow_writes)
    except AccessError as e:
        raise click.ClickException(str(e)) from None
    tls = tls_context(http_cert, http_key)
    served = Served.of(http_host, tls is not None, public_url)
    click.echo(access.summary(), err=True)
    if not is_loopback(http_host):
        for line in exposure_warnings(access, served.secure_cookies, http_host, http_port):
            click.echo(f"warning: {line}", err=True)
    with socket.socket(socket.AF_INET6 if ":" in http_host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((http_host, http_port))
        except OSError as e:
            raise click.ClickException(f"cannot listen on {http_host}:{http_port}: {e.strerror}") from None
    logging.getLogger("kafkalite").setLevel(logging.CRITICAL)  # errors go to the page, not the terminal
    console = Console(bootstrap_server, access, served, client_config, interval, session_timeout)
    url = f"{served.public_url}/cluster" if served.public_url else console_url(http_host, http_port, served.scheme)
    try:
        asyncio.run(serve(console, http_host, http_port, url, tls))
    except KeyboardInterrupt:
        pass


def exposure_warnings(access, https: bool, host: str, port: int) -> list[str]:  # type: ignore[no-untyped-def]
    """What a console reachable from other machines gives away, one line each."""
    out = []
    if not access.login_required:
        what = "changes it" if access.writes else "reads it (read-only)"
        out.append(f"the console listens on {host}:{port} with no login: anyone who reaches it {what}")
    elif not https:
        out.append(f"the console listens on {host}:{port} over plain http: passwords and sessions cross the network "
                   "in clear (use --http-cert/--http-key or a TLS proxy with an https --public-url)")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
