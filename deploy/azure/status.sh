#!/usr/bin/env bash
# The cluster's health, through one VM: each broker up or down, then every partition's
# Leader/Replicas/Isr (deploy/node/status.sh, run there over ssh).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'USAGE'
Usage: deploy/azure/status.sh [--vm N] [--config FILE] [--dry-run]

Runs deploy/node/status.sh on one VM over ssh: a line per broker (up/down, and that VM's
kl-broker.service state), the topics as kl-topics --describe prints them, then "healthy" or what is
not. Exits 0 when healthy.

  --vm N          ask VM N (default 1; pick another if that one is down)
  --config FILE   the config (default: deploy/azure/cluster.env, or $KL_AZURE_CONFIG)
  --dry-run       print the ssh command, run nothing
  -h, --help      this help
USAGE
}

common_options "$@"
VM=1
set -- ${REST[@]+"${REST[@]}"}
while [ $# -gt 0 ]; do
  case $1 in
    --vm)
      if [ $# -lt 2 ] || ! [[ $2 =~ ^[1-9][0-9]*$ ]]; then
        die "--vm needs a VM number"
      fi
      VM=$2
      shift
      ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
load_config
[ "$VM" -le "$VM_COUNT" ] || die "--vm $VM: there are $VM_COUNT VMs"
need_tool ssh "install OpenSSH"
on_vm "$VM" sudo bash "$REMOTE_NODE_DIR/status.sh"
finish ""
