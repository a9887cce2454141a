"""pipeline.session's SPARK_HOME for Python workers (pip's pyspark without its pyspark.zip): Spark runs what
its bin/ holds, so the directory must be one no other local user can write to or plant beforehand."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.session import spark_home_for_workers


def test_the_spark_home_is_made_in_the_users_own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    home = spark_home_for_workers()
    assert home is not None, "pip's pyspark ships python/lib/pyspark.zip"
    home_path = Path(home)
    assert home_path.parent == tmp_path / "cache" / "kafkalite"
    assert (home_path / "bin" / "spark-submit").exists() and not (home_path / "python").exists()
    assert not home_path.parent.stat().st_mode & 0o022  # neither group nor others may write there
    assert spark_home_for_workers() == home  # made once, then reused


def test_a_cache_others_can_write_to_is_not_used(tmp_path, monkeypatch):
    """Someone else's planted directory (here: a world-writable cache) is never taken as SPARK_HOME."""
    shared = tmp_path / "shared"
    (shared / "kafkalite").mkdir(parents=True)
    os.chmod(shared / "kafkalite", 0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    home = spark_home_for_workers()
    assert home is not None and not Path(home).is_relative_to(shared)
    assert (Path(home) / "bin" / "spark-submit").exists()
