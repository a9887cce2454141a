"""kl-cluster: run a local cluster of kl-broker processes for demos and tests.

State lives in DATA_DIR/cluster.json (ports, pids), so `status`, `kill`, `start`
and `down` work from any shell. `up --coordination zookeeper` also starts a local
standalone ZooKeeper (client/cli/zk_local.py) in DATA_DIR/zookeeper, stopped by `down`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from net.version import version_option


def start_command(
    broker_id: int | str,
    port: int,
    data_dir: str | Path,
    host: str | None = None,
    peers: str | None = None,
    extra: Sequence[str] = (),
    coordination: str | None = None,
    zookeeper: str | None = None,
) -> list[str]:
    """The `kl-broker start` command line, for the tools and tests that launch brokers."""
    cmd = [
        sys.executable,
        "-m",
        "broker.cli",
        "start",
        "--id",
        str(broker_id),
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]
    if host:
        cmd += ["--host", host]
    if peers:
        cmd += ["--peers", peers]
    if coordination:
        cmd += ["--coordination", coordination]
    if zookeeper:
        cmd += ["--zookeeper", zookeeper]
    return cmd + list(extra)


STATE = "cluster.json"
SECRET_FILE = "inter-broker.secret"


def write_cluster_secret(data_dir: Path) -> Path:
    """The cluster's inter-broker secret (inter.broker.secret.file): brokers prove it to each other before
    anything they send each other is taken (docs/SECURITY.md). Random, one per cluster, 0600 from its
    creation; kept when it exists (a restarted broker must still know its cluster's)."""
    path = data_dir / SECRET_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    os.chmod(path, 0o600)
    return path


# A local cluster is for development: as Kafka's shipped server.properties does, a new consumer group starts at
# once instead of waiting group.initial.rebalance.delay.ms (3 s) for more members; --override sets it back.
DEV_OVERRIDES = ("group.initial.rebalance.delay.ms=0",)


_ENDPOINT_PORT = re.compile(r"(://[^,]*:)(\d+)(?=\s*(,|$))")


def _stepped_listeners(spec: str | None, advertised: str | None, step: int | None, n: int) -> dict[str, str]:
    """Broker n's `listeners` / `advertised.listeners`: the first broker's with every non-zero port raised by
    n x step (Kafka's NAME://HOST:PORT format; the broker checks the entries)."""
    if step is None:
        step = len([e for e in (spec or "").split(",") if e.strip()])

    def raised(value: str) -> str:
        return _ENDPOINT_PORT.sub(
            lambda m: m.group(1) + str(int(m.group(2)) + n * step if int(m.group(2)) else 0), value
        )

    out = {}
    if spec:
        out["listeners"] = raised(spec)
    if advertised:
        out["advertised.listeners"] = raised(advertised)
    return out


def _free_port_run(base: int, n: int) -> int:
    """`base` if base..base+n-1 are all free; a clear error otherwise."""
    for p in range(base, base + n):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker binds: TIME_WAIT is fine
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                raise click.ClickException(f"port {p} is in use; pick another --base-port") from None
    return base


def _load(data_dir: Path) -> dict[str, Any]:
    path = data_dir / STATE
    if not path.exists():
        raise click.ClickException(f"no cluster in {data_dir} (run kl-cluster up --data-dir {data_dir})")
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def _save(data_dir: Path, state: dict[str, Any]) -> None:
    tmp = data_dir / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, data_dir / STATE)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def _wait_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.3):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _start_broker(data_dir: Path, state: dict[str, Any], bid: str) -> int:
    b = state["brokers"][bid]
    log = open(data_dir / f"broker-{bid}.log", "ab")
    zk = state.get("zookeeper")
    cmd = start_command(
        bid,
        b["port"],
        data_dir / f"broker-{bid}",
        peers=state.get("peers") or None,
        extra=[
            *state.get("extra", []),
            # A local open cluster for development: its console shows log end offsets from per-topic metrics.
            *(
                ["--override", f"metrics.port={b['metrics_port']}", "--override", "metrics.topic.labels=true"]
                if b.get("metrics_port")
                else []
            ),
            *(["--override", f"kafka.port={b['kafka_port']}"] if b.get("kafka_port") else []),
            *(x for k in ("listeners", "advertised.listeners") if b.get(k) for x in ("--override", f"{k}={b[k]}")),
        ],
        coordination="zookeeper" if zk else None,
        zookeeper=f"127.0.0.1:{zk['port']}" if zk else None,
    )
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    b["pid"] = proc.pid
    return proc.pid


@click.group()
@version_option()
def main() -> None:
    """Start, inspect and stop a local Kafka Lite cluster."""


@main.command()
@click.option("--brokers", type=int, default=3, show_default=True)
@click.option("--base-port", type=int, default=9092, show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), required=True)
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE", help="Passed to every broker.")
@click.option(
    "--coordination",
    type=click.Choice(["custom", "zookeeper"]),
    default="custom",
    show_default=True,
    help="zookeeper: start a local ZooKeeper too and run the brokers in ZooKeeper mode.",
)
@click.option("--zookeeper-port", type=int, default=0, help="ZooKeeper's port (default: a free one).")
@click.option(
    "--metrics-base-port",
    type=int,
    default=None,
    help="metrics.port of the first broker, the next ones follow (default: base port + 100; -1: no metrics).",
)
@click.option(
    "--kafka-base-port",
    type=int,
    default=None,
    help="kafka.port of the first broker, the next ones follow: Kafka clients connect there (default: none).",
)
@click.option(
    "--listeners",
    "listeners_spec",
    default=None,
    metavar="NAME://HOST:PORT,...",
    help="Kafka's listeners of the first broker; each next broker's ports are --listener-port-step higher "
    "(port 0: any free one), e.g. kafkajs's layout: PLAINTEXT_HOST://:9092,SSL_HOST://:9093,SASL_SSL_HOST://:9094 "
    "with --listener-port-step 3 and --override listener.security.protocol.map=... (docs/SECURITY.md).",
)
@click.option(
    "--advertised-listeners",
    "advertised_spec",
    default=None,
    metavar="NAME://HOST:PORT,...",
    help="advertised.listeners of the first broker, stepped as --listeners.",
)
@click.option(
    "--listener-port-step",
    type=int,
    default=None,
    help="How much higher each broker's listener ports are than the previous one's (default: the number of "
    "listeners in --listeners).",
)
@click.option("--dashboard", is_flag=True, help="Also start kl-dashboard (the web console) and print its URL.")
@click.option("--dashboard-port", type=int, default=None, help="The console's HTTP port (default: base port + 200).")
@click.option(
    "--dashboard-allow-writes",
    is_flag=True,
    help="Let the console create and delete topics (kl-dashboard --allow-writes; it is read-only otherwise, "
    "as this open cluster has no users to log in as).",
)
def up(
    brokers: int,
    base_port: int,
    data_dir: Path,
    overrides: tuple[str, ...],
    coordination: str,
    zookeeper_port: int,
    metrics_base_port: int | None,
    kafka_base_port: int | None,
    listeners_spec: str | None,
    advertised_spec: str | None,
    listener_port_step: int | None,
    dashboard: bool,
    dashboard_port: int | None,
    dashboard_allow_writes: bool,
) -> None:
    """Start N brokers in the background and print the bootstrap servers: the native listeners' on the first
    line and, with --kafka-base-port, the Kafka listeners' on the second; then one line starting with "#" that
    says which ports the cluster uses (metrics and console URLs also on stderr)."""
    if brokers < 1:
        raise click.UsageError("--brokers must be >= 1")
    data_dir.mkdir(parents=True, exist_ok=True)
    if (data_dir / STATE).exists() and any(_alive(b.get("pid")) for b in _load(data_dir)["brokers"].values()):
        raise click.ClickException(f"a cluster is already running in {data_dir}; kl-cluster down first")
    _free_port_run(base_port, brokers)
    metrics_base = base_port + 100 if metrics_base_port is None else metrics_base_port
    if metrics_base > 0:
        _free_port_run(metrics_base, brokers)
    if kafka_base_port is not None:
        ranges = {"--base-port": base_port, "--metrics-base-port": metrics_base if metrics_base > 0 else None}
        for flag, start in ranges.items():
            if start is not None and abs(start - kafka_base_port) < brokers:
                raise click.UsageError(f"--kafka-base-port {kafka_base_port} overlaps the ports of {flag} ({start})")
        _free_port_run(kafka_base_port, brokers)
    if dashboard_port is None:
        dashboard_port = base_port + 200  # next to the brokers' (base) and their metrics' (base + 100) ports
    if dashboard_allow_writes and not dashboard:
        raise click.UsageError("--dashboard-allow-writes needs --dashboard")
    if dashboard:
        _free_port_run(dashboard_port, 1)
    ids = [str(i) for i in range(1, brokers + 1)]
    secret = f"inter.broker.secret.file={write_cluster_secret(data_dir).resolve()}"
    state: dict[str, Any] = {
        "brokers": {
            i: {
                "port": base_port + n,
                "pid": None,
                "metrics_port": metrics_base + n if metrics_base > 0 else None,
                "kafka_port": kafka_base_port + n if kafka_base_port is not None else None,
                **_stepped_listeners(listeners_spec, advertised_spec, listener_port_step, n),
            }
            for n, i in enumerate(ids)
        },
        "peers": ",".join(f"{i}@127.0.0.1:{base_port + n}" for n, i in enumerate(ids)) if brokers > 1 else "",
        "extra": [x for o in (*DEV_OVERRIDES, secret, *overrides) for x in ("--override", o)],
    }
    if coordination == "zookeeper":
        state["zookeeper"] = _start_zookeeper(data_dir, zookeeper_port)
        _save(data_dir, state)
    for bid in ids:
        _start_broker(data_dir, state, bid)
    _save(data_dir, state)
    for bid in ids:
        if not _wait_port(state["brokers"][bid]["port"], 30):
            raise click.ClickException(f"broker {bid} did not start; see {data_dir}/broker-{bid}.log")
    bootstrap = ",".join(f"127.0.0.1:{state['brokers'][b]['port']}" for b in ids)
    if not wait_registered(bootstrap, brokers, 30):
        raise click.ClickException(f"the brokers did not form a cluster within 30 s; see {data_dir}/broker-*.log")
    for bid in ids:
        if mp := state["brokers"][bid].get("metrics_port"):
            click.echo(f"broker {bid} metrics: http://127.0.0.1:{mp}/metrics", err=True)
    if dashboard:
        state["dashboard"] = _start_dashboard(data_dir, bootstrap, dashboard_port, dashboard_allow_writes)
        _save(data_dir, state)
        click.echo(f"console: http://127.0.0.1:{dashboard_port}/cluster", err=True)
    click.echo(bootstrap)
    if kafka_base_port is not None:
        kafka = ",".join(f"127.0.0.1:{state['brokers'][b]['kafka_port']}" for b in ids)
        if not _wait_kafka_listeners(bootstrap, brokers, 30):
            raise click.ClickException("the brokers' Kafka listeners were not all registered within 30 s")
        click.echo(kafka)
    click.echo(ports_summary(state))


PORT_KINDS = (("native", "port"), ("kafka", "kafka_port"), ("metrics", "metrics_port"))


def ports_summary(state: dict[str, Any]) -> str:
    """`# ports: native 9092-9094, kafka 19092-19094, metrics 9192-9194, console 9292`: what the cluster
    listens on. A comment line, after the bootstrap lists, so scripts that read those lines skip it."""

    def run(key: str) -> str | None:
        ports = [b[key] for b in state["brokers"].values() if b.get(key)]
        if not ports:
            return None
        return str(ports[0]) if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"

    parts = [f"{name} {r}" for name, key in PORT_KINDS if (r := run(key)) is not None]
    if dash := state.get("dashboard"):
        parts.append(f"console {dash['port']}")
    if zk := state.get("zookeeper"):
        parts.append(f"zookeeper {zk['port']}")
    return "# ports: " + ", ".join(parts)


def _start_dashboard(data_dir: Path, bootstrap: str, port: int, allow_writes: bool = False) -> dict[str, Any]:
    log = open(data_dir / "dashboard.log", "ab")
    cmd = [sys.executable, "-m", "client.dashboard", "--bootstrap-server", bootstrap, "--http-port", str(port)]
    if allow_writes:
        cmd.append("--allow-writes")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    if not _wait_port(port, 30):
        raise click.ClickException(f"kl-dashboard did not start; see {data_dir}/dashboard.log")
    return {"port": port, "pid": proc.pid}


def _start_zookeeper(data_dir: Path, port: int) -> dict[str, Any]:
    from client.cli.zk_local import LocalZooKeeper

    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    try:
        zk = LocalZooKeeper(data_dir / "zookeeper", port).start(detach=True)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"ZooKeeper on 127.0.0.1:{port}", err=True)
    return {"port": port, "pid": zk.proc.pid if zk.proc else None}


def _poll_metadata(bootstrap: str, timeout: float, request: Any, done: Callable[[Any], bool]) -> bool:
    """Ask any broker for Metadata (`request`: the typed MetadataRequest, or the native v0 map) every 0.2 s until
    `done(answer)` or the timeout."""
    import asyncio

    from client.cluster import KafkaLiteClient
    from net.errors import KafkaLiteError
    from net.protocol import ApiKey

    async def check() -> bool:
        client = KafkaLiteClient(bootstrap, "kl-cluster", request_timeout_ms=2000)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                try:
                    if isinstance(request, dict):
                        answer = await client.request(None, ApiKey.METADATA, request)
                    else:
                        answer = await client.call(None, request)
                    if done(answer):
                        return True
                except (KafkaLiteError, OSError, TimeoutError):
                    pass
                await asyncio.sleep(0.2)
            return False
        finally:
            await client.close()

    return asyncio.run(check())


def _wait_kafka_listeners(bootstrap: str, n: int, timeout: float) -> bool:
    """Until the metadata names all n brokers' Kafka listeners (each broker registers its own). Asked on the native
    listener in the v0 map, the one form that names another listener's endpoints (docs/COMPATIBILITY.md)."""
    body = {"topics": [], "listener": "kafka"}
    return _poll_metadata(bootstrap, timeout, body, lambda md: len(md.get("brokers") or []) >= n)


def wait_registered(bootstrap: str, n: int, timeout: float) -> bool:
    """Until a controller is elected and has registered all n brokers (topics need them for replicas)."""
    from client.cluster import metadata_request

    return _poll_metadata(
        bootstrap, timeout, metadata_request([]), lambda md: md.controller_id >= 0 and len(md.brokers) >= n
    )


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), required=True)
def status(data_dir: Path) -> None:
    """One line per broker, then the topics as kl-topics --describe prints them."""
    state = _load(data_dir)
    up_ = []
    if zk := state.get("zookeeper"):
        click.echo(
            f"zookeeper\t127.0.0.1:{zk['port']}\tpid {zk.get('pid')}\t{'up' if _alive(zk.get('pid')) else 'down'}"
        )
    if dash := state.get("dashboard"):
        click.echo(
            f"console\thttp://127.0.0.1:{dash['port']}/cluster\tpid {dash.get('pid')}\t"
            f"{'up' if _alive(dash.get('pid')) else 'down'}"
        )
    for bid, b in state["brokers"].items():
        alive = _alive(b.get("pid"))
        metrics = f"\tmetrics 127.0.0.1:{b['metrics_port']}" if b.get("metrics_port") else ""
        metrics += f"\tkafka 127.0.0.1:{b['kafka_port']}" if b.get("kafka_port") else ""
        click.echo(f"broker {bid}\t127.0.0.1:{b['port']}\tpid {b.get('pid')}\t{'up' if alive else 'down'}{metrics}")
        if alive:
            up_.append(f"127.0.0.1:{b['port']}")
    if not up_:
        return
    from client.cli.topics import format_description
    from client.sync import Admin
    from net.errors import KafkaLiteError

    try:
        with Admin(",".join(up_), request_timeout_ms=5000) as admin:
            for d in admin.describe_topics():
                for line in format_description(d):
                    click.echo(line)
    except KafkaLiteError as e:
        click.echo(f"(metadata unavailable: {e})")


def _signal(data_dir: Path, bid: str, sig: int) -> None:
    state = _load(data_dir)
    b = state["brokers"].get(bid)
    if b is None:
        raise click.ClickException(f"no broker {bid} in this cluster")
    if not _alive(b.get("pid")):
        raise click.ClickException(f"broker {bid} is not running")
    os.kill(b["pid"], sig)


@main.command()
@click.argument("broker_id")
@click.option("--data-dir", type=click.Path(path_type=Path), required=True)
@click.option("--signal", "sig", type=click.Choice(["KILL", "TERM", "STOP", "CONT"]), default="KILL")
def kill(broker_id: str, data_dir: Path, sig: str) -> None:
    """Send a broker SIGKILL (or --signal TERM/STOP/CONT)."""
    _signal(data_dir, broker_id, getattr(signal, f"SIG{sig}"))
    click.echo(f"sent SIG{sig} to broker {broker_id}")


@main.command()
@click.argument("broker_ids", nargs=-1, required=True)
@click.option("--data-dir", type=click.Path(path_type=Path), required=True)
def start(broker_ids: tuple[str, ...], data_dir: Path) -> None:
    """Start stopped brokers again with their old ids, ports and data (several: all at once)."""
    state = _load(data_dir)
    for broker_id in broker_ids:
        b = state["brokers"].get(broker_id)
        if b is None:
            raise click.ClickException(f"no broker {broker_id} in this cluster")
        if _alive(b.get("pid")):
            raise click.ClickException(f"broker {broker_id} is already running")
    for broker_id in broker_ids:
        _start_broker(data_dir, state, broker_id)
    _save(data_dir, state)
    for broker_id in broker_ids:
        b = state["brokers"][broker_id]
        if not _wait_port(b["port"], 30):
            raise click.ClickException(f"broker {broker_id} did not start; see {data_dir}/broker-{broker_id}.log")
        click.echo(f"started broker {broker_id} on 127.0.0.1:{b['port']}")


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), required=True)
@click.option("--keep-console", is_flag=True, help="Leave kl-dashboard running (it waits for the brokers to return).")
def down(data_dir: Path, keep_console: bool) -> None:
    """SIGTERM the console and every broker (clean shutdown) and wait; SIGKILL what is left after 30 s. Then
    ZooKeeper."""
    state = _load(data_dir)
    if (dash := state.get("dashboard")) and _alive(dash.get("pid")) and not keep_console:
        os.kill(dash["pid"], signal.SIGTERM)
        click.echo("stopped the console")
    pids = [b["pid"] for b in state["brokers"].values() if _alive(b.get("pid"))]
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    click.echo(f"stopped {len(pids)} brokers")
    if state.get("zookeeper"):
        from client.cli.zk_local import stop_pid_file

        if stop_pid_file(data_dir / "zookeeper" / "zookeeper.pid"):
            click.echo("stopped ZooKeeper")


if __name__ == "__main__":
    main()
