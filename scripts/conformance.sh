#!/usr/bin/env bash
# Run a Kafka client's own test suite against a Kafka Lite cluster laid out as that client's CI lays out Kafka,
# and write the result table into docs/COMPATIBILITY.md (issue 27 §4). Long (tens of minutes): not part of
# scripts/test.sh. Needs node/npm and kafkajs at the commit pinned in bench/conformance/kafkajs.py:
#   scripts/conformance.sh --kafkajs-dir DIR [--smoke] [-- jest path patterns]
# DIR is made from the `fetch` tool's snapshot (/work/.mirror/tulios+kafkajs/repo, or --mirror GIT_DIR) when
# missing; elsewhere: git clone https://github.com/tulios/kafkajs DIR && git -C DIR checkout <pinned commit>.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$ROOT/.venv/bin/python" -m bench.conformance.kafkajs "$@"
