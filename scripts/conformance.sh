#!/usr/bin/env bash
# Run a Kafka client's own test suite against a Kafka Lite cluster laid out as that client's CI lays out Kafka,
# and write the result table into docs/COMPATIBILITY.md (issue 27 §4). Long (tens of minutes): not part of
# scripts/test.sh. Needs node/npm and kafkajs at the commit pinned in bench/conformance/kafkajs.py:
#   scripts/conformance.sh --kafkajs-dir DIR [--smoke] [-- jest path patterns]
# DIR is made from the `fetch` tool's snapshot (/work/.mirror/tulios+kafkajs/repo, or --mirror GIT_DIR) when
# missing; elsewhere: git clone https://github.com/tulios/kafkajs DIR && git -C DIR checkout <pinned commit>.
# kafka-python's pytest suite has its own harness (one broker laid out as its KafkaFixture; DIR/.venv from PyPI):
#   .venv/bin/python -m bench.conformance.kafka_python --kafka-python-dir DIR [--smoke] [-- pytest args]
# (DIR exported from /work/.mirror/dpkp+kafka-python/repo at the commit pinned in bench/conformance/kafka_python.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$ROOT/.venv/bin/python" -m bench.conformance.kafkajs "$@"
