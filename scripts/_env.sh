# Sourced by the other scripts: make .venv and install the project into it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "error: Python >= 3.11 is required (found: $("$PY" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
STAMP=.venv/.installed-$(cat setup.cfg pyproject.toml | sha1sum | cut -c1-12)
if [ ! -f "$STAMP" ]; then
  echo "setting up .venv (first run only)..." >&2
  # KL_PIP_NO_COMPILE=1 (scripts/test.sh): no bytecode at install. The suite keeps its bytecode under
  # PYTHONPYCACHEPREFIX, where pip's compiled files (site-packages/__pycache__) are never read, so compiling them
  # cost ~16 s of the fresh clone's first minute for nothing (32 s against 15.5 s, 2026-11-28).
  compile=()
  [ "${KL_PIP_NO_COMPILE:-0}" = 1 ] && compile=(--no-compile)
  if ! { .venv/bin/python -m pip install -q --upgrade pip \
      && .venv/bin/python -m pip install -q "${compile[@]}" -e ".[test,bench,spark]"; } \
      >.venv/install.log 2>&1; then
    tail -n 20 .venv/install.log >&2
    echo "error: installing the project into .venv failed (full log: .venv/install.log)" >&2
    exit 1
  fi
  rm -f .venv/.installed-*
  touch "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
# Spark (kl-spark, the Spark tests) needs Java 17+: use an installed JDK 17, else install one with apt.
# Executors must run this venv's Python to import the `pipeline` package.
export PYSPARK_PYTHON="$ROOT/.venv/bin/python"
if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1 && [ ! -d /usr/lib/jvm/java-17-openjdk-amd64 ] \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Java 17 for Spark (apt-get)..." >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; } \
    >.venv/apt-java.log 2>&1 || echo "warning: could not install Java 17 (log: .venv/apt-java.log)" >&2
fi
for j in /usr/lib/jvm/java-17-openjdk-*; do
  if [ -z "${JAVA_HOME:-}" ] && [ -x "$j/bin/java" ]; then export JAVA_HOME="$j"; fi
done
# ZooKeeper for the coordination=zookeeper mode and its tests: Debian's `zookeeper` package (3.8).
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ZooKeeper (apt-get)..." >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper; } \
        >.venv/apt-zookeeper.log 2>&1; then
      tail -n 20 .venv/apt-zookeeper.log >&2
      echo "error: could not install ZooKeeper (log: .venv/apt-zookeeper.log)" >&2
      exit 1
    fi
  elif [ "$(basename "$0")" = test.sh ]; then
    # The ZooKeeper tests never skip in the full suite: stop here with the command rather than fail later.
    echo "error: ZooKeeper is missing; install it with: sudo apt-get install -y zookeeper" >&2
    exit 1
  else
    echo "note: ZooKeeper is missing (needed only for --coordination zookeeper): sudo apt-get install -y zookeeper" >&2
  fi
fi
# The linter for deploy/**/*.sh (tests/integration/test_deploy_scripts.py): Debian's shellcheck.
if ! command -v shellcheck >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing shellcheck (apt-get)..." >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck; } \
        >.venv/apt-shellcheck.log 2>&1; then
      tail -n 20 .venv/apt-shellcheck.log >&2
      echo "warning: could not install shellcheck (log: .venv/apt-shellcheck.log)" >&2
    fi
  else
    echo "note: shellcheck is missing; install it with: sudo apt-get install -y shellcheck" >&2
  fi
fi
# The console's browser tests (tests/integration/test_dashboard.py: Debian's chromium + chromium-driver,
# driven by Selenium) and the monitoring config checks (test_monitoring.py: promtool, Debian's prometheus).
if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1 \
    || ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium, chromium-driver and prometheus (apt-get)..." >&2
    if ! { apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
          chromium chromium-driver prometheus; } >.venv/apt-dashboard.log 2>&1; then
      tail -n 20 .venv/apt-dashboard.log >&2
      echo "error: could not install chromium/chromium-driver/prometheus (log: .venv/apt-dashboard.log)" >&2
      if [ "$(basename "$0")" = test.sh ]; then exit 1; fi
    fi
  elif [ "$(basename "$0")" = test.sh ]; then
    echo "error: the dashboard and monitoring tests need: sudo apt-get install -y chromium chromium-driver prometheus" >&2
    exit 1
  fi
fi
# The Kafka-protocol client tests (tests/integration/test_kafka_*.py): kcat and Node.js from Debian, kafkajs
# from npm at the version pinned in tests/js/package-lock.json (Python clients come with the test extras).
# Only what is missing: a machine may already have Node.js from elsewhere, and Debian's npm conflicts with it.
KC_MISSING=()
command -v kcat >/dev/null 2>&1 || KC_MISSING+=(kcat)
command -v node >/dev/null 2>&1 || KC_MISSING+=(nodejs)
command -v npm >/dev/null 2>&1 || KC_MISSING+=(npm)
if [ "${#KC_MISSING[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${KC_MISSING[*]} (apt-get)..." >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${KC_MISSING[@]}"; } >.venv/apt-kafka-clients.log 2>&1; then
      tail -n 20 .venv/apt-kafka-clients.log >&2
      echo "error: could not install ${KC_MISSING[*]} (log: .venv/apt-kafka-clients.log)" >&2
      if [ "$(basename "$0")" = test.sh ]; then exit 1; fi
    fi
  elif [ "$(basename "$0")" = test.sh ]; then
    echo "error: the Kafka client tests need: sudo apt-get install -y ${KC_MISSING[*]}" >&2
    exit 1
  fi
fi
if command -v npm >/dev/null 2>&1 && [ ! -f tests/js/node_modules/.installed-"$(sha1sum tests/js/package-lock.json | cut -c1-12)" ]; then
  echo "installing kafkajs (npm ci)..." >&2
  if (cd tests/js && rm -rf node_modules && npm ci --no-audit --no-fund --loglevel=error) >.venv/npm-kafkajs.log 2>&1; then
    touch tests/js/node_modules/.installed-"$(sha1sum tests/js/package-lock.json | cut -c1-12)"
  else
    tail -n 20 .venv/npm-kafkajs.log >&2
    echo "error: could not install kafkajs with npm (log: .venv/npm-kafkajs.log)" >&2
    if [ "$(basename "$0")" = test.sh ]; then exit 1; fi
  fi
fi
# The Spark driver's class-data-sharing archive (pipeline/spark_cds.py: a session's JVM starts on half the CPU),
# made once per venv here rather than by the first Spark job's background maker.
# An empty stamp: Spark cannot start here, or the archive could not be made; not tried again for this venv.
# KL_SPARK_CDS_BACKGROUND=1 (scripts/test.sh): made alongside what follows (~20 s of one core), not before it;
# a driver that starts before it is there starts without it, as it would with none.
if [ ! -f .venv/.spark-cds ] || { [ -s .venv/.spark-cds ] && [ ! -f "$(cat .venv/.spark-cds)" ]; }; then
  make_cds() {  # the stamp appears when its content is final (a run may start while the background one makes it)
    .venv/bin/python -c 'from pipeline.session import class_archive; print(class_archive() or "")' \
      >.venv/.spark-cds.tmp 2>/dev/null || true
    mv .venv/.spark-cds.tmp .venv/.spark-cds
  }
  if [ "${KL_SPARK_CDS_BACKGROUND:-0}" = 1 ]; then
    make_cds </dev/null >/dev/null 2>&1 &
  else
    make_cds
  fi
fi
