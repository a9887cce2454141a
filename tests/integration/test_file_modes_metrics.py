"""Who may read a broker's files and metrics (issue 25 §5). Started with umask 000, a SASL broker still creates
its data directory 0700 and every file 0600 (segments, indexes, checkpoints, quorum-state, the metadata log,
bootstrap.records, broker-incarnation); it refuses to start on a data directory others can read that holds SCRAM
credentials, with one line; an open broker's loose directory is tightened. Its metrics endpoint (HTTPS with
basic auth here) refuses anonymous and wrong-password scrapes, and names no topic unless the operator opts in."""

from __future__ import annotations

import base64
import os
import re
import ssl
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, wait_port
from tests.integration.test_fuzz_security import fill
from tests.integration.test_monitoring import exported_as, referenced_metrics

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


def start_broker(data: Path, log: Path, *overrides: str, port: int | None = None) -> tuple[subprocess.Popen, int]:
    port = port or free_port()
    cmd = [str(ROOT / ".venv/bin/kl-broker"), "start", "--id", "1", "--port", str(port), "--data-dir", str(data)]
    for o in overrides:
        cmd += ["--override", o]
    # umask 000: whatever the operator's shell says, the broker's files must not be readable by others
    proc = subprocess.Popen(cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, preexec_fn=lambda: os.umask(0))
    return proc, port


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(ROOT / "deploy/tls/make-certs.sh"), str(d), "broker", "127.0.0.1"], check=True)
    return d


@pytest.fixture(scope="module")
def secured(tmp_path_factory, certs):
    d = tmp_path_factory.mktemp("modes")
    metrics_port = free_port()
    overrides = [
        "security.protocol=SASL_PLAINTEXT",
        f"metrics.port={metrics_port}",
        "metrics.basic.auth.users=prom:scrape-secret",
        f"metrics.ssl.keystore.location={certs / 'broker.pem'}",
        "log.flush.offset.checkpoint.interval.ms=300",
        "replica.high.watermark.checkpoint.interval.ms=300",
    ]
    cmd_port = free_port()
    cmd = [
        str(ROOT / ".venv/bin/kl-broker"), "start", "--id", "1", "--port", str(cmd_port),
        "--data-dir", str(d / "data2"),
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
    ] + [x for o in overrides for x in ("--override", o)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=open(d / "broker.log", "ab"), stderr=subprocess.STDOUT, preexec_fn=lambda: os.umask(0)
    )
    try:
        wait_port(cmd_port, proc=proc)
        wait_port(metrics_port, proc=proc)
        yield proc, cmd_port, metrics_port, d / "data2", overrides, d
    finally:
        proc.terminate()
        proc.wait(20)


def scrape(port: int, certs: Path, user: str | None = None, password: str = "") -> tuple[int, str]:
    req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if user is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def test_files_are_the_brokers_alone_whatever_the_umask(secured):
    proc, port, _, data, _, _ = secured
    fill(port, "secret-topic", 20)
    deadline = time.monotonic() + 10
    while not any(data.glob("*checkpoint*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    names = {p.name for p in data.rglob("*")}
    for expected in (
        "bootstrap.records",
        "quorum-state",
        "broker-incarnation",
        "__cluster_metadata-0",
        "secret-topic-0",
    ):
        assert expected in names, f"{expected} missing from {sorted(names)}"
    assert any(n.endswith(".log") for n in names) and any(n.endswith(".index") for n in names)
    assert any("checkpoint" in n for n in names)
    loose = [
        f"{p.relative_to(data)} {stat.S_IMODE(p.stat().st_mode):04o}"
        for p in [data, *data.rglob("*")]
        if stat.S_IMODE(p.stat().st_mode) & 0o077
    ]
    assert not loose, f"readable by others: {loose}"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def test_metrics_need_a_login_and_name_no_topic_by_default(secured, certs):
    _, _, metrics_port, _, _, _ = secured
    assert scrape(metrics_port, certs)[0] == 401
    assert scrape(metrics_port, certs, "prom", "wrong")[0] == 401
    assert scrape(metrics_port, certs, "nobody", "scrape-secret")[0] == 401
    status, body = scrape(metrics_port, certs, "prom", "scrape-secret")
    assert status == 200 and "kafkalite_broker_info" in body and "kafkalite_connection_count" in body
    assert "secret-topic" not in body and 'topic="' not in body and 'group="' not in body
    # What the dashboards and alerts read still exists, summed per broker.
    assert re.search(r'kafkalite_log_size_bytes\{broker="1"\} [1-9]', body)
    exported = {f.name for f in text_string_to_metric_families(body)}
    assert not [n for n in referenced_metrics() if not exported_as(n, exported)]
    with pytest.raises(OSError):  # HTTPS only: a plain HTTP request gets no answer (URLError, a reset)
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()


def test_a_world_readable_data_dir_with_credentials_is_refused(secured):
    proc, _, _, data, overrides, d = secured
    proc.terminate()
    assert proc.wait(20) == 0 or proc.returncode is not None
    os.chmod(data, 0o755)
    port = free_port()
    cmd = [str(ROOT / ".venv/bin/kl-broker"), "start", "--id", "1", "--port", str(port), "--data-dir", str(data)]
    out = subprocess.run(
        cmd + [x for o in overrides for x in ("--override", o)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and "kafkalite" not in ln]
    assert len(lines) == 1 and "holds SCRAM credentials" in lines[0] and "chmod 700" in lines[0], out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert stat.S_IMODE(data.stat().st_mode) == 0o755  # left for the operator to decide


def test_an_open_brokers_loose_dir_is_tightened(tmp_path):
    data = tmp_path / "open"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    proc, port = start_broker(data, tmp_path / "b.log")
    try:
        wait_port(port, proc=proc)
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
    finally:
        proc.terminate()
        proc.wait(20)
