"""Shared by the Spark tests: the "Spark can run here" gate, reading a topic with a plain consumer."""

from __future__ import annotations

import os

import pytest

from client.consumer import TopicPartition
from client.sync import Consumer


def require_spark() -> None:
    """Skip where Spark cannot run (no Java / pyspark), but never under CI: there it is a failure."""
    try:
        from pipeline.session import check_environment

        check_environment()
    except Exception as e:  # noqa: BLE001 - SparkSetupError or an import error: same verdict
        if os.environ.get("CI") == "true":
            pytest.fail(f"Spark is required under CI: {e}")
        pytest.skip(f"Spark cannot run here: {e}")


def consume_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30) -> set[tuple]:
    """(partition, offset, key, value) of every record up to the high watermarks, via the broker."""
    import time

    out: set[tuple] = set()
    with Consumer(bootstrap, auto_offset_reset="earliest") as c:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = {tp.partition: off for tp, off in c.list_offsets(tps, -1).items()}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(c.position(tp) < ends[tp.partition] for tp in tps):
            for r in c.poll(500):
                out.add((r.partition, r.offset, r.key, r.value))
    return out


def spark_session_fixture(app: str):  # type: ignore[no-untyped-def]
    """A module's SparkSession (local[2], 2 shuffle partitions), stopped after the module."""
    require_spark()
    from pipeline.session import spark_session

    s = spark_session("local[2]", app, {"spark.sql.shuffle.partitions": "2"})
    expect_pyspark_everywhere(s)
    yield s
    s.stop()


def expect_pyspark_everywhere(spark) -> None:  # type: ignore[no-untyped-def]
    """Under scripts/test.sh's lowest-version run (KL_EXPECT_PYSPARK=4.2): the driver's pyspark, Spark's JVM and
    the Python workers are all that version, not the .venv's newer one."""
    want = os.environ.get("KL_EXPECT_PYSPARK")
    if not want:
        return
    import pyspark

    def same(version: str) -> bool:
        return version == want or version.startswith(want + ".")

    worker = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__version__).first()
    found = {"driver": pyspark.__version__, "JVM": spark.version, "Python worker": worker}
    assert all(same(v) for v in found.values()), f"KL_EXPECT_PYSPARK={want}, found {found}"


def stop_daemons(procs: list) -> None:
    """Stop Spark daemons started in sessions of their own (their JVM children die with the group)."""
    import signal
    import subprocess

    for p in reversed(procs):
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
