"""The `kafkalite` batch source on three hosts (issue 16 §4): network namespaces joined by a bridge (198.18.33.0/24,
inside 198.18.0.0/15; nothing leaves this machine), a broker on each host keeping only its own replicas, a
Spark standalone master on host 1 and one worker per host whose executors know their host's broker data
directory ($KAFKALITE_DATA_DIR, as deploy/node/install.sh --spark-worker sets it). The job is kl-spark stats
with --bootstrap-server, run on host 1. Every partition is read once; each task read its range from local
segment files exactly when its host holds that partition's replica, and from the leader otherwise. Needs root."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.netns import NetnsLab, available
from client import Producer
from tests.conftest import ROOT
from tests.integration.cluster_harness import ClusterHarness, wait_until
from tests.integration.spark_support import require_spark, stop_daemons
from tests.integration.test_spark_standalone import spark_home

pytestmark = pytest.mark.timeout(900)
SUBNET = "198.18.33.0/24"
TOPIC = "spread"
PARTITIONS = 6
RECORDS = 1800
SPARK_PORT = 7077
READ_LINE = re.compile(r"kafkalite read (\S+)-(\d+) \[(\d+), (\d+)\) from (the local replica in (\S+)|the leader)")


@pytest.fixture
def lab():
    if not available():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("network namespaces need root and iproute2")
        pytest.skip("network namespaces need root and iproute2")
    require_spark()
    lab = NetnsLab("ksp", SUBNET, 3).setup()
    yield lab
    lab.teardown()


def spark_env(lab: NetnsLab, i: int, tmp: Path, data_dir: Path | None) -> dict:
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": lab.addr(i),
        "SPARK_WORKER_DIR": str(tmp / f"work-{i}"),
        "SPARK_LOG_DIR": str(tmp),
        "PYSPARK_PYTHON": sys.executable,
    }
    if data_dir is not None:
        env["KAFKALITE_DATA_DIR"] = str(data_dir)
    return env


def test_batch_read_on_three_hosts_reads_local_replicas_and_fetches_the_rest(lab, tmp_path):
    h = ClusterHarness(tmp_path / "cluster", 3, lab=lab)
    procs: list[subprocess.Popen] = []
    try:
        h.start()
        h.create_topic(TOPIC, PARTITIONS, 1)  # one replica each: every host holds only its own partitions
        owner = {d.partition: d.leader for d in h.describe(TOPIC)}
        assert set(owner.values()) == {1, 2, 3}, owner
        with Producer(h.bootstrap(), acks="all", linger_ms=5) as p:
            for i in range(RECORDS):
                p.send(TOPIC, f"v{i}".encode(), key=f"k{i}".encode())
            p.flush()

        master = f"spark://{lab.addr(1)}:{SPARK_PORT}"
        cls = str(spark_home() / "bin" / "spark-class")
        logs = [tmp_path / "master.log"] + [tmp_path / f"worker-{i}.log" for i in (1, 2, 3)]
        procs.append(
            lab.popen(
                1,
                [cls, "org.apache.spark.deploy.master.Master", "--host", lab.addr(1), "--port", str(SPARK_PORT),
                 "--webui-port", "0"],
                stdout=open(logs[0], "wb"), stderr=subprocess.STDOUT, env=spark_env(lab, 1, tmp_path, None),
                start_new_session=True,
            )
        )  # fmt: skip
        wait_until(lambda: "I have been elected leader" in logs[0].read_text(), 90, "the Spark master")
        for i in (1, 2, 3):
            procs.append(
                lab.popen(
                    i,
                    [cls, "org.apache.spark.deploy.worker.Worker", master, "--host", lab.addr(i), "--cores", "1",
                     "--memory", "768m", "--webui-port", "0"],
                    stdout=open(logs[i], "wb"), stderr=subprocess.STDOUT,
                    env=spark_env(lab, i, tmp_path, h[i].data_dir), start_new_session=True,
                )
            )  # fmt: skip
        wait_until(
            lambda: all("Successfully registered with master" in f.read_text() for f in logs[1:]), 90, "3 workers"
        )
        job = subprocess.run(
            lab.argv(1, [str(Path(sys.executable).parent / "kl-spark"), "stats", "--bootstrap-server", h.bootstrap(),
                         "--topic", TOPIC, "--master", master, "--option", "maxRecordsPerPartition=100",
                         "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=3"]),
            capture_output=True, text=True, timeout=600, env=spark_env(lab, 1, tmp_path, None), cwd=ROOT,
        )  # fmt: skip
        assert job.returncode == 0, job.stderr[-3000:]
        assert f"{TOPIC}: {RECORDS} records, {RECORDS} distinct keys" in job.stdout, job.stdout

        reads: list[tuple[int, int, int, int, str | None]] = []  # (host, partition, start, end, local dir)
        for i in (1, 2, 3):
            for f in (tmp_path / f"work-{i}").glob("app-*/*/stderr"):
                for m in READ_LINE.finditer(f.read_text()):
                    reads.append((i, int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(6)))
        covered = sorted((p, a, b) for _, p, a, b, _ in reads)
        hw = h.high_watermarks(TOPIC, PARTITIONS)
        for p in range(PARTITIONS):  # each partition's ranges tile [0, high watermark) once
            spans = [(a, b) for q, a, b in covered if q == p]
            assert spans[0][0] == 0 and spans[-1][1] == hw[p] and all(x[1] == y[0] for x, y in zip(spans, spans[1:])), (
                p,
                spans,
            )
        for host, p, a, b, local in reads:
            if owner[p] == host:
                assert local is not None and Path(local) == h[host].data_dir, (host, p, a, b, local)
            else:
                assert local is None, f"host {host} read {TOPIC}-{p} from {local}, but broker {owner[p]} holds it"
        assert {host for host, *_ in reads} == {1, 2, 3}, "every worker ran tasks"
        assert any(loc for *_, loc in reads) and any(loc is None for *_, loc in reads)
    finally:
        stop_daemons(procs)
        h.cleanup()
