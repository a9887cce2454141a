#!/usr/bin/env bash
# Install (or reconfigure) one Kafka Lite broker on this host: the kafkalite user, a venv with the
# package, the data dir, server.properties, a launcher and kl-broker.service. Idempotent: a second
# run with the same arguments changes nothing. Runs on each VM (cloud-init, deploy.sh, upgrade.sh).
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
  --coordination MODE    builtin (the brokers elect their controller; default) or zookeeper (TODO)
  --user NAME            service user, created if missing (default: kafkalite)

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
                         (containers, tests)
  --no-start             set everything up, start nothing
  --reuse-config         take every setting not given from the last install (ROOT/etc/kafkalite/node.env)
  --root DIR             install under DIR instead of / (several brokers on one machine: tests)
  -h, --help             this help
EOF
}

# --- arguments ---------------------------------------------------------------------------------

A_ROOT="" A_ID="" A_PEERS="" A_HOST="" A_PORT="" A_USER="" A_COORD="" A_PACKAGE="" A_WHEELHOUSE=""
A_DEPS_FROM="" A_PYTHON="" A_OVERRIDES=() OVERRIDES_GIVEN=0 NO_SYSTEMD="" NO_START=0 REUSE=0
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
KL_DEPS_FROM="" KL_PYTHON="" KL_SYSTEMD="" KL_OVERRIDES=()
if [ "$REUSE" = 1 ]; then
  kl_load_env
fi
KL_BROKER_ID=${A_ID:-$KL_BROKER_ID}
KL_PEERS=${A_PEERS:-$KL_PEERS}
KL_USER=${A_USER:-${KL_USER:-kafkalite}}
KL_COORDINATION=${A_COORD:-${KL_COORDINATION:-builtin}}
KL_WHEELHOUSE=${A_WHEELHOUSE:-$KL_WHEELHOUSE}
KL_DEPS_FROM=${A_DEPS_FROM:-$KL_DEPS_FROM}
KL_PYTHON=${A_PYTHON:-${KL_PYTHON:-python3}}
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

case $KL_COORDINATION in
  builtin) ;;
  zookeeper)
    # TODO(zookeeper): the issue's optional ZooKeeper mode, not done: the released broker has no
    # ZooKeeper coordination yet (it elects its controller among the brokers, docs/ELECTION.md).
    # Once it reads `coordination=zookeeper` and `zookeeper.connect=HOST:2181,...` from
    # server.properties, this branch should: apt-get install -y zookeeperd (Debian's/Ubuntu's
    # package) on the first three VMs, write /etc/zookeeper/conf/zoo.cfg (server.N=<peer>:2888:3888)
    # and /etc/zookeeper/conf/myid, enable zookeeper.service, and put those two keys into
    # server.properties; deploy/azure/provision.sh would open 2181, 2888 and 3888 inside the vnet only.
    die "--coordination zookeeper is not implemented yet (TODO(zookeeper) in deploy/node/install.sh); use builtin"
    ;;
  *) die "--coordination must be builtin or zookeeper, got '$KL_COORDINATION'" ;;
esac

if [ "$(id -u)" -ne 0 ] && [ "$KL_USER" != "$(id -un)" ]; then
  die "run as root (sudo), or pass --user $(id -un) to run the broker as yourself"
fi
if [ "$KL_SYSTEMD" = yes ] && [ "$NO_START" = 0 ] && ! kl_systemd_running; then
  die "systemd is not running on this host: use --no-systemd (foreground) or --no-start"
fi

# --- helpers that count changes ------------------------------------------------------------------

CHANGES=0

changed() {
  CHANGES=$((CHANGES + 1))
  note "$*"
}

# Writes stdin to $1 with mode $2 unless it already has exactly that content and mode, so that a
# second run leaves files (and their mtimes) untouched.
# (The new content is compared from a scratch dir: even a temporary file in the target's
# directory would change that directory's mtime.)
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
put_file() {
  local path=$1 mode=$2 tmp
  cat >"$SCRATCH/new"
  if [ -f "$path" ] && cmp -s "$SCRATCH/new" "$path"; then
    if [ "$(stat -c %a "$path")" != "$mode" ]; then
      chmod "$mode" "$path"
      changed "chmod $mode $path"
    fi
    return 0
  fi
  # atomically: a reader (or a crash) sees the old file or the new one, never half of one
  tmp=$(mktemp "$path.XXXXXX")
  cat "$SCRATCH/new" >"$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$path"
  changed "wrote $path"
}

# A directory with this mode and owner, touched only if something differs.
put_dir() {
  local path=$1 mode=$2 owner=$3
  if [ ! -d "$path" ]; then
    mkdir -p "$path"
    changed "created $path"
  fi
  if [ "$(stat -c %a "$path")" != "$mode" ]; then
    chmod "$mode" "$path"
    changed "chmod $mode $path"
  fi
  if [ "$(stat -c %U:%G "$path")" != "$owner" ]; then
    chown "$owner" "$path"
    changed "chown $owner $path"
  fi
}

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

{
  echo "# Written by deploy/node/install.sh: rerun it to change this file (edits are overwritten)."
  echo "broker.id=$KL_BROKER_ID"
  echo "host=$KL_HOST"
  echo "port=$KL_PORT"
  echo "log.dirs=$KL_DATA_DIR"
  if [ -n "$KL_PEERS" ]; then
    echo "peers=$KL_PEERS"
  fi
  for o in ${KL_OVERRIDES[@]+"${KL_OVERRIDES[@]}"}; do
    echo "$o"
  done
} | put_file "$KL_PROPERTIES" 644

{
  echo "# Written by deploy/node/install.sh: the settings it was given (install.sh --reuse-config,"
  echo "# upgrade.sh, wait-isr.sh and status.sh read them)."
  for var in KL_BROKER_ID KL_HOST KL_PORT KL_PEERS KL_USER KL_COORDINATION KL_PYTHON KL_WHEELHOUSE \
    KL_DEPS_FROM KL_SYSTEMD; do
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

# --- 4. run it ---------------------------------------------------------------------------------------

if [ "$KL_SYSTEMD" = no ]; then
  note "$CHANGES changes"
  if [ "$NO_START" = 1 ]; then
    exit 0
  fi
  [ "$HAVE_PACKAGE" = 1 ] || die "no package installed yet: pass --package"
  pid=$(kl_broker_pid)
  [ -z "$pid" ] || die "a broker is already running here (pid $pid)"
  kl_launch_argv
  note "running in the foreground: ${KL_LAUNCH[*]}"
  rm -rf "$SCRATCH" # exec skips the EXIT trap
  exec "${KL_LAUNCH[@]}"
fi

unit_changes=$CHANGES
mkdir -p "$KL_UNIT_DIR"
put_file "$KL_UNIT_FILE" 644 <<EOF
# Written by deploy/node/install.sh.
[Unit]
Description=Kafka Lite broker $KL_BROKER_ID
Documentation=file://$KL_PREFIX/node/install.sh
Wants=network-online.target
After=network-online.target

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
unit_changed=$((CHANGES - unit_changes))

if ! kl_systemd_running; then
  note "$CHANGES changes (systemd is not running here: $KL_UNIT not enabled)"
  exit 0
fi
if [ "$unit_changed" != 0 ]; then
  systemctl daemon-reload
fi
if ! systemctl is-enabled --quiet "$KL_UNIT" 2>/dev/null; then
  systemctl enable --quiet "$KL_UNIT"
  changed "enabled $KL_UNIT"
fi
if [ "$NO_START" = 1 ]; then
  note "$CHANGES changes (not started: --no-start)"
elif [ "$HAVE_PACKAGE" = 0 ]; then
  note "$CHANGES changes; no package installed yet, so $KL_UNIT is not started (deploy.sh delivers one)"
elif ! systemctl is-active --quiet "$KL_UNIT"; then
  systemctl start "$KL_UNIT"
  note "$CHANGES changes; started $KL_UNIT"
elif [ "$CHANGES" != 0 ]; then
  systemctl restart "$KL_UNIT"
  note "$CHANGES changes; restarted $KL_UNIT"
else
  note "nothing changed; $KL_UNIT is running"
fi
