#!/usr/bin/env bash
# The main job: a broker, a topic, a produced and consumed stream, and a summary.
source "$(dirname "$0")/_env.sh"
python - <<'PY'
import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1], file=open(".venv/.demo-port", "w"))
PY
PORT=$(cat .venv/.demo-port)
DATA=$(mktemp -d /tmp/kafkalite-demo.XXXXXX)
BS="127.0.0.1:$PORT"
cleanup() {
  [ -n "${BROKER_PID:-}" ] && kill -TERM "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null
  rm -rf "$DATA"
}
trap cleanup EXIT

echo "== starting broker 1 on $BS (data in $DATA)"
kl-broker start --id 1 --port "$PORT" --data-dir "$DATA" 2>"$DATA.log" &
BROKER_PID=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done

echo "== kl-topics --create"
kl-topics --bootstrap-server "$BS" --create --topic demo --partitions 3 --replication-factor 1
kl-topics --bootstrap-server "$BS" --describe --topic demo

echo "== kl-produce: 5 keyed lines"
printf 'alice:hello\nbob:kafka lite\nalice:second from alice\ncarol:hi\nbob:bye\n' |
  kl-produce --bootstrap-server "$BS" --topic demo --key-separator :
echo "== kl-consume --from-beginning"
kl-consume --bootstrap-server "$BS" --topic demo --from-beginning --max-messages 5 --print-partition --print-offset --print-key

echo "== kl-perf produce: 1,000,000 records of 100 bytes, acks=1"
kl-perf produce --bootstrap-server "$BS" --topic demo --num-records 1000000 --record-size 100 --acks 1
echo "== kl-perf consume: everything from the beginning"
kl-perf consume --bootstrap-server "$BS" --topic demo --messages 1000005

echo "== clean shutdown (SIGTERM)"
kill -TERM "$BROKER_PID"; wait "$BROKER_PID" || true; BROKER_PID=
tail -n 2 "$DATA.log"
echo "== segment files on disk"
find "$DATA" -name '*.log' -printf '%P\t%s bytes\n' | sort
rm -f "$DATA.log"
