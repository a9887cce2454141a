#!/usr/bin/env bash
# Set up .venv and run every test. Extra arguments go to pytest.
source "$(dirname "$0")/_env.sh"
ruff check .
exec python -m pytest "$@"
