#!/usr/bin/env bash
# Wait until the cluster, as `kl-topics --describe` shows it, reaches a state: the checks that
# the rolling restart (upgrade.sh, deploy/azure/deploy.sh) makes before moving on.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

usage() {
  cat <<'EOF'
Usage: wait-isr.sh --until healthy|in-sync|fenced [options]

Polls `kl-topics --describe` (every topic) on each broker until, in every one's view:
  healthy   every partition has a leader and a full ISR (and every broker answers)
  in-sync   this broker is in the ISR of every partition it replicates, each of which has a
            leader (after a restart: it caught up and rejoined; every broker answers)
  fenced    this broker leads nothing and has left every ISR it shared (after a stop: the
            controller noticed, leaders moved; the other brokers answer)

Options:
  --broker-id N      the broker to check (default: this host's, from node.env)
  --bootstrap LIST   the brokers to ask, HOST:PORT,... (default: every peer, from node.env)
  --timeout SECONDS  give up after this long, exit 1 (default 300)
  --root DIR         the --root given to install.sh
  -h, --help         this help
EOF
}

ROOT="" UNTIL="" ID="" BOOTSTRAP="" TIMEOUT=300
while [ $# -gt 0 ]; do
  case $1 in
    --until)
      UNTIL=$(arg "$@")
      shift
      ;;
    --broker-id)
      ID=$(arg "$@")
      shift
      ;;
    --bootstrap)
      BOOTSTRAP=$(arg "$@")
      shift
      ;;
    --timeout)
      TIMEOUT=$(arg "$@")
      shift
      ;;
    --root)
      ROOT=$(arg "$@")
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
case $UNTIL in
  healthy | in-sync | fenced) ;;
  *) die "--until must be healthy, in-sync or fenced (see --help)" ;;
esac
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout must be a number of seconds"

kl_paths "$ROOT"
kl_load_env
ID=${ID:-$KL_BROKER_ID}
PEERS=${KL_PEERS:-$KL_BROKER_ID@$KL_HOST:$KL_PORT}
BOOTSTRAP=${BOOTSTRAP:-$(kl_bootstrap "$PEERS")}
TOPICS=$KL_VENV/bin/kl-topics
[ -x "$TOPICS" ] || die "no $TOPICS: install a package first"
kl_client_args

# Every broker is asked on its own, and the condition must hold in each one's view: a broker that
# was cut off or just restarted may still serve the metadata it had (say, itself in every ISR)
# until it catches up with the controller. A stopped broker (fenced) is not asked.
IFS=, read -r -a ASK <<<"$BOOTSTRAP"
if [ "$UNTIL" = fenced ]; then
  IFS=, read -r -a entries <<<"$PEERS"
  for entry in "${entries[@]}"; do
    if [ "${entry%%@*}" = "$ID" ]; then
      for n in "${!ASK[@]}"; do
        if [ "${ASK[$n]}" = "${entry#*@}" ]; then
          unset "ASK[$n]"
        fi
      done
    fi
  done
  ASK=(${ASK[@]+"${ASK[@]}"})
fi
[ ${#ASK[@]} -gt 0 ] || die "no broker to ask"
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# One look at the cluster: 0 when the condition holds in every broker's view; why not on stdout.
check() {
  local n msg=""
  for n in "${!ASK[@]}"; do
    {
      rc=0
      timeout 30 "$TOPICS" --bootstrap-server "${ASK[$n]}" ${KL_CLIENT_ARGS[@]+"${KL_CLIENT_ARGS[@]}"} --describe >"$SCRATCH/$n.out" 2>&1 || rc=$?
      echo "$rc" >"$SCRATCH/$n.rc"
    } &
  done
  wait
  for n in "${!ASK[@]}"; do
    if [ "$(cat "$SCRATCH/$n.rc")" != 0 ]; then
      echo "${ASK[$n]} did not answer: $(tail -n 1 "$SCRATCH/$n.out")"
      return 1
    fi
    if ! msg=$(kl_check_partitions "$UNTIL" "$ID" <"$SCRATCH/$n.out"); then
      echo "as ${ASK[$n]} sees it, $msg"
      return 1
    fi
  done
  echo "$msg in the view of ${#ASK[@]} brokers"
}

start=$SECONDS
last=""
while true; do
  if msg=$(check); then
    note "$UNTIL (broker $ID): $msg, after $((SECONDS - start)) s"
    exit 0
  fi
  if [ "$msg" != "$last" ]; then
    note "waiting for $UNTIL (broker $ID): $msg"
    last=$msg
  fi
  if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
    note "timed out after $TIMEOUT s waiting for $UNTIL: $msg"
    exit 1
  fi
  sleep 1
done
