"""Which ports a local cluster uses (issue 24 §3 "Ports"): `kl-cluster up` prints them on stdout after the
bootstrap lists and puts the console at base port + 200 unless told otherwise; `scripts/demo.sh --base-port`
lays its cluster out from the given port, and refuses a bad or busy one in one line."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BrokerProcess
from tests.integration.cluster_harness import HOST, port_range, wait_until
from tests.ports import all_free

ROOT = Path(__file__).resolve().parents[2]
KL = [sys.executable, "-m", "client.cli.cluster"]


def free_layout(brokers: int, kafka: bool = False, kafka_ports: int | None = None) -> int:
    """A base port B with B.., B+100.. (metrics), B+200 (console) and, with `kafka`, B+300.. free: one per broker,
    or `kafka_ports` of them (a test that lays several listeners per broker out from B+300)."""
    block = (kafka_ports or brokers) if kafka else 0
    while True:
        low, high = port_range()
        base = random.randrange(low, high - 400)
        ports = [base + off + n for off in (0, 100) for n in range(brokers)] + [base + 200]
        ports += [base + 300 + n for n in range(block)]
        if all_free(ports):
            return base


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


def test_kl_cluster_up_says_which_ports_it_uses_and_the_console_follows_the_base_port(tmp_path):
    base = free_layout(2, kafka=True)
    data = str(tmp_path / "kl")
    argv = ["up", "--brokers", "2", "--base-port", str(base), "--kafka-base-port", str(base + 300)]
    up = subprocess.run([*KL, *argv, "--data-dir", data, "--dashboard"], cwd=ROOT, capture_output=True, text=True)
    try:
        assert up.returncode == 0, up.stderr
        native, kafka, ports = up.stdout.splitlines()  # the first two lines keep their meaning
        assert native == f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        assert kafka == f"127.0.0.1:{base + 300},127.0.0.1:{base + 301}"
        assert ports == (
            f"# ports: native {base}-{base + 1}, kafka {base + 300}-{base + 301}, "
            f"metrics {base + 100}-{base + 101}, console {base + 200}"
        )
        assert f"console: http://127.0.0.1:{base + 200}/cluster" in up.stderr
        for port in (base, base + 1, base + 300, base + 301, base + 100, base + 101, base + 200):
            assert listening(port), port
    finally:
        subprocess.run([*KL, "down", "--data-dir", data], cwd=ROOT, capture_output=True, timeout=60)
    wait_until(lambda: not listening(base + 200), 10, "the console to stop")


def demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "scripts/demo.sh"), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_demo_refuses_a_bad_or_busy_base_port_in_one_line():
    for bad in ("abc", "80", "70000", "--base-port"):
        r = demo("--base-port", bad) if bad != "--base-port" else demo("--base-port")
        assert r.returncode == 2 and r.stdout == "", (bad, r.stdout)
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("error: --base-port must be a port"), r.stderr
    r = demo("--frobnicate")
    assert r.returncode == 2 and r.stderr.startswith("error: unknown argument '--frobnicate'")
    base = free_layout(3)
    with socket.socket() as busy:
        busy.bind((HOST, base + 200))  # the console's port is taken
        busy.listen()
        r = demo("--base-port", str(base))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    busy_ports = f"{base}-{base + 2}, {base + 100}-{base + 102} and {base + 200}"
    assert r.stderr.strip().splitlines()[-1] == f"error: --base-port {base}: ports {busy_ports} are not all free"


def test_demo_runs_its_cluster_and_console_from_the_base_port(tmp_path):
    """The demo up to its cluster and console, on --base-port's layout; Ctrl-C then stops everything it started."""
    base = free_layout(3)
    out = open(tmp_path / "demo.out", "w+")
    proc = subprocess.Popen(
        [str(ROOT / "scripts/demo.sh"), "--base-port", str(base)],
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "KEEP": "0"},
    )

    def started() -> bool:
        return "web console: " in (tmp_path / "demo.out").read_text() or proc.poll() is not None

    try:
        wait_until(started, 120, "the demo's cluster and console")
        text = (tmp_path / "demo.out").read_text()
        assert proc.poll() is None, text
        assert f"bootstrap servers: 127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in text
        assert f"# ports: native {base}-{base + 2}, metrics {base + 100}-{base + 102}, console {base + 200}" in text
        assert f"web console: http://127.0.0.1:{base + 200}/cluster" in text
        for port in (base, base + 1, base + 2, base + 100, base + 200):
            assert listening(port), port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the demo's trap stops what it started
        proc.wait(90)
        out.close()
    wait_until(lambda: not any(listening(p) for p in (base, base + 1, base + 2, base + 200)), 30, "the demo's ports")


def test_a_test_broker_whose_port_is_taken_fails_at_once_with_its_own_words(tmp_path):
    """The test fixture's broker on a port another server holds (what a CI run met when a client's connect() took
    an ephemeral port between free_port() and the broker's bind): the start fails within seconds quoting the
    broker's "Address already in use", not after 30 s of asking the stranger for a controller."""
    with socket.socket() as stranger:
        stranger.bind((HOST, 0))
        stranger.listen()
        b = BrokerProcess(tmp_path / "data", port=stranger.getsockname()[1])
        t0 = time.monotonic()
        try:
            with pytest.raises((RuntimeError, TimeoutError), match="exited(.|\n)*Address already in use"):
                b.start()
        finally:
            b.cleanup()
        assert time.monotonic() - t0 < 15
