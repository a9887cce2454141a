"""The Spark driver's class-data-sharing archive (pipeline/spark_cds.py): made once, mapped by every later driver,
never put in place cut short, and silent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import spark_cds
from tests.conftest import ROOT
from tests.integration.spark_support import require_spark

pytestmark = pytest.mark.timeout(900)

# A driver in a process of its own (a test worker may hold a JVM from another module, which a new session in
# this process would reuse), started with the options the archive gives plus -Xshare:on, which makes the JVM
# refuse to start unless it maps the archive: the session runs a query only if the archive was used.
SESSION = """
import sys
from pipeline.session import spark_session
s = spark_session("local[1]", "cds-check", {"spark.driver.extraJavaOptions": sys.argv[1] + " -Xshare:on"})
print("sum", s.range(10).selectExpr("sum(id)").collect()[0][0])
print(s.sparkContext._jvm.System.getProperty("java.class.path"))
s.stop()
"""


def _java_and_home() -> tuple[str, str]:
    from pipeline.session import _spark_home, find_java

    java = find_java()
    assert java is not None
    return java, _spark_home()


def test_an_archive_is_made_once_mapped_by_a_later_driver_silent_and_never_put_in_place_cut_short(tmp_path):
    require_spark()
    java, home = _java_and_home()
    path = spark_cds.archive_path(tmp_path, java, home)
    assert spark_cds.make(path, java) and path.is_file() and path.stat().st_size > 1_000_000
    assert [p.name for p in tmp_path.glob("*.tmp")] == []  # the maker's file was renamed, not left behind
    options = spark_cds.driver_options(tmp_path, java, home)
    assert options.startswith(f"-XX:SharedArchiveFile={path} ")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KAFKALITE_SPARK_CDS": "0", "SPARK_HOME": home}
    done = subprocess.run(
        [sys.executable, "-c", SESSION, options], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer, classpath = done.stdout.strip().splitlines()  # nothing of the JVM's own on stdout
    assert answer == "sum 45"
    assert "cds" not in done.stderr.lower() and "shared archive" not in done.stderr.lower(), done.stderr[-2000:]
    # A second make finds it and does nothing.
    mtime = path.stat().st_mtime_ns
    assert spark_cds.make(path, java) and path.stat().st_mtime_ns == mtime
    # A truncated archive would crash every driver with SIGBUS as it maps it: the check a maker runs before the
    # rename refuses it, and garbage too, and accepts the real one.
    assert spark_cds._maps(java, path, classpath)
    cut = tmp_path / "cut.jsa"
    cut.write_bytes(path.read_bytes()[:1_000_000])
    garbage = tmp_path / "garbage.jsa"
    garbage.write_bytes(b"not an archive\n" * 100)
    assert not spark_cds._maps(java, cut, classpath)
    assert not spark_cds._maps(java, garbage, classpath)
    assert not list(tmp_path.glob("hs_err*")) and not list(Path(ROOT).glob("hs_err*"))


def test_a_failed_make_is_not_retried_at_every_driver_start(tmp_path, monkeypatch):
    """A Java that cannot make an archive (no base archive, a full disk) would otherwise start a maker's JVM beside
    every driver: after one failure, drivers start without and ask for none."""
    monkeypatch.setenv("KAFKALITE_SPARK_CDS", "1")
    path = spark_cds.archive_path(tmp_path, "/no/such/java", str(tmp_path))
    assert not spark_cds.make(path, "/no/such/java") and not path.exists()  # the maker's JVM check fails
    assert path.with_suffix(".failed").exists()
    started: list[Path] = []
    monkeypatch.setattr(spark_cds, "_make_in_background", started.append)
    assert spark_cds.driver_options(tmp_path, "/no/such/java", str(tmp_path)) == ""
    assert started == []


def test_turned_off_it_names_no_archive_and_makes_none(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKALITE_SPARK_CDS", "0")
    assert spark_cds.driver_options(tmp_path, "/usr/bin/java", str(tmp_path)) == ""
    assert list(tmp_path.iterdir()) == []


def test_no_archive_where_the_cache_would_not_last(tmp_path, monkeypatch):
    """A cache directory others can write to is not used (an archive is code the JVM maps), and a temporary one
    would be new at every start: no archive is made or named then."""
    from pipeline.session import class_archive, user_cache_dir

    shared = tmp_path / "kafkalite"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_cache_dir() is None
    assert class_archive() is None
    assert list(shared.iterdir()) == []
