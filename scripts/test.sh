#!/usr/bin/env bash
# Set up .venv and run every test. Extra arguments go to pytest (and then only the main run is made).
# Without arguments, a second run takes the Spark data source's API tests against the lowest pyspark that
# setup.cfg allows (scripts/_spark_versions.sh); KL_SPARK_LOWEST=0 skips it, =1 makes it with arguments too.
source "$(dirname "$0")/_env.sh"
source "$(dirname "$0")/_spark_versions.sh"
ruff check .
# Layers point one way, no import circles (setup.cfg [importlinter]); PYTHONPATH: bench/ and tests/ are not installed
PYTHONPATH=. lint-imports --no-cache
# Two workers, a test module per worker at a time (modules share clusters through module-scoped fixtures, and
# the multi-host modules each use their own subnet): KL_TEST_WORKERS=0 runs everything in this process.
PYTEST=(python -m pytest -n "${KL_TEST_WORKERS:-2}" --dist loadfile)
pyspark_newest_in_venv
if [ "${KL_SPARK_LOWEST:-$([ $# -eq 0 ] && echo 1 || echo 0)}" != 1 ]; then
  exec "${PYTEST[@]}" "$@"
fi
rc=0
"${PYTEST[@]}" "$@" || rc=$?
spark_api_tests_lowest || rc=$?
exit "$rc"
