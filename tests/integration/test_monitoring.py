"""deploy/monitoring/ is valid (promtool check config / rules, Debian's `prometheus` package) and only uses
metric names a broker exports; the broker serves them on metrics.port, never on its protocol port."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from client.admin import NewTopic
from client.sync import Admin, Consumer, Producer
from tests.integration.cluster_harness import free_ports, wait_until

MON = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created", "_info")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: apt-get install -y prometheus (scripts/_env.sh installs it)")
    return path


@pytest.mark.parametrize("what,file", [("config", "prometheus.yml"), ("rules", "alerts.yml")])
def test_promtool_accepts_the_monitoring_files(what, file):
    r = subprocess.run([promtool(), "check", what, str(MON / file)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


def referenced_metrics() -> set[str]:
    exprs = [
        t["expr"] for p in json.loads((MON / "grafana-dashboard.json").read_text())["panels"] for t in p["targets"]
    ]
    exprs += re.findall(r"expr: *>?\s*\n?((?:.*\n)*?)\s+for:", (MON / "alerts.yml").read_text())
    names = set()
    for e in exprs:
        e = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", e)
        names |= {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e) if w.startswith("kafkalite_")}
    return names


def exported_as(name: str, families: set[str]) -> bool:
    """A sample name belongs to a family: itself, or the family plus a counter / histogram suffix."""
    return name in families or any(name.endswith(s) and name[: -len(s)] in families for s in SUFFIXES)


def test_dashboard_and_alerts_use_only_exported_metrics(broker_factory):
    port, metrics_port = free_ports(2)
    b = broker_factory(
        port=port, extra=["--override", f"metrics.port={metrics_port}", "--override", "metrics.topic.labels=true"]
    )
    with Admin(b.bootstrap) as admin:
        admin.create_topics([NewTopic("m", num_partitions=1, replication_factor=1)])
    with Producer(b.bootstrap, acks="all") as p:
        p.send("m", b"v", key=b"k")
        p.flush()
    with Consumer(b.bootstrap, group_id="g", auto_offset_reset="earliest") as c:
        c.subscribe(["m"])
        wait_until(lambda: c.poll(timeout_ms=500), 30, "a record")
        c.commit()
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    exported = {f.name for f in text_string_to_metric_families(text)}
    used = referenced_metrics()
    assert len(used) >= 12
    missing = sorted(n for n in used if not exported_as(n, exported))
    assert missing == [], f"not exported: {missing}"
    # The per-partition and per-group series carry their labels.
    assert re.search(r'kafkalite_log_size_bytes\{broker="1",partition="0",topic="m"\} [1-9]', text)
    assert re.search(r'kafkalite_consumer_group_lag\{broker="1",group="g",partition="0",topic="m"\} 0\.0', text)
    assert re.search(r'kafkalite_request_seconds_count\{api="PRODUCE",broker="1"\} [1-9]', text)
    assert re.search(r'kafkalite_topic_bytes_out_total\{broker="1",topic="m"\} [1-9]', text)
    assert 'kafkalite_leader_count{broker="1"} ' in text
    # The protocol port no longer answers HTTP: a GET there is a malformed frame and the broker closes.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100) == b""
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/nope", timeout=5)
    assert e.value.code == 404
