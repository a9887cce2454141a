#!/usr/bin/env bash
# Install (or reconfigure) one Kafka Lite broker on this host: the kafkalite user, a venv with the
# package, the data dir, server.properties, a launcher and kl-broker.service; with
# --coordination zookeeper on a host of --zookeeper-servers, also a ZooKeeper server of the ensemble
# (zoo.cfg, myid, a launcher and kl-zookeeper.service). Secured by default: SASL_SSL on every
# listener and between brokers, ACLs on, with the TLS material and passwords of --secrets-dir; the
# first start creates the admin and broker users. Idempotent: a second run with the same arguments
# changes nothing. Runs on each VM (cloud-init, deploy.sh, upgrade.sh).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

usage() {
  cat <<'EOF'
Usage: install.sh --id N [--peers 1@HOST:PORT,2@HOST:PORT,...] [options]

Installs a Kafka Lite broker: user, venv, data dir, config, kl-broker.service (enabled, started).
Running it again with the same arguments changes nothing; with other arguments it changes what
differs and restarts the service if it was running.

Broker:
  --id N                 broker.id
  --peers LIST           every broker of the cluster, this one included (default: a cluster of one)
  --host ADDR            address to listen on (default: this broker's entry in --peers, else 127.0.0.1)
  --port PORT            port (default: this broker's entry in --peers, else 9092)
  --override KEY=VALUE   any server.properties key, repeatable (replaces the earlier overrides)
  --coordination MODE    custom (the brokers elect their controller; default, as the broker's
                         coordination=custom) or zookeeper
  --user NAME            service user, created if missing (default: kafkalite)

Security (docs/SECURITY.md; the default is SASL_SSL, authorizer=acl):
  --secrets-dir DIR      this broker's TLS material and the cluster's passwords, as
                         deploy/tls/cluster-secrets.sh makes them: ca.pem, broker.pem (key and
                         certificate), admin.password, broker.password. Copied to
                         ROOT/etc/kafkalite/secrets (root and the service user only); delete DIR
                         afterwards. Until they are there the broker is set up but not started.
                         The first start creates the SCRAM users admin (a super user, for the
                         operator) and broker (how brokers log in to each other); the node scripts
                         log in as admin with ROOT/etc/kafkalite/admin.properties (root only).
  --insecure             PLAINTEXT, no logins, no ACLs: for labs on a closed network only
  --inter-broker-secret FILE
                         with --insecure: the cluster's secret (one line, the same file on every
                         broker; deploy/azure/deploy.sh makes one), which brokers prove to each other
                         on their inter-broker listener so that a client cannot act as a broker.
                         Copied to ROOT/etc/kafkalite/inter-broker.secret (0600, the service user);
                         delete FILE afterwards. Without it the brokers warn that anyone who
                         reaches their inter-broker port can act as a broker.

ZooKeeper (--coordination zookeeper; server.properties gets coordination and zookeeper.connect):
  --zookeeper-servers LIST
                         the ensemble, ID=HOST,... (ZooKeeper's server.ID=HOST:2888:3888; ids
                         1..255, an odd count: 3 tolerates one server down). The host whose HOST is
                         this broker's address runs server ID: Debian's zookeeper package (apt-get
                         if missing), ROOT/etc/kafkalite/zookeeper/zoo.cfg (clientPort 2181), myid
                         and data in ROOT/var/lib/kafkalite/zookeeper, kl-zookeeper.service. Every
                         other host gets only the broker side. The same list on every host.
  --zookeeper-id N       this host runs server N of the list (default: see above)
  --zookeeper-connect HOST:PORT,...[/CHROOT]
                         zookeeper.connect (default: every server's HOST:2181; the broker's default
                         chroot is /kafkalite); alone, without --zookeeper-servers: an ensemble
                         that runs elsewhere, nothing of ZooKeeper is installed here

Package (into a venv at ROOT/opt/kafkalite/venv):
  --package PATH|SPEC    a wheel, a source directory, or a pip requirement; reinstalled only when its
                         content changed. Without it, an installed package is kept; with none
                         installed, everything else is set up and the broker is not started.
  --wheelhouse DIR       install offline: --no-index --find-links DIR
  --deps-from DIR        reuse the dependencies installed in this site-packages directory (offline,
                         fast; for tests and images that already have them)
  --python PATH          interpreter for the venv, Python >= 3.11 (default: python3)

Running:
  --no-systemd           no unit: run the broker in the foreground (exec), as the unit would
                         (containers, tests); a ZooKeeper server of this host is started first,
                         in the background (its pid in ROOT/var/lib/kafkalite/kl-zookeeper.pid)
  --no-start             set everything up, start nothing
  --reuse-config         take every setting not given from the last install (ROOT/etc/kafkalite/node.env)
  --root DIR             install under DIR instead of / (several brokers on one machine: tests)
  -h, --help             this help
EOF
}

# --- arguments ---------------------------------------------------------------------------------

A_ROOT="" A_ID="" A_PEERS="" A_HOST="" A_PORT="" A_USER="" A_COORD="" A_PACKAGE="" A_WHEELHOUSE=""
A_DEPS_FROM="" A_PYTHON="" A_OVERRIDES=() OVERRIDES_GIVEN=0 NO_SYSTEMD="" NO_START=0 REUSE=0
A_ZK_SERVERS="" A_ZK_ID="" A_ZK_CONNECT="" A_SECRETS="" A_INSECURE="" A_IB_SECRET=""
while [ $# -gt 0 ]; do
  case $1 in
    --id)
      A_ID=$(arg "$@")
      shift
      ;;
    --peers)
      A_PEERS=$(arg "$@")
      shift
      ;;
    --host)
      A_HOST=$(arg "$@")
      shift
      ;;
    --port)
      A_PORT=$(arg "$@")
      shift
      ;;
    --override)
      o=$(arg "$@")
      A_OVERRIDES+=("$o")
      OVERRIDES_GIVEN=1
      shift
      ;;
    --coordination)
      A_COORD=$(arg "$@")
      shift
      ;;
    --zookeeper-servers)
      A_ZK_SERVERS=$(arg "$@")
      shift
      ;;
    --zookeeper-id)
      A_ZK_ID=$(arg "$@")
      shift
      ;;
    --zookeeper-connect)
      A_ZK_CONNECT=$(arg "$@")
      shift
      ;;
    --user)
      A_USER=$(arg "$@")
      shift
      ;;
    --package)
      A_PACKAGE=$(arg "$@")
      shift
      ;;
    --wheelhouse)
      A_WHEELHOUSE=$(arg "$@")
      shift
      ;;
    --deps-from)
      A_DEPS_FROM=$(arg "$@")
      shift
      ;;
    --python)
      A_PYTHON=$(arg "$@")
      shift
      ;;
    --root)
      A_ROOT=$(arg "$@")
      shift
      ;;
    --secrets-dir)
      A_SECRETS=$(arg "$@")
      shift
      ;;
    --inter-broker-secret)
      A_IB_SECRET=$(arg "$@")
      shift
      ;;
    --insecure) A_INSECURE=1 ;;
    --no-systemd) NO_SYSTEMD=1 ;;
    --no-start) NO_START=1 ;;
    --reuse-config) REUSE=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

if [ -n "$A_ROOT" ]; then
  mkdir -p "$A_ROOT"
  A_ROOT=$(cd "$A_ROOT" && pwd)
fi
kl_paths "$A_ROOT"

# Settings: the arguments, else (with --reuse-config) the last install's, else the defaults.
KL_BROKER_ID="" KL_PEERS="" KL_HOST="" KL_PORT="" KL_USER="" KL_COORDINATION="" KL_WHEELHOUSE=""
KL_DEPS_FROM="" KL_PYTHON="" KL_SYSTEMD="" KL_OVERRIDES=() KL_ZK_SERVERS="" KL_ZK_ID="" KL_ZK_CONNECT=""
KL_SECURITY=""
if [ "$REUSE" = 1 ]; then
  kl_load_env
fi
KL_BROKER_ID=${A_ID:-$KL_BROKER_ID}
KL_PEERS=${A_PEERS:-$KL_PEERS}
KL_USER=${A_USER:-${KL_USER:-kafkalite}}
KL_COORDINATION=${A_COORD:-${KL_COORDINATION:-custom}}
KL_ZK_SERVERS=${A_ZK_SERVERS:-$KL_ZK_SERVERS}
KL_ZK_ID=${A_ZK_ID:-$KL_ZK_ID}
KL_ZK_CONNECT=${A_ZK_CONNECT:-$KL_ZK_CONNECT}
KL_WHEELHOUSE=${A_WHEELHOUSE:-$KL_WHEELHOUSE}
KL_DEPS_FROM=${A_DEPS_FROM:-$KL_DEPS_FROM}
KL_PYTHON=${A_PYTHON:-${KL_PYTHON:-python3}}
if [ -n "$A_INSECURE" ] && [ -n "$A_SECRETS" ]; then
  die "--secrets-dir and --insecure do not go together"
elif [ -n "$A_INSECURE" ]; then
  KL_SECURITY=PLAINTEXT
elif [ -n "$A_SECRETS" ]; then
  KL_SECURITY=SASL_SSL
fi
KL_SECURITY=${KL_SECURITY:-SASL_SSL}
if [ -n "$A_IB_SECRET" ]; then
  [ "$KL_SECURITY" = PLAINTEXT ] || die "--inter-broker-secret is for --insecure clusters (SASL_SSL brokers log in as broker)"
  [ -s "$A_IB_SECRET" ] || die "--inter-broker-secret: no file $A_IB_SECRET"
  if [ "$(wc -l <"$A_IB_SECRET")" -gt 1 ] || [ "$(tr -d '\n' <"$A_IB_SECRET" | wc -c)" -lt 16 ]; then
    die "--inter-broker-secret: $A_IB_SECRET must be one line of at least 16 characters"
  fi
fi
if [ -n "$NO_SYSTEMD" ]; then
  KL_SYSTEMD=no
else
  KL_SYSTEMD=yes
fi
if [ "$OVERRIDES_GIVEN" = 1 ]; then
  KL_OVERRIDES=("${A_OVERRIDES[@]}")
fi

[ -n "$KL_BROKER_ID" ] || die "--id is required (see --help)"
[[ $KL_BROKER_ID =~ ^[0-9]+$ ]] || die "--id must be a number, got '$KL_BROKER_ID'"
own_entry=""
if [ -n "$KL_PEERS" ]; then
  peer_re='^[0-9]+@[^,@:]+:[0-9]+$'
  IFS=, read -r -a peer_list <<<"$KL_PEERS"
  for entry in "${peer_list[@]}"; do
    [[ $entry =~ $peer_re ]] || die "--peers: '$entry' is not ID@HOST:PORT"
    if [ "${entry%%@*}" = "$KL_BROKER_ID" ]; then
      own_entry=${entry#*@}
    fi
  done
  [ -n "$own_entry" ] || die "--peers has no entry for broker $KL_BROKER_ID"
fi
if [ -n "$own_entry" ]; then
  KL_HOST=${A_HOST:-${own_entry%:*}}
  KL_PORT=${A_PORT:-${own_entry##*:}}
else
  KL_HOST=${A_HOST:-${KL_HOST:-127.0.0.1}}
  KL_PORT=${A_PORT:-${KL_PORT:-9092}}
fi
[[ $KL_PORT =~ ^[0-9]+$ ]] || die "--port must be a number, got '$KL_PORT'"
for o in ${KL_OVERRIDES[@]+"${KL_OVERRIDES[@]}"}; do
  [[ $o == ?*=* ]] || die "--override expects KEY=VALUE, got '$o'"
  [[ $o != *$'\n'* ]] || die "--override values are one line"
done

# The secrets this run brings (--secrets-dir): every file there, each password one line that can
# go into a JAAS string and a SCRAM spec.
SECRET_FILES=(ca.pem broker.pem admin.password broker.password)
if [ -n "$A_SECRETS" ]; then
  [ -d "$A_SECRETS" ] || die "--secrets-dir: no directory $A_SECRETS"
  for f in "${SECRET_FILES[@]}"; do
    [ -s "$A_SECRETS/$f" ] || die "--secrets-dir: no $f in $A_SECRETS (deploy/tls/cluster-secrets.sh makes it)"
  done
  if ! grep -q "PRIVATE KEY-----" "$A_SECRETS/broker.pem" || ! grep -q "BEGIN CERTIFICATE" "$A_SECRETS/broker.pem"; then
    die "--secrets-dir: broker.pem must hold the broker's private key and certificate (PEM)"
  fi
  grep -q "BEGIN CERTIFICATE" "$A_SECRETS/ca.pem" || die "--secrets-dir: ca.pem is not a PEM certificate"
  for f in admin.password broker.password; do
    if [ "$(wc -l <"$A_SECRETS/$f")" -gt 1 ] || ! [[ $(cat "$A_SECRETS/$f") =~ ^[A-Za-z0-9._~+/=@%:-]{12,}$ ]]; then
      die "--secrets-dir: $f must be one line of at least 12 letters, digits or ._~+/=@%:-"
    fi
  done
fi

# coordination=zookeeper (broker/server/config.py: `coordination`, `zookeeper.connect`): which ZooKeeper
# server, if any, this host runs (ZK_ID), and what the broker connects to (ZK_CONNECT).
ZK_ID="" ZK_CONNECT=""
case $KL_COORDINATION in
  custom | builtin) # builtin: this option's former name (an earlier install's saved settings)
    KL_COORDINATION=custom
    if [ -n "$A_ZK_SERVERS$A_ZK_ID$A_ZK_CONNECT" ]; then
      die "--zookeeper-servers, --zookeeper-id and --zookeeper-connect go with --coordination zookeeper"
    fi
    ;;
  zookeeper)
    if [ -z "$KL_ZK_SERVERS$KL_ZK_CONNECT" ]; then
      die "--coordination zookeeper needs --zookeeper-servers ID=HOST,... (the ensemble to run) or --zookeeper-connect HOST:PORT,... (one that runs elsewhere)"
    fi
    if [ -n "$KL_ZK_SERVERS" ]; then
      kl_zk_check_servers "$KL_ZK_SERVERS"
    fi
    if [ -n "$KL_ZK_CONNECT" ] && ! [[ $KL_ZK_CONNECT =~ ^[A-Za-z0-9._-]+:[0-9]+(,[A-Za-z0-9._-]+:[0-9]+)*(/[A-Za-z0-9._/-]*)?$ ]]; then
      die "--zookeeper-connect must be HOST:PORT,...[/CHROOT], got '$KL_ZK_CONNECT'"
    fi
    if [ -n "$KL_ZK_ID" ] && [ -z "$(kl_zk_host_of "$KL_ZK_ID")" ]; then
      die "--zookeeper-id $KL_ZK_ID: no server $KL_ZK_ID in --zookeeper-servers '$KL_ZK_SERVERS'"
    fi
    ZK_ID=$(kl_zk_server_id)
    ZK_CONNECT=$(kl_zk_connect)
    ;;
  *) die "--coordination must be custom or zookeeper, got '$KL_COORDINATION'" ;;
esac

if [ "$(id -u)" -ne 0 ] && [ "$KL_USER" != "$(id -un)" ]; then
  die "run as root (sudo), or pass --user $(id -un) to run the broker as yourself"
fi
if [ "$KL_SYSTEMD" = yes ] && [ "$NO_START" = 0 ] && ! kl_systemd_running; then
  die "systemd is not running on this host: use --no-systemd (foreground) or --no-start"
fi

# --- helpers that count changes ------------------------------------------------------------------

# `... | put_file` runs put_file in this shell, not in a subshell, so that the changes it counts
# are counted (and decide what is restarted).
shopt -s lastpipe
CHANGES=0

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# What identifies the package's content: a wheel's hash, a source tree's hash, or the pip spec.
package_fingerprint() {
  local pkg=$1
  if [ -f "$pkg" ]; then
    printf 'file %s sha256 %s\n' "$(basename "$pkg")" "$(sha256sum <"$pkg" | cut -d' ' -f1)"
  elif [ -d "$pkg" ]; then
    printf 'tree sha256 %s\n' "$(cd "$pkg" && find . -type f \( -name '*.py' -o -name setup.cfg -o -name pyproject.toml \) \
      -not -path './.*' -not -path './build/*' -not -path '*/__pycache__/*' -print0 |
      LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
  else
    printf 'spec %s\n' "$pkg"
  fi
}

# --- 1. user and directories -------------------------------------------------------------------------

if ! id -u "$KL_USER" >/dev/null 2>&1; then
  useradd --system --user-group --home-dir "$KL_STATE_DIR" --no-create-home \
    --shell /usr/sbin/nologin --comment "Kafka Lite broker" "$KL_USER"
  changed "created user $KL_USER"
fi
KL_GROUP=$(id -gn "$KL_USER")
ROOT_OWNER="$(id -un):$(id -gn)"

put_dir "$KL_PREFIX" 755 "$ROOT_OWNER"
put_dir "$KL_PREFIX/bin" 755 "$ROOT_OWNER"
put_dir "$KL_PREFIX/node" 755 "$ROOT_OWNER"
put_dir "$KL_CONF_DIR" 755 "$ROOT_OWNER"
put_dir "$KL_STATE_DIR" 750 "$KL_USER:$KL_GROUP"
put_dir "$KL_DATA_DIR" 750 "$KL_USER:$KL_GROUP"

# --- 2. venv and package -------------------------------------------------------------------------------

if [ ! -x "$KL_VENV/bin/python" ]; then
  "$KL_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null ||
    die "$KL_PYTHON is not Python >= 3.11 (Ubuntu 24.04 LTS has 3.12: apt-get install python3-venv)"
  "$KL_PYTHON" -m venv "$KL_VENV" ||
    die "could not create a venv with $KL_PYTHON (on Debian/Ubuntu: apt-get install python3-venv)"
  changed "created venv $KL_VENV"
fi
if [ -n "$KL_DEPS_FROM" ]; then
  [ -d "$KL_DEPS_FROM" ] || die "--deps-from: no directory $KL_DEPS_FROM"
  site=$("$KL_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  # a .pth line puts that directory on sys.path after the venv's own site-packages
  printf '%s\n' "$KL_DEPS_FROM" | put_file "$site/kafkalite-deps.pth" 644
fi

pip_opts=(--disable-pip-version-check --quiet)
if [ -n "$KL_WHEELHOUSE" ]; then
  pip_opts+=(--no-index --find-links "$KL_WHEELHOUSE")
elif [ -n "$KL_DEPS_FROM" ]; then
  pip_opts+=(--no-index)
fi
if [ -n "$A_PACKAGE" ]; then
  if [ -e "$A_PACKAGE" ]; then
    A_PACKAGE=$(realpath "$A_PACKAGE")
  fi
  stamp="$(package_fingerprint "$A_PACKAGE")
wheelhouse $KL_WHEELHOUSE
deps-from $KL_DEPS_FROM"
  if [ -x "$KL_VENV/bin/kl-broker" ] && [ -f "$KL_STAMP" ] && [ "$(cat "$KL_STAMP")" = "$stamp" ]; then
    note "package unchanged ($(head -n1 "$KL_STAMP"))"
  else
    rm -f "$KL_STAMP"
    # First exactly this artifact (even at the same version number), then whatever it depends on.
    "$KL_VENV/bin/python" -m pip install "${pip_opts[@]}" --no-deps --force-reinstall "$A_PACKAGE"
    "$KL_VENV/bin/python" -m pip install "${pip_opts[@]}" kafka-lite
    "$KL_VENV/bin/kl-broker" --help >/dev/null || die "the installed kl-broker does not run"
    printf '%s\n' "$stamp" >"$KL_STAMP"
    changed "installed $(head -n1 "$KL_STAMP")"
  fi
fi
HAVE_PACKAGE=0
if [ -x "$KL_VENV/bin/kl-broker" ]; then
  HAVE_PACKAGE=1
fi

# --- 3. configuration, launcher, node scripts --------------------------------------------------------

# SASL_SSL: the secrets, then what server.properties and the admin's client config say about them.
HAVE_SECRETS=1
PROPS_MODE=644 PROPS_OWNER=""
if [ "$KL_SECURITY" = SASL_SSL ]; then
  put_dir "$KL_SECRETS_DIR" 750 "$(id -un):$KL_GROUP"
  for f in ${A_SECRETS:+"${SECRET_FILES[@]}"}; do
    case $f in
      admin.password) put_file "$KL_SECRETS_DIR/$f" 600 "$ROOT_OWNER" <"$A_SECRETS/$f" ;;
      *) put_file "$KL_SECRETS_DIR/$f" 640 "$(id -un):$KL_GROUP" <"$A_SECRETS/$f" ;;
    esac
  done
  for f in "${SECRET_FILES[@]}"; do
    [ -s "$KL_SECRETS_DIR/$f" ] || HAVE_SECRETS=0
  done
  # server.properties holds the broker's password (sasl.jaas.config): root and the service user only
  PROPS_MODE=640 PROPS_OWNER="$(id -un):$KL_GROUP"
fi
# --insecure: the cluster's inter-broker secret, readable by the service user only (the broker refuses a
# secret file others may read).
KL_IB_SECRET=$KL_CONF_DIR/inter-broker.secret
if [ -n "$A_IB_SECRET" ]; then
  put_file "$KL_IB_SECRET" 600 "$KL_USER:$KL_GROUP" <"$A_IB_SECRET"
fi
if [ "$HAVE_SECRETS" = 1 ] && [ "$KL_SECURITY" = SASL_SSL ]; then
  BROKER_PASSWORD=$(cat "$KL_SECRETS_DIR/broker.password")
  ADMIN_PASSWORD=$(cat "$KL_SECRETS_DIR/admin.password")
  {
    echo "# Written by deploy/node/install.sh: the admin's login, for the node scripts and the operator"
    echo "# (kl-topics --command-config $KL_CLIENT_CONFIG). Root only."
    echo "security.protocol=SASL_SSL"
    echo "sasl.mechanism=SCRAM-SHA-256"
    echo "sasl.username=admin"
    echo "sasl.password=$ADMIN_PASSWORD"
    echo "ssl.ca.location=$KL_SECRETS_DIR/ca.pem"
  } | put_file "$KL_CLIENT_CONFIG" 600 "$ROOT_OWNER"
fi

{
  echo "# Written by deploy/node/install.sh: rerun it to change this file (edits are overwritten)."
  echo "broker.id=$KL_BROKER_ID"
  echo "host=$KL_HOST"
  echo "port=$KL_PORT"
  echo "log.dirs=$KL_DATA_DIR"
  echo "log.dirs.group.readable=true"  # the data dir is 750 for the group (a Spark worker reads segments)
  if [ -n "$KL_PEERS" ]; then
    echo "peers=$KL_PEERS"
  fi
  if [ "$KL_COORDINATION" = zookeeper ]; then
    echo "coordination=zookeeper"
    echo "zookeeper.connect=$ZK_CONNECT"
  fi
  if [ "$KL_SECURITY" = SASL_SSL ]; then
    echo "# SASL_SSL on every listener and between brokers; ACLs, with admin and the brokers as super users"
    echo "security.protocol=SASL_SSL"
    echo "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512"
    echo "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256"
    if [ "$HAVE_SECRETS" = 1 ]; then
      echo "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"broker\" password=\"$BROKER_PASSWORD\";"
    fi
    echo "ssl.keystore.location=$KL_SECRETS_DIR/broker.pem"
    echo "ssl.truststore.location=$KL_SECRETS_DIR/ca.pem"
    echo "authorizer=acl"
    echo "super.users=User:admin;User:broker"
  elif [ -s "$KL_IB_SECRET" ]; then
    echo "# brokers prove the cluster's secret to each other on their inter-broker listener (docs/SECURITY.md)"
    echo "inter.broker.secret.file=$KL_IB_SECRET"
  fi
  for o in ${KL_OVERRIDES[@]+"${KL_OVERRIDES[@]}"}; do
    echo "$o"
  done
} | put_file "$KL_PROPERTIES" "$PROPS_MODE" "$PROPS_OWNER"

{
  echo "# Written by deploy/node/install.sh: the settings it was given (install.sh --reuse-config,"
  echo "# upgrade.sh, wait-isr.sh and status.sh read them)."
  for var in KL_BROKER_ID KL_HOST KL_PORT KL_PEERS KL_USER KL_COORDINATION KL_ZK_SERVERS KL_ZK_ID \
    KL_ZK_CONNECT KL_PYTHON KL_WHEELHOUSE KL_DEPS_FROM KL_SYSTEMD KL_SECURITY; do
    printf '%s=%q\n' "$var" "${!var}"
  done
  printf 'KL_OVERRIDES=('
  for o in ${KL_OVERRIDES[@]+"${KL_OVERRIDES[@]}"}; do
    printf ' %q' "$o"
  done
  printf ' )\n'
} | put_file "$KL_NODE_ENV" 644

# The one broker command line: kl-broker.service's ExecStart and `install.sh --no-systemd` (and
# upgrade.sh without systemd) all run this file.
{
  echo "#!/usr/bin/env bash"
  echo "# Written by deploy/node/install.sh. The broker's command line: kl-broker.service runs it"
  echo "# (ExecStart), and so does install.sh --no-systemd, in the foreground."
  echo "set -euo pipefail"
  printf 'echo "$$" >%q\n' "$KL_PIDFILE"
  printf 'exec %q start --config %q\n' "$KL_VENV/bin/kl-broker" "$KL_PROPERTIES"
} | put_file "$KL_LAUNCHER" 755

for f in "${KL_NODE_SCRIPTS[@]}"; do
  if [ "$HERE/$f" != "$KL_PREFIX/node/$f" ]; then
    mode=644
    if [ "$f" != common.sh ]; then
      mode=755
    fi
    put_file "$KL_PREFIX/node/$f" "$mode" <"$HERE/$f"
  fi
done

# The new cluster's first users, on an empty data dir (kafka-storage.sh format --add-scram): the
# first controller commits them with the cluster's first record. Passwords go through stdin, never
# a command line.
if [ "$KL_SECURITY" = SASL_SSL ] && [ "$HAVE_SECRETS" = 1 ] && [ "$HAVE_PACKAGE" = 1 ] &&
  [ -z "$(ls -A "$KL_DATA_DIR")" ]; then
  printf '%s\n' "SCRAM-SHA-256=[name=admin,password=$ADMIN_PASSWORD]" "SCRAM-SHA-512=[name=admin,password=$ADMIN_PASSWORD]" \
    "SCRAM-SHA-256=[name=broker,password=$BROKER_PASSWORD]" "SCRAM-SHA-512=[name=broker,password=$BROKER_PASSWORD]" |
    "$KL_VENV/bin/kl-broker" format --config "$KL_PROPERTIES" --add-scram-file - >/dev/null ||
    die "kl-broker format failed"
  chown -R "$KL_USER:$KL_GROUP" "$KL_DATA_DIR"
  changed "formatted $KL_DATA_DIR with the users admin and broker"
fi

# --- 4. ZooKeeper server (coordination=zookeeper, on the hosts of --zookeeper-servers) ---------------
# Debian's/Ubuntu's `zookeeper` package provides the server (jars, java); its `zookeeperd` companion
# (an init script for /etc/zookeeper/conf) is not used: kl-zookeeper.service runs a launcher with
# this install's zoo.cfg, like the broker's, with or without systemd and under any --root.

install_zookeeper_package() {
  if [ "$(id -u)" -ne 0 ]; then
    die "ZooKeeper is not installed ($KL_ZK_JAR, java): as root, apt-get install -y zookeeper"
  fi
  command -v apt-get >/dev/null ||
    die "ZooKeeper is not installed and there is no apt-get here: install ZooKeeper >= 3.5 with its jar at $KL_ZK_JAR"
  note "installing Debian's zookeeper package (and java) with apt-get"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper >&2; then
    # a stale package index (cloud-init refreshes it; a long-running host may not have)
    DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper >&2 || die "apt-get install zookeeper failed"
  fi
  changed "installed the zookeeper package"
}

ZK_CHANGES=0
if [ -n "$ZK_ID" ]; then
  zk_before=$CHANGES
  if [ ! -f "$KL_ZK_JAR" ] || ! command -v java >/dev/null; then
    install_zookeeper_package
  fi
  [ -f "$KL_ZK_JAR" ] || die "no $KL_ZK_JAR after installing the zookeeper package"
  java=$(command -v java) || die "no java after installing the zookeeper package"
  put_dir "$KL_ZK_CONF_DIR" 755 "$ROOT_OWNER"
  put_dir "$KL_ZK_DATA_DIR" 750 "$KL_USER:$KL_GROUP"
  {
    echo "# Written by deploy/node/install.sh: rerun it to change this file (edits are overwritten)."
    echo "# ZooKeeper server $ZK_ID of the Kafka Lite brokers' ensemble (coordination=zookeeper)."
    echo "# A tick of 1 s grants the brokers their 9 s sessions (zookeeper.session.timeout.ms; ZooKeeper"
    echo "# grants 2 to 20 ticks): a silent broker is judged as patiently as with the custom coordination."
    echo "tickTime=1000"
    echo "initLimit=10"
    echo "syncLimit=5"
    echo "dataDir=$KL_ZK_DATA_DIR"
    echo "clientPort=$KL_ZK_CLIENT_PORT"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=ruok,srvr,stat,mntr"
    echo "autopurge.snapRetainCount=3"
    echo "autopurge.purgeInterval=24"
    IFS=, read -r -a zk_entries <<<"$KL_ZK_SERVERS"
    if [ ${#zk_entries[@]} -gt 1 ]; then # one server alone runs standalone, with no server.N line
      for entry in "${zk_entries[@]}"; do
        echo "server.${entry%%=*}=${entry#*=}:$KL_ZK_PEER_PORT:$KL_ZK_ELECTION_PORT"
      done
    fi
  } | put_file "$KL_ZK_CFG" 644
  printf '%s\n' "$ZK_ID" | put_file "$KL_ZK_MYID" 644
  # The server's classpath: the jar (its manifest names its dependencies) and, when there, slf4j's
  # simple binding, so that it logs to stderr (the journal, or zookeeper.log without systemd).
  zk_classpath=$KL_ZK_JAR
  if [ -f /usr/share/java/slf4j-simple.jar ]; then
    zk_classpath+=:/usr/share/java/slf4j-simple.jar
  fi
  {
    echo "#!/usr/bin/env bash"
    echo "# Written by deploy/node/install.sh. ZooKeeper server $ZK_ID's command line: $KL_ZK_UNIT runs"
    echo "# it (ExecStart), and so does install.sh --no-systemd, in the background."
    echo "set -euo pipefail"
    printf 'echo "$$" >%q\n' "$KL_ZK_PIDFILE"
    printf 'exec %q -Xms64m -Xmx512m -XX:+UseSerialGC -Dzookeeper.admin.enableServer=false -cp %q %s %q\n' \
      "$java" "$zk_classpath" org.apache.zookeeper.server.quorum.QuorumPeerMain "$KL_ZK_CFG"
  } | put_file "$KL_ZK_LAUNCHER" 755
  ZK_CHANGES=$((CHANGES - zk_before))
fi

# --- 5. run it ---------------------------------------------------------------------------------------

if [ "$KL_SYSTEMD" = no ]; then
  note "$CHANGES changes"
  if [ "$NO_START" = 1 ]; then
    exit 0
  fi
  [ "$HAVE_PACKAGE" = 1 ] || die "no package installed yet: pass --package"
  [ "$HAVE_SECRETS" = 1 ] || die "no TLS material and passwords yet: pass --secrets-dir DIR (or --insecure)"
  pid=$(kl_broker_pid)
  [ -z "$pid" ] || die "a broker is already running here (pid $pid)"
  if [ -n "$ZK_ID" ]; then
    pid=$(kl_zookeeper_pid)
    if [ -n "$pid" ] && [ "$ZK_CHANGES" != 0 ]; then
      note "restarting ZooKeeper server $ZK_ID (pid $pid): its setup changed"
      kl_stop_pid "$pid"
      pid=""
    fi
    if [ -z "$pid" ]; then
      kl_start_detached "$KL_ZK_LAUNCHER" "$KL_ZK_LOG" kl_zookeeper_pid ||
        die "ZooKeeper server $ZK_ID did not start (log: $KL_ZK_LOG)"
      note "started ZooKeeper server $ZK_ID in the background (pid $(kl_zookeeper_pid), log $KL_ZK_LOG)"
    else
      note "ZooKeeper server $ZK_ID is running (pid $pid)"
    fi
  fi
  kl_launch_argv
  note "running in the foreground: ${KL_LAUNCH[*]}"
  rm -rf "$SCRATCH" # exec skips the EXIT trap
  exec "${KL_LAUNCH[@]}"
fi

unit_changes=$CHANGES
# With a ZooKeeper server here, the broker starts after it and stops before it (a clean stop then
# closes the broker's session at once, instead of leaving it to expire).
after=network-online.target
if [ -n "$ZK_ID" ]; then
  after+=" $KL_ZK_UNIT"
fi
mkdir -p "$KL_UNIT_DIR"
put_file "$KL_UNIT_FILE" 644 <<EOF
# Written by deploy/node/install.sh.
[Unit]
Description=Kafka Lite broker $KL_BROKER_ID
Documentation=file://$KL_PREFIX/node/install.sh
Wants=network-online.target
After=$after

[Service]
Type=simple
User=$KL_USER
Group=$KL_GROUP
ExecStart=$KL_LAUNCHER
# A clean stop: SIGTERM to the broker alone, which flushes its logs and exits; SIGKILL only if it
# is still running after the timeout.
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=$KL_STOP_TIMEOUT
Restart=on-failure
RestartSec=2
LimitNOFILE=1048576
UMask=0027

[Install]
WantedBy=multi-user.target
EOF
if [ -n "$ZK_ID" ]; then
  zk_before=$CHANGES
  put_file "$KL_ZK_UNIT_FILE" 644 <<EOF
# Written by deploy/node/install.sh.
[Unit]
Description=ZooKeeper server $ZK_ID for the Kafka Lite brokers
Documentation=file://$KL_PREFIX/node/install.sh
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
User=$KL_USER
Group=$KL_GROUP
ExecStart=$KL_ZK_LAUNCHER
# the JVM exits with 128+15 on SIGTERM
SuccessExitStatus=143
TimeoutStopSec=30
Restart=on-failure
RestartSec=2
LimitNOFILE=65536
UMask=0027

[Install]
WantedBy=multi-user.target
EOF
  ZK_CHANGES=$((ZK_CHANGES + CHANGES - zk_before))
fi
unit_changed=$((CHANGES - unit_changes))

if ! kl_systemd_running; then
  note "$CHANGES changes (systemd is not running here: $KL_UNIT${ZK_ID:+ and $KL_ZK_UNIT} not enabled)"
  exit 0
fi
if [ "$unit_changed" != 0 ]; then
  systemctl daemon-reload
fi
if [ -n "$ZK_ID" ]; then
  # Debian's zookeeperd would run a second server on port 2181 (from /etc/zookeeper/conf)
  if systemctl is-enabled --quiet zookeeper.service 2>/dev/null || systemctl is-active --quiet zookeeper.service; then
    systemctl disable --now --quiet zookeeper.service
    changed "disabled zookeeper.service (zookeeperd's): $KL_ZK_UNIT runs this host's server"
    ZK_CHANGES=$((ZK_CHANGES + 1))
  fi
  if ! systemctl is-enabled --quiet "$KL_ZK_UNIT" 2>/dev/null; then
    systemctl enable --quiet "$KL_ZK_UNIT"
    changed "enabled $KL_ZK_UNIT"
    ZK_CHANGES=$((ZK_CHANGES + 1))
  fi
  if [ "$NO_START" = 1 ]; then
    :
  elif ! systemctl is-active --quiet "$KL_ZK_UNIT"; then
    systemctl start "$KL_ZK_UNIT"
    note "started $KL_ZK_UNIT"
  elif [ "$ZK_CHANGES" != 0 ]; then
    systemctl restart "$KL_ZK_UNIT"
    note "restarted $KL_ZK_UNIT"
  fi
fi
if ! systemctl is-enabled --quiet "$KL_UNIT" 2>/dev/null; then
  systemctl enable --quiet "$KL_UNIT"
  changed "enabled $KL_UNIT"
fi
if [ "$NO_START" = 1 ]; then
  note "$CHANGES changes (not started: --no-start)"
elif [ "$HAVE_PACKAGE" = 0 ]; then
  note "$CHANGES changes; no package installed yet, so $KL_UNIT is not started (deploy.sh delivers one)"
elif [ "$HAVE_SECRETS" = 0 ]; then
  note "$CHANGES changes; no TLS material and passwords yet, so $KL_UNIT is not started (deploy.sh --initial delivers them)"
elif ! systemctl is-active --quiet "$KL_UNIT"; then
  systemctl start "$KL_UNIT"
  note "$CHANGES changes; started $KL_UNIT"
elif [ $((CHANGES - ZK_CHANGES)) != 0 ]; then
  systemctl restart "$KL_UNIT"
  note "$CHANGES changes; restarted $KL_UNIT"
elif [ "$CHANGES" != 0 ]; then
  note "$CHANGES changes, all to the ZooKeeper server; $KL_UNIT keeps running"
else
  note "nothing changed; $KL_UNIT is running"
fi
