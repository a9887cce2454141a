#!/usr/bin/env bash
# One step of a rolling upgrade, on one host: check the cluster is healthy, stop this broker,
# wait until the controller has fenced it, install the new package, start it, and wait until it
# is back in every ISR. deploy/azure/deploy.sh runs it on each VM in turn over ssh; the netns
# test runs it in each namespace host.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

usage() {
  cat <<'EOF'
Usage: upgrade.sh [--package PATH|SPEC] [options]

Restarts this host's broker without loss of availability (one broker at a time):
  1. waits until the cluster is healthy (every broker up, every ISR full);
  2. stops the broker (SIGTERM; SIGKILL after 60 s) and waits until the controller fenced it;
  3. with --package: installs it (install.sh --reuse-config, so nothing else changes);
  4. starts the broker and waits until it is back in the ISR of every partition it replicates.
Exits non-zero if a step times out; the broker is started again whatever happened.

Options:
  --package PATH|SPEC    the new package (a wheel, a source dir or a pip spec); without it, a restart
  --timeout SECONDS      for each wait (default 300)
  --root DIR             the --root given to install.sh
  -h, --help             this help
EOF
}

ROOT="" PACKAGE="" TIMEOUT=300
while [ $# -gt 0 ]; do
  case $1 in
    --package)
      PACKAGE=$(arg "$@")
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
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout must be a number of seconds"
if [ -n "$PACKAGE" ] && [ -e "$PACKAGE" ]; then
  PACKAGE=$(realpath "$PACKAGE")
fi

kl_paths "$ROOT"
kl_load_env
root_args=()
if [ -n "$ROOT" ]; then
  root_args=(--root "$ROOT")
fi
wait_for() {
  bash "$HERE/wait-isr.sh" "${root_args[@]}" --timeout "$TIMEOUT" --until "$1"
}

stop_broker() {
  if [ "$KL_SYSTEMD" = yes ]; then
    # the unit's KillSignal=SIGTERM and TimeoutStopSec make this a clean stop
    systemctl stop "$KL_UNIT"
    return
  fi
  local pid
  pid=$(kl_broker_pid)
  if [ -z "$pid" ]; then
    note "no broker running"
    return
  fi
  kl_stop_pid "$pid"
}

start_broker() {
  if [ "$KL_SYSTEMD" = yes ]; then
    systemctl start "$KL_UNIT"
    return
  fi
  # Without systemd: the same launcher as the unit's ExecStart, in the background, in its own
  # session so that it outlives this script.
  kl_start_detached "$KL_LAUNCHER" "$KL_LOG" kl_broker_pid || die "the broker did not start (log: $KL_LOG)"
}

note "rolling step: checking that the cluster is healthy before stopping this broker"
wait_for healthy || die "the cluster is not healthy: not stopping broker $KL_BROKER_ID (nothing changed)"

note "stopping"
stop_broker
# From here on the broker is started again whatever fails.
trap 'kl_broker_running || { note "starting it again after a failure"; start_broker; }' EXIT
wait_for fenced || note "the controller did not fence broker $KL_BROKER_ID in $TIMEOUT s; going on"

if [ -n "$PACKAGE" ]; then
  install_args=("${root_args[@]}" --reuse-config --no-start --package "$PACKAGE")
  if [ "$KL_SYSTEMD" = no ]; then
    install_args+=(--no-systemd)
  fi
  bash "$HERE/install.sh" "${install_args[@]}"
fi

note "starting"
start_broker
trap - EXIT
wait_for in-sync || die "broker $KL_BROKER_ID did not rejoin every ISR within $TIMEOUT s"
note "done: broker $KL_BROKER_ID is back in every ISR"
