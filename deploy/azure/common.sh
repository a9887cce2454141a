# shellcheck shell=bash
# Sourced by the deploy/azure scripts: options every script has, cluster.env, names and addresses
# of the VMs, and running (or, with --dry-run, only printing) az/ssh commands.
# The variables set here are read by the scripts that source this file:
# shellcheck disable=SC2034

AZ_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$AZ_DIR/../.." && pwd)
NODE_DIR=$REPO_ROOT/deploy/node
NODE_SCRIPTS=(common.sh install.sh upgrade.sh wait-isr.sh status.sh spark.sh)
CONFIG=${KL_AZURE_CONFIG:-$AZ_DIR/cluster.env}
DRY_RUN=0 INSECURE=0
# where install.sh puts its copies of the node scripts on a VM
REMOTE_NODE_DIR=/opt/kafkalite/node
# COORDINATION=zookeeper: ZooKeeper's client, follower and election ports (deploy/node/common.sh's
# KL_ZK_*_PORT), opened inside the vnet only
ZOOKEEPER_PORTS=(2181 2888 3888)

die() {
  echo "error: $*" >&2
  exit 1
}

# Progress goes to stderr; stdout carries only the "+ command" lines.
step() {
  echo "==> $*" >&2
}

# Python's shlex.quote, so that the printed commands can be pasted into a shell (and compared).
shquote() {
  local safe='^[A-Za-z0-9_@%+=:,./-]+$' q="'\"'\"'"
  if [ -z "$1" ]; then
    printf "''"
  elif [[ $1 =~ $safe ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/$q}"
  fi
}

shjoin() {
  local out="" w
  for w in "$@"; do
    out+="${out:+ }$(shquote "$w")"
  done
  printf '%s' "$out"
}

# Print a command as "+ cmd args" and run it, unless --dry-run.
run() {
  printf '+ %s\n' "$(shjoin "$@")"
  if [ "$DRY_RUN" = 0 ]; then
    "$@"
  fi
}

# The options every script takes. Sets REST to the arguments it did not consume.
common_options() {
  REST=()
  while [ $# -gt 0 ]; do
    case $1 in
      --config)
        if [ $# -lt 2 ] || [ -z "$2" ]; then
          die "--config needs a file"
        fi
        CONFIG=$2
        shift
        ;;
      --dry-run) DRY_RUN=1 ;;
      --insecure) INSECURE=1 ;;
      -h | --help)
        usage
        exit 0
        ;;
      *) REST+=("$1") ;;
    esac
    shift
  done
}

# Reads cluster.env and checks it. Everything below uses the variables it sets.
load_config() {
  [ -f "$CONFIG" ] || die "no config file $CONFIG (copy deploy/azure/cluster.env and edit it)"
  RESOURCE_GROUP="" LOCATION="" VM_SIZE="" VM_COUNT="" ADMIN_USER="" ALLOWED_SSH_SOURCE=""
  BROKER_PORT="" COORDINATION="" SSH_PUBLIC_KEY="" SSH_PRIVATE_KEY="" VM_IMAGE="" NAME_PREFIX=""
  VNET_PREFIX="" SUBNET_PREFIX="" PRIVATE_IP_BASE="" PRIVATE_IP_START="" DNS_PREFIX="" SSH_HOSTS=""
  BROKER_OVERRIDES="" PACKAGE="" BUILD_DIR="" ZOOKEEPER_COUNT="" METRICS_PORT="" SECURITY="" SECRETS_DIR=""
  SPARK_WORKERS="" SPARK_MASTER_PORT=""
  # shellcheck source=cluster.env
  source "$CONFIG"
  local var
  for var in RESOURCE_GROUP LOCATION VM_SIZE VM_COUNT ADMIN_USER BROKER_PORT COORDINATION; do
    [ -n "${!var}" ] || die "$CONFIG: set $var"
  done
  SSH_PUBLIC_KEY=${SSH_PUBLIC_KEY:-$HOME/.ssh/id_ed25519.pub}
  SSH_PRIVATE_KEY=${SSH_PRIVATE_KEY:-$HOME/.ssh/id_ed25519}
  VM_IMAGE=${VM_IMAGE:-Canonical:ubuntu-24_04-lts:server:latest}
  NAME_PREFIX=${NAME_PREFIX:-kl}
  VNET_PREFIX=${VNET_PREFIX:-10.42.0.0/16}
  SUBNET_PREFIX=${SUBNET_PREFIX:-10.42.1.0/24}
  PRIVATE_IP_BASE=${PRIVATE_IP_BASE:-10.42.1}
  PRIVATE_IP_START=${PRIVATE_IP_START:-11}
  DNS_PREFIX=${DNS_PREFIX:-$(printf '%s-%s' "$NAME_PREFIX" "$RESOURCE_GROUP" | tr 'A-Z_.' 'a-z--')}
  BUILD_DIR=${BUILD_DIR:-$AZ_DIR/.build}
  SECURITY=${SECURITY:-SASL_SSL}
  if [ "$INSECURE" = 1 ]; then
    SECURITY=PLAINTEXT
  fi
  case $SECURITY in
    SASL_SSL | PLAINTEXT) ;;
    *) die "$CONFIG: SECURITY must be SASL_SSL or PLAINTEXT, got '$SECURITY'" ;;
  esac
  SECRETS_DIR=${SECRETS_DIR:-$HOME/.kafkalite/$RESOURCE_GROUP}
  SPARK_WORKERS=${SPARK_WORKERS:-no}
  SPARK_MASTER_PORT=${SPARK_MASTER_PORT:-7077}
  case $SPARK_WORKERS in
    yes | no) ;;
    *) die "$CONFIG: SPARK_WORKERS must be yes or no, got '$SPARK_WORKERS'" ;;
  esac
  read -r -a OVERRIDES <<<"$BROKER_OVERRIDES"
  read -r -a SSH_HOST_LIST <<<"$SSH_HOSTS"

  [[ $ADMIN_USER =~ ^[a-z_][a-z0-9_-]*$ ]] || die "$CONFIG: ADMIN_USER must be a plain user name"
  [[ $VM_COUNT =~ ^[1-9][0-9]*$ ]] || die "$CONFIG: VM_COUNT must be a positive number"
  if ! [[ $BROKER_PORT =~ ^[0-9]+$ ]] || [ "$BROKER_PORT" -lt 1 ] || [ "$BROKER_PORT" -gt 65535 ]; then
    die "$CONFIG: BROKER_PORT must be a port number"
  fi
  if [ -n "$METRICS_PORT" ]; then
    if ! [[ $METRICS_PORT =~ ^[0-9]+$ ]] || [ "$METRICS_PORT" -lt 1 ] || [ "$METRICS_PORT" -gt 65535 ] \
      || [ "$METRICS_PORT" = "$BROKER_PORT" ]; then
      die "$CONFIG: METRICS_PORT must be a port number other than BROKER_PORT (or empty: no metrics listener)"
    fi
    # metrics.host defaults to loopback: Prometheus scrapes from the vnet (the NSG admits nothing else)
    OVERRIDES=("metrics.port=$METRICS_PORT" "metrics.host=0.0.0.0" ${OVERRIDES[@]+"${OVERRIDES[@]}"})
  fi
  if ! [[ $PRIVATE_IP_START =~ ^[0-9]+$ ]] || [ $((PRIVATE_IP_START + VM_COUNT - 1)) -gt 254 ]; then
    die "$CONFIG: PRIVATE_IP_START + VM_COUNT - 1 must be at most 254"
  fi
  [[ $PRIVATE_IP_BASE =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$CONFIG: PRIVATE_IP_BASE is three octets, e.g. 10.42.1"
  [[ $ALLOWED_SSH_SOURCE =~ ^[0-9]+(\.[0-9]+){3}(/[0-9]+)?$ ]] ||
    die "$CONFIG: ALLOWED_SSH_SOURCE must be your public address or range (e.g. 203.0.113.7/32), got '$ALLOWED_SSH_SOURCE'"
  [[ $DNS_PREFIX =~ ^[a-z][a-z0-9-]{0,55}[a-z0-9]$ ]] ||
    die "$CONFIG: DNS_PREFIX must be lowercase letters, digits and dashes, got '$DNS_PREFIX'"
  case $COORDINATION in
    custom | builtin) COORDINATION=custom ;; # builtin: this setting's former name
    zookeeper)
      # the first ZOOKEEPER_COUNT VMs run a ZooKeeper server each (default 3, or 1 for fewer VMs)
      if [ -z "$ZOOKEEPER_COUNT" ]; then
        ZOOKEEPER_COUNT=1
        if [ "$VM_COUNT" -ge 3 ]; then
          ZOOKEEPER_COUNT=3
        fi
      fi
      if ! [[ $ZOOKEEPER_COUNT =~ ^[1-9][0-9]*$ ]] || [ "$ZOOKEEPER_COUNT" -gt "$VM_COUNT" ]; then
        die "$CONFIG: ZOOKEEPER_COUNT must be a number from 1 to VM_COUNT ($VM_COUNT), got '$ZOOKEEPER_COUNT'"
      fi
      if [ $((ZOOKEEPER_COUNT % 2)) = 0 ]; then
        step "note: $ZOOKEEPER_COUNT ZooKeeper servers tolerate no more failures than $((ZOOKEEPER_COUNT - 1)); an odd count is better"
      fi
      ;;
    *) die "$CONFIG: COORDINATION must be custom or zookeeper" ;;
  esac
  if [ ${#SSH_HOST_LIST[@]} -ne 0 ] && [ ${#SSH_HOST_LIST[@]} -ne "$VM_COUNT" ]; then
    die "$CONFIG: SSH_HOSTS lists ${#SSH_HOST_LIST[@]} hosts for $VM_COUNT VMs"
  fi
  if [ $((VM_COUNT % 2)) = 0 ]; then
    step "note: $VM_COUNT brokers tolerate no more failures than $((VM_COUNT - 1)); an odd count is better"
  fi
  NSG=$NAME_PREFIX-nsg
  VNET=$NAME_PREFIX-vnet
  SUBNET=$NAME_PREFIX-subnet
  SSH_OPTS=(-i "$SSH_PRIVATE_KEY" -o StrictHostKeyChecking=accept-new -o ConnectTimeout=15
    -o ServerAliveInterval=30 -o BatchMode=yes)
}

vm_name() { printf '%s-%s' "$NAME_PREFIX" "$1"; }
vm_private_ip() { printf '%s.%s' "$PRIVATE_IP_BASE" $((PRIVATE_IP_START + $1 - 1)); }
vm_dns_label() { printf '%s-%s' "$DNS_PREFIX" "$1"; }

vm_ssh_host() {
  if [ ${#SSH_HOST_LIST[@]} -ne 0 ]; then
    printf '%s' "${SSH_HOST_LIST[$1 - 1]}"
  else
    printf '%s.%s.cloudapp.azure.com' "$(vm_dns_label "$1")" "$LOCATION"
  fi
}

# The --peers list every broker gets: 1@10.42.1.11:9092,2@10.42.1.12:9092,...
peers() {
  local i out=""
  for ((i = 1; i <= VM_COUNT; i++)); do
    out+="${out:+,}$i@$(vm_private_ip "$i"):$BROKER_PORT"
  done
  printf '%s' "$out"
}

# COORDINATION=zookeeper: the ensemble every VM's install.sh gets (--zookeeper-servers): server i
# on VM i, for the first ZOOKEEPER_COUNT VMs: 1=10.42.1.11,2=10.42.1.12,3=10.42.1.13
zookeeper_servers() {
  local i out=""
  for ((i = 1; i <= ZOOKEEPER_COUNT; i++)); do
    out+="${out:+,}$i=$(vm_private_ip "$i")"
  done
  printf '%s' "$out"
}

# Run a command on VM $1 over ssh (the remaining arguments, quoted into one remote command line).
on_vm() {
  local i=$1
  shift
  run ssh "${SSH_OPTS[@]}" "$ADMIN_USER@$(vm_ssh_host "$i")" "$(shjoin "$@")"
}

# Run a shell command line (one string, used as it is) on VM $1 over ssh.
on_vm_sh() {
  run ssh "${SSH_OPTS[@]}" "$ADMIN_USER@$(vm_ssh_host "$1")" "$2"
}

# The last word of a script: what was done (if $1 says), or that nothing was.
finish() {
  if [ "$DRY_RUN" = 1 ]; then
    step "dry run: printed the commands above, ran none"
  elif [ -n "$1" ]; then
    step "$1"
  fi
}

# Copy local files to a directory on VM $1.
copy_to_vm() {
  local i=$1 dest=$2
  shift 2
  run scp -q "${SSH_OPTS[@]}" "$@" "$ADMIN_USER@$(vm_ssh_host "$i"):$dest/"
}

need_tool() {
  [ "$DRY_RUN" = 1 ] || command -v "$1" >/dev/null || die "$1 is not installed ($2)"
}
