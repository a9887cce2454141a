# shellcheck shell=bash
# Sourced by the deploy/node scripts: the on-host layout, node.env, and the checks on
# `kl-topics --describe` output that the rolling restart waits on.
# The KL_* variables set here are read by the scripts that source this file:
# shellcheck disable=SC2034

KL_UNIT=kl-broker.service
# systemd's TimeoutStopSec and upgrade.sh's wait after SIGTERM: a clean shutdown flushes and
# fsyncs every partition, which can take a while on a busy disk.
KL_STOP_TIMEOUT=60
KL_NODE_SCRIPTS=(common.sh install.sh upgrade.sh wait-isr.sh status.sh)

die() {
  echo "error: $*" >&2
  exit 1
}

# The value of option $1 (the caller passes "$@"), or a clear error if there is none.
arg() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then
    die "$1 needs a value (see --help)"
  fi
  printf '%s' "$2"
}

note() {
  echo "[kafkalite${KL_BROKER_ID:+ broker $KL_BROKER_ID}] $*" >&2
}

# The on-host layout. $1 is the root ("" for /): tests and containers install several brokers
# on one machine, each under its own root; the paths written into the unit and the launcher are
# the rooted ones, so nothing is chrooted.
kl_paths() {
  local root=${1%/}
  KL_ROOT=$root
  KL_PREFIX=$root/opt/kafkalite
  KL_VENV=$KL_PREFIX/venv
  KL_LAUNCHER=$KL_PREFIX/bin/kl-broker-run
  KL_STAMP=$KL_PREFIX/.package-stamp
  KL_CONF_DIR=$root/etc/kafkalite
  KL_NODE_ENV=$KL_CONF_DIR/node.env
  KL_PROPERTIES=$KL_CONF_DIR/server.properties
  KL_STATE_DIR=$root/var/lib/kafkalite
  KL_DATA_DIR=$KL_STATE_DIR/data
  KL_PIDFILE=$KL_STATE_DIR/kl-broker.pid
  KL_LOG=$KL_STATE_DIR/broker.log
  KL_UNIT_DIR=$root/etc/systemd/system
  KL_UNIT_FILE=$KL_UNIT_DIR/$KL_UNIT
}

# node.env: what install.sh was told (broker id, peers, user, ...), for upgrade.sh, wait-isr.sh,
# status.sh and `install.sh --reuse-config`.
kl_load_env() {
  [ -f "$KL_NODE_ENV" ] || die "no $KL_NODE_ENV: run install.sh first${KL_ROOT:+ (with --root $KL_ROOT)}"
  # shellcheck source=/dev/null
  source "$KL_NODE_ENV"
}

# "1@h1:9092,2@h2:9092" -> "h1:9092,h2:9092"
kl_bootstrap() {
  local out="" entry
  local -a entries
  IFS=, read -r -a entries <<<"$1"
  for entry in "${entries[@]}"; do
    out+="${out:+,}${entry#*@}"
  done
  printf '%s\n' "$out"
}

# The command that runs the broker: the launcher, as the service user. kl-broker.service runs the
# same launcher (ExecStart) with User= set, so both paths run one command line.
kl_launch_argv() {
  if [ "$(id -un)" = "$KL_USER" ]; then
    KL_LAUNCH=("$KL_LAUNCHER")
  else
    KL_LAUNCH=(runuser -u "$KL_USER" -- "$KL_LAUNCHER")
  fi
}

kl_systemd_running() {
  [ -d /run/systemd/system ]
}

# Whether process $1 runs: exists and is not a zombie (a broker run in the foreground, by a test
# or a container, stays a zombie after it exits until its parent reaps it).
kl_alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# The pid of the running broker (from the launcher's pid file), or nothing.
kl_broker_pid() {
  local pid
  [ -f "$KL_PIDFILE" ] || return 0
  pid=$(cat "$KL_PIDFILE" 2>/dev/null || true)
  case $pid in '' | *[!0-9]*) return 0 ;; esac
  # the pid may have been reused since: it must still be a kl-broker
  if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'kl-broker start'; then
    printf '%s\n' "$pid"
  fi
}

kl_broker_running() {
  if [ "$KL_SYSTEMD" = yes ]; then
    systemctl is-active --quiet "$KL_UNIT"
  else
    [ -n "$(kl_broker_pid)" ]
  fi
}

# Is something listening on host:port? (bash's /dev/tcp: no extra tools on the VM)
kl_port_open() {
  # shellcheck disable=SC2016 # $1 and $2 expand in the inner bash
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# Reads `kl-topics --describe` on stdin and checks every partition line against a condition:
#   healthy  every partition has a leader and its ISR is all of its replicas
#   in-sync  broker $2 is in the ISR of every partition it replicates, each of which has a leader
#   fenced   broker $2 leads none of its partitions and has left every ISR it shared with others
#            (the controller fenced it; an ISR of it alone stays, so only it can lead cleanly again)
# Prints "N partitions ok" and returns 0, or prints the first failing partition and returns 1.
kl_check_partitions() {
  awk -F '\t' -v mode="$1" -v id="${2:-}" '
    function val(prefix,   i) {
      for (i = 1; i <= NF; i++) if (index($i, prefix) == 1) return substr($i, length(prefix) + 1)
      return ""
    }
    function has(list, x,   n, a, i) {
      n = split(list, a, ",")
      for (i = 1; i <= n; i++) if (a[i] == x) return 1
      return 0
    }
    function sameset(x, y,   n, a, i) {
      if (split(x, a, ",") != split(y, a, ",")) return 0
      n = split(x, a, ",")
      for (i = 1; i <= n; i++) if (!has(y, a[i])) return 0
      return 1
    }
    index($0, "Partition: ") && index($0, "Isr: ") {
      parts++
      leader = val("Leader: "); reps = val("Replicas: "); isr = val("Isr: ")
      where = val("Topic: ") "-" val("Partition: ") " (Leader: " leader ", Replicas: " reps ", Isr: " isr ")"
      fail = ""
      if (mode == "healthy") {
        if (leader == "none") fail = "no leader"
        else if (!sameset(reps, isr)) fail = "under-replicated"
      } else if (has(reps, id)) {
        if (mode == "in-sync" && leader == "none") fail = "no leader"
        else if (mode == "in-sync" && !has(isr, id)) fail = "broker " id " not in the ISR yet"
        else if (mode == "fenced" && leader == id) fail = "broker " id " still leads"
        else if (mode == "fenced" && has(isr, id) && isr != id) fail = "broker " id " still in the ISR"
      }
      if (fail != "" && first == "") first = where ": " fail
    }
    END {
      if (first != "") { print first; exit 1 }
      print parts + 0 " partitions ok"
    }'
}
