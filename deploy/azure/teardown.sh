#!/usr/bin/env bash
# Delete everything provision.sh created: the whole resource group (VMs, disks, addresses, vnet,
# NSG), after you confirm by typing its name.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'USAGE'
Usage: deploy/azure/teardown.sh [--yes] [--config FILE] [--dry-run]

Deletes the resource group in cluster.env and everything in it, data included. Asks you to type
the resource group's name first.

  --yes           do not ask (scripts)
  --config FILE   the config (default: deploy/azure/cluster.env, or $KL_AZURE_CONFIG)
  --dry-run       print the az command, ask nothing, run nothing
  -h, --help      this help
USAGE
}

common_options "$@"
YES=0
for a in ${REST[@]+"${REST[@]}"}; do
  case $a in
    --yes) YES=1 ;;
    *) die "unknown argument: $a (see --help)" ;;
  esac
done
load_config
need_tool az "https://learn.microsoft.com/cli/azure/install-azure-cli, then az login"

if [ "$DRY_RUN" = 0 ] && [ "$YES" = 0 ]; then
  echo "This deletes resource group '$RESOURCE_GROUP' and everything in it: $VM_COUNT VMs, their disks and data." >&2
  printf 'Type the resource group name to confirm: ' >&2
  answer=""
  read -r answer || true
  if [ "$answer" != "$RESOURCE_GROUP" ]; then
    die "not confirmed; nothing deleted"
  fi
fi
step "deleting resource group $RESOURCE_GROUP"
run az group delete --name "$RESOURCE_GROUP" --yes
finish "deleted resource group $RESOURCE_GROUP"
