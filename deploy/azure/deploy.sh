#!/usr/bin/env bash
# Build a wheel of this checkout, copy it to every VM over ssh and upgrade the brokers one at a
# time: each step (deploy/node/upgrade.sh on that VM) waits until the restarted broker is back in
# every ISR before the next broker is touched, so the cluster stays available throughout.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: deploy/azure/deploy.sh [--initial] [--wheel FILE] [--timeout SECONDS] [--config FILE] [--insecure] [--dry-run]

Builds a wheel (python3 -m pip wheel), copies it and deploy/node/*.sh to each VM, then:
  (default)   a rolling upgrade: one VM at a time, upgrade.sh checks the cluster is healthy, stops
              the broker, waits until it is fenced, installs the wheel, starts it and waits until
              it is back in every ISR; a failed step stops the rollout there.
  --initial   the first deployment after provision.sh: waits for cloud-init, installs the wheel
              and starts the broker on every VM, then waits until all brokers form a cluster.
              With SECURITY=SASL_SSL (the default) it first makes the cluster's CA, each
              broker's certificate and the admin and broker passwords here, in SECRETS_DIR
              (deploy/tls/cluster-secrets.sh), copies each VM its own over ssh into a 0700
              directory, which install.sh takes in and which is deleted right after. With
              --insecure, the same for the cluster's inter-broker secret only
              (deploy/tls/inter-broker-secret.sh).

  --wheel FILE        deploy this wheel instead of building one
  --timeout SECONDS   for each wait on a VM (default 600)
  --config FILE       the config (default: deploy/azure/cluster.env, or $KL_AZURE_CONFIG)
  --insecure          PLAINTEXT brokers (SECURITY=PLAINTEXT): for labs only
  --dry-run           print the commands (build, ssh, scp), run nothing

With SPARK_WORKERS=yes in the config, each VM then also gets a Spark standalone worker (deploy/node/spark.sh),
and VM 1 the master.
  -h, --help          this help
EOF
}

common_options "$@"
INITIAL=0 WHEEL="" TIMEOUT=600
set -- ${REST[@]+"${REST[@]}"}
while [ $# -gt 0 ]; do
  case $1 in
    --initial) INITIAL=1 ;;
    --wheel)
      [ $# -ge 2 ] || die "--wheel needs a file"
      WHEEL=$2
      shift
      ;;
    --timeout)
      if [ $# -lt 2 ] || ! [[ $2 =~ ^[0-9]+$ ]]; then
        die "--timeout needs a number of seconds"
      fi
      TIMEOUT=$2
      shift
      ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
load_config
need_tool ssh "install OpenSSH"
REMOTE_DIR=/home/$ADMIN_USER/kafkalite-deploy

# --- the wheel -------------------------------------------------------------------------------------
if [ -z "$WHEEL" ]; then
  version=$(sed -n 's/^version *= *//p' "$REPO_ROOT/setup.cfg")
  [ -n "$version" ] || die "no version in $REPO_ROOT/setup.cfg"
  step "building the wheel of $REPO_ROOT"
  run rm -rf "$BUILD_DIR/dist"
  run "${PYTHON:-python3}" -m pip wheel --quiet --no-deps --wheel-dir "$BUILD_DIR/dist" "$REPO_ROOT"
  WHEEL=$BUILD_DIR/dist/kafka_lite-$version-py3-none-any.whl
fi
if [ "$DRY_RUN" = 0 ] && [ ! -f "$WHEEL" ]; then
  die "no wheel $WHEEL"
fi
REMOTE_WHEEL=$REMOTE_DIR/$(basename "$WHEEL")

# --- copy it, with the node scripts, to every VM ----------------------------------------------------
node_files=()
for f in "${NODE_SCRIPTS[@]}"; do
  node_files+=("$NODE_DIR/$f")
done
for ((i = 1; i <= VM_COUNT; i++)); do
  step "copying $(basename "$WHEEL") and deploy/node/*.sh to $(vm_name "$i")"
  on_vm_sh "$i" "rm -rf $REMOTE_DIR && mkdir -p $REMOTE_DIR"
  copy_to_vm "$i" "$REMOTE_DIR" "$WHEEL" "${node_files[@]}"
done

# --- the cluster's secrets (SASL_SSL), made and kept here ---------------------------------------------
if [ "$INITIAL" = 1 ] && [ "$SECURITY" = SASL_SSL ]; then
  specs=()
  for ((i = 1; i <= VM_COUNT; i++)); do
    specs+=("$i=$(vm_private_ip "$i"),$(vm_name "$i")")
  done
  step "the cluster's CA, certificates and passwords in $SECRETS_DIR (kept on this machine only)"
  run bash "$REPO_ROOT/deploy/tls/cluster-secrets.sh" "$SECRETS_DIR" "${specs[@]}"
elif [ "$INITIAL" = 1 ]; then
  step "the cluster's inter-broker secret in $SECRETS_DIR (kept on this machine only)"
  run bash "$REPO_ROOT/deploy/tls/inter-broker-secret.sh" "$SECRETS_DIR"
fi

# --- install ---------------------------------------------------------------------------------------
if [ "$INITIAL" = 1 ]; then
  for ((i = 1; i <= VM_COUNT; i++)); do
    step "broker $i: waiting for cloud-init, then installing and starting"
    on_vm "$i" cloud-init status --wait
    install=(sudo bash "$REMOTE_DIR/install.sh" --reuse-config --package "$REMOTE_WHEEL")
    if [ "$SECURITY" = SASL_SSL ]; then
      # over ssh, never in cloud-init: into a directory only the admin user can read, taken in by
      # install.sh (root and the broker's user only), then deleted whatever install.sh did
      secrets=$REMOTE_DIR/secrets
      on_vm_sh "$i" "install -d -m 700 $secrets"
      copy_to_vm "$i" "$secrets" "$SECRETS_DIR/broker-$i"/{ca.pem,broker.pem,admin.password,broker.password}
      on_vm_sh "$i" "$(shjoin "${install[@]}" --secrets-dir "$secrets"); rc=\$?; rm -rf $secrets; exit \$rc"
    else
      # the same way: the inter-broker secret over ssh, taken in by install.sh, the copy deleted
      secrets=$REMOTE_DIR/secrets
      on_vm_sh "$i" "install -d -m 700 $secrets"
      copy_to_vm "$i" "$secrets" "$SECRETS_DIR/inter-broker.secret"
      ib_secret=(--insecure --inter-broker-secret "$secrets/inter-broker.secret")
      on_vm_sh "$i" "$(shjoin "${install[@]}" "${ib_secret[@]}"); rc=\$?; rm -rf $secrets; exit \$rc"
    fi
  done
  step "waiting until every broker answers and every partition is fully replicated"
  on_vm 1 sudo bash "$REMOTE_DIR/wait-isr.sh" --until healthy --timeout "$TIMEOUT"
else
  for ((i = 1; i <= VM_COUNT; i++)); do
    step "broker $i of $VM_COUNT: rolling upgrade on $(vm_name "$i")"
    if ! on_vm "$i" sudo bash "$REMOTE_DIR/upgrade.sh" --package "$REMOTE_WHEEL" --timeout "$TIMEOUT"; then
      die "the upgrade of broker $i failed; brokers after it were not touched (deploy/azure/status.sh shows the cluster)"
    fi
  done
fi

# --- Spark next to the brokers (SPARK_WORKERS=yes): the master on VM 1, a worker on every VM ---------------
if [ "$SPARK_WORKERS" = yes ]; then
  spark_master="spark://$(vm_private_ip 1):$SPARK_MASTER_PORT"
  for ((i = 1; i <= VM_COUNT; i++)); do
    step "Spark on $(vm_name "$i"): a worker of $spark_master$([ "$i" = 1 ] && echo ', and the master')"
    spark=(sudo bash "$REMOTE_DIR/spark.sh" --master "$spark_master")
    [ "$i" != 1 ] || spark+=(--run-master)
    on_vm "$i" "${spark[@]}"
  done
fi

on_vm 1 sudo bash "$REMOTE_DIR/status.sh"
finish "deployed $(basename "$WHEEL") to $VM_COUNT brokers"
if [ "$SECURITY" = SASL_SSL ] && [ "$DRY_RUN" = 0 ]; then
  step "the admin's login: --command-config $SECRETS_DIR/admin.properties (a super user; kl-acls grants others)"
fi
