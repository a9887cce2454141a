#!/usr/bin/env bash
# The cluster as one host sees it: each broker up or down (and, with coordination=zookeeper, each
# ZooKeeper server's mode), then every partition's Leader/Replicas/Isr (kl-cluster status's format, for brokers that kl-cluster did not start).
# deploy/azure/status.sh runs it on one VM over ssh.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

usage() {
  cat <<'EOF'
Usage: status.sh [--root DIR]

Prints one line per broker (address, up/down; this host's service state), with
coordination=zookeeper one per ZooKeeper server (leader, follower, standalone, not serving or
down), then the topics as `kl-topics --describe` prints them, then "healthy" or what is not.
Exits 0 when healthy (every broker and ZooKeeper server answers, every partition has a leader and
a full ISR), 1 otherwise.

  --root DIR   the --root given to install.sh
  -h, --help   this help
EOF
}

ROOT=""
while [ $# -gt 0 ]; do
  case $1 in
    --root)
      [ $# -ge 2 ] || die "--root needs a value"
      ROOT=$2
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

kl_paths "$ROOT"
kl_load_env
PEERS=${KL_PEERS:-$KL_BROKER_ID@$KL_HOST:$KL_PORT}
problems=()
up=()
IFS=, read -r -a entries <<<"$PEERS"
for entry in "${entries[@]}"; do
  id=${entry%%@*} hostport=${entry#*@}
  state=down
  if kl_port_open "${hostport%:*}" "${hostport##*:}"; then
    state=up
    up+=("$hostport")
  else
    problems+=("broker $id down")
  fi
  extra=""
  if [ "$id" = "$KL_BROKER_ID" ]; then
    if [ "$KL_SYSTEMD" = yes ]; then
      extra=$'\t'"this host: $KL_UNIT $(systemctl is-active "$KL_UNIT" 2>/dev/null || true)"
    else
      extra=$'\t'"this host: pid $(kl_broker_pid)"
    fi
  fi
  printf 'broker %s\t%s\t%s%s\n' "$id" "$hostport" "$state" "$extra"
done

if [ "$KL_COORDINATION" = zookeeper ]; then
  zk_id=$(kl_zk_server_id)
  zk_own=""
  if [ -n "$zk_id" ]; then
    zk_own=$(kl_zk_host_of "$zk_id"):$KL_ZK_CLIENT_PORT
  fi
  connect=$(kl_zk_connect)
  IFS=, read -r -a entries <<<"${connect%%/*}"
  for hostport in "${entries[@]}"; do
    state=$(kl_zk_mode "${hostport%:*}" "${hostport##*:}")
    if [ -z "$state" ]; then
      if kl_port_open "${hostport%:*}" "${hostport##*:}"; then
        state="not serving"
      else
        state=down
      fi
      problems+=("zookeeper $hostport $state")
    fi
    extra=""
    if [ "$hostport" = "$zk_own" ]; then
      if [ "$KL_SYSTEMD" = yes ]; then
        extra=$'\t'"this host: $KL_ZK_UNIT $(systemctl is-active "$KL_ZK_UNIT" 2>/dev/null || true)"
      else
        extra=$'\t'"this host: pid $(kl_zookeeper_pid)"
      fi
    fi
    printf 'zookeeper\t%s\t%s%s\n' "$hostport" "$state" "$extra"
  done
fi

if [ ${#up[@]} -gt 0 ]; then
  bootstrap=$(
    IFS=,
    echo "${up[*]}"
  )
  kl_client_args
  if out=$(timeout 30 "$KL_VENV/bin/kl-topics" --bootstrap-server "$bootstrap" ${KL_CLIENT_ARGS[@]+"${KL_CLIENT_ARGS[@]}"} \
    --describe 2>&1); then
    [ -z "$out" ] || printf '%s\n' "$out"
    if ! why=$(kl_check_partitions healthy <<<"$out"); then
      problems+=("$why")
    fi
  else
    echo "(metadata unavailable: ${out##*$'\n'})"
    problems+=("metadata unavailable")
  fi
fi

if [ ${#problems[@]} -eq 0 ]; then
  echo "healthy: every broker${zk_own+ and ZooKeeper server} up, every partition led and fully in sync"
else
  printf 'NOT healthy: %s\n' "${problems[0]}"
  exit 1
fi
