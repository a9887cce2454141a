#!/usr/bin/env bash
# Run a Kafka client's own test suite against a Kafka Lite cluster laid out as that client's CI lays out Kafka,
# and write the result table into docs/COMPATIBILITY.md (issue 27 §4). Long (tens of minutes): not part of
# scripts/test.sh. The first argument names the client (default kafkajs):
#   scripts/conformance.sh [kafkajs] --kafkajs-dir DIR [--smoke] [-- jest path patterns]
#     needs node/npm and kafkajs at the commit pinned in bench/conformance/kafkajs.py; DIR is made from the
#     `fetch` tool's snapshot (/work/.mirror/tulios+kafkajs/repo, or --mirror GIT_DIR) when missing; elsewhere:
#     git clone https://github.com/tulios/kafkajs DIR && git -C DIR checkout <pinned commit>.
#   scripts/conformance.sh aiokafka --aiokafka-dir DIR [--smoke] [-- pytest args]
#     aiokafka at the commit pinned in bench/conformance/aiokafka.py (0.14.0), from
#     /work/.mirror/aio-libs+aiokafka/repo when DIR is missing (or git clone https://github.com/aio-libs/aiokafka);
#     its test dependencies go into DIR/.venv from PyPI; needs openssl for the suite's certificates.
#   scripts/conformance.sh kafka_python --kafka-python-dir DIR [--smoke] [-- pytest args]
#     kafka-python at the commit pinned in bench/conformance/kafka_python.py, from
#     /work/.mirror/dpkp+kafka-python/repo when DIR is missing; one broker laid out as its KafkaFixture; its test
#     dependencies go into DIR/.venv from PyPI.
#   scripts/conformance.sh confluent_kafka --ckp-dir DIR [--protocol classic|consumer|both] [-- pytest args]
#     confluent-kafka-python's tests at the release pinned in bench/conformance/confluent_kafka.py, from
#     /work/.mirror/confluentinc+confluent-kafka-python/repo when DIR is missing; the newest confluent-kafka and
#     the tests' dependencies go into DIR/.venv from PyPI; one broker per group protocol.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
client=kafkajs
case "${1:-}" in
  kafkajs|aiokafka|kafka_python|confluent_kafka) client="$1"; shift ;;
esac
exec "$ROOT/.venv/bin/python" -m "bench.conformance.$client" "$@"
