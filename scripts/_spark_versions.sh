# shellcheck shell=bash
# Sourced by test.sh after _env.sh: the Spark source against both ends of setup.cfg's pyspark bound.
# The main run must use what a fresh install gets (the newest pyspark the bound allows); a second, short run
# takes the data source's PySpark API tests against the lowest version the bound allows, installed once
# into .venv/pyspark-<version> and put first on PYTHONPATH (the driver, Spark's JVM and its Python workers
# all come from there: spark_support.py checks each against KL_EXPECT_PYSPARK).

# The tests that touch PySpark's data source API, all in one module (one Spark start): the read limits' round
# trip, a default-trigger query with maxOffsetsPerTrigger into a memory sink, availableNow, the sink in batch
# and streaming and a batch read of what it wrote.
SPARK_API_TESTS=(
  tests/unit/test_spark_stream_plan.py
  "tests/integration/test_spark_streaming.py::test_readmes_shape_default_trigger_with_max_offsets_per_trigger_fills_a_memory_sink"
  "tests/integration/test_spark_streaming.py::test_available_now_reads_exactly_what_was_produced_and_a_restart_reads_only_the_new"
  "tests/integration/test_spark_streaming.py::test_sink_batch_and_streaming_writes_read_back_by_kl_consume_and_the_source"
)

# setup.cfg's lower bound of pyspark in the spark extra ("pyspark>=4.2" -> 4.2).
pyspark_lowest() {
  python - <<'PY'
import configparser, re, sys
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
m = re.search(r"^\s*pyspark\s*>=\s*([0-9][0-9.]*)", cfg["options.extras_require"]["spark"], re.M)
sys.exit("error: setup.cfg's spark extra has no 'pyspark>=X' lower bound") if not m else print(m.group(1))
PY
}

# The main run gets the newest pyspark the bound allows, as a fresh install does: a .venv made before a
# PySpark release is brought up to date (the index is asked once per run; offline, the run goes on as is).
pyspark_newest_in_venv() {
  local installed latest
  installed=$(python -c 'import pyspark; print(pyspark.__version__)')
  latest=$(python -m pip index versions pyspark 2>/dev/null | sed -n 's/^pyspark (\(.*\))$/\1/p' | head -n 1)
  if [ -z "$latest" ]; then
    echo "note: cannot ask the package index for the newest pyspark; testing the installed $installed" >&2
  elif [ "$installed" != "$latest" ]; then
    echo "pyspark $installed in .venv, a fresh install gets $latest: upgrading (pip)..." >&2
    python -m pip install -q --upgrade "pyspark==$latest" >.venv/pyspark-upgrade.log 2>&1 \
      || { tail -n 20 .venv/pyspark-upgrade.log >&2; echo "error: upgrading pyspark failed" >&2; return 1; }
  fi
  echo "main run: pyspark $(python -c 'import pyspark; print(pyspark.__version__)')" >&2
}

# The SPARK_API_TESTS with the lowest pyspark first on PYTHONPATH. Extra arguments go to pytest.
spark_api_tests_lowest() {
  local low dir
  low=$(pyspark_lowest)
  dir="$ROOT/.venv/pyspark-$low"
  if [ ! -f "$dir/.installed" ]; then
    echo "installing pyspark==$low into $dir for the lowest-version run (first run only)..." >&2
    rm -rf "$dir"
    # With its own dependency (py4j at the version this pyspark asks for), nothing else. No bytecode at install:
    # test.sh's PYTHONPYCACHEPREFIX keeps it elsewhere (see KL_PIP_NO_COMPILE in _env.sh).
    if ! python -m pip install -q --no-compile --target "$dir" "pyspark==$low" >.venv/pyspark-lowest.log 2>&1; then
      tail -n 20 .venv/pyspark-lowest.log >&2
      echo "error: could not install pyspark==$low (log: .venv/pyspark-lowest.log)" >&2
      return 1
    fi
    touch "$dir/.installed"
  fi
  echo "lowest-version run: pyspark $low" >&2
  # KAFKALITE_SPARK_CDS=0: this run starts one driver, and a class archive for this pyspark would cost it a second
  # JVM (pipeline/spark_cds.py's background maker) that no later run uses.
  KL_EXPECT_PYSPARK=$low KAFKALITE_SPARK_CDS=0 PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" \
    python -m pytest "${SPARK_API_TESTS[@]}" "$@"
}
