#!/usr/bin/env bash
# The main job: a tweet stream for a hashtag through a 3-broker cluster (RF=3, min.insync.replicas=2)
# to a consumer group of 3 processes, one broker killed mid-stream and restarted, then a Spark job
# over the brokers' segment files. A Spark Structured Streaming job (kl-spark stream-hashtags) counts the
# hashtags live next to the group, through the failover, into the topic hashtag-counts. Ends with
# acknowledged = consumed = counted-by-Spark, and the same top hashtags from the group, the live job and
# the batch job. Stops everything it started, also on Ctrl-C or failure. The web console (kl-dashboard) runs
# throughout: open the URL printed at the start to watch the failover. KEEP=1 keeps the work directory,
# and restarts the cluster at the end and leaves it running with its console.
#
# Usage: scripts/demo.sh [--base-port PORT]   brokers on PORT..PORT+2, their metrics on PORT+100..PORT+102,
#        the console on PORT+200 (kl-cluster up's layout); default: the first such free run from 19092.
BASE_PORT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base-port) BASE_PORT="${2:-none}"; shift $(($# > 1 ? 2 : 1)) ;;
    --base-port=*) BASE_PORT="${1#*=}"; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (usage: scripts/demo.sh [--base-port PORT])" >&2; exit 2 ;;
  esac
done
if [ -n "$BASE_PORT" ] && ! { [[ "$BASE_PORT" =~ ^[1-9][0-9]{3,4}$ ]] && ((BASE_PORT <= 65335)); }; then
  echo "error: --base-port must be a port from 1024 to 65335 (PORT+200 is the console's), not '$BASE_PORT'" >&2
  exit 2
fi
source "$(dirname "$0")/_env.sh"

# Three consecutive free ports for the brokers, the three above base+100 for their metrics (metrics.port),
# and base+200 for the console: --base-port's, or the first free run from 19092.
BASE=$(python - "$BASE_PORT" <<'PY'
import socket
import sys


def free(base: int) -> bool:
    socks = [socket.socket() for _ in range(7)]
    try:
        for s, port in zip(socks, [base, base + 1, base + 2, base + 100, base + 101, base + 102, base + 200]):
            s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


if sys.argv[1]:
    base = int(sys.argv[1])
    if not free(base):
        sys.exit(f"error: --base-port {base}: ports {base}-{base + 2}, {base + 100}-{base + 102} and {base + 200} are not all free")
    print(base)
else:
    print(next(base for base in range(19092, 60000, 7) if free(base)))
PY
)

RATE="${RATE:-100}"          # tweets per second
DURATION="${DURATION:-40}"   # seconds of streaming
KILL_AT="${KILL_AT:-12}"     # seconds into the stream: SIGKILL broker 2
RESTART_AT="${RESTART_AT:-24}"
HASHTAG="${HASHTAG:-DataEngineering}"
T0=$(date +%s.%N)
elapsed() { python -c "import time; print(f'{time.time() - $T0:5.1f}s')"; }
say() { printf '\n== [%s] %s\n' "$(elapsed)" "$*"; }

say "checking Spark's prerequisites"
kl-spark check

WORK=$(mktemp -d /tmp/kafkalite-demo.XXXXXX)
KL="$WORK/kl"
PIDS=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -f "$KL/cluster.json" ] && { [ "${KEEP:-0}" != 1 ] || [ "$rc" != 0 ]; }; then
    kl-cluster down --data-dir "$KL" >/dev/null 2>&1 || true
  fi
  if [ "${KEEP:-0}" = 1 ] || [ "$rc" != 0 ]; then
    echo "work directory kept: $WORK (broker logs: $KL/broker-*.log)" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

say "starting Spark (local[2]) while the cluster starts: one session for the live job (Structured Streaming, 30s windows, 1m watermark) next to the group, and for the batch job at the end"
# pipeline/demo_spark.py: the live job starts once $WORK/bootstrap names the cluster; it reads from the earliest
# offset, so it misses nothing it starts after.
python -m pipeline.demo_spark "$WORK" --bootstrap-file "$WORK/bootstrap" --data-dir "$KL" --topic tweets \
  --to-topic hashtag-counts --window 30s --watermark 1m --trigger "3 seconds" --master 'local[2]' --since "$T0" \
  >"$WORK/stream.log" 2>"$WORK/stream.err" &
STREAM=$!
PIDS+=("$STREAM")

say "starting 3 brokers on ports $BASE-$((BASE + 2)) (data in $KL)"
UP=$(kl-cluster up --brokers 3 --base-port "$BASE" --data-dir "$KL" --override group.initial.rebalance.delay.ms=0 \
  --dashboard)
BS=${UP%%$'\n'*}  # the first line; the last one says which ports the cluster uses (console: base + 200)
echo "bootstrap servers: $BS"
echo "${UP##*$'\n'}"
echo "web console: http://127.0.0.1:$((BASE + 200))/cluster  (watch broker 2 fail over there)"
kl-topics --bootstrap-server "$BS" --create --topic tweets --partitions 3 --replication-factor 3 \
  --config min.insync.replicas=2
kl-topics --bootstrap-server "$BS" --create --topic hashtag-counts --partitions 1 --replication-factor 3 \
  --config cleanup.policy=compact --config min.insync.replicas=2
kl-topics --bootstrap-server "$BS" --describe --topic tweets
echo "$BS" >"$WORK/bootstrap.tmp" && mv "$WORK/bootstrap.tmp" "$WORK/bootstrap"  # the live Spark job starts

say "starting a consumer group of 3 processes (group hashtag-counters)"
for n in 1 2 3; do
  kl-tweets consume --bootstrap-server "$BS" --topic tweets --group hashtag-counters --name "consumer-$n" \
    --output "$WORK/consumer-$n.jsonl" --session-timeout-ms 6000 --heartbeat-interval-ms 1000 \
    --report-every 3600 >"$WORK/consumer-$n.log" 2>&1 &
  PIDS+=($!)
done
python -m pipeline.demo wait-group "$BS" hashtag-counters 3

say "producing #$HASHTAG tweets at $RATE/s for ${DURATION}s (acks=all, key = user id)"
kl-tweets produce --bootstrap-server "$BS" --topic tweets --hashtag "$HASHTAG" --rate "$RATE" \
  --duration "$DURATION" --no-bursts --seed 7 --acked-file "$WORK/acked.txt" --progress-every 0.5 \
  >"$WORK/producer.log" 2>&1 &
PRODUCER=$!
PIDS+=("$PRODUCER")

STREAM_T0=$(date +%s)
killed=0
restarted=0
while kill -0 "$PRODUCER" 2>/dev/null; do
  sleep 2
  now=$(( $(date +%s) - STREAM_T0 ))
  python -m pipeline.demo status "$WORK" --since "$T0"
  if [ "$killed" = 0 ] && [ "$now" -ge "$KILL_AT" ]; then
    say "SIGKILL broker 2 mid-stream"
    kl-cluster kill 2 --data-dir "$KL"
    killed=1
  fi
  if [ "$killed" = 1 ] && [ "$restarted" = 0 ] && [ "$now" -ge "$RESTART_AT" ]; then
    say "leaders and ISRs without broker 2:"
    kl-cluster status --data-dir "$KL" | grep -E 'broker|Partition: ' || true
    say "restarting broker 2"
    kl-cluster start 2 --data-dir "$KL"
    restarted=1
  fi
done
if ! wait "$PRODUCER"; then
  tail -n 5 "$WORK/producer.log" >&2
  echo "error: the producer failed" >&2
  exit 1
fi
tail -n 1 "$WORK/producer.log"

say "waiting for the group to consume every acknowledged tweet"
python -m pipeline.demo wait "$WORK" --timeout 90
python -m pipeline.demo status "$WORK" --since "$T0"
kl-groups --bootstrap-server "$BS" --describe --group hashtag-counters || true
say "draining the live Spark job: it reads to the topic's end, then stops"
touch "$WORK/spark-drain"
while [ ! -f "$WORK/stream.json" ]; do
  if ! kill -0 "$STREAM" 2>/dev/null; then
    grep -v '^\s*at ' "$WORK/stream.err" | tail -n 5 >&2
    echo "error: the live Spark job failed (log: $WORK/stream.err)" >&2
    exit 1
  fi
  sleep 0.5
done
sed -n '/^read [0-9]* records; final counts/,$p' "$WORK/stream.log" | sed 's/^/  /'
OTHERS=()  # the group and the producer stop now; the Spark session stays for the batch job
for pid in "${PIDS[@]}"; do [ "$pid" = "$STREAM" ] || OTHERS+=("$pid"); done
for pid in "${OTHERS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${OTHERS[@]}"; do wait "$pid" 2>/dev/null || true; done
PIDS=("$STREAM")
grep -h "distinct tweets in" "$WORK"/consumer-*.log | sed 's/^/  /' || true

say "cluster after the restart (broker 2 back in every ISR?)"
kl-cluster status --data-dir "$KL" | grep -E 'broker|Partition: ' || true
say "clean shutdown of the cluster: the segment files are final"
kl-cluster down --data-dir "$KL" --keep-console
find "$KL" -path '*tweets-*' -name '*.log' -printf '  %P\t%s bytes\n' | sort

say "Spark (local[2], the live job's session): top hashtags over the 3 brokers' segment files"
touch "$WORK/segments-final"
if ! wait "$STREAM"; then
  grep -v '^\s*at ' "$WORK/stream.err" | tail -n 5 >&2
  echo "error: the Spark batch job failed (log: $WORK/stream.err)" >&2
  exit 1
fi
PIDS=()
cat "$WORK/spark.log"
grep -E '^\[ *[0-9.]+s\] ' "$WORK/stream.err" | sed 's/^/  spark: /' || true

say "summary"
python -m pipeline.demo summary "$WORK" --top 10
if [ "${KEEP:-0}" = 1 ]; then
  say "KEEP=1: the cluster again, left running with its console"
  for n in 1 2 3; do kl-cluster start "$n" --data-dir "$KL"; done
  echo "web console: http://127.0.0.1:$((BASE + 200))/cluster   bootstrap: $BS"
  echo "stop it with: kl-cluster down --data-dir $KL"
fi
echo "demo finished in $(elapsed)"
