"""Starting Spark for the pipeline: Java and pyarrow checks, a quiet SparkSession, the data source registered.

Spark needs a JVM (Java 17+) and, for Python data sources, pyarrow; executors must run this
project's Python (PYSPARK_PYTHON), or they cannot import the `pipeline` package.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline import spark_cds

MIN_JAVA = 17
# setup.cfg's lower bound (pyspark>=4.2): latestOffset(start, limit) and pyspark.sql.streaming.datasource's
# read limits came in 4.2. scripts/test.sh runs the Spark source's tests against this version too.
MIN_PYSPARK = (4, 2)
_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


class SparkSetupError(RuntimeError):
    """Spark cannot start here (no Java, too old a Java, no pyspark/pyarrow). One line, says what to do."""


def find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def java_version(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        raise SparkSetupError(f"cannot tell the version of {java} (java -version said: {out.strip()[:80]!r})")
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def check_environment() -> str:
    """A one-line description of the Java used; SparkSetupError if Spark cannot run."""
    java = find_java()
    if java is None:
        raise SparkSetupError(
            f"Spark needs Java {MIN_JAVA}+ and none was found: install it (apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    version = java_version(java)
    if version < MIN_JAVA:
        raise SparkSetupError(
            f"Spark needs Java {MIN_JAVA}+, but {java} is Java {version}: set JAVA_HOME to a newer one"
        )
    for module, extra in (("pyspark", f"pyspark>={MIN_PYSPARK[0]}.{MIN_PYSPARK[1]}"), ("pyarrow", "pyarrow")):
        try:
            __import__(module)
        except ImportError:
            raise SparkSetupError(f"{module} is not installed: pip install -e '.[spark]' (needs {extra})") from None
    import pyspark

    if tuple(int(x) for x in re.findall(r"\d+", pyspark.__version__)[:2]) < MIN_PYSPARK:
        raise SparkSetupError(
            f"pyspark {pyspark.__version__} is too old: the streaming source's read limits need "
            f"{MIN_PYSPARK[0]}.{MIN_PYSPARK[1]}+ (pip install -e '.[spark]')"
        )
    return f"Java {version} ({java}), pyspark {pyspark.__version__}"


def _log4j_file() -> str:
    path = Path(tempfile.gettempdir()) / "kafkalite-log4j2-quiet.properties"
    if not path.exists() or path.read_text() != _QUIET_LOG4J:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_QUIET_LOG4J)
        tmp.replace(path)
    return str(path)


def user_cache_dir() -> Path | None:
    """~/.cache/kafkalite (XDG_CACHE_HOME) if this user owns it and nobody else can write to it, else None."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafkalite"
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = base.stat()
        if st.st_uid == os.getuid() and not st.st_mode & 0o022:
            return base
    except OSError:
        pass
    return None


def private_cache_dir() -> Path:
    """A directory only this user can write to: Spark runs what SPARK_HOME/bin holds, so a shared place with a
    predictable name (/tmp) would let another local user plant it. ~/.cache/kafkalite (XDG_CACHE_HOME), else
    a new private temporary directory."""
    return user_cache_dir() or Path(tempfile.mkdtemp(prefix="kafkalite-"))


def spark_home_for_workers() -> str | None:
    """A SPARK_HOME for pip's pyspark without its python/lib/pyspark.zip, or None where there is no such zip.

    Spark puts SPARK_HOME/python/lib/pyspark.zip first on every Python worker's PYTHONPATH, and Python compiles
    what it imports from a zip on every start (it caches no bytecode for zips): each worker (the planner, the
    streaming source's runner, the task daemon) spends about a CPU second compiling pyspark. On a busy machine
    that is over Spark's fixed 10 s for a worker to connect back, and the query dies. This directory links to
    everything of the installed pyspark but `python/`: the zip's path no longer exists, so workers import the
    same pyspark from site-packages, with its compiled bytecode."""
    import pyspark

    real = Path(pyspark.__file__).resolve().parent
    if not (real / "python" / "lib" / "pyspark.zip").is_file():
        return None
    tag = hashlib.sha1(f"{real}|{pyspark.__version__}".encode()).hexdigest()[:12]
    home = private_cache_dir() / f"spark-home-{tag}"
    if not (home / "bin" / "spark-submit").exists():
        tmp = home.with_name(f"{home.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for entry in real.iterdir():
            if entry.name != "python":
                (tmp / entry.name).symlink_to(entry)
        try:
            tmp.rename(home)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return str(home)


def _spark_home() -> str:
    """The SPARK_HOME a driver started here runs from (its classpath): the environment's, else what spark_session
    sets (spark_home_for_workers), else pip's pyspark itself."""
    import pyspark

    return os.environ.get("SPARK_HOME") or spark_home_for_workers() or str(Path(pyspark.__file__).resolve().parent)


def spark_session(master: str | None = None, app_name: str = "kl-spark", conf: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """A SparkSession with the `kafkalite` data source registered.

    `master` None keeps what spark-submit set, else `local[*]`. Spark's startup chatter is
    turned down to errors; executors run this interpreter unless PYSPARK_PYTHON says otherwise."""
    check_environment()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from pipeline.datasource import register

    builder = SparkSession.builder.appName(app_name)
    quiet = f"-Dlog4j2.configurationFile=file:{_log4j_file()}"
    driver_options = quiet
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # we start the JVM (spark-submit started it otherwise)
        if "SPARK_HOME" not in os.environ and (home := spark_home_for_workers()):
            os.environ["SPARK_HOME"] = home
        if master is None and not SparkConf().contains("spark.master"):
            master = "local[*]"  # not under spark-submit, which hands us its --master
        java, cache = find_java(), user_cache_dir()
        # A class archive only where it lasts: made in a temporary directory, no later driver would find it.
        if java is not None and cache is not None:  # check_environment found Java
            cds = spark_cds.driver_options(cache, java, _spark_home())
            driver_options = f"{quiet} {cds}".strip()
    if master is not None:
        builder = builder.master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.driver.extraJavaOptions": driver_options,
        "spark.executor.extraJavaOptions": quiet,
        "spark.sql.session.timeZone": "UTC",
        # Workers forked with the data source already imported (pipeline/spark_daemon.py): ~0.7 CPU-s each.
        "spark.python.daemon.module": "pipeline.spark_daemon",
    }
    if master is not None and master.startswith("local"):
        # One host: no name lookup of this machine's hostname at start (slow where DNS is), nothing listens
        # beyond loopback.
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    for key, value in (conf or {}).items():
        # Java options given by the caller come after the log4j one rather than replace it.
        join = key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
        settings[key] = f"{settings[key]} {value}" if join else value
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def class_archive() -> Path | None:
    """The driver's class-data-sharing archive (pipeline/spark_cds.py) for the Java and pyspark found here, made now
    if there is none; None: Spark cannot start here, or it could not be made (Spark then starts without)."""
    try:
        check_environment()
    except SparkSetupError:
        return None
    java, cache = find_java(), user_cache_dir()
    if java is None or cache is None:
        return None
    path = spark_cds.archive_path(cache, java, _spark_home())
    return path if spark_cds.make(path, java) else None
