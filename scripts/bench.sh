#!/usr/bin/env bash
# Run one benchmark script with everything it needs: ./scripts/bench.sh run_single_broker [--runs 3 ...]
# Sets up .venv (with the bench extras) and installs the peers' servers (Debian's redis-server,
# nats-server, redis-benchmark) and iperf3 when missing, and Go with Debian's nats.go for the NATS load generator
# (bench/peers/native/nats_js_pub.go). Results go to docs/BENCHMARKS.md (each script writes its section).
# shellcheck source=scripts/_env.sh
source "$(dirname "$0")/_env.sh"
if [ $# -lt 1 ]; then
  echo "usage: scripts/bench.sh NAME [ARGS...]   (NAME: a bench/run_*.py module, e.g. run_single_broker)" >&2
  exit 2
fi
missing=()
for bin in redis-server nats-server iperf3; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
command -v go >/dev/null 2>&1 || missing+=(golang-go)
[ -d /usr/share/gocode/src/github.com/nats-io/nats.go ] || missing+=(golang-github-nats-io-go-nats-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} (apt-get)..." >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
        >.venv/apt-bench.log 2>&1; then
      tail -n 20 .venv/apt-bench.log >&2
      echo "error: could not install ${missing[*]} (log: .venv/apt-bench.log)" >&2
      exit 1
    fi
  else
    echo "error: the peer benchmarks need: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
name=$1
shift
exec python -m "bench.$name" "$@"
