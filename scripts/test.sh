#!/usr/bin/env bash
# Set up .venv and run every test. Extra arguments go to pytest.
source "$(dirname "$0")/_env.sh"
ruff check .
# Layers point one way, no import circles (setup.cfg [importlinter]); PYTHONPATH: bench/ and tests/ are not installed
PYTHONPATH=. lint-imports --no-cache
exec python -m pytest "$@"
