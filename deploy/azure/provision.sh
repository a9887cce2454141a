#!/usr/bin/env bash
# Create the Azure resources for a Kafka Lite cluster: a resource group, an NSG (ssh only from
# ALLOWED_SSH_SOURCE, the broker port, and with COORDINATION=zookeeper ZooKeeper's ports, only from
# inside the vnet), a vnet and subnet, and VM_COUNT Ubuntu LTS VMs with static private addresses.
# Each VM's cloud-init runs deploy/node/install.sh with its broker id and the peer list (and the
# ZooKeeper ensemble). Run from an operator's machine, after `az login`.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: deploy/azure/provision.sh [--config FILE] [--insecure] [--dry-run]

Creates the resource group, NSG, vnet/subnet and VMs that cluster.env describes; each VM's
cloud-init installs the broker (deploy/node/install.sh: user, venv, config, kl-broker.service),
and with COORDINATION=zookeeper, on the first ZOOKEEPER_COUNT VMs, a ZooKeeper server of the
ensemble (kl-zookeeper.service; ports 2181, 2888 and 3888 open inside the vnet only).
Then run deploy.sh --initial to build and start the brokers. The brokers are secured (SASL_SSL,
ACLs): cloud-init carries no secret, so they start once deploy.sh --initial has delivered theirs.

  --config FILE   the config (default: deploy/azure/cluster.env, or $KL_AZURE_CONFIG)
  --insecure      PLAINTEXT brokers, no logins (SECURITY=PLAINTEXT): for labs only
  --dry-run       print the az commands, run nothing (the cloud-init files are still written)
  -h, --help      this help
EOF
}

common_options "$@"
[ ${#REST[@]} -eq 0 ] || die "unknown argument: ${REST[0]} (see --help)"
load_config
need_tool az "https://learn.microsoft.com/cli/azure/install-azure-cli, then az login"
if [ "$DRY_RUN" = 0 ] && [ ! -f "$SSH_PUBLIC_KEY" ]; then
  die "no ssh public key $SSH_PUBLIC_KEY (ssh-keygen -t ed25519, or set SSH_PUBLIC_KEY)"
fi

# A YAML string: double-quoted, for the few characters our arguments may hold.
yaml_str() {
  case $1 in
    *'"'* | *\\* | *$'\n'*) die "cannot put '$1' into cloud-init" ;;
  esac
  printf '"%s"' "$1"
}

# cloud-init for VM $1: the node scripts (gzip+base64, unchanged), then install.sh with this
# broker's id and every peer.
cloud_init() {
  local i=$1 f args=() a sep=""
  args=(bash /opt/kafkalite-bootstrap/install.sh --id "$i" --peers "$(peers)" --coordination "$COORDINATION")
  if [ "$COORDINATION" = zookeeper ]; then
    # the same list on every VM: install.sh runs server i on the VM whose address it names
    args+=(--zookeeper-servers "$(zookeeper_servers)")
  fi
  if [ "$SECURITY" = PLAINTEXT ]; then
    args+=(--insecure)
  fi
  for a in ${OVERRIDES[@]+"${OVERRIDES[@]}"}; do
    args+=(--override "$a")
  done
  if [ -n "$PACKAGE" ]; then
    args+=(--package "$PACKAGE")
  fi
  echo "#cloud-config"
  echo "# Kafka Lite broker $i of $VM_COUNT: written by deploy/azure/provision.sh"
  echo "package_update: true"
  echo "packages:"
  echo "  - python3-venv"
  echo "write_files:"
  for f in "${NODE_SCRIPTS[@]}"; do
    echo "  - path: /opt/kafkalite-bootstrap/$f"
    echo "    permissions: \"0755\""
    echo "    encoding: gz+b64"
    echo "    content: $(gzip -9nc "$NODE_DIR/$f" | base64 -w0)"
  done
  echo "runcmd:"
  printf '  - ['
  for a in "${args[@]}"; do
    printf '%s%s' "$sep" "$(yaml_str "$a")"
    sep=", "
  done
  printf ']\n'
}

step "resource group $RESOURCE_GROUP in $LOCATION"
run az group create --name "$RESOURCE_GROUP" --location "$LOCATION" --output none

zk_ports=""
if [ "$COORDINATION" = zookeeper ]; then
  zk_ports=" and ZooKeeper's ${ZOOKEEPER_PORTS[*]}"
fi
metrics_port=""
if [ -n "$METRICS_PORT" ]; then
  metrics_port=", metrics $METRICS_PORT"
fi
step "network security group $NSG: ssh only from $ALLOWED_SSH_SOURCE, port $BROKER_PORT$metrics_port$zk_ports only from the vnet"
# name, priority, access, protocol, source, then the destination ports
nsg_rule() {
  run az network nsg rule create --resource-group "$RESOURCE_GROUP" --nsg-name "$NSG" --name "$1" \
    --priority "$2" --direction Inbound --access "$3" --protocol "$4" --source-address-prefixes "$5" \
    --source-port-ranges '*' --destination-address-prefixes '*' --destination-port-ranges "${@:6}" --output none
}
run az network nsg create --resource-group "$RESOURCE_GROUP" --location "$LOCATION" --name "$NSG" --output none
nsg_rule allow-ssh-from-operator 100 Allow Tcp "$ALLOWED_SSH_SOURCE" 22
nsg_rule allow-broker-from-vnet 110 Allow Tcp VirtualNetwork "$BROKER_PORT"
if [ -n "$METRICS_PORT" ]; then
  nsg_rule allow-metrics-from-vnet 115 Allow Tcp VirtualNetwork "$METRICS_PORT"
fi
if [ "$COORDINATION" = zookeeper ]; then
  nsg_rule allow-zookeeper-from-vnet 120 Allow Tcp VirtualNetwork "${ZOOKEEPER_PORTS[@]}"
fi
# Azure's defaults would already drop these from the internet; explicit rules also keep out the
# rest of the vnet (ssh) and anything a later rule might let in.
nsg_rule deny-ssh-from-elsewhere 4000 Deny '*' '*' 22
nsg_rule deny-broker-from-elsewhere 4010 Deny '*' '*' "$BROKER_PORT"
if [ -n "$METRICS_PORT" ]; then
  nsg_rule deny-metrics-from-elsewhere 4015 Deny '*' '*' "$METRICS_PORT"
fi
if [ "$COORDINATION" = zookeeper ]; then
  nsg_rule deny-zookeeper-from-elsewhere 4020 Deny '*' '*' "${ZOOKEEPER_PORTS[@]}"
fi

step "vnet $VNET ($VNET_PREFIX), subnet $SUBNET ($SUBNET_PREFIX) behind $NSG"
run az network vnet create --resource-group "$RESOURCE_GROUP" --location "$LOCATION" --name "$VNET" \
  --address-prefixes "$VNET_PREFIX" --output none
run az network vnet subnet create --resource-group "$RESOURCE_GROUP" --vnet-name "$VNET" --name "$SUBNET" \
  --address-prefixes "$SUBNET_PREFIX" --network-security-group "$NSG" --output none

mkdir -p "$BUILD_DIR"
for ((i = 1; i <= VM_COUNT; i++)); do
  name=$(vm_name "$i")
  custom_data=$BUILD_DIR/cloud-init-$name.yaml
  cloud_init "$i" >"$custom_data"
  tags=(role=kafkalite-broker "broker-id=$i")
  zk_role=""
  if [ "$COORDINATION" = zookeeper ] && [ "$i" -le "$ZOOKEEPER_COUNT" ]; then
    tags+=("zookeeper-id=$i")
    zk_role=", ZooKeeper server $i"
  fi
  step "VM $name: $VM_SIZE, $(vm_private_ip "$i"), broker $i$zk_role (cloud-init: $custom_data)"
  public_ip=(--public-ip-address "$name-ip" --public-ip-sku Standard --public-ip-address-allocation static
    --public-ip-address-dns-name "$(vm_dns_label "$i")")
  if [ ${#SSH_HOST_LIST[@]} -ne 0 ]; then
    public_ip=(--public-ip-address "")
  fi
  run az vm create --resource-group "$RESOURCE_GROUP" --location "$LOCATION" --name "$name" \
    --image "$VM_IMAGE" --size "$VM_SIZE" --admin-username "$ADMIN_USER" --authentication-type ssh \
    --ssh-key-values "$SSH_PUBLIC_KEY" --vnet-name "$VNET" --subnet "$SUBNET" \
    --private-ip-address "$(vm_private_ip "$i")" --nsg "" "${public_ip[@]}" \
    --custom-data "$custom_data" --tags "${tags[@]}" --output none
done

finish "provisioned; the VMs install the broker at first boot. Next: deploy/azure/deploy.sh --initial"
for ((i = 1; i <= VM_COUNT; i++)); do
  step "  broker $i: $(vm_name "$i") $(vm_private_ip "$i"):$BROKER_PORT  ssh $ADMIN_USER@$(vm_ssh_host "$i")"
done
if [ "$COORDINATION" = zookeeper ]; then
  step "  ZooKeeper ensemble (started at first boot): $(zookeeper_servers)"
fi
