"""A class-data-sharing archive for the Spark driver's JVM (AppCDS, JDK 13+): the classes a Spark session loads,
parsed and verified once and mapped from a file by every later driver, as `java -XX:SharedArchiveFile` does.

A driver's start is mostly class loading: on local[2] with kl-spark's JVM settings, a session and a first query
took 6.6 CPU s of the JVM, and 3.0 with the archive (bench/spark_start.py; 7.7 -> 3.3 s to the first answer).
The archive belongs to one Java, one pyspark and one SPARK_HOME (the classpath it was made with): its name is
a hash of them, and the JVM itself refuses an archive whose jars changed since, starting as it would without.

`driver_options()` names the archive when there is one; when there is none it starts one being made in the
background (a short session of its own, at low priority, one at a time per archive) and the session at hand
starts without it. pipeline.session's `class_archive()` makes it in the foreground (scripts/_env.sh does, after
an install). KAFKALITE_SPARK_CDS=0 turns it off.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

# Silence the JVM's own reports on the archive (a mismatch after an upgrade is a warning on stdout otherwise,
# which would reach the user's terminal and a CLI's one-line output): a refused archive just means a slower start.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_ARCHIVE_GLOB = "spark-cds-*.jsa"
_KEEP = 3  # archives kept (one per Java/pyspark/SPARK_HOME in use); older ones are deleted when a new one is made


def enabled() -> bool:
    return os.environ.get("KAFKALITE_SPARK_CDS", "1") != "0"


def archive_path(cache_dir: Path, java: str, spark_home: str) -> Path:
    """The archive for this Java (its real path and mtime: an upgrade is a new key), pyspark and SPARK_HOME."""
    import pyspark

    real_java = os.path.realpath(java)
    try:
        java_stamp = str(os.stat(real_java).st_mtime_ns)
    except OSError:
        java_stamp = "?"
    key = f"{real_java}|{java_stamp}|{pyspark.__version__}|{os.path.realpath(spark_home)}"
    return cache_dir / f"spark-cds-{hashlib.sha1(key.encode()).hexdigest()[:16]}.jsa"


def driver_options(cache_dir: Path, java: str, spark_home: str) -> str:
    """JVM options for a driver started from `spark_home`: the archive's, or "" (then one is being made)."""
    if not enabled():
        return ""
    path = archive_path(cache_dir, java, spark_home)
    if path.is_file():
        return f"-XX:SharedArchiveFile={path} {_QUIET}"
    if not _failed(path).exists():  # a Java that cannot make one (no base archive) is not asked at every start
        _make_in_background(path)
    return ""


def _failed(path: Path) -> Path:
    """Left by a maker that could not make `path`; an explicit make (pipeline.session.class_archive) tries again."""
    return path.with_suffix(".failed")


def _make_in_background(path: Path) -> None:
    """A detached maker (pipeline.session.class_archive) at low priority; it exits at once if another is making it."""
    env = {**os.environ, "KAFKALITE_SPARK_CDS": "0"}  # its own session must not start a maker in turn
    maker = "import os; os.nice(10); from pipeline.session import class_archive; class_archive()"
    try:
        subprocess.Popen(
            [sys.executable, "-c", maker],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives a short CLI run, and a Ctrl-C of it
        )
    except OSError:
        pass  # no archive this time: Spark starts as it would without


def make(path: Path, java: str) -> bool:
    """Make `path` with a short session of its own (the classes a session and a first query load), unless another
    process holds its lock. True if the archive exists afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return path.is_file()  # another process is making it
        if path.is_file():
            return True
        if not os.access(java, os.X_OK):  # no JVM to check an archive with: none is made
            _failed(path).touch()
            return False
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
        # The JVM writes the archive as it exits, after the session's Python would have: the child closes the
        # gateway's stdin (how PySpark ends its JVM), waits for it and exits with its status. It prints the JVM's
        # classpath, which the check below needs.
        child = (
            "import sys\n"
            "from pipeline.session import spark_session\n"
            "s = spark_session('local[1]', 'kafkalite-cds', {'spark.driver.extraJavaOptions': sys.argv[1]})\n"
            "s.range(100).selectExpr('sum(id)').collect()\n"
            "print(s.sparkContext._jvm.System.getProperty('java.class.path'))\n"
            "jvm = s.sparkContext._gateway.proc\n"
            "s.stop()\n"
            "jvm.stdin.close()\n"
            "sys.exit(jvm.wait(300))\n"
        )
        options = f"-XX:ArchiveClassesAtExit={tmp} {_QUIET}"
        env = {**os.environ, "KAFKALITE_SPARK_CDS": "0"}
        try:
            done = subprocess.run(
                [sys.executable, "-c", child, options],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=600,
            )
            lines = done.stdout.strip().splitlines()
            if done.returncode == 0 and lines and tmp.is_file() and _maps(java, tmp, lines[-1]):
                tmp.replace(path)
        except (OSError, subprocess.SubprocessError):
            pass
        finally:
            tmp.unlink(missing_ok=True)
        if path.is_file():
            _failed(path).unlink(missing_ok=True)
        else:
            _failed(path).touch()
        _prune(path)
        return path.is_file()


def _maps(java: str, archive: Path, classpath: str) -> bool:
    """A JVM on Spark's classpath starts from the archive: one cut short (a full disk, a kill while it was written)
    would crash every driver with SIGBUS as it maps the file, so it is never put in place."""
    try:
        done = subprocess.run(
            [java, f"-XX:SharedArchiveFile={archive}", "-Xshare:on", "-XX:ErrorFile=/dev/null"]
            + ["-cp", classpath, "-version"],
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _prune(keep: Path) -> None:
    """The newest _KEEP archives stay (each is ~150 MB); a fresh clone's venv makes a new one."""
    archives = sorted(keep.parent.glob(_ARCHIVE_GLOB), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[_KEEP:]:
        if old != keep:
            old.unlink(missing_ok=True)
