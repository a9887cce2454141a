#!/usr/bin/env bash
# Set up .venv and run every test. Extra arguments go to pytest.
source "$(dirname "$0")/_env.sh"
ruff check .
# Layers point one way, no import circles (setup.cfg [importlinter]); PYTHONPATH: bench/ and tests/ are not installed
PYTHONPATH=. lint-imports --no-cache
# Two workers, a test module per worker at a time (modules share clusters through module-scoped fixtures, and
# the multi-host modules each use their own subnet): KL_TEST_WORKERS=0 runs everything in this process.
exec python -m pytest -n "${KL_TEST_WORKERS:-2}" --dist loadfile "$@"
