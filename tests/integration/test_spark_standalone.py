"""kl-spark on a Spark standalone cluster: a master and a worker started from the pyspark install
(`spark-class ...deploy.master.Master` / `...deploy.worker.Worker`) on loopback, the job submitted
with --master spark://127.0.0.1:PORT, and, as spark-submit, through pipeline/kl_spark.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from client import Admin, NewTopic
from tests.conftest import ROOT, BrokerProcess, free_port
from tests.integration.spark_support import require_spark, stop_daemons
from tests.integration.test_spark import produce
from tests.waiting import wait_until

# A hang guard, well above a loaded machine's time (a machine at half speed took 124-202 s to start one driver
# beside the suite's other modules, 2026-11-28): a timeout inside a py4j call leaves the Spark session's
# gateway unusable, so every later test of the module would fail with it.
pytestmark = pytest.mark.timeout(900)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def start_daemon(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [str(spark_home() / "bin" / "spark-class"), *args],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its JVM children die with the group
    )


def wait_for(pred, timeout: float, what: str, procs: list[subprocess.Popen], logs: list[Path]) -> None:  # type: ignore[no-untyped-def]
    """wait_until, giving up at once if a Spark daemon exits; the daemons' logs say why."""
    wait_until(
        pred,
        timeout,
        what,
        0.3,
        give_up=lambda: next((f"a Spark daemon exited ({p.returncode})" for p in procs if p.poll() is not None), None),
        detail=lambda: "\n".join(f.read_text()[-2000:] for f in logs),
    )


@pytest.fixture
def standalone(tmp_path):
    require_spark()
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "SPARK_LOG_DIR": str(tmp_path),
        "PYSPARK_PYTHON": sys.executable,
    }
    port, ui, wui = free_port(), free_port(), free_port()
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    procs = [
        start_daemon(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            master_log,
            env,
        )
    ]
    url = f"spark://127.0.0.1:{port}"
    try:
        wait_for(lambda: "I have been elected leader" in master_log.read_text(), 60, "the master", procs, [master_log])
        procs.append(
            start_daemon(
                ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--webui-port", str(wui),
                 "--cores", "2", "--memory", "1g"],
                worker_log,
                env,
            )
        )  # fmt: skip
        wait_for(
            lambda: "Successfully registered with master" in worker_log.read_text(),
            60,
            "the worker to register",
            procs,
            [master_log, worker_log],
        )
        yield url, env, [master_log, worker_log]
    finally:
        stop_daemons(procs)


def test_stats_on_a_standalone_master(standalone, tmp_path):
    url, env, logs = standalone
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Admin(b.bootstrap) as a:
            a.create_topics([NewTopic("tweets", 3, 1, configs={"segment.bytes": "16384"})])
        produce(b.bootstrap, "tweets", 900, 0, "zstd")
        summary = tmp_path / "s.json"
        # As spark-submit runs it: the job file, with the master chosen by spark-submit.
        r = subprocess.run(
            [str(Path(sys.executable).parent / "spark-submit"), "--master", url, str(ROOT / "pipeline" / "kl_spark.py"),
             "hashtags", "--path", str(b.data_dir), "--topic", "tweets", "--top", "2", "--summary-json", str(summary)],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
            env={**env, "PYSPARK_DRIVER_PYTHON": sys.executable},
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:] + "\n".join(f.read_text()[-2000:] for f in logs)
        # spark-submit merges the driver's stderr into its stdout.
        assert f"on {url}" in r.stdout + r.stderr, r.stdout[-3000:]
        s = json.loads(summary.read_text())
        assert (s["records"], s["top"]) == (900, [["kafka", 900], ["spark", 300]])
        # The executors on the worker did the reading.
        app_logs = list((tmp_path / "work").rglob("stderr"))
        assert app_logs, "no executor ran on the worker"
    finally:
        b.cleanup()
