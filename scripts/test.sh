#!/usr/bin/env bash
# Set up .venv and run every test. Extra arguments go to pytest (every run below).
# Alongside the main run, another takes the Spark data source's API tests against the lowest pyspark that
# setup.cfg allows (scripts/_spark_versions.sh); KL_SPARK_LOWEST=0 skips it. Naming a test file or test runs only that.
KL_SPARK_CDS_BACKGROUND=1 KL_PIP_NO_COMPILE=1 source "$(dirname "$0")/_env.sh"
source "$(dirname "$0")/_spark_versions.sh"
# Bytecode cached, as an installed package runs (pip compiles at install; here it is compiled as first imported,
# KL_PIP_NO_COMPILE above): a sandbox's PYTHONDONTWRITEBYTECODE would
# make every broker, CLI and Spark worker the suite starts compile the product's modules again (a broker start:
# ~0.5 s of CPU against ~0.28 s cached, measured, and the suite starts brokers and CLIs by the hundred). The cache
# lives in .venv, outside the source tree (bench/run_cluster.py's installed_env does the same for benchmarks).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.venv/pycache}"
# The Spark JVMs the tests start (spark-submit's driver, which runs local[N]'s executors too, and standalone
# daemons) compile with C1 only and collect with one thread: a test's Spark job is short, and C2's compiler
# threads and G1's workers only fight the brokers for the two cores. Measured: a session start plus small jobs
# 11-12 CPU s against 20-21 by default; test_spark.py 92 s against 137 s wall on the same busy machine.
export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
export SPARK_DAEMON_JAVA_OPTS="${SPARK_DAEMON_JAVA_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
ruff check .
# Layers point one way, no import circles (setup.cfg [importlinter]); PYTHONPATH: bench/ and tests/ are not installed
PYTHONPATH=. lint-imports --no-cache
# Four workers on two cores, a test module per worker at a time (modules share clusters through module-scoped
# fixtures, and the multi-host modules each use their own subnet): the workers spend much of their time waiting
# on brokers, JVMs and timeouts (the CPU was a third idle with two; three cut the main run from 935 s to 654 s,
# 2026-11-28; with three the run's last four minutes were still 20-40% idle, four: 707 -> 645 s in runs side by
# side with the same other load). KL_TEST_WORKERS=0 runs everything in this process. The
# tests marked serial load the whole machine on purpose (CPU hogs): they run alone, after the rest. Modules are
# handed out longest first (tests/module_order.py; --no-loadscope-reorder keeps that order), so that no long
# module starts last while the other workers have nothing left to do.
PYTEST=(python -m pytest -n "${KL_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder)
pyspark_newest_in_venv
targeted=0  # a test file or test named on the command line: run just that, in one pass
for a in "$@"; do [ -e "${a%%::*}" ] && targeted=1; done
# Types (setup.cfg [mypy]): strict on net/, election/, client/, broker/, less what the modules listed there still fail.
# In a full run mypy checks alongside the tests (~6 s of one core, before them until 28 November 2026); its verdict
# counts like theirs.
if [ "$targeted" = 1 ]; then
  mypy
  exec "${PYTEST[@]}" "$@"
fi
rc=0
mypy_log=$(mktemp)
mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
# The lowest-pyspark run (14 tests, one JVM, ~35 s) goes alongside the main run rather than after it: the
# main run's workers spend much of their time waiting on brokers and timeouts, not on the CPU. Its
# output is shown when it ends.
low_pid=""
if [ "${KL_SPARK_LOWEST:-1}" = 1 ]; then
  low_log=$(mktemp)
  spark_api_tests_lowest "$@" >"$low_log" 2>&1 &
  low_pid=$!
  trap '[ -z "$low_pid" ] || kill "$low_pid" 2>/dev/null || true' EXIT  # an interrupted run stops it too
fi
# --durations: every run's log names its 30 slowest set-ups, tests and teardowns, where the suite's time goes.
"${PYTEST[@]}" -m "not serial" --durations=30 "$@" || rc=$?
if [ -n "$low_pid" ]; then
  wait "$low_pid" || rc=$?
  low_pid=""
  cat "$low_log"
  rm -f "$low_log"
fi
wait "$mypy_pid" || rc=1
cat "$mypy_log"
rm -f "$mypy_log"
python -m pytest -m serial "$@" || { r=$?; [ "$r" = 5 ] || rc=$r; }  # 5: none selected
exit "$rc"
