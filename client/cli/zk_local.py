"""A local standalone ZooKeeper for `kl-cluster up --coordination zookeeper`, the tests and the benchmarks:
Debian's `zookeeper` package (3.8; jars in /usr/share/java), started as `java ... ZooKeeperServerMain`
with its own config and data directory on a loopback port. Starting the main class directly is faster
than zkServer.sh (no env scripts, no log4j setup) and leaves one process to stop.

tickTime is 500 ms so that ZooKeeper accepts 2 s sessions (it allows 2 to 20 ticks): the same failure
detection time as the custom mode's broker.session.timeout.ms (docs/BENCHMARKS.md compares the two).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

JAVA_DIR = Path("/usr/share/java")
# The server's runtime classpath in Debian's package (netty is only needed for its optional TLS transport).
JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-nop.jar", "commons-cli.jar", "metrics-core.jar")
INSTALL_HINT = "apt-get install -y zookeeper   (as root: Debian's ZooKeeper 3.8 server)"
TICK_MS = 500


def zookeeper_installed() -> bool:
    return shutil.which("java") is not None and all((JAVA_DIR / j).is_file() for j in JARS)


def _ruok(port: int, timeout: float = 0.5, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


class LocalZooKeeper:
    def __init__(self, root: Path, port: int, host: str = "127.0.0.1") -> None:
        self.root = Path(root)
        self.port = port
        # Loopback by default; a network-namespace lab binds it to its bridge address (bench/netns.py).
        self.host = host
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.root / "zookeeper.pid"

    def command(self) -> list[str]:
        cfg = self.root / "zoo.cfg"
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        cfg.write_text(
            f"tickTime={TICK_MS}\n"
            f"dataDir={self.root / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            f"minSessionTimeout={2 * TICK_MS}\n"
            "maxSessionTimeout=60000\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "maxClientCnxns=0\n"
        )
        cp = ":".join(str(JAVA_DIR / j) for j in JARS)
        # A small heap and the client compiler: ZooKeeper starts in ~1 s on a slow, shared machine.
        return [
            "java",
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            cp,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(cfg),
        ]

    def start(self, timeout: float = 60, detach: bool = False) -> "LocalZooKeeper":
        if not zookeeper_installed():
            raise RuntimeError(f"ZooKeeper is not installed; run: {INSTALL_HINT}")
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "zookeeper.log", "ab")
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=detach,
        )
        log.close()
        self.pid_file.write_text(str(self.proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.root / 'zookeeper.log'}")
            if _ruok(self.port, host=self.host):
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper not serving on port {self.port} after {timeout}s")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server abruptly (ZooKeeper lost); its data directory stays for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None:
            self.kill(signal.SIGTERM)
        else:
            stop_pid_file(self.pid_file)
        self.pid_file.unlink(missing_ok=True)


def stop_pid_file(pid_file: Path, timeout: float = 10) -> bool:
    """Stop the ZooKeeper whose pid `pid_file` holds (kl-cluster down); True if one was running."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True
